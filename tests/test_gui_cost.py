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
    # Draft max follows the curve: its best window's rows - 1 (none when one row is best on this CPU).
    if cm.best_rows > 1:
        assert view.use_draft_max.text() == f"Use draft max {cm.best_rows - 1}"
        assert w.analysis.use_draft_max() == cm.best_rows - 1 == w.panel.draft_max.value()
    else:
        assert w.analysis.use_draft_max() == 0 and not view.use_draft_max.isVisible()
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


def test_try_other_weight_types_plots_each_layout_and_offers_the_best(qtbot, runtime, tmp_path, monkeypatch):
    """Issue 13: the loaded Q4_1 model converted to Q8_0 and Q4_0 (into a fresh cache folder), c(k)
    of each measured and drawn; "Use … form" loads the layout with the best ceiling, whichever
    this CPU makes it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    w = make_window(qtbot, runtime, tmp_path)
    view = w.cost_view
    with qtbot.waitSignal(w.analysis.layoutsReady, timeout=MEASURE_TIMEOUT_MS) as blocker:
        assert w.analysis.try_layouts()
        assert w.state == W.BUSY and not view.try_layouts.isEnabled()
    layouts, error = blocker.args
    assert error == "" and [t for t, _m in layouts] == ["Q4_1", "Q8_0", "Q4_0"]
    assert all(len(m.model.row_ms) == 16 and min(m.model.row_ms) > 0 for _t, m in layouts)
    assert layouts[1][1].weight_types[0][0] == "Q8_0" and layouts[0][1].model_path == str(runtime.model_path)
    w.refresh_all()
    assert len(view._layout_curves) == 2 and "weight layouts:" in view.ceiling_label.text()
    best = max(layouts, key=lambda tm: tm[1].model.ceiling)
    if best is layouts[0]:
        assert view.offered_layout() is None and not view.use_layout.isVisible()
        return
    assert view.offered_layout() is best and view.use_layout.text() == f"Use {best[0]} form"
    with qtbot.waitSignal(w.worker.modelLoaded, timeout=MEASURE_TIMEOUT_MS):
        assert w.analysis.use_layout()
    assert str(w.worker.runtime.model_path) == best[1].model_path
    assert w.panel.model_path() == best[1].model_path
