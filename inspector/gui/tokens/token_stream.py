"""The token view's text widget: a read-only monospace ``QTextEdit`` whose characters carry their
token's index (``TOKEN_PROPERTY``), with a tooltip and a click per token."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, Signal
from PySide6.QtGui import QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextEdit, QToolTip

TOKEN_PROPERTY = QTextCharFormat.UserProperty + 1
"""Character format property holding the generated-token index of the text it formats."""


class TokenStream(QTextEdit):
    """The stream of token texts. ``tooltip(index)`` gives the HTML shown over token ``index``;
    ``tokenClicked(index)`` is emitted when a token is clicked."""

    tokenClicked = Signal(int)

    def __init__(self, tooltip: Callable[[int], str]) -> None:
        super().__init__()
        self._tooltip = tooltip
        self.setReadOnly(True)
        self.setMouseTracking(True)
        self.viewport().setMouseTracking(True)
        f = QFont("DejaVu Sans Mono")
        f.setStyleHint(QFont.StyleHint.Monospace)
        f.setPointSize(11)
        self.document().setDefaultFont(f)
        self.document().setUndoRedoEnabled(False)  # read only: an undo stack would only grow
        self.viewport().installEventFilter(self)

    def token_at(self, pos) -> int | None:
        """The index of the token drawn at viewport point ``pos``, or None (no token there)."""
        cur = self.cursorForPosition(pos)
        # cursorForPosition returns the boundary nearest the point; look right of it.
        cur.movePosition(QTextCursor.MoveOperation.NextCharacter)
        v = cur.charFormat().property(TOKEN_PROPERTY)
        return int(v) if v is not None else None

    def eventFilter(self, obj, ev) -> bool:
        # Tooltips through an event filter on the viewport, not a viewportEvent override:
        # paint events then never pass through Python.
        if ev.type() == QEvent.Type.ToolTip:
            idx = self.token_at(ev.pos())
            if idx is not None:
                QToolTip.showText(ev.globalPos(), self._tooltip(idx), self.viewport())
            else:
                QToolTip.hideText()
            return True
        return False

    def mouseReleaseEvent(self, ev) -> None:
        super().mouseReleaseEvent(ev)
        idx = self.token_at(ev.position().toPoint())
        if idx is not None:
            self.tokenClicked.emit(idx)
