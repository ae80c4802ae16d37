"""The judged counts of "Acceptance vs target p" stay inside the chart at the Statistics tab's sizes (issue 54
item 9: a full bar's count was cut off at the top)."""

from __future__ import annotations

from inspector.engine.probability_stats import DEFAULT_EDGES, ProbabilityBin
from inspector.gui.plots.probability import AcceptancePlot


def test_every_count_label_lies_inside_the_plot_even_above_a_full_bar(qtbot):
    plot = AcceptancePlot("Acceptance vs target p", "target p", "tip")
    qtbot.addWidget(plot)
    plot.resize(260, 150)  # about what the Statistics tab gives it at 1024x640
    edges = DEFAULT_EDGES
    bins = [ProbabilityBin(lo, hi, 120, 120 if i % 2 else 30, (lo + hi) / 2)
            for i, (lo, hi) in enumerate(zip(edges, edges[1:]))]
    plot.draw(bins)
    plot.grab()
    view = plot.getViewBox().sceneBoundingRect()
    shown = [t for t in plot.count_labels if t.toPlainText()]
    assert len(shown) == len(bins) and plot.counts() == [120] * len(bins)
    for t in shown:
        box = t.sceneBoundingRect()
        assert view.top() <= box.top() and box.bottom() <= view.bottom() + 1, (t.toPlainText(), box, view)
