"""The Cost model tab: Measure on the engine thread, the plot, the ceiling, the
settings cache, PNG export, and expected vs observed speedup in Statistics."""

from __future__ import annotations

from inspector.gui import worker as W
from test_gui_support import make_window, run_to_end

MEASURE_TIMEOUT_MS = 180_000


def test_measure_fills_the_plot_and_statistics_show_expected_speedup(qtbot, runtime, tmp_path):
    """The run matches single tokens (``ngram_min=1``): its first query always proposes,
    so there is a window to predict a speedup for whatever the model says."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=32, ngram_min=1)
    view = w.cost_view
    assert view.point_count() == 0 and not view.export.isEnabled()
    w.refresh_all()
    assert "measure the cost model" in w.stats.labels["expected"].text()
    with qtbot.waitSignal(w.analysis.costReady, timeout=MEASURE_TIMEOUT_MS) as blocker:
        assert w.analysis.measure()
        # Busy while the engine thread measures: no run, no second measurement.
        assert w.state == W.BUSY and not w.panel.run.isEnabled() and not view.measure.isEnabled()
        assert not w.analysis.measure()
    measured, error = blocker.args
    assert error == ""
    assert w.state == W.IDLE and w.panel.run.isEnabled()
    w.refresh_all()
    cm = measured.model
    assert len(cm.row_ms) == 16 and all(ms > 0 for ms in cm.row_ms)
    assert view.point_count() == 16
    x, y = view.cost_curve.getData()
    assert list(x) == list(range(1, 17)) and all(v > 0 for v in y)
    assert view.ceiling_text() == f"best possible speedup {cm.ceiling:.1f}x at {cm.best_rows} rows"
    assert cm.ceiling >= 1.0
    assert view.ceiling_text() in view.ceiling_label.text()
    png = tmp_path / "cost-curve.png"
    assert view.export_png(str(png)) and png.stat().st_size > 10_000

    # Statistics: expected speedup from the cost model beside the (estimated) observed one.
    run_to_end(qtbot, w)
    s = w.stats
    assert s.expected_speedup is not None and s.expected_speedup > 0
    assert s.labels["expected"].text().startswith(f"{s.expected_speedup:.2f}x")
    assert s.observed_estimated and s.observed_speedup > 0
    assert "estimate" in s.labels["observed"].text()

    # A run is going: Measure is refused.
    assert w.start_run()
    assert not w.analysis.measure()
    qtbot.waitUntil(lambda: w.state == W.IDLE, timeout=MEASURE_TIMEOUT_MS)

    # The cost model is remembered per model: a new window with these settings shows it.
    v = make_window(qtbot, runtime, tmp_path)
    assert v.analysis.current is not None
    assert v.analysis.current.model.row_ms == cm.row_ms
    v.refresh_all()
    assert v.cost_view.point_count() == 16
