"""The Tune window (issue 28): the grid predicted off the GUI thread from the finished run, best first, the
heatmap's shape, Copy as llama-server flags, Verify's measured row, and a sampled run refused."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from inspector.bench.tune import DRAFT_MAX_GRID, MODEL_FREE, OPTION_GRID, grid
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.tune.view import ALL_SOURCES, DRAFT_MAX, ROW_ROLE
from inspector.session.run_states import BUSY, IDLE
from test_gui_support import make_window, part, RUN_TIMEOUT_MS, run_to_end


def test_tune_fills_its_table_heatmap_and_flags_from_the_finished_run_and_verifies(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=48)
    model = w.model
    run_to_end(qtbot, w)
    tune = w.analysis.tune
    with qtbot.waitSignal(tune.tuned, timeout=120_000) as blocker:
        v = tune.show_tune()  # returns at once: the grid is predicted on its own thread
        assert v.refused() == "" and v.source.currentText() == ALL_SOURCES
        assert "Note:" not in v.info.text()  # a cold, single request: nothing to warn about
        assert v.cancel.isEnabled() and not v.tune.isEnabled() and v.progress.isVisible()
    rows, note = blocker.args
    assert rows and "best first" in note and not v.cancel.isEnabled()
    qtbot.waitUntil(lambda: v.table.rowCount() == len(rows))
    speedups = [v.table.item(i, 1).data(Qt.ItemDataRole.UserRole) for i in range(v.table.rowCount())]
    assert speedups == sorted(speedups, reverse=True) and speedups[0] == rows[0].speedup
    assert v.selected_row() is rows[0]
    # Sorting by another column keeps each row's configuration (Ctrl+C copies what is shown).
    v.table.sortByColumn(3, Qt.SortOrder.AscendingOrder)
    first = rows[v.table.item(0, 0).data(ROW_ROLE)]
    assert v.table.item(0, 0).text() == first.label and first.windows == min(r.windows for r in rows)

    # The heatmap: ngram-mod over its two options, the best draft max in every cell.
    v.heat_source.setCurrentText("ngram-mod")
    assert [v.heat_x.itemText(i) for i in range(v.heat_x.count())] == [*OPTION_GRID["ngram-mod"], DRAFT_MAX]
    xs, ys, speed, best = v.heat
    assert speed.shape == (len(OPTION_GRID["ngram-mod"]["n_min"]), len(OPTION_GRID["ngram-mod"]["n_match"]))
    assert v.image.image.shape == speed.shape
    assert np.nanmax(speed) == max(r.speedup for r in rows if r.source == "ngram-mod")
    assert v.plot.getPlotItem().getAxis("bottom").labelText == "n_match"
    v.heat_y.setCurrentText(DRAFT_MAX)
    assert v.heat[2].shape == (len({r.draft_max for r in rows if r.source == "ngram-mod"}), 4)

    # Copy as llama-server flags: a llama.cpp proposer's line, and our own n-gram source has none.
    simple = next(r for r in rows if r.source == "ngram-simple")
    line = tune.copy_flags(simple)
    assert line.startswith("llama-server") and "--spec-type ngram-simple" in line
    assert QGuiApplication.clipboard().text() == line
    assert tune.copy_flags(next(r for r in rows if r.source == "ngram")) is None
    assert "spec-inspector's own source" in v.status.text()

    # Verify the best: measured beside predicted, windows equal to the replay's when the output is the same.
    v.table.sortByColumn(1, Qt.SortOrder.DescendingOrder)
    v.table.selectRow(0)
    with qtbot.waitSignal(tune.verified, timeout=RUN_TIMEOUT_MS) as blocker:
        v.verify.click()
        assert model.state == BUSY and not v.verify.isEnabled()
    out, _note = blocker.args
    assert out is not None and out.label == rows[0].label
    assert out.measured_tokens_per_s > 0 and out.measured_speedup is not None
    assert out.windows_match is True or not out.same_output
    assert "measured" in v.verified.text() and model.state == IDLE and v.verify.isEnabled()


def test_a_sampled_run_shows_why_it_cannot_be_tuned(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=8)
    panel = part(w, ControlPanel)
    panel.temperature.setValue(0.7)
    run_to_end(qtbot, w)
    v = w.analysis.tune.show_tune()
    assert "temperature &gt; 0" in v.refused() or "temperature > 0" in v.refused()
    assert v.pages.currentIndex() == 1 and v.table.rowCount() == 0


def test_cancel_keeps_the_rows_predicted_so_far(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    run_to_end(qtbot, w)
    tune = w.analysis.tune
    with qtbot.waitSignal(tune.tuned, timeout=120_000):
        v = tune.show_tune()
    assert v.rows and not v.cancel.isEnabled()
    with qtbot.waitSignal(tune.tuned, timeout=120_000) as blocker:
        assert tune.start_tune(MODEL_FREE, DRAFT_MAX_GRID)
        assert not tune.start_tune(("ngram",), (4,))  # one grid at a time
        v.cancel.click()
    rows, note = blocker.args
    assert note.startswith("cancelled") and len(rows) < len(grid())
    assert v.table.rowCount() == len(rows) and v.tune.isEnabled()


def test_a_long_status_message_does_not_move_the_table_under_the_pointer(qtbot, runtime, tmp_path):
    """Issue 36, 8: a message that wrapped made the controls row taller and the next click hit another row."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    run_to_end(qtbot, w)
    tune = w.analysis.tune
    with qtbot.waitSignal(tune.tuned, timeout=120_000):
        v = tune.show_tune()
    qtbot.waitUntil(lambda: v.table.rowCount() > 0)
    v.say("")
    qtbot.wait(50)
    top = v.table.mapTo(v, v.table.rect().topLeft()).y()
    v.say("copied: llama-server " + " ".join(["--spec-ngram-map-k4v-size-n 12"] * 30) + " · note: a long one")
    qtbot.wait(50)
    assert v.table.mapTo(v, v.table.rect().topLeft()).y() == top
    assert v.status.toolTip().startswith("copied: llama-server")
