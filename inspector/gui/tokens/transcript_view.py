"""The Conversation tab: the transcript of the conversation shown, with a turn picker beside it (issue 26).

Every turn's user message and the model's answer (its committed text;
``inspector.session.transcript``), the turn shown in the other views marked. The list beside it
picks a turn like the Next turn row's picker does (``turnChosen``: the window shows that turn's
session). The view redraws from the records on the window's timer (``refresh``): cheap when
nothing changed (one signature check), and while a turn generates only its new text is appended,
so a selection and the scroll position stay. The text is selectable (Ctrl+C) and **Copy
transcript** puts all of it on the clipboard as plain text.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor, QFont, QTextBlockFormat, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
    QListWidget,
    QPushButton,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from inspector.gui.tokens.conversation_bar import turn_label
from inspector.session.transcript import answer_of, system_message, transcript_text, transcript_turns, user_text_of

SHOWN_BACKGROUND = "#fff8e1"
"""Background of the turn the other views show."""
USER_COLOR = "#1565c0"
ANSWER_COLOR = "#2e7d32"
BODY_INDENT = 14
"""Left indent of a message's text under its label (px)."""
EMPTY_TEXT = ("No run yet: run a prompt (Ctrl+R), then send a next turn in the row under the tokens; every "
              "turn's message and the model's answer are shown here.")


class TranscriptView(QWidget):
    """Turn list (the picker) beside the transcript; ``turnChosen(index)`` (0-based) when the user picks one.

    ``source``: a callable returning ``(records, shown, pickable)``: the turns' ``SessionRecord``s (turn 1
    first, the running turn last), the record the other views show, and whether a turn can be picked now
    (no run goes); None (until the window sets it): no turns."""

    turnChosen = Signal(int)

    def __init__(self, source=None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.source = source if source is not None else (lambda: ([], None, False))
        self._signature: tuple | None = None
        self._records: list = []
        self._live_answer = ""  # the running turn's answer as drawn (new text is appended after it)
        self._live_open = False  # the last turn's answer is still generating (the document's end)
        self._setting = False  # the list's selection is being set here, not by the user
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)
        self.splitter = split
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        self.picker = QListWidget()
        self.picker.setToolTip("the turns of the conversation: pick one to show it in every view (the Next turn "
                               "row's picker does the same)")
        self.picker.setTextElideMode(Qt.TextElideMode.ElideRight)  # a long label ends with "…" (the tooltip has it)
        self.picker.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.picker.setMinimumWidth(120)
        self.picker.currentRowChanged.connect(self._picked)
        self.copy = QPushButton("Copy transcript")
        self.copy.setToolTip("put the whole transcript on the clipboard as plain text (select text and "
                             "Ctrl+C for a part)")
        self.copy.clicked.connect(self.copy_all)
        ll.addWidget(self.picker, 1)
        ll.addWidget(self.copy)
        self.text = QTextBrowser()
        self.text.setOpenLinks(False)
        self.text.document().setUndoRedoEnabled(False)
        self.text.setPlaceholderText(EMPTY_TEXT)
        body = QFont("DejaVu Sans Mono")
        body.setStyleHint(QFont.StyleHint.Monospace)
        body.setPointSize(10)
        self._body = QTextCharFormat()
        self._body.setFont(body)
        self._label = QTextCharFormat()
        self._label.setFontWeight(QFont.Weight.Bold)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.addWidget(self.text, 1)
        split.addWidget(left)
        split.addWidget(right)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setSizes([190, 600])
        lay.addWidget(split)

    # -- drawing -------------------------------------------------------------------------------
    def refresh(self, force: bool = False) -> None:
        """Draw what changed since the last call (the window's timer calls it while the tab is shown)."""
        records, shown, pickable = self.source()
        last = records[-1] if records else None
        signature = (tuple(id(r) for r in records), id(shown), pickable, tuple(r.version for r in records[:-1]),
                     None if last is None else (last.header is not None, last.end is not None))
        self.picker.setEnabled(pickable)
        if force or signature != self._signature:
            self._signature = signature
            self._records = list(records)
            self._rebuild(records, shown)
        elif records:
            self._append_live(records[-1])

    def _rebuild(self, records, shown) -> None:
        """The whole transcript and the picker again (turns added, another turn shown, a turn ended)."""
        labels = [turn_label(k, r) for k, r in enumerate(records, 1)]
        current = next((k for k, r in enumerate(records) if r is shown), -1)
        self._setting = True
        try:
            if [self.picker.item(i).text() for i in range(self.picker.count())] != labels:
                self.picker.clear()
                self.picker.addItems(labels)
                for i, r in enumerate(records):
                    self.picker.item(i).setToolTip(user_text_of(r)[:400] if r.conversation
                                                   else "the run shown (a next turn makes it turn 1)")
            self.picker.setCurrentRow(current)
        finally:
            self._setting = False
        bar = self.text.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        keep = bar.value()
        doc = self.text.document()
        doc.clear()
        if not records:
            self._live_answer = ""
            self._live_open = False
            return
        cur = QTextCursor(doc)
        system = system_message(records)
        if system:
            self._message(cur, "System", system, "#555", None, first=True)
        turns = transcript_turns(records)
        for t, r in zip(turns, records):
            tint = SHOWN_BACKGROUND if r is shown and len(records) > 1 else None
            head = f"Turn {t.number}" + ("  (shown in every view)" if tint else "")
            hf = QTextCharFormat(self._label)
            hf.setAnchor(True)
            hf.setAnchorNames([f"turn{t.number}"])
            self._block(cur, head, hf, tint, first=not system and t.number == 1, top=8)
            self._message(cur, "You", t.user_text, USER_COLOR, tint)
            state = "" if t.finished else "  (generating…)"
            self._message(cur, "Model" + state, t.answer, ANSWER_COLOR, tint)
            if t.finished and t.ended:
                self._block(cur, f"ended: {t.ended}", self._note_format(), tint, indent=BODY_INDENT)
        last = turns[-1]
        self._live_answer = last.answer if not last.finished else ""
        self._live_open = not last.finished
        if current >= 0 and len(records) > 1 and not self._live_open:
            self._scroll_to_turn(current)
        else:
            bar.setValue(bar.maximum() if at_end or self._live_open else keep)

    def _append_live(self, record) -> None:
        """Append the running turn's new text to its answer (the document's last block)."""
        if not self._live_open:
            return
        answer, finished = answer_of(record)
        if finished or not answer.startswith(self._live_answer):
            self.refresh(force=True)
            return
        new = answer[len(self._live_answer):]
        if not new:
            return
        bar = self.text.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        cur = QTextCursor(self.text.document())
        cur.movePosition(QTextCursor.MoveOperation.End)
        cur.insertText(new, self._body)
        self._live_answer = answer
        if at_end:
            bar.setValue(bar.maximum())

    def _block(self, cur, text: str, fmt, tint, *, first: bool = False, indent: int = 0, top: int = 0) -> None:
        bf = QTextBlockFormat()
        bf.setLeftMargin(indent)
        bf.setTopMargin(top)
        if tint:
            bf.setBackground(QColor(tint))
        if first:
            cur.setBlockFormat(bf)
        else:
            cur.insertBlock(bf)
        cur.insertText(text, fmt)

    def _message(self, cur, label: str, text: str, color: str, tint, first: bool = False) -> None:
        lf = QTextCharFormat(self._label)
        lf.setForeground(QColor(color))
        self._block(cur, label, lf, tint, first=first, top=2)
        self._block(cur, text, self._body, tint, indent=BODY_INDENT)

    def _note_format(self) -> QTextCharFormat:
        f = QTextCharFormat()
        f.setForeground(QColor("#777"))
        return f

    def _scroll_to_turn(self, index: int) -> None:
        """Scroll so turn ``index`` (0-based)'s heading is at the top."""
        self.text.scrollToAnchor(f"turn{index + 1}")

    # -- picking and copying --------------------------------------------------------------
    def _picked(self, row: int) -> None:
        if not self._setting and row >= 0:
            self.turnChosen.emit(row)

    def plain_text(self) -> str:
        """The transcript as plain text (``inspector.session.transcript.transcript_text``)."""
        records, _shown, _pickable = self.source()
        return transcript_text(records)

    def copy_all(self) -> None:
        """Put the whole transcript on the clipboard as plain text."""
        QApplication.clipboard().setText(self.plain_text())
