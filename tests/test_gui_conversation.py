"""The window's Next turn row: a run continued as a conversation (issue 16), on the real model.

No test relies on the model's words: the answers are whatever the model committed, read
back from the run's own records."""

from __future__ import annotations

from inspector.engine.classify import FROM_PREFILL
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.tokens.conversation_bar import ConversationBar
from test_gui_support import export_session, make_window, open_receipts, part, run_to_end

MAX = 8


def send_turn(qtbot, w, text: str) -> tuple:
    """Type ``text`` in the Next turn row, press Send, and wait for the turn's end."""
    model = w.model
    conversation_bar = part(w, ConversationBar)
    from test_gui_support import RUN_TIMEOUT_MS

    conversation_bar.message.setText(text)
    with qtbot.waitSignal(model.runFinished, timeout=RUN_TIMEOUT_MS) as blocker:
        conversation_bar.send.click()
    w.refresh_all()
    return tuple(blocker.args)



def shown_dialog(w):
    """The last error dialog the window opened (for ``WindowModel.show_error``: a window-modal box that does not
    block), or None."""
    return getattr(w, "error_box", None)

def test_the_next_turn_waits_for_a_finished_run_and_says_why(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    panel = part(w, ControlPanel)
    conversation_bar = part(w, ConversationBar)
    bar = conversation_bar
    assert not bar.send.isEnabled() and "run a prompt first" in bar.message.placeholderText()
    assert not bar.turn.isVisible()
    panel.raw.setChecked(True)
    run_to_end(qtbot, w)
    assert not bar.send.isEnabled() and "raw prompt" in bar.message.placeholderText()


def test_a_next_turn_prompts_with_the_chat_so_far_and_every_turn_is_exported_in_one_document(qtbot, runtime,
                                                                                             tmp_path):
    from inspector.receipts import load_document

    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    model = w.model
    conversation_bar = part(w, ConversationBar)
    run_to_end(qtbot, w)
    first = model.session
    answer = first.end.output_text
    bar = conversation_bar
    assert bar.send.isEnabled() and "turn 2" in bar.message.placeholderText()
    reason, end = send_turn(qtbot, w, "Say it again.")
    assert end is not None and reason != "error"
    assert model.banner_html.startswith("Turn 2 · Finished")
    second = model.session
    assert second is not first and second.conversation["turn"] == 2
    assert second.header.templated_text.count(answer) >= 1 and "Say it again." in second.header.templated_text
    assert second.prompt_token_count > first.prompt_token_count + len(first.tokens)
    assert bar.turn.isVisible() and bar.turn.count() == 2 and bar.turn.currentIndex() == 1
    assert "Turn 2: Say it again." == bar.turn.itemText(1)
    # The picker shows turn 1 in every view, and Send still continues after turn 2.
    bar.turn.activated.emit(0)
    assert model.session is first and "turn <b>1</b>" in model.banner_html and "continues after the last" in model.banner_html
    assert bar.send.isEnabled() and "turn 3" in bar.message.placeholderText()

    path, error = export_session(qtbot, w, tmp_path / "conv.json")
    assert error == "" and w.files.receipts_dir() == str(tmp_path.resolve())  # the dialogs start there next
    doc = load_document(path)
    assert doc["kind"] == "conversation" and doc["conversation"]["turns"] == 2
    assert [t["conversation"]["turn"] for t in doc["turns"]] == [1, 2]
    assert all(w_["turn"] == 2 for w_ in doc["turns"][1]["windows"])
    assert doc["conversation"]["messages"][1] == {"role": "assistant", "content": answer}
    assert doc["summary"]["generated_tokens"] == len(first.tokens) + len(second.tokens)

    # Opened again: both turns, read only, the last one shown.
    other = make_window(qtbot, runtime, tmp_path, settings_file="other.ini")
    other_model = other.model
    other_conversation_bar = part(other, ConversationBar)
    assert open_receipts(qtbot, other, path) == ""
    obar = other_conversation_bar
    assert obar.turn.count() == 2 and other_model.session.conversation["turn"] == 2
    assert not obar.send.isEnabled() and "read only" in obar.message.placeholderText()
    obar.turn.activated.emit(0)
    assert other_model.session.conversation["turn"] == 1 and len(other_model.session.tokens) == len(first.tokens)
    assert "read only" in other_model.banner_html
    # A new run from the prompt leaves the conversation.
    run_to_end(qtbot, w)
    assert not bar.turn.isVisible() and model.session.conversation is None


def test_a_turn_that_no_longer_fits_the_context_is_refused_and_the_earlier_turn_stays_shown(qtbot, runtime,
                                                                                            tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    model = w.model
    conversation_bar = part(w, ConversationBar)
    run_to_end(qtbot, w)
    first = model.session
    errors = []
    model.errorShown.connect(errors.append)
    before = shown_dialog(w)
    reason, end = send_turn(qtbot, w, "word " * (runtime.n_ctx + 10))
    assert reason == "error"
    assert "Turn 2 did not run" in model.banner_html and "context holds" in model.banner_html
    box = shown_dialog(w)
    assert box is not None and box is not before and any(k in box.text().lower() for k in ("context", "long"))
    box.close()
    assert model.session is first and conversation_bar.turn.count() == 1
    assert conversation_bar.send.isEnabled()


def test_a_next_turn_can_start_paused_and_be_stepped_window_by_window(qtbot, runtime, tmp_path):
    from inspector.session.run_states import PAUSED
    from scenarios import NoEndOfTurn
    from test_gui_support import RUN_TIMEOUT_MS, wait_state

    w = make_window(qtbot, NoEndOfTurn(runtime), tmp_path, max_tokens=24)  # no end of turn: steps remain
    model = w.model
    conversation_bar = part(w, ConversationBar)
    run_to_end(qtbot, w)
    bar = conversation_bar
    assert bar.step.isEnabled()
    bar.message.setText("Again, please.")
    bar.step.click()
    wait_state(qtbot, w, PAUSED)
    # Held before its first decode step, with its first token: the prefill's last row gave it (no step).
    assert model.session.conversation["turn"] == 2 and model.worker.generation.decode_step == 0
    assert [t.outcome for t in model.session.tokens] == [FROM_PREFILL] and model.worker.generation.generated_count == 1
    model.commands.step_window()
    qtbot.waitUntil(lambda: model.state == PAUSED and model.worker.generation.decode_step == 1, timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(model.runFinished, timeout=RUN_TIMEOUT_MS):
        model.commands.run()
    assert bar.turn.count() == 2 and model.session.conversation["turn"] == 2 and len(model.session.tokens) == 24


def test_a_refused_run_from_the_prompt_keeps_the_conversation_and_a_stop_before_any_token_counts_no_turn(
        qtbot, runtime, tmp_path, monkeypatch):
    """The review: a Run from the prompt that never started dropped the conversation (the next Send then
    rebuilt turn 1 from turn 2); a turn stopped before its first token joined the history empty."""
    import threading

    from inspector.session.run_states import PAUSED
    from test_gui_support import RUN_TIMEOUT_MS, wait_state

    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    model = w.model
    panel = part(w, ControlPanel)
    conversation_bar = part(w, ConversationBar)
    run_to_end(qtbot, w)
    send_turn(qtbot, w, "Say it again.")
    second = model.session
    path, error = export_session(qtbot, w, tmp_path / "conv.json")
    assert error == ""
    # A run from the prompt whose source cannot be made (replay of a conversation file: refused by name).
    before = shown_dialog(w)
    assert panel.set_source("replay")
    panel.option_controls["replay"]["replay"].set_value(str(path))
    with qtbot.waitSignal(model.sourceRefused, timeout=RUN_TIMEOUT_MS):
        assert model.commands.start_run()
    box = shown_dialog(w)
    assert box is not None and box is not before and "is a conversation of 2 turns" in box.text()
    box.close()
    assert model.session is second and w.turns.conversation is not None and conversation_bar.turn.count() == 2
    assert panel.set_source("ngram")
    # Another context size would load the model again: the next turn waits for it.
    panel.n_ctx.setValue(runtime.n_ctx // 2)
    w.turns.refresh()
    assert not conversation_bar.send.isEnabled() and "context" in conversation_bar.message.placeholderText()
    panel.n_ctx.setValue(runtime.n_ctx)
    w.turns.refresh()
    # Stopped before its first token (Stop pressed while the worker has not begun the turn yet: its first
    # call for a run is held until then): no turn, the message stays for another try.
    gate, is_loaded = threading.Event(), model.worker.is_loaded

    def held(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            gate.wait(RUN_TIMEOUT_MS / 1000)
        return is_loaded(*args, **kwargs)

    monkeypatch.setattr(model.worker, "is_loaded", held)
    conversation_bar.message.setText("Once more.")
    conversation_bar.step.click()
    with qtbot.waitSignal(model.runFinished, timeout=RUN_TIMEOUT_MS):
        model.commands.stop()
        gate.set()
    assert model.session is second and w.turns.conversation.turns == 2
    assert "stopped before its first token" in model.banner_html
    assert conversation_bar.message.text() == "Once more."
    # Stopped while held before its first decode step: the prefill's last row already gave its first
    # token, so it is a turn (of one token) and the message is used.
    conversation_bar.step.click()
    wait_state(qtbot, w, PAUSED)
    third = model.session
    with qtbot.waitSignal(model.runFinished, timeout=RUN_TIMEOUT_MS):
        model.commands.stop()
    assert model.session is third and len(third.tokens) == 1 and third.tokens[0].outcome == FROM_PREFILL
    assert w.turns.conversation.turns == 3 and conversation_bar.turn.count() == 3
    assert conversation_bar.message.text() == ""
