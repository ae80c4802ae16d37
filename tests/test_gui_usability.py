"""What a first-time user meets: a second run, the model loading at startup, the
example picker, the side panel at 1280x800, the lock-timing legend."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint, QPointF, QSettings, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QTabWidget

import inspector
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.panel.prompt_box import CUSTOM_PROMPT
from inspector.gui.panel.run_buttons import FAULT_DISABLED_TIP
from inspector.gui.plots.event_log import EventLog
from inspector.gui.plots.lock_plots import LockPlots
from inspector.gui.shell.banner import Banner
from inspector.gui.shell.layout import StatusProgress
from inspector.gui.tokens.token_view import TokenView
from inspector.gui.windows.detail import WindowDetail
from inspector.prompts import example_prompts
from inspector.session.run_states import IDLE, LOADING
from test_gui_support import DecodeHold, make_window, part, run_to_end


def _texts_shown(w, runtime, g) -> None:
    """Token view, rows table and event log show the run's real token texts."""
    wm = w.model
    token_view = part(w, TokenView)
    window_detail = part(w, WindowDetail)
    event_log = part(w, EventLog)
    s = wm.session
    assert s.tokens and all(t.text == runtime.token_text(t.token) for t in s.tokens)
    assert token_view.stream.toPlainText() == "".join(t.shown for t in s.tokens)
    assert "\u2205" not in token_view.stream.toPlainText()
    r = g.receipts[0]
    window_detail.select_window(r.window_index)
    cell = window_detail.rows.item(0, 4).text()  # row 0's prediction: 'text'  (id)
    pred = r.verification_row_predictions[0]
    assert cell.startswith("'" + runtime.token_text(pred).replace("\n", "\\n")) and f"<{pred}>" not in cell
    model = event_log.model
    commit = next(i for i, e in enumerate(s.events) if e.kind == "commit" and e.token is not None)
    shown = " ".join(str(model.data(model.index(commit, c))) for c in range(model.columnCount()))
    tok = s.events[commit].token
    assert repr(runtime.token_text(tok)) in shown and f"<{tok}>" not in shown


def test_second_run_shows_token_texts(qtbot, runtime, tmp_path):
    """Single-token n-gram matches: the first query always proposes, so each run has a
    window to show whatever the model says."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24, ngram_min=1)
    model = w.model
    lock_plots = part(w, LockPlots)
    run_to_end(qtbot, w)
    _texts_shown(w, runtime, model.worker.generation)
    # The main session's prefill is a point of the lock-timing plots.
    assert lock_plots.series_counts()["prefill"] == 1
    run_to_end(qtbot, w)
    _texts_shown(w, runtime, model.worker.generation)
    assert lock_plots.series_counts()["prefill"] == 1


def test_startup_loads_the_model_with_progress_and_a_hint(qtbot, model_path, tmp_path):
    from inspector.gui.shell.main_window import MainWindow
    from inspector.gui.shell.model_line import LOADED_HINT

    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    w = MainWindow(None, settings=settings, data_dir=tmp_path / "data", load_at_start=True)
    model = w.model
    panel = part(w, ControlPanel)
    load_progress = part(w, StatusProgress)
    banner = part(w, Banner)
    qtbot.addWidget(w)
    progress = []
    model.worker.modelProgress.connect(progress.append, Qt.ConnectionType.DirectConnection)
    w.show()
    try:
        assert model.state == LOADING and load_progress.isVisible()
        assert not panel.run.isEnabled()
        qtbot.waitUntil(lambda: model.state == IDLE and model.model_info is not None, timeout=60_000)
        assert progress and max(progress) == 1.0
        assert Path(model.model_info["path"]) == Path(model_path)
        assert not load_progress.isVisible() and panel.run.isEnabled()
        assert banner.isVisible() and "Model loaded" in model.banner_html and LOADED_HINT in model.banner_html
        assert panel.model_status.text().startswith("loaded:")
    finally:
        w.close()  # closes the runtime it loaded


def test_example_picker_follows_the_editor_across_launches(qtbot, runtime, tmp_path):
    names = list(example_prompts())
    w = make_window(qtbot, runtime, tmp_path)  # copy-with-corrections
    panel = part(w, ControlPanel)
    p = panel
    assert p.examples.currentText() == "copy-with-corrections" == p.example_name()
    p.prompt.setPlainText(p.prompt.toPlainText() + " Please.")
    assert p.examples.currentText() == CUSTOM_PROMPT and p.example_name() == ""
    p.prompt.setPlainText(example_prompts()[names[0]])
    assert p.examples.currentText() == names[0]
    p.choose_example("copy-with-corrections")
    w.close()
    # The next launch (same settings) shows the same name for the same text.
    w2 = make_window(qtbot, runtime, tmp_path, example="open-ended")
    w2.close()
    from inspector.gui.shell.main_window import MainWindow

    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    w3 = MainWindow(runtime, settings=settings, data_dir=tmp_path / "data")
    w3_panel = part(w3, ControlPanel)
    qtbot.addWidget(w3)
    assert w3_panel.examples.currentText() == "open-ended"
    assert w3_panel.prompt.toPlainText() == example_prompts()["open-ended"]
    # First launch (no settings): the default example, by name.
    fresh = MainWindow(runtime, settings=QSettings(str(tmp_path / "new.ini"), QSettings.Format.IniFormat),
                       data_dir=tmp_path / "data")
    fresh_panel = part(fresh, ControlPanel)
    qtbot.addWidget(fresh)
    assert fresh_panel.examples.currentText() == "copy-with-corrections"


def test_example_text_is_the_file_without_its_final_newline(qtbot, runtime, tmp_path):
    folder = Path(inspector.asset_path("prompts"))
    files = sorted(folder.glob("*.txt"))
    assert files
    for f in files:
        raw = f.read_text("utf-8")
        assert example_prompts()[f.stem] == (raw[:-1] if raw.endswith("\n") else raw)
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    raw = (folder / "copy-with-corrections.txt").read_text("utf-8")
    assert panel.prompt.toPlainText() == raw.removesuffix("\n")
    # The run gets exactly that text (as `spec-inspector run --prompt-file` does).
    sent = []
    w.requestRun.disconnect()
    w.requestRun.connect(sent.append)
    assert model.commands.start_run()
    assert sent[0].request.prompt_text == raw.removesuffix("\n")
    model.worker.runFinished.emit("stopped", None)  # nothing ran: back to idle
    qtbot.waitUntil(lambda: model.state == IDLE)


def _fully_visible(widget, window) -> bool:
    if not widget.isVisible():
        return False
    top_left = widget.mapTo(window, QPoint(0, 0))
    inside = window.rect().contains(top_left) and \
        window.rect().contains(top_left + QPoint(widget.width() - 1, widget.height() - 1))
    return inside and widget.visibleRegion().boundingRect() == widget.rect()


def test_side_panel_at_1280x800(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    panel = part(w, ControlPanel)
    token_view = part(w, TokenView)
    w.resize(1280, 800)
    qtbot.waitExposed(w)
    QApplication.processEvents()
    p = panel
    for b in (p.run, p.pause, p.stop, p.step_window, p.step_token, p.resume, *p.fault_buttons, p.fault_token,
              p.background, *p.break_boxes.values()):
        assert _fully_visible(b, w), b.text() if hasattr(b, "text") else b
    # Fault buttons work in a live session, idle included (armed for the next run);
    # disabled ones say when they work.
    assert p.fault_cancel.isEnabled() and FAULT_DISABLED_TIP not in p.fault_cancel.toolTip()
    p.set_faults_enabled(False)
    assert not p.fault_cancel.isEnabled() and FAULT_DISABLED_TIP in p.fault_cancel.toolTip()
    p.set_faults_enabled(True)
    assert FAULT_DISABLED_TIP not in p.fault_cancel.toolTip()
    # A wheel over an unfocused spin box or combo scrolls the setup, never changes the value.
    bar = p.setup_scroll.verticalScrollBar()
    p.setup_scroll.widget().setMinimumHeight(2000)  # make sure the setup can scroll
    QApplication.processEvents()
    bar.setValue(0)
    token_view.stream.setFocus()
    for target, value in ((p.max_tokens, p.max_tokens.value), (p.temperature, p.temperature.value),
                          (p.source, p.source.currentIndex), (p.examples, p.examples.currentIndex)):
        before = value()
        pos = QPointF(target.width() / 2, target.height() / 2)
        ev = QWheelEvent(pos, target.mapToGlobal(pos), QPoint(), QPoint(0, -120), Qt.MouseButton.NoButton,
                         Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
        QApplication.sendEvent(target, ev)
        assert value() == before, target
    assert bar.value() > 0
    # A focused spin box still takes the wheel.
    p.max_tokens.setFocus()
    before = p.max_tokens.value()
    pos = QPointF(5, 5)
    QApplication.sendEvent(p.max_tokens, QWheelEvent(pos, p.max_tokens.mapToGlobal(pos), QPoint(), QPoint(0, 120),
                                                     Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                                                     Qt.ScrollPhase.NoScrollPhase, False))
    assert p.max_tokens.value() == before + 1
    p.max_tokens.setValue(before)


def test_run_keeps_the_side_panel_where_it_was(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=8)
    panel = part(w, ControlPanel)
    w.resize(1280, 800)
    qtbot.waitExposed(w)
    p = panel
    p.setup_scroll.widget().setMinimumHeight(1500)
    QApplication.processEvents()
    bar = p.setup_scroll.verticalScrollBar()
    bar.setValue(0)
    p.prompt.setFocus()  # Ctrl+R from the prompt editor disables it while running
    run_to_end(qtbot, w)
    assert bar.value() == 0


def test_lock_legend_is_outside_the_plots(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    lock_plots = part(w, LockPlots)
    tabs = part(w, QTabWidget, "views")
    lp = lock_plots
    tabs.setCurrentWidget(lp)
    qtbot.waitExposed(w)
    QApplication.processEvents()
    assert lp.wait_plot.getPlotItem().legend is None and lp.hold_plot.getPlotItem().legend is None
    for name in ("verify", "repair", "prefill", "step", "background"):
        assert name in lp.legend.text()
    assert lp.legend.geometry().bottom() < lp.wait_plot.mapTo(lp, lp.wait_plot.rect().topLeft()).y()


def test_banner_keeps_its_space_when_a_run_starts(qtbot, runtime, tmp_path):
    """The banner is looked at while the run's first decode is held in the runtime
    (``DecodeHold``): the run is surely going, however fast the CPU."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=16)
    model = w.model
    token_view = part(w, TokenView)
    banner = part(w, Banner)
    w.resize(1280, 800)
    qtbot.waitExposed(w)
    QApplication.processEvents()
    y = token_view.mapTo(w, QPoint(0, 0)).y()
    assert banner.isVisible() and "Model loaded" in model.banner_html
    hold = DecodeHold(runtime, when=lambda: model.worker.running)
    with hold.installed(), qtbot.waitSignal(model.runFinished, timeout=180_000):
        assert model.commands.start_run()
        qtbot.waitUntil(hold.held.is_set, timeout=120_000)
        QApplication.processEvents()
        assert banner.isVisible() and "Running" in model.banner_html  # the run status replaces the hint
        assert token_view.mapTo(w, QPoint(0, 0)).y() == y  # the view below does not jump
        hold.release()
    QApplication.processEvents()
    assert "Finished" in model.banner_html and token_view.mapTo(w, QPoint(0, 0)).y() == y
