"""The Conversation tab (issue 26): every turn's user message and the model's answer beside a turn
picker, copyable, following the turn that generates. On the real model; the answers compared are
the runs' own records, never the model's particular words."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication, QTabWidget

from inspector.gui.tokens.conversation_bar import ConversationBar
from inspector.gui.tokens.transcript_view import TranscriptView
from inspector.session.run_states import PAUSED
from inspector.session.transcript import message_text, transcript_text
from scenarios import NoEndOfTurn
from test_gui_conversation import send_turn
from test_gui_support import make_window, part, RUN_TIMEOUT_MS, run_to_end, wait_state

MAX = 8


def shown_text(w) -> str:
    """The Conversation tab's text as drawn."""
    transcript = part(w, TranscriptView)
    return transcript.text.toPlainText()


def test_the_conversation_tab_shows_every_turn_and_its_picker_shows_a_turn_in_every_view(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    model = w.model
    transcript = part(w, TranscriptView)
    conversation_bar = part(w, ConversationBar)
    tabs = part(w, QTabWidget, "views")
    assert tabs.indexOf(transcript) == 1 and tabs.tabText(1) == "Conversation"
    tabs.setCurrentWidget(transcript)
    assert transcript.picker.count() == 0 and shown_text(w) == ""
    run_to_end(qtbot, w)
    first = model.session
    # A single run is shown as turn 1: its prompt and its answer.
    assert transcript.picker.count() == 1
    assert first.prompt_text in shown_text(w) and first.end.output_text.strip() in shown_text(w)
    send_turn(qtbot, w, "Say it again.")
    second = model.session
    assert second is not first
    text = shown_text(w)
    assert transcript.picker.count() == 2 and transcript.picker.currentRow() == 1
    assert w.minimumSizeHint().width() <= 1024  # the turn pickers never widen the window past 1024 px
    for r, user in ((first, first.prompt_text), (second, "Say it again.")):
        assert user in text and r.end.output_text.strip() in text
    assert text.index("Turn 1") < text.index(first.end.output_text.strip()) < text.index("Turn 2") \
        < text.index("Say it again.") < text.rindex(second.end.output_text.strip())
    # Picking turn 1 in the transcript shows it in every view, and the Next turn row's picker follows.
    transcript.picker.setCurrentRow(0)
    assert model.session is first and conversation_bar.turn.currentIndex() == 0
    w.refresh_all()
    assert "Turn 1  (shown in every view)" in shown_text(w)
    # Picking turn 2 in the Next turn row's picker: the transcript's list follows.
    conversation_bar.turn.activated.emit(1)
    w.refresh_all()
    assert model.session is second and transcript.picker.currentRow() == 1
    assert "Turn 2  (shown in every view)" in shown_text(w)
    # Copy transcript: every message and answer as plain text.
    transcript.copy.click()
    copied = QApplication.clipboard().text()
    assert copied == transcript_text([first, second])
    assert message_text("user", "Say it again.") in copied and second.end.output_text.strip() in copied


def test_the_conversation_tab_follows_the_turn_that_generates_and_no_turn_is_picked_meanwhile(qtbot, runtime,
                                                                                              tmp_path):
    w = make_window(qtbot, NoEndOfTurn(runtime), tmp_path, max_tokens=48)  # no end of turn: steps remain
    model = w.model
    transcript = part(w, TranscriptView)
    conversation_bar = part(w, ConversationBar)
    tabs = part(w, QTabWidget, "views")
    run_to_end(qtbot, w)
    tabs.setCurrentWidget(transcript)
    bar = conversation_bar
    bar.message.setText("Again, please.")
    bar.step.click()
    wait_state(qtbot, w, PAUSED)
    turn = model.session
    sizes = []
    for _step in range(3):
        before = model.worker.generation.generated_count
        model.commands.step_window()
        qtbot.waitUntil(lambda b=before: model.state == PAUSED and model.worker.generation.generated_count > b,
                        timeout=60_000)
        w.redraw()  # the window's timer: the new text is appended
        text = shown_text(w)
        assert "Again, please." in text and "Model  (generating…)" in text
        assert text.endswith(turn.output_text) and turn.output_text
        sizes.append(len(turn.output_text))
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]
    assert not transcript.picker.isEnabled()  # no turn is picked while one runs
    with qtbot.waitSignal(model.runFinished, timeout=RUN_TIMEOUT_MS):
        model.commands.run()
    w.refresh_all()
    assert transcript.picker.isEnabled() and "generating" not in shown_text(w)
    assert turn.end.output_text.strip() in shown_text(w)
