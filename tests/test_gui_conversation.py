"""The window's Next turn row: a run continued as a conversation (issue 16), on the real model.

No test relies on the model's words: the answers are whatever the model committed, read
back from the run's own records."""

from __future__ import annotations

from inspector.engine.classify import FROM_PREFILL
from test_gui_support import export_session, make_window, open_receipts, run_to_end

MAX = 8


def send_turn(qtbot, w, text: str) -> tuple:
    """Type ``text`` in the Next turn row, press Send, and wait for the turn's end."""
    from test_gui_support import RUN_TIMEOUT_MS

    w.conversation_bar.message.setText(text)
    with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS) as blocker:
        w.conversation_bar.send.click()
    w.refresh_all()
    return tuple(blocker.args)



def shown_dialog(w):
    """The last error dialog the window opened (for ``WindowModel.show_error``: a window-modal box that does not
    block), or None."""
    return getattr(w, "error_box", None)

def test_the_next_turn_waits_for_a_finished_run_and_says_why(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    bar = w.conversation_bar
    assert not bar.send.isEnabled() and "run a prompt first" in bar.message.placeholderText()
    assert not bar.turn.isVisible()
    w.panel.raw.setChecked(True)
    run_to_end(qtbot, w)
    assert not bar.send.isEnabled() and "raw prompt" in bar.message.placeholderText()


def test_a_next_turn_prompts_with_the_chat_so_far_and_every_turn_is_exported_in_one_document(qtbot, runtime,
                                                                                             tmp_path):
    from inspector.receipts import load_document

    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    run_to_end(qtbot, w)
    first = w.session
    answer = first.end.output_text
    bar = w.conversation_bar
    assert bar.send.isEnabled() and "turn 2" in bar.message.placeholderText()
    reason, end = send_turn(qtbot, w, "Say it again.")
    assert end is not None and reason != "error"
    assert w.banner.text().startswith("Turn 2 · Finished")
    second = w.session
    assert second is not first and second.conversation["turn"] == 2
    assert second.header.templated_text.count(answer) >= 1 and "Say it again." in second.header.templated_text
    assert second.prompt_token_count > first.prompt_token_count + len(first.tokens)
    assert bar.turn.isVisible() and bar.turn.count() == 2 and bar.turn.currentIndex() == 1
    assert "Turn 2: Say it again." == bar.turn.itemText(1)
    # The picker shows turn 1 in every view, and Send still continues after turn 2.
    bar.turn.activated.emit(0)
    assert w.session is first and "turn <b>1</b>" in w.banner.text() and "continues after the last" in w.banner.text()
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
    assert open_receipts(qtbot, other, path) == ""
    obar = other.conversation_bar
    assert obar.turn.count() == 2 and other.session.conversation["turn"] == 2
    assert not obar.send.isEnabled() and "read only" in obar.message.placeholderText()
    obar.turn.activated.emit(0)
    assert other.session.conversation["turn"] == 1 and len(other.session.tokens) == len(first.tokens)
    assert "read only" in other.banner.text()
    # A new run from the prompt leaves the conversation.
    run_to_end(qtbot, w)
    assert not bar.turn.isVisible() and w.session.conversation is None


def test_a_turn_that_no_longer_fits_the_context_is_refused_and_the_earlier_turn_stays_shown(qtbot, runtime,
                                                                                            tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    run_to_end(qtbot, w)
    first = w.session
    errors = []
    w.errorShown.connect(errors.append)
    before = shown_dialog(w)
    reason, end = send_turn(qtbot, w, "word " * (runtime.n_ctx + 10))
    assert reason == "error"
    assert "Turn 2 did not run" in w.banner.text() and "context holds" in w.banner.text()
    box = shown_dialog(w)
    assert box is not None and box is not before and any(k in box.text().lower() for k in ("context", "long"))
    box.close()
    assert w.session is first and w.conversation_bar.turn.count() == 1
    assert w.conversation_bar.send.isEnabled()


def test_a_next_turn_can_start_paused_and_be_stepped_window_by_window(qtbot, runtime, tmp_path):
    from inspector.session.run_states import PAUSED
    from scenarios import NoEndOfTurn
    from test_gui_support import RUN_TIMEOUT_MS, wait_state

    w = make_window(qtbot, NoEndOfTurn(runtime), tmp_path, max_tokens=24)  # no end of turn: steps remain
    run_to_end(qtbot, w)
    bar = w.conversation_bar
    assert bar.step.isEnabled()
    bar.message.setText("Again, please.")
    bar.step.click()
    wait_state(qtbot, w, PAUSED)
    # Held before its first decode step, with its first token: the prefill's last row gave it (no step).
    assert w.session.conversation["turn"] == 2 and w.worker.generation.decode_step == 0
    assert [t.outcome for t in w.session.tokens] == [FROM_PREFILL] and w.worker.generation.generated_count == 1
    w.run.step_window_clicked()
    qtbot.waitUntil(lambda: w.state == PAUSED and w.worker.generation.decode_step == 1, timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS):
        w.run.run_clicked()
    assert bar.turn.count() == 2 and w.session.conversation["turn"] == 2 and len(w.session.tokens) == 24


def test_a_refused_run_from_the_prompt_keeps_the_conversation_and_a_stop_before_any_token_counts_no_turn(
        qtbot, runtime, tmp_path, monkeypatch):
    """The review: a Run from the prompt that never started dropped the conversation (the next Send then
    rebuilt turn 1 from turn 2); a turn stopped before its first token joined the history empty."""
    import threading

    from inspector.session.run_states import PAUSED
    from test_gui_support import RUN_TIMEOUT_MS, wait_state

    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    run_to_end(qtbot, w)
    send_turn(qtbot, w, "Say it again.")
    second = w.session
    path, error = export_session(qtbot, w, tmp_path / "conv.json")
    assert error == ""
    # A run from the prompt whose source cannot be made (replay of a conversation file: refused by name).
    before = shown_dialog(w)
    assert w.panel.set_source("replay")
    w.panel.option_controls["replay"]["replay"].set_value(str(path))
    with qtbot.waitSignal(w.sourceRefused, timeout=RUN_TIMEOUT_MS):
        assert w.run.start_run()
    box = shown_dialog(w)
    assert box is not None and box is not before and "is a conversation of 2 turns" in box.text()
    box.close()
    assert w.session is second and w.turns.conversation is not None and w.conversation_bar.turn.count() == 2
    assert w.panel.set_source("ngram")
    # Another context size would load the model again: the next turn waits for it.
    w.panel.n_ctx.setValue(runtime.n_ctx // 2)
    w.turns.refresh()
    assert not w.conversation_bar.send.isEnabled() and "context" in w.conversation_bar.message.placeholderText()
    w.panel.n_ctx.setValue(runtime.n_ctx)
    w.turns.refresh()
    # Stopped before its first token (Stop pressed while the worker has not begun the turn yet: its first
    # call for a run is held until then): no turn, the message stays for another try.
    gate, is_loaded = threading.Event(), w.worker.is_loaded

    def held(*args, **kwargs):
        if threading.current_thread() is not threading.main_thread():
            gate.wait(RUN_TIMEOUT_MS / 1000)
        return is_loaded(*args, **kwargs)

    monkeypatch.setattr(w.worker, "is_loaded", held)
    w.conversation_bar.message.setText("Once more.")
    w.conversation_bar.step.click()
    with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS):
        w.run.stop_clicked()
        gate.set()
    assert w.session is second and w.turns.conversation.turns == 2
    assert "stopped before its first token" in w.banner.text()
    assert w.conversation_bar.message.text() == "Once more."
    # Stopped while held before its first decode step: the prefill's last row already gave its first
    # token, so it is a turn (of one token) and the message is used.
    w.conversation_bar.step.click()
    wait_state(qtbot, w, PAUSED)
    third = w.session
    with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS):
        w.run.stop_clicked()
    assert w.session is third and len(third.tokens) == 1 and third.tokens[0].outcome == FROM_PREFILL
    assert w.turns.conversation.turns == 3 and w.conversation_bar.turn.count() == 3
    assert w.conversation_bar.message.text() == ""
