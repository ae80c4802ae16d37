"""The Cost model tab: Measure on the engine thread, the plot, the ceiling, the
settings cache, PNG export, and expected vs observed speedup in Statistics."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtWidgets import QTabWidget
from inspector.gui.cost.view import CostView
from inspector.gui.engine_thread.analysis import CostMeasured
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.plots.statistics import StatsView
from inspector.llama.cost_model import CostModel
from inspector.session.run_states import BUSY, IDLE
from test_gui_support import make_window, part, run_to_end

MEASURE_TIMEOUT_MS = 180_000


def test_measure_fills_the_plot_and_statistics_show_expected_speedup(qtbot, runtime, tmp_path):
    """The run matches single tokens (``ngram_min=1``): its first query always proposes,
    so there is a window to predict a speedup for whatever the model says."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=32, ngram_min=1)
    model = w.model
    panel = part(w, ControlPanel)
    stats = part(w, StatsView)
    cost_view = part(w, CostView)
    view = cost_view
    assert view.point_count() == 0 and not view.export.isEnabled()
    w.refresh_all()
    assert "measure the cost model" in stats.labels["expected"].text()
    with qtbot.waitSignal(model.costReady, timeout=MEASURE_TIMEOUT_MS) as blocker:
        assert model.commands.measure_cost()
        # Busy while the engine thread measures: no run, no second measurement.
        assert model.state == BUSY and not panel.run.isEnabled() and not view.measure.isEnabled()
        assert not model.commands.measure_cost()
    measured, error = blocker.args
    assert error == ""
    assert model.state == IDLE and panel.run.isEnabled()
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
        assert w.analysis.use_draft_max() == cm.best_rows - 1 == panel.draft_max.value()
    else:
        assert w.analysis.use_draft_max() == 0 and not view.use_draft_max.isVisible()
    png = tmp_path / "cost-curve.png"
    assert view.export_png(str(png)) and png.stat().st_size > 10_000

    # Statistics: expected speedup from the cost model beside the (estimated) observed one.
    run_to_end(qtbot, w)
    s = stats
    assert s.expected_speedup is not None and s.expected_speedup > 0
    assert s.labels["expected"].text().startswith(f"{s.expected_speedup:.2f}x")
    assert s.observed_estimated and s.observed_speedup > 0
    assert "estimate" in s.labels["observed"].text()

    # A run is going: Measure is refused.
    assert model.commands.start_run()
    assert not model.commands.measure_cost()
    qtbot.waitUntil(lambda: model.state == IDLE, timeout=MEASURE_TIMEOUT_MS)

    # The cost model is remembered per model: a new window with these settings shows it.
    v = make_window(qtbot, runtime, tmp_path)
    v_cost_view = part(v, CostView)
    assert v.analysis.current is not None
    assert v.analysis.current.model.row_ms == cm.row_ms
    v.refresh_all()
    assert v_cost_view.point_count() == 16


def test_try_other_weight_types_plots_each_layout_and_offers_the_best(qtbot, runtime, tmp_path, monkeypatch):
    """Issue 13: the loaded Q4_1 model converted to Q8_0 and Q4_0 (into a fresh cache folder), c(k)
    of each measured and drawn; "Use … form" loads the layout with the best ceiling, whichever
    this CPU makes it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    cost_view = part(w, CostView)
    view = cost_view
    with qtbot.waitSignal(w.analysis.layoutsReady, timeout=MEASURE_TIMEOUT_MS) as blocker:
        assert w.analysis.try_layouts()
        assert model.state == BUSY and not view.try_layouts.isEnabled()
    layouts, error = blocker.args
    assert error == "" and [t for t, _m in layouts] == ["Q4_1", "Q8_0", "Q4_0"]
    assert all(len(m.model.row_ms) == 16 and min(m.model.row_ms) > 0 for _t, m in layouts)
    assert layouts[1][1].weight_types[0][0] == "Q8_0" and layouts[0][1].model_path == str(runtime.model_path)
    w.refresh_all()
    assert len(view._layout_curves) == 2 and "Weight layouts:" in view.ceiling_label.text()
    best = max(layouts, key=lambda tm: tm[1].model.ceiling)
    if best is layouts[0]:  # this CPU runs the loaded form best: nothing offered
        assert view.offered_layout() is None and view.use_layout.isHidden()
        # Issue 42: the "Use … form" path is still exercised here: the Q4_0 form's curve made flat
        # (one row costs as much as 16: ceiling 16x), as a CPU with free wide batches would measure it.
        q4_0 = layouts[2][1]
        flat = replace(q4_0, model=CostModel((q4_0.model.row_ms[0],) * 16))
        layouts = [layouts[0], layouts[1], ("Q4_0", flat)]
        view.set_layouts(layouts)
        best = layouts[2]
    assert view.offered_layout() is best and view.use_layout.text() == f"Use {best[0]} form"
    assert not view.use_layout.isHidden()
    with qtbot.waitSignal(model.worker.modelLoaded, timeout=MEASURE_TIMEOUT_MS):
        assert w.analysis.use_layout()
    assert str(model.worker.runtime.model_path) == best[1].model_path
    assert panel.target_weights() == best[0] and panel.model_path() == ""  # the bundled entry, in that form


def test_the_weights_choice_converts_once_loads_that_form_and_is_remembered_per_model(qtbot, runtime, tmp_path,
                                                                                     monkeypatch):
    """Issue 13 item 3: "Q8_0 form" for the bundled model converts it (llama.cpp quantize, into a fresh
    cache), loads it, names the original in the model line and the receipts, and a new window with
    the same settings has the choice back; another model keeps "as stored"."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    w = make_window(qtbot, runtime, tmp_path, max_tokens=4)
    model = w.model
    panel = part(w, ControlPanel)
    assert panel.target_weights() == ""
    panel.set_target_weights("Q8_0")
    with qtbot.waitSignal(model.worker.modelLoaded, timeout=MEASURE_TIMEOUT_MS) as blocker:
        assert w.load_selected_model()
    info = blocker.args[0]
    assert info["weights"] == "Q8_0" and info["converted_from"] == str(Path(runtime.model_path).resolve())
    assert (tmp_path / "cache" / "spec-inspector").exists()
    qtbot.waitUntil(lambda: model.state == IDLE, timeout=MEASURE_TIMEOUT_MS)
    assert "in Q8_0 form" in panel.model_status.text() and panel.model_path() == ""
    run_to_end(qtbot, w)  # runs on the converted form: no second load
    assert model.session.header.model["converted_from"] == info["converted_from"]
    panel.add_recent_model(str(tmp_path / "other.gguf"))
    assert panel.target_weights() == ""  # another model: as stored
    panel.model_combo.setCurrentIndex(0)
    assert panel.target_weights() == "Q8_0"
    w.save_settings()
    v = make_window(qtbot, runtime, tmp_path)
    v_panel = part(v, ControlPanel)
    v_panel.model_combo.setCurrentIndex(0)
    assert v_panel.target_weights() == "Q8_0"


def test_draft_max_auto_is_the_default_and_a_run_takes_the_stored_curves_best_window(qtbot, runtime, tmp_path):
    """A curve whose best window is 4 rows is stored for the loaded model: a run with the panel's
    default (auto) uses draft max 3 and says so beside the spin box; no window proposes more."""
    import os

    from inspector.llama.cost_cache import store_cost_model
    from inspector.llama.cost_model import CostModel

    store_cost_model(runtime.model_path, os.cpu_count() or 1,
                     CostModel((10.0, 12.0, 14.0, 16.0, 30.0, 36.0, 42.0, 48.0)))
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24, ngram_min=1)
    model = w.model
    panel = part(w, ControlPanel)
    assert panel.draft_max_choice() is None and panel.draft_max.text() == "auto"
    run_to_end(qtbot, w)
    assert model.session.settings["draft_max"] == 3
    assert panel.draft_max_used.text().strip() == "→ 3" and "ceiling 2.50x" in panel.draft_max_used.toolTip()
    assert model.session.receipts and all(r.proposal_token_count <= 3 for r in model.session.receipts)
    # A draft max typed in is used as given.
    panel.draft_max.setValue(2)
    assert panel.draft_max_used.text() == ""
    run_to_end(qtbot, w)
    assert model.session.settings["draft_max"] == 2 and "draft_max_from" not in model.session.settings


def test_a_measurement_started_before_the_tab_was_shown_keeps_the_stored_curve_on_screen(qtbot, runtime, tmp_path):
    """Issue 54: Ctrl+M with the Cost model tab never opened showed "Press Measure…" for the whole
    measurement instead of the curve the model already had."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    cost_view = part(w, CostView)
    tabs = part(w, QTabWidget, "views")
    view = cost_view
    assert tabs.currentWidget() is not view
    view.set_cost_model(CostMeasured(CostModel((10.0, 12.0, 15.0, 19.0)), str(runtime.model_path), 2, 40))
    view.set_busy(True, "measuring …", cancellable=True)  # what Ctrl+M does first, before the tab shows
    tabs.setCurrentWidget(view)
    assert view.stack.currentWidget() is view.plots and view.point_count() == 4
