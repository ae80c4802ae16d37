"""What a new user hit in the window (issue 26): each defect reproduced on the real model.

No test relies on the model's words."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QTabWidget
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.plots.lock_plots import LockPlots
from inspector.gui.plots.statistics import StatsView
from inspector.gui.tokens.conversation_bar import ConversationBar
from inspector.gui.windows.detail import WindowDetail
from inspector.session.run_states import IDLE
from test_gui_support import make_window, part, run_to_end

LOAD_TIMEOUT_MS = 180_000


def load_weights(qtbot, w, weight_type: str) -> dict:
    """Choose ``weight_type`` in the weights box and load the model in that form; returns its info."""
    model = w.model
    panel = part(w, ControlPanel)
    panel.set_target_weights(weight_type)
    with qtbot.waitSignal(model.worker.modelLoaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        assert w.load_selected_model()
    qtbot.waitUntil(lambda: model.state == IDLE, timeout=LOAD_TIMEOUT_MS)
    return blocker.args[0]


def test_the_next_turn_continues_a_run_on_another_weight_form(qtbot, runtime, tmp_path, monkeypatch):
    """Defect 1: after a run in Q8_0 form the Next turn row is open (the conversation ran on the chosen
    model, whose loaded file is a cached conversion); choosing another form says so in the window's
    words, never the cache file's name."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    w = make_window(qtbot, runtime, tmp_path, max_tokens=4)
    panel = part(w, ControlPanel)
    conversation_bar = part(w, ConversationBar)
    info = load_weights(qtbot, w, "Q8_0")
    run_to_end(qtbot, w)
    bar = conversation_bar
    assert bar.send.isEnabled(), bar.message.placeholderText()
    panel.set_target_weights("")
    assert not bar.send.isEnabled()
    why = bar.message.placeholderText()
    assert "Q8_0 form" in why and "weights" in why and Path(info["path"]).name not in why


def test_the_weights_box_is_read_only_during_a_run(qtbot, runtime, tmp_path):
    """Defect 2: choosing another form mid-run would say "Q4_0 form" while the run goes on in the
    loaded one: the box is disabled while a run goes, like the model list."""
    from test_gui_support import DecodeHold, wait_state

    w = make_window(qtbot, runtime, tmp_path, max_tokens=8)
    model = w.model
    panel = part(w, ControlPanel)
    assert panel.weights.isEnabled()
    with DecodeHold(runtime).installed() as hold:
        assert model.commands.start_run()
        qtbot.waitUntil(hold.held.is_set, timeout=60_000)
        assert not panel.weights.isEnabled() and not panel.model_combo.isEnabled()
        hold.release()
    wait_state(qtbot, w, IDLE)
    assert panel.weights.isEnabled()


def test_a_receipts_view_shows_the_files_weight_form_and_a_model_load_keeps_it(qtbot, runtime, tmp_path,
                                                                               monkeypatch):
    """Defect 2: a read-only receipts view shows the file's weight form in the box (disabled) and its
    model line; a model that finishes loading meanwhile (``--receipts`` at start) changes neither."""
    from test_gui_support import export_session, open_receipts

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    w = make_window(qtbot, runtime, tmp_path, max_tokens=4)
    info = load_weights(qtbot, w, "Q8_0")
    run_to_end(qtbot, w)
    path = tmp_path / "q8.json"
    assert export_session(qtbot, w, path)[1] == ""
    v = make_window(qtbot, runtime, tmp_path, settings_file="other.ini")
    v_panel = part(v, ControlPanel)
    assert v_panel.target_weights() == ""
    assert open_receipts(qtbot, v, path) == ""
    assert v_panel.weights.currentData() == "Q8_0" and not v_panel.weights.isEnabled()
    line = v_panel.model_status.text()
    assert "Q8_0 form" in line and "read only" in line and Path(info["path"]).name not in line
    v.model_line.loaded(runtime.describe())  # the live model's load ends while the file is shown
    assert v_panel.model_status.text() == line and v_panel.weights.currentData() == "Q8_0"


def test_the_weights_box_offers_no_conversion_to_the_files_own_type(qtbot, runtime, tmp_path):
    """Defect 2: the bundled file is Q4_1: the box says "as stored (Q4_1)" and offers no "Q4_1 form"."""
    stored = runtime.describe()["weights"]
    w = make_window(qtbot, runtime, tmp_path)
    panel = part(w, ControlPanel)
    box = panel.weights
    texts = [box.itemText(i) for i in range(box.count())]
    assert f"{stored} form" not in texts and box.findData(stored) < 0
    assert stored in box.itemText(0)
    panel.set_target_weights(stored)  # e.g. the cost view's best layout is the stored one
    assert panel.target_weights() == ""


def test_a_refused_draft_model_leaves_no_running_banner(qtbot, runtime, tmp_path):
    """Defect 3: after a draft model is refused the banner said "Running: source draft · ..." while
    nothing ran; it says the run did not start, and why."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=8)
    model = w.model
    panel = part(w, ControlPanel)
    panel.set_source("draft")
    panel.draft_model.setText(str(tmp_path / "missing.gguf"))
    with qtbot.waitSignal(model.sourceRefused, timeout=30_000):
        assert model.commands.start_run()
    qtbot.wait(200)
    banner = model.banner_html
    assert model.state == IDLE and not banner.startswith(("Running", "Loading")), banner
    assert "did not start" in banner and "missing.gguf" in banner
    w.error_box.close()
    # Another source chosen: the red refusal about the draft no longer stands (issue 36, 8).
    panel.set_source("ngram")
    assert "did not start" not in model.banner_html and "ngram" in model.banner_html


def test_a_paused_run_says_it_has_not_finished_rather_than_a_finish_reason_of_running(qtbot, runtime, tmp_path):
    """Issue 36, 8: "finish reason: running" read as if running were a finish reason."""
    from inspector.session.run_states import PAUSED
    from test_gui_support import wait_state

    w = make_window(qtbot, runtime, tmp_path, max_tokens=8)
    model = w.model
    stats = part(w, StatsView)
    model.commands.step_window()
    wait_state(qtbot, w, PAUSED)
    w.refresh_all()
    assert stats.labels["finish"].text() == "— (not finished: running)"
    model.commands.stop()
    qtbot.waitUntil(lambda: model.state == IDLE, timeout=60_000)


def test_a_model_without_a_chat_template_names_the_windows_raw_box(qtbot, runtime, tmp_path, monkeypatch):
    """Defect 5: the refusal said "use --raw" (the command line's word); the window's control is the
    "raw (no chat template)" box."""
    for holder in (runtime.vocabulary, runtime):  # the runtime lends the vocabulary's chat_template
        monkeypatch.setattr(holder, "chat_template", lambda: "")
    w = make_window(qtbot, runtime, tmp_path, max_tokens=4)
    model = w.model
    panel = part(w, ControlPanel)
    with qtbot.waitSignal(model.runFinished, timeout=60_000):
        assert model.commands.start_run()
    shown = w.error_box.text() + " " + model.banner_html
    assert "--raw" not in shown and panel.raw.text() in shown, shown
    w.error_box.close()


def test_an_idle_new_session_says_no_run_and_baseline_not_run_is_not_green(qtbot, runtime, tmp_path):
    """Defect 5: an idle new live session showed "finish reason: running"; "baseline: not run" kept the
    green of an earlier "identical to plain decoding"."""
    from inspector.session.session_record import SessionRecord

    w = make_window(qtbot, runtime, tmp_path, max_tokens=4)
    model = w.model
    panel = part(w, ControlPanel)
    stats = part(w, StatsView)
    w.refresh_all()
    assert stats.labels["finish"].text() != "running"
    panel.baseline.setChecked(True)
    run_to_end(qtbot, w)
    qtbot.waitUntil(lambda: model.session.baseline is not None, timeout=60_000)
    w.refresh_all()
    w.set_session(SessionRecord())
    w.refresh_all()
    label = stats.labels["baseline"]
    assert label.text() == "not run" and "color" not in label.styleSheet()
    assert stats.labels["finish"].text() != "running"


def test_the_status_bar_never_cuts_an_error_mid_word(qtbot, runtime, tmp_path):
    """Defect 5: the status bar cut an error ("...failed (in"): a long one is shortened with "…" to
    what fits, and its tooltip holds all of it."""
    from inspector.session.run_states import ERROR

    w = make_window(qtbot, runtime, tmp_path)
    w.resize(1024, 640)
    message = "callback failed (injected fault at token 5): " + "the repair trimmed the KV cache " * 8
    w.run.set_state(ERROR, message)
    label = w.status_state
    qtbot.waitUntil(lambda: label.width() > 0)
    assert message in label.toolTip()
    shown = label.shown_text() if hasattr(label, "shown_text") else label.text()
    assert shown == label.toolTip() or shown.endswith("…")
    assert label.fontMetrics().horizontalAdvance(shown) <= label.width()
    w.run.set_state(IDLE)



def test_loading_another_model_says_the_session_shown_ran_on_the_other_one(qtbot, runtime, tmp_path):
    """Defect 7: after loading another GGUF the previous model's stream and statistics stayed with
    nothing saying they belong to that model: the banner names both, and Run."""
    import shutil

    w = make_window(qtbot, runtime, tmp_path, max_tokens=4)
    model = w.model
    panel = part(w, ControlPanel)
    run_to_end(qtbot, w)
    other = tmp_path / "other-model.gguf"
    shutil.copyfile(runtime.model_path, other)
    panel.add_recent_model(str(other))
    with qtbot.waitSignal(model.worker.modelLoaded, timeout=LOAD_TIMEOUT_MS):
        assert w.load_selected_model()
    qtbot.waitUntil(lambda: model.state == IDLE, timeout=LOAD_TIMEOUT_MS)
    banner = model.banner_html
    assert "other-model.gguf" in banner and Path(runtime.model_path).name in banner and "Run" in banner, banner


def test_the_window_is_usable_at_1024x640(qtbot, runtime, tmp_path):
    """Defect 4: the window could not be narrower than 1160 px, the Receipt pane's tabs read "Ra" and
    the lock legend forced the width: at 1024x640 the window is that size and the Windows tab's
    detail tabs and the lock legend fit."""
    from PySide6.QtWidgets import QApplication

    w = make_window(qtbot, runtime, tmp_path)
    window_detail = part(w, WindowDetail)
    lock_plots = part(w, LockPlots)
    tabs = part(w, QTabWidget, "views")
    w.resize(1024, 640)
    qtbot.waitExposed(w)
    QApplication.processEvents()
    assert w.width() <= 1024 and w.minimumSizeHint().width() <= 1024
    bar = window_detail.detail_tabs.tabBar()
    for i in range(bar.count()):
        assert bar.tabRect(i).right() <= bar.width(), bar.tabText(i)  # every tab's name whole
    tabs.setCurrentWidget(lock_plots)
    QApplication.processEvents()
    legend = lock_plots.legend
    assert legend.wordWrap() or legend.sizeHint().width() <= legend.width()


def test_after_a_weight_form_switch_the_banner_names_the_stored_form_and_the_stale_draft_max_goes(
        qtbot, runtime, tmp_path, monkeypatch):
    """Issue 36, 8: "The run shown ran on X.Q4_1.gguf" said nothing of its form, and the draft max hint kept
    the old run's "→ 8" after another form loaded."""
    from inspector.gui.panel.source_choice import DRAFT_MAX_AUTO

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    w = make_window(qtbot, runtime, tmp_path, max_tokens=4)
    model = w.model
    panel = part(w, ControlPanel)
    panel.draft_max.setValue(DRAFT_MAX_AUTO)
    run_to_end(qtbot, w)
    assert panel.draft_max_used.text().strip().startswith("→")
    stored = runtime.info.main_weight_type
    load_weights(qtbot, w, "Q8_0")
    banner = model.banner_html
    assert "in Q8_0 form" in banner and f"as stored ({stored})" in banner, banner
    assert panel.draft_max_used.text() == ""


def test_a_receipts_file_and_an_autosave_of_a_run_as_stored_name_the_files_weight_type(qtbot, runtime, tmp_path):
    """Issue 36, 8: file and autosave views said "as stored" without the type."""
    from test_gui_support import export_session, open_receipts

    stored = runtime.describe()["weights"]
    w = make_window(qtbot, runtime, tmp_path, max_tokens=4)
    model = w.model
    run_to_end(qtbot, w)
    path = tmp_path / "stored.json"
    assert export_session(qtbot, w, path)[1] == ""
    autosave = model.session.header.autosave_path
    for opened in (path, autosave):
        v = make_window(qtbot, runtime, tmp_path, settings_file=f"view-{Path(opened).suffix[1:]}.ini")
        v_panel = part(v, ControlPanel)
        assert open_receipts(qtbot, v, opened) == ""
        assert v_panel.weights.currentText() == f"as stored ({stored})", opened
        assert f"as stored ({stored})" in v_panel.model_status.text(), opened
