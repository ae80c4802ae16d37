"""The token stream: generated text, each token colored by what happened to it.

Only committed tokens are ever shown (branch-conditioned predictions never
reach this view). Hovering a token shows its window, verification row,
proposed vs predicted token and position; clicking selects its window.
After a comparison with plain decoding, the first token where the output
differs is marked (red on yellow, wavy red underline) and a line above the text says
whether the outputs are identical.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QLabel, QTextEdit, QToolTip, QVBoxLayout, QWidget

from inspector.gui import outcomes as O
from inspector.gui.session_model import SessionData

TOKEN_PROPERTY = QTextCharFormat.UserProperty + 1


DIVERGENCE_COLOR = "#d50000"
DIVERGENCE_BACKGROUND = "#ffd600"
NEAR_TIE_LOGITS = 1.0
"""A divergence whose top-2 logit margin is below this is called a near-tie (batch arithmetic can flip it)."""


def _show(text: str) -> str:
    """A token's text for a tooltip: quoted, whitespace made visible, HTML-escaped."""
    return html.escape("'" + text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r") + "'")


class _Stream(QTextEdit):
    tokenClicked = Signal(int)

    def __init__(self, owner: "TokenView") -> None:
        super().__init__()
        self._owner = owner
        self.setReadOnly(True)
        self.setMouseTracking(True)
        self.viewport().setMouseTracking(True)
        f = QFont("DejaVu Sans Mono")
        f.setStyleHint(QFont.StyleHint.Monospace)
        f.setPointSize(11)
        self.document().setDefaultFont(f)

    def token_at(self, pos) -> int | None:
        cur = self.cursorForPosition(pos)
        # cursorForPosition returns the boundary nearest the point; look right of it.
        cur.movePosition(QTextCursor.MoveOperation.NextCharacter)
        v = cur.charFormat().property(TOKEN_PROPERTY)
        return int(v) if v is not None else None

    def viewportEvent(self, ev) -> bool:
        if ev.type() == QEvent.Type.ToolTip:
            idx = self.token_at(ev.pos())
            if idx is not None:
                QToolTip.showText(ev.globalPos(), self._owner.tooltip(idx), self.viewport())
            else:
                QToolTip.hideText()
            return True
        return super().viewportEvent(ev)

    def mouseReleaseEvent(self, ev) -> None:
        super().mouseReleaseEvent(ev)
        idx = self.token_at(ev.position().toPoint())
        if idx is not None:
            self.tokenClicked.emit(idx)


class TokenView(QWidget):
    """Generated text with per-token colors and a legend; redraws only changed tokens.

    ``windowClicked(window_index)`` is emitted when a token of a window is clicked.
    """

    windowClicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session: SessionData | None = None
        self.rendered = 0
        """Tokens drawn so far (their count)."""
        self._starts: list[int] = []  # document position where each drawn token starts
        self._formats = {}
        for outcome in O.COLORS:
            fmt = QTextCharFormat()
            fmt.setForeground(QColor(O.COLORS[outcome]))
            fmt.setBackground(QColor(O.BACKGROUNDS[outcome]))
            if outcome in (O.CORRECTION, O.BONUS, O.END):
                fmt.setFontWeight(QFont.Weight.Bold)
            if outcome == O.END:
                fmt.setFontUnderline(True)
            self._formats[outcome] = fmt
        self._diverged = QTextCharFormat()
        self._diverged.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
        self._diverged.setUnderlineColor(QColor(DIVERGENCE_COLOR))
        self._diverged.setFontWeight(QFont.Weight.Bold)
        self._diverged.setForeground(QColor(DIVERGENCE_COLOR))
        self._diverged.setBackground(QColor(DIVERGENCE_BACKGROUND))
        self._baseline_shown: object = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        legend = QLabel(" &nbsp; ".join(
            f"<span style='background:{O.BACKGROUNDS[o]};color:{O.COLORS[o]};font-weight:bold'>&nbsp;abc&nbsp;</span>"
            f"&nbsp;{label}" for o, label in O.LEGEND))
        legend.setWordWrap(True)
        self.legend = legend
        self.hold_label = QLabel("")
        self.hold_label.setTextFormat(Qt.TextFormat.RichText)  # token texts arrive HTML-escaped
        self.hold_label.setStyleSheet("color:#e65100;font-weight:bold")
        self.baseline_label = QLabel("")
        self.baseline_label.setTextFormat(Qt.TextFormat.RichText)
        self.baseline_label.setWordWrap(True)
        self.baseline_label.hide()
        lay.addWidget(legend)
        lay.addWidget(self.baseline_label)
        lay.addWidget(self.hold_label)
        self.stream = _Stream(self)
        self.stream.tokenClicked.connect(self._clicked)
        lay.addWidget(self.stream, 1)

    def set_session(self, session: SessionData) -> None:
        self.session = session
        self.rendered = 0
        self._starts = []
        self.stream.clear()
        self.hold_label.setText("")
        self._baseline_shown = None
        self.baseline_label.hide()
        self.refresh()

    def token_count(self) -> int:
        return self.rendered

    def is_marked_divergent(self, index: int) -> bool:
        """Whether token ``index`` is drawn with the divergence mark (tests)."""
        if index >= self.rendered:
            return False
        cur = QTextCursor(self.stream.document())
        cur.setPosition(self._starts[index] + 1)
        return cur.charFormat().underlineStyle() == QTextCharFormat.UnderlineStyle.WaveUnderline

    def tooltip(self, index: int) -> str:
        """Tooltip text of generated token ``index``."""
        s = self.session
        if s is None or index >= len(s.tokens):
            return ""
        t = s.tokens[index]
        lines = [f"<b>{O.LEGEND_LABEL.get(t.outcome, t.outcome)}</b>"]
        if t.window is None:
            lines.append("plain step (no proposal)")
        else:
            lines.append(f"window {t.window}, row {t.row}")
            proposed = "— (bonus row: no proposal token)" if t.proposed is None else \
                f"{_show(s.text_of(t.proposed))} ({t.proposed})"
            lines.append(f"proposed: {proposed}")
        lines.append(f"predicted (committed): {_show(t.text)} ({t.token})")
        lines.append(f"position: {t.position}")
        if index == s.divergence_index:
            lines.append(f"<span style='color:{DIVERGENCE_COLOR}'><b>first difference from plain decoding</b></span>")
            lines.extend(self._divergence_lines(s.baseline["divergence"]))
        return "<br>".join(lines)

    def _divergence_lines(self, d: dict) -> list[str]:
        s = self.session

        def tok(key: str) -> str:
            t = d[key]
            if t < 0:
                return "— (that run had ended)"
            return f"{_show(d.get(key.replace('_token', '_text')) or s.text_of(t))} ({t})"

        margin = float(d["margin"])
        tie = " — a near-tie: batch arithmetic can flip it" if margin < NEAR_TIE_LOGITS else ""
        return [f"plain decoding: {tok('plain_token')}", f"speculative: {tok('speculative_token')}",
                f"target's top-2 margin there: {margin:.4f} logits{tie}"]

    def baseline_text(self) -> str:
        """The line above the text about the comparison with plain decoding ("" when none ran)."""
        s = self.session
        b = s.baseline if s is not None else None
        if not b:
            return ""
        if b.get("identical"):
            return (f"<span style='color:#1b5e20'><b>Baseline:</b> identical to plain decoding "
                    f"({len(b.get('plain_token_ids', []))} tokens)</span>")
        d = b["divergence"]
        return (f"<span style='color:{DIVERGENCE_COLOR}'><b>Baseline:</b> differs from plain decoding at generated "
                f"token {d['index']}</span> (marked <span style='background:{DIVERGENCE_BACKGROUND};"
                f"color:{DIVERGENCE_COLOR};font-weight:bold;text-decoration:underline'>&nbsp;so&nbsp;</span>): " + " · ".join(self._divergence_lines(d)))

    def _show_baseline(self) -> None:
        s = self.session
        if s is None or s.baseline is self._baseline_shown:
            return
        self._baseline_shown = s.baseline
        text = self.baseline_text()
        self.baseline_label.setText(text)
        self.baseline_label.setVisible(bool(text))

    def _clicked(self, index: int) -> None:
        s = self.session
        if s is not None and index < len(s.tokens) and s.tokens[index].window is not None:
            self.windowClicked.emit(s.tokens[index].window)

    def show_hold(self, info: dict | None) -> None:
        """Show the token about to be committed (step-token mode), or clear it."""
        if not info:
            self.hold_label.setText("")
            return
        s = self.session
        text = _show(s.text_of(info["token"])) if s else str(info["token"])
        where = f"window {info['window']}, row {info['row']}" if info["window"] else "plain step, row 0"
        self.hold_label.setText(f"Holding — about to commit: {text} (token {info['token']}) — {where}, position {info['position']}")

    def refresh(self) -> None:
        """Draw tokens added or changed since the last call."""
        s = self.session
        if s is None:
            return
        self._show_baseline()
        start = min(s.tokens_dirty_from, self.rendered)
        n = len(s.tokens)
        if start >= n and self.rendered == n:
            s.tokens_dirty_from = n
            return
        cur = QTextCursor(self.stream.document())
        bar = self.stream.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        if start < self.rendered:
            cur.setPosition(self._starts[start])
            cur.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cur.removeSelectedText()
            del self._starts[start:]
        cur.movePosition(QTextCursor.MoveOperation.End)
        diverged = s.divergence_index
        for t in s.tokens[start:]:
            fmt = QTextCharFormat(self._formats.get(t.outcome, self._formats[O.PLAIN]))
            if t.index == diverged:
                fmt.merge(self._diverged)
            fmt.setProperty(TOKEN_PROPERTY, t.index)
            self._starts.append(cur.position())
            text = t.text if t.text else "\u2205"
            cur.insertText(text, fmt)
        self.rendered = n
        s.tokens_dirty_from = n
        if at_end:
            bar.setValue(bar.maximum())
