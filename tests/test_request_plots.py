"""The Requests tab's plots: the arrival axis reads as clock times (issue 54 item 9), and the acceptance per
stretch of context sums the windows there."""

from __future__ import annotations

import time

import numpy as np

from inspector.gui.model.request_log import RequestLog
from inspector.gui.serve.request_plots import ClockAxis, RequestPlots, binned_acceptance


def _labels(axis, lo: float, hi: float, width: int = 600) -> list[str]:
    """The tick labels ``axis`` draws for ``lo .. hi`` over ``width`` pixels, as its paint asks for them."""
    return [s for spacing, values in axis.tickValues(lo, hi, width) for s in axis.tickStrings(values, 1, spacing)]


def test_a_few_seconds_of_requests_are_labelled_with_clock_times(qtbot):
    plots = RequestPlots(RequestLog())
    qtbot.addWidget(plots)
    plots.resize(1000, 300)
    plots.grab()  # painted once: the date axis measures its labels with the font it paints with
    axis = plots.per_request.getPlotItem().getAxis("bottom")
    t0 = time.mktime((2026, 12, 6, 12, 3, 21, 0, 0, -1))
    labels = [s for s in _labels(axis, t0, t0 + 3) if s]
    assert labels and all(s.count(":") == 2 for s in labels), labels  # "12:03:22", never "22.000"
    assert "12:03:22" in labels and not any("." in s for s in labels), labels
    within = [s for s in _labels(axis, t0 + 0.4, t0 + 1.6, 330) if s]
    assert within == ["12:03:22"], within  # about a second of requests: a whole-second tick, not none
    hours = [s for s in _labels(axis, t0, t0 + 4 * 3600) if s]
    assert hours and all(s.count(":") == 2 and "." not in s for s in hours), hours


def test_the_clock_axis_adds_tenths_only_below_a_second_and_leaves_impossible_times_blank():
    axis = ClockAxis("bottom")
    t0 = time.mktime((2026, 12, 6, 12, 3, 21, 0, 0, -1))
    assert axis.tickStrings([t0, t0 + 0.5], 1, 0.5) == ["12:03:21.0", "12:03:21.5"]
    assert axis.tickStrings([t0], 1, 5) == ["12:03:21"]
    assert axis.tickStrings([1e20], 1, 5) == [""]


def test_the_acceptance_per_stretch_of_context_sums_accepted_over_proposed():
    points = np.array([[0, 1, 2], [0, 1, 2], [100, 0, 4], [100, 4, 4]], float)
    mids, acc = binned_acceptance(points, bins=2)
    assert list(mids) == [25.0, 75.0] and list(acc) == [0.5, 0.5]


def test_the_context_length_axis_ticks_whole_tokens_only(qtbot):
    plots = RequestPlots(RequestLog())
    qtbot.addWidget(plots)
    plots.resize(1000, 300)
    plots.grab()
    axis = plots.by_context.getPlotItem().getAxis("bottom")
    values = [v for _spacing, vs in axis.tickValues(48.3, 49.9, 400) for v in vs]
    assert values and all(float(v).is_integer() for v in values), values  # the trial read 48.6, 48.8, ...
