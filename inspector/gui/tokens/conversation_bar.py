"""The Next turn row under the token view: continue the shown run as a conversation (issue 16).

After a run ends, a follow-up message typed here starts the next turn: its prompt is the
chat so far (every earlier user message and the model's committed answer, through the
model's chat template; ``RunRequest.chat_messages``), and proposal sources keep what they
remember (the worker's ``source_memory`` of the loaded model). Once there are two turns,
the turn picker shows any earlier turn in every view; Export receipts then writes one
conversation document holding every turn (``inspector.session.conversation``), and
opening such a file shows its turns the same way (read only).

``ConversationBar`` is the widget; ``ConversationActions`` keeps the window's
``Conversation`` and decides what the bar allows (the window's state, a raw prompt, a
file). Neither calls llama.cpp: the turn is a run like any other on the worker.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QWidget

from inspector.gui.look.banner_colours import BANNER_DONE, BANNER_ERROR, BANNER_HINT
from inspector.gui.model.window_model import WindowModel
from inspector.session.conversation import Conversation, conversation_block
from inspector.session.run_states import IDLE, SERVING

SEND_SHORTCUT = "Ctrl+Return"
STEP_SHORTCUT = "Shift+Return"
TURN_LABEL_CHARS = 48
"""A turn picker item shows this many characters of its user message."""
TURN_PICKER_CHARS = 16
"""The turn picker's width in characters (its list shows the labels whole)."""


def turn_label(k: int, record) -> str:
    """``Turn 2: Apply this change to …`` for the ``k``-th (1-based) turn's record."""
    block = record.conversation or {}
    text = " ".join((block.get("user_text") or record.prompt_text or "").split())
    if len(text) > TURN_LABEL_CHARS:
        text = text[: TURN_LABEL_CHARS - 1] + "…"
    return f"Turn {k}: {text}" if text else f"Turn {k}"


class ConversationBar(QWidget):
    """Turn picker (hidden until there are two turns), the next message, and Send next turn.

    ``sendRequested(text, paused)``: Send (or Ctrl+Enter / Enter in the message) with a message;
    ``paused`` for Step (Shift+Enter): the turn holds before its first decode step.
    ``turnChosen(index)``: the user picked turn ``index`` (0-based) to show."""

    sendRequested = Signal(str, bool)
    turnChosen = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 2, 4, 0)
        self.turn = QComboBox()
        self.turn.setToolTip("which turn of the conversation every view shows")
        # As wide as TURN_PICKER_CHARS characters, never as its longest label: the window stays 1024 px wide
        # (each label whole in the list and the item's tooltip).
        self.turn.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.turn.setMinimumContentsLength(TURN_PICKER_CHARS)
        self.turn.hide()
        self.title = QLabel("<b>Next turn</b>")
        self.message = QLineEdit()
        self.message.setClearButtonEnabled(True)
        self.send = QPushButton("Send next turn")
        self.send.setToolTip(f"run the next turn: the chat so far, then this message ({SEND_SHORTCUT})")
        lay.addWidget(self.turn)
        lay.addWidget(self.title)
        lay.addWidget(self.message, 1)
        self.step = QPushButton("Step")
        self.step.setToolTip(f"start the next turn paused before its first window: then Step window (F10) or "
                             f"Step token (F11) go one at a time ({STEP_SHORTCUT})")
        lay.addWidget(self.send)
        lay.addWidget(self.step)
        self.send.clicked.connect(self._send)
        self.step.clicked.connect(lambda: self._send(paused=True))
        self.message.returnPressed.connect(self._send)
        QShortcut(QKeySequence(SEND_SHORTCUT), self.message, self._send,
                  context=Qt.ShortcutContext.WidgetShortcut)
        QShortcut(QKeySequence(STEP_SHORTCUT), self.message, lambda: self._send(paused=True),
                  context=Qt.ShortcutContext.WidgetShortcut)
        self.turn.activated.connect(self.turnChosen.emit)

    def _send(self, paused: bool = False) -> None:
        if self.send.isEnabled() and self.message.text().strip():
            self.sendRequested.emit(self.message.text(), paused)

    def show_turns(self, labels: list[str], current: int) -> None:
        """Fill the picker with ``labels`` (shown from two turns on) and select ``current``."""
        if [self.turn.itemText(i) for i in range(self.turn.count())] != labels:
            self.turn.clear()
            self.turn.addItems(labels)
            for i, label in enumerate(labels):
                self.turn.setItemData(i, label, Qt.ItemDataRole.ToolTipRole)
        self.turn.view().setMinimumWidth(self.turn.view().sizeHintForColumn(0) + 24)
        if 0 <= current < len(labels):
            self.turn.setCurrentIndex(current)
        self.turn.setVisible(len(labels) >= 2)

    def set_sendable(self, ok: bool, why: str, next_turn: int) -> None:
        """Enable the message and Send when ``ok``; else say ``why`` in the placeholder and tooltips."""
        self.message.setEnabled(ok)
        self.send.setEnabled(ok)
        self.step.setEnabled(ok)
        self.title.setText(f"<b>Turn {next_turn}</b>" if ok else "<b>Next turn</b>")
        self.message.setPlaceholderText(f"a follow-up message; turn {next_turn}'s prompt is the chat so far "
                                        "(Enter sends)" if ok else why)
        self.message.setToolTip(f"turn {next_turn}'s prompt: every earlier message and the model's answers, "
                                f"through the chat template, then this message (Enter or {SEND_SHORTCUT} sends); "
                                "the proposal source keeps what it remembered" if ok else why)


class ConversationActions(QObject):
    """The window's conversation: which turns exist, what the bar allows, Send, the turn picker.

    ``conversation``: the live conversation or the one read from a file (None: the shown run is
    not part of one yet; a first Send makes the shown run turn 1). ``source_path``: the
    conversation file it was read from ("" for a live one).

    It drives the ``bar`` and reads the side ``panel``'s model choice. It gets the window's model
    (``WindowModel``: the session shown, the window's state, what the window says, its ``runFinished`` and
    ``sourceRefused``, the worker's ``runStarted``, the served ``requests``, none of whose records continues
    here) and ``run`` (``RunControl``: ``start_run``, ``chosen_model``; the model's ``stateChanged``)."""

    def __init__(self, model: WindowModel, bar: ConversationBar, panel, run, parent=None) -> None:
        super().__init__(parent)
        self.model, self.run = model, run
        self.bar = bar
        self.panel = panel
        self.conversation: Conversation | None = None
        self.source_path = ""
        self._running_turn = None  # the record of the turn being run, until it ends
        bar.sendRequested.connect(self.send)
        bar.turnChosen.connect(self.show_turn)
        self.model.stateChanged.connect(lambda _s: self.refresh())
        model.runFinished.connect(self._run_finished)
        model.sourceRefused.connect(lambda _m: self._run_finished("error", None))
        model.worker.runStarted.connect(self._run_started)
        for box in (panel.model_combo, panel.weights):  # another model or form: say so at once
            box.currentIndexChanged.connect(lambda _i: self.refresh())

    # -- what the bar allows ---------------------------------------------------------------
    def transcript_source(self) -> tuple:
        """The Conversation tab's ``(records, shown, pickable)`` (``TranscriptView.source``): the conversation's
        turns (the running one included), or the shown run alone when it is no turn; a turn is picked only
        while idle."""
        shown = self.model.session
        records = self.records()
        if shown not in records:
            records = [shown] if shown.header is not None or shown.document is not None else []
        return records, shown, self.model.state == IDLE

    def records(self) -> list:
        """The turns' records, the one running included."""
        conv = self.conversation
        rs = list(conv.records) if conv is not None else []
        if self._running_turn is not None and self._running_turn not in rs:
            rs.append(self._running_turn)
        return rs

    def why_not(self) -> str:
        """Why a next turn cannot be sent now ("" when it can)."""
        state, s = self.model.state, self.model.session
        if self.source_path or s.origin != "live":
            return "a receipts file is read only: File > New live session (Ctrl+N), then Run, to start a conversation"
        if state == SERVING:
            return "the window is serving: turn Serve off (Run menu) to continue a conversation"
        if state != IDLE:
            return "the next turn can be sent when this run has ended"
        if s.header is None or s.end is None:
            return "run a prompt first (Ctrl+R); then continue the conversation here"
        if any(r is s for r in self.model.requests.records.values()):
            return "a served request is shown (its client holds the conversation): Run a prompt to start one here"
        if (s.settings or {}).get("raw"):
            return "a raw prompt is no chat: turn raw off and run again to continue as a conversation"
        conv = self.conversation
        if s.conversation is not None and (conv is None or s not in conv.records):
            return "this run was a turn of a conversation left since: Run the prompt again to start a new one"
        last = conv.records[-1] if conv is not None and conv.records else s
        return self._model_changed(last)

    def _model_changed(self, last) -> str:
        """Why the panel's model no longer continues ``last``'s conversation ("" when it does): another
        model file or context size would load a model again (and forget what the sources remembered)."""
        h = last.header
        try:
            path = str(self.run.chosen_model())
        except Exception:  # no model chosen: the run itself says why
            return ""
        # a converted weight form ran from a cached file: the conversation's model is its original
        ran, n_ctx = str(h.model.get("converted_from") or h.model.get("path", "")), h.model.get("n_ctx")
        if ran and Path(path).resolve() != Path(ran).resolve():
            return f"the conversation ran on {Path(ran).name}: choose it again, or Run to start a new conversation"
        form = h.model.get("weights", "") if h.model.get("converted_from") else ""
        chosen = self.panel.target_weights()
        if chosen != form and not (chosen and not form and chosen == h.model.get("weights")):
            ran_in = f"in {form} form" if form else "with its weights as stored"
            return (f"the conversation ran {ran_in}: choose that in weights again, or Run to start a new "
                    "conversation (another weight form loads the model again)")
        if n_ctx and self.panel.n_ctx.value() != n_ctx:
            return (f"the conversation ran with context {n_ctx}: set it back, or Run to start a new conversation "
                    "(another context size loads the model again)")
        return ""

    def refresh(self) -> None:
        """Set the bar from the window's state and the conversation."""
        rs = self.records()
        shown = next((k for k, r in enumerate(rs) if r is self.model.session), len(rs) - 1)
        self.bar.show_turns([turn_label(k, r) for k, r in enumerate(rs, 1)], shown)
        self.bar.turn.setEnabled(self.model.state == IDLE)
        why = self.why_not()
        self.bar.set_sendable(not why, why, max(len(rs), 1) + 1)

    # -- turns -------------------------------------------------------------------------------
    def forget(self) -> None:
        """Leave the conversation (a new run from the prompt, a new live session, another file)."""
        self.conversation, self.source_path, self._running_turn = None, "", None
        self.refresh()

    def adopt(self, conversation: Conversation, path: str = "") -> None:
        """Show ``conversation`` (read from ``path``): its last turn in the views, the picker over its turns."""
        self.conversation, self.source_path, self._running_turn = conversation, path, None
        self.refresh()

    def send(self, text: str, paused: bool = False) -> bool:
        """Start the next turn with ``text`` (``paused``: holding before its first decode step, for
        stepping); returns whether it started (the reason is shown otherwise)."""
        why = self.why_not()
        if why or not text.strip():
            self.model.show_error("Cannot send the next turn", why or "Type a message first.")
            return False
        conv = self.conversation
        shown = self.model.session
        if conv is None or not conv.records or conv.records[-1] is not shown:
            if conv is None or shown not in conv.records:  # the shown run becomes turn 1 of a new conversation
                conv = Conversation()
                system = (shown.settings or {}).get("system_prompt")
                if system:  # it ran after a system message: every turn keeps it first
                    conv.history.messages.append({"role": "system", "content": system})
                shown.conversation = conversation_block(1, 1, conv.history, shown.prompt_text)
                conv.add_turn(shown)
            self.conversation = conv
        fields = conv.next_turn(text)
        if not self.run.start_run(turn=fields, paused=paused):
            return False
        self._running_turn = self.model.session
        self.refresh()  # the message stays until the turn is counted (a refused turn keeps it)
        return True

    def _run_started(self, _info) -> None:
        """A run from the prompt (not a turn) has started: it leaves the conversation."""
        if self._running_turn is None and (self.conversation is not None or self.source_path):
            self.forget()

    def show_turn(self, index: int) -> None:
        """Show turn ``index`` (0-based) in every view (only while no run goes)."""
        rs = self.records()
        if self.model.state != IDLE or not 0 <= index < len(rs) or rs[index] is self.model.session:
            self.refresh()
            return
        self.model.show_session(rs[index])
        self.model.redraw_all()
        k = index + 1
        where = (" — read only (File &gt; New live session, Ctrl+N, to run)" if rs[index].origin != "live" else
                 "; the next turn continues after the last")
        self.model.set_banner(f"Showing turn <b>{k}</b> of {len(rs)}: "
                            f"{html.escape(turn_label(k, rs[index]).split(': ', 1)[-1])}{where}", BANNER_HINT)
        self.refresh()

    def _run_finished(self, reason: str, end) -> None:
        turn, self._running_turn = self._running_turn, None
        if turn is not None and self.conversation is not None:
            if end is not None and turn.end is not None and turn.tokens:
                self.conversation.add_turn(turn)
                self.bar.message.clear()
                if turn is self.model.session and reason != "error":
                    self.model.set_banner(f"Turn {self.conversation.turns} · {self.model.banner_html}", BANNER_DONE,
                                          self.model.banner_tip)  # a cut banner's "details" keep the whole text
            elif self.conversation.records:  # the turn never ran (its prompt no longer fits, ...)
                n = len(self.conversation.records)
                self.model.show_session(self.conversation.records[-1])
                self.model.redraw_all()
                why = ("it was stopped before its first token" if end is not None and end.reason == "stopped"
                       else html.escape(self.model.last_error or reason))
                self.model.set_banner(f"<b>Turn {n + 1} did not run:</b> {why}<br>Turn {n} is shown; its receipts "
                                    "are kept, and Send tries the message again.", BANNER_ERROR)
        self.refresh()

    # -- export --------------------------------------------------------------------------
    def export_conversation(self):
        """The conversation of the shown session when it has two turns or more: a ``Conversation`` whose
        records are snapshots (the running turn too), or the path of the file it came from; None when
        the shown session is a single run."""
        rs = [r for r in self.records() if r.header is not None or r.document is not None]  # a turn not begun yet: none
        if len(rs) < 2 or self.model.session not in self.records():
            return None
        if self.source_path:
            return self.source_path
        return Conversation(records=[r.snapshot() if r.header is not None else r for r in rs])
