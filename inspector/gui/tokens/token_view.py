"""The token stream: generated text, each token colored by what happened to it.

Only committed tokens are ever shown (branch-conditioned predictions never
reach this view). Hovering a token shows its window, verification row,
proposed vs predicted token and position, and the target's probability figures
for that row (issue 15: proposed and predicted p, rank, top 5, entropy, margin,
draft q, basis); clicking selects its window. A token whose row's top-2 logit
margin is below the "near-tie" threshold (the spin box beside the legend,
remembered in the window's QSettings) has a dotted underline.
After a comparison with plain decoding, the first token where the output
differs is marked (red on yellow, wavy red underline) and a line above the text says
whether the outputs are identical.
"""

from __future__ import annotations

from PySide6.QtCore import QSettings, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPixmap, QTextCharFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import QDoubleSpinBox, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from inspector.engine.probabilities import DEFAULT_NEAR_TIE_MARGIN
from inspector.gui.look import outcomes as O
from inspector.gui.tokens.token_figures import NEAR_TIE_COLOR
from inspector.gui.tokens.token_stream import TOKEN_PROPERTY, TokenStream
from inspector.gui.tokens.token_text import (DIVERGENCE_BACKGROUND, DIVERGENCE_COLOR, baseline_html, hold_html,
                                             token_tooltip)
from inspector.session.session_record import SessionRecord

MAX_SHOWN = 10_000
"""Most generated tokens in the document at once (a longer stream is shown in pages)."""
CHUNK = 2_500
"""Tokens dropped from the head at a time while a long live stream is followed."""
NEAR_TIE_MAX = 10.0
"""Largest near-tie threshold the spin box offers (logits)."""
NEAR_TIE_KEY = "token_view/near_tie_logits"
"""QSettings key of the near-tie threshold (logits)."""
LEGEND_SHORT = {O.ACCEPTED: "accepted", O.CORRECTION: "correction", O.BONUS: "bonus", O.FROM_PREFILL: "first token",
                O.PLAIN: "plain step", O.END: "end"}
"""The legend's short name of each token outcome (``outcomes.LEGEND`` gives the long ones, in its tooltip)."""
_PENDING = object()  # margin of a token whose figures are still to come (its window's receipt, its plain step's batch)


class TokenView(QWidget):
    """Generated text with per-token colors and a legend; redraws only changed tokens.

    ``windowClicked(window_index)`` is emitted when a token of a window is clicked. The view keeps
    its own redraw cursor (the tokens it drew and the record's ``version`` then) and never writes
    the record.
    """

    windowClicked = Signal(int)
    auditRequested = Signal()
    """The "Audit this difference…" link on the line about the comparison with plain decoding was clicked."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session: SessionRecord | None = None
        self.first = 0
        """Index of the first generated token in the document (0 unless the stream is long)."""
        self.rendered = 0
        """Index after the last generated token in the document (= tokens drawn when ``first`` is 0)."""
        self._starts: list[int] = []  # document position where each drawn token starts (from ``first``)
        self._drawn_version = -1  # the record's version when the view last drew
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
        self._near_tie = QTextCharFormat()
        self._near_tie.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
        self._near_tie.setUnderlineColor(QColor(NEAR_TIE_COLOR))
        self.near_tie_margin = DEFAULT_NEAR_TIE_MARGIN
        """Tokens whose row's top-2 logit margin is below this (logits) are marked near-ties."""
        self._margins: list = []  # per generated token: its row's margin (logits), None, or _PENDING (still to come)
        self._pending_from: int | None = None  # first drawn token whose window had no receipt yet
        self._entries_seen = (0, 0)  # (receipts, discards) when the pending tokens were last checked
        self._settings: QSettings | None = None
        self._baseline_shown: object = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        # Compact: each outcome's short name drawn as its tokens are (one line at 1024 px wide); the
        # tooltip says what each one is.
        legend = QLabel(" ".join(
            f"<span style='background:{O.BACKGROUNDS[o]};color:{O.COLORS[o]};font-weight:bold'>"
            f"&nbsp;{LEGEND_SHORT.get(o, label)}&nbsp;</span>" for o, label in O.LEGEND))
        legend.setToolTip("<br>".join(f"<b>{LEGEND_SHORT.get(o, label)}</b>: {label}" for o, label in O.LEGEND))
        legend.setWordWrap(True)
        self.legend = legend
        # The near-tie entry of the legend: a sample drawn with the stream's own format (rich
        # text in a label has no dotted underline), then the threshold.
        self.near_tie_sample = QLabel()
        self.near_tie_sample.setPixmap(self._sample_pixmap())
        self.near_tie_spin = QDoubleSpinBox()
        self.near_tie_spin.setRange(0.0, NEAR_TIE_MAX)
        self.near_tie_spin.setSingleStep(0.1)
        self.near_tie_spin.setDecimals(1)
        self.near_tie_spin.setPrefix("near-tie < ")
        self.near_tie_spin.setSuffix(" logits")
        self.near_tie_spin.setValue(DEFAULT_NEAR_TIE_MARGIN)
        tip = ("dotted underline: the target's top two logits on the token's verification row differ by less "
               "than this margin (logits), so it nearly chose another token; 0 marks none")
        for wdg in (self.near_tie_sample, self.near_tie_spin):
            wdg.setToolTip(tip)
        self.near_tie_spin.valueChanged.connect(self.set_near_tie_margin)
        bar = QHBoxLayout()
        bar.setContentsMargins(0, 0, 6, 0)  # the spin box's frame never touches the window's edge
        bar.addWidget(legend, 1)
        bar.addWidget(self.near_tie_sample)
        bar.addWidget(self.near_tie_spin)
        self.hold_label = QLabel("")
        self.hold_label.setTextFormat(Qt.TextFormat.RichText)  # token texts arrive HTML-escaped
        self.hold_label.setStyleSheet("color:#e65100;font-weight:bold")
        # A long hold line wraps; it never widens the window past the screen.
        self.hold_label.setWordWrap(True)
        self.hold_label.setMinimumWidth(1)
        self.hold_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.baseline_label = QLabel("")
        self.baseline_label.setTextFormat(Qt.TextFormat.RichText)
        self.baseline_label.setWordWrap(True)
        self.baseline_label.linkActivated.connect(lambda _link: self.auditRequested.emit())
        self.baseline_label.hide()
        lay.addLayout(bar)
        lay.addWidget(self.baseline_label)
        lay.addWidget(self.hold_label)
        self.stream = TokenStream(self.tooltip)
        self.stream.tokenClicked.connect(self._clicked)
        self.nav = QWidget()
        nl = QHBoxLayout(self.nav)
        nl.setContentsMargins(0, 0, 0, 0)
        self.nav_label = QLabel("")
        self.nav_label.setStyleSheet("color:#555")
        self.earlier = QPushButton("◀ earlier")
        self.later = QPushButton("later ▶")
        self.earlier.clicked.connect(lambda: self.page(-1))
        self.later.clicked.connect(lambda: self.page(1))
        for wdg in (self.nav_label, self.earlier, self.later):
            nl.addWidget(wdg)
        nl.addStretch(1)
        self.nav.setToolTip(f"a long stream is shown {MAX_SHOWN:,} tokens at a time")
        self.nav.hide()
        lay.addWidget(self.nav)
        lay.addWidget(self.stream, 1)

    def _sample_pixmap(self) -> QPixmap:
        """The legend's near-tie sample: a bold "abc" (as the legend's samples) with the stream's near-tie underline."""
        doc = QTextDocument()
        doc.setDocumentMargin(1)
        f = QFont(self.font())
        f.setBold(True)
        doc.setDefaultFont(f)
        fmt = QTextCharFormat(self._near_tie)
        QTextCursor(doc).insertText("\u2009abc\u2009", fmt)
        ratio = self.devicePixelRatioF()
        size = doc.size().toSize()
        pix = QPixmap(QSize(size.width(), size.height()) * ratio)
        pix.setDevicePixelRatio(ratio)
        pix.fill(QColor("#ffffff"))
        painter = QPainter(pix)
        doc.drawContents(painter)
        painter.end()
        return pix

    def use_settings(self, settings: QSettings) -> None:
        """Keep the near-tie threshold in ``settings`` (the window's QSettings): read it now, write it
        on every change (the main window calls it once; without it the threshold is not remembered)."""
        self._settings = settings
        try:
            v = float(settings.value(NEAR_TIE_KEY, DEFAULT_NEAR_TIE_MARGIN))
        except (TypeError, ValueError):
            v = DEFAULT_NEAR_TIE_MARGIN
        if not 0.0 <= v <= NEAR_TIE_MAX:  # also NaN
            v = DEFAULT_NEAR_TIE_MARGIN
        self.near_tie_spin.setValue(v)
        self.set_near_tie_margin(self.near_tie_spin.value())

    def set_near_tie_margin(self, logits: float) -> None:
        """Mark tokens whose row margin is below ``logits`` (0..``NEAR_TIE_MAX``) as near-ties; restyles
        only the shown tokens whose mark changes, and stores the value in the settings."""
        logits = float(logits)
        if self.near_tie_spin.value() != logits:
            self.near_tie_spin.setValue(logits)  # calls back here once
            return
        if self._settings is not None and self._settings.value(NEAR_TIE_KEY) != logits:
            self._settings.setValue(NEAR_TIE_KEY, logits)
        old, self.near_tie_margin = self.near_tie_margin, logits
        if old == logits or self.session is None:
            return
        tokens, margins = self.session.tokens, self._margins
        changed = [i for i in range(self.first, min(self.rendered, len(margins)))
                   if isinstance(margins[i], float) and (margins[i] < old) != (margins[i] < logits)]
        if not changed:
            return
        doc = self.stream.document()
        cur = QTextCursor(doc)
        cur.beginEditBlock()
        end_of_doc = doc.characterCount() - 1
        for i in changed:
            k = i - self.first
            cur.setPosition(self._starts[k])
            cur.setPosition(self._starts[k + 1] if k + 1 < len(self._starts) else end_of_doc,
                            QTextCursor.MoveMode.KeepAnchor)
            cur.setCharFormat(self._format_of(tokens[i]))
        cur.endEditBlock()

    def _margin_of(self, t):
        """Token ``t``'s row margin (logits; cached once known), None without figures, or ``_PENDING``
        while its window has no receipt or its plain step's batch has not run (not run here, on the GUI
        thread: the generation runs it within ``inspector.engine.deferred_figures.MAX_AGE_MS``)."""
        m = self._margins
        i = t.index
        if i < len(m) and m[i] is not _PENDING:
            return m[i]
        s = self.session
        if s.figures_pending(t):  # its batch has not run: not forced here (the GUI thread), asked again later
            v = _PENDING
        elif (p := s.token_probabilities(t)) is not None:
            v = float(p.margin)
        elif t.window is not None and s.window(t.window) is None:
            v = _PENDING
        else:
            v = None
        if i >= len(m):
            m.extend([_PENDING] * (i + 1 - len(m)))
        m[i] = v
        return v

    def _format_of(self, t) -> QTextCharFormat:
        """Token ``t``'s character format: its outcome's, the near-tie and divergence marks, its index."""
        fmt = QTextCharFormat(self._formats.get(t.outcome, self._formats[O.PLAIN]))
        m = self._margin_of(t)
        if isinstance(m, float) and m < self.near_tie_margin:
            fmt.merge(self._near_tie)
        if t.index == self.session.divergence_index:
            fmt.merge(self._diverged)
        fmt.setProperty(TOKEN_PROPERTY, t.index)
        return fmt

    def is_marked_near_tie(self, index: int) -> bool:
        """Whether token ``index`` is drawn with the near-tie mark (dotted underline; tests)."""
        if not self.first <= index < self.rendered:
            return False
        cur = QTextCursor(self.stream.document())
        cur.setPosition(self._starts[index - self.first] + 1)
        return cur.charFormat().underlineStyle() == QTextCharFormat.UnderlineStyle.DotLine

    def near_tie_marks(self) -> list[int]:
        """Indices of the shown tokens drawn with the near-tie mark (read from the document; tests)."""
        return [i for i in range(self.first, self.rendered) if self.is_marked_near_tie(i)]

    def set_session(self, session: SessionRecord) -> None:
        self.session = session
        self.first = self.rendered = 0
        self._starts = []
        self._margins = []
        self._pending_from = None
        self._entries_seen = (0, 0)
        self._drawn_version = -1
        self.stream.clear()
        self.nav.hide()
        self.hold_label.setText("")
        self._baseline_shown = None
        self.baseline_label.hide()
        self.refresh()

    def token_count(self) -> int:
        """Tokens in the document (all of them unless the stream is longer than ``MAX_SHOWN``)."""
        return self.rendered - self.first

    def is_marked_divergent(self, index: int) -> bool:
        """Whether token ``index`` is drawn with the divergence mark (tests)."""
        if not self.first <= index < self.rendered:
            return False
        cur = QTextCursor(self.stream.document())
        cur.setPosition(self._starts[index - self.first] + 1)
        return cur.charFormat().underlineStyle() == QTextCharFormat.UnderlineStyle.WaveUnderline

    def tooltip(self, index: int) -> str:
        """Tooltip text of generated token ``index`` (``token_text.token_tooltip``; "" without it)."""
        s = self.session
        return "" if s is None else token_tooltip(s, index, self.near_tie_margin)

    def baseline_text(self) -> str:
        """The line above the text about the comparison with plain decoding ("" when none ran)."""
        return baseline_html(self.session)

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
        self.hold_label.setText(hold_html(self.session, info))

    def refresh(self) -> None:
        """Draw tokens added or changed since the last call, in one edit block (one
        layout per redraw). Keeps at most ``MAX_SHOWN`` tokens in the document:
        while the view follows the end, the oldest are dropped ``CHUNK`` at a time."""
        s = self.session
        if s is None:
            return
        self._show_baseline()
        n = len(s.tokens)
        changed = s.token_changes_since(self._drawn_version)
        start = max(self.rendered if changed is None else min(changed, self.rendered), self.first)
        if self._pending_from is not None and self._pending_ready(s):
            # A window ended, or a plain step's figures arrived: its tokens (drawn without them) get their marks.
            self._entries_seen = (len(s.receipts), len(s.discards))
            start = min(start, max(self._pending_from, self.first))
        self._drawn_version = s.version
        if start >= n and self.rendered == n:
            return
        bar = self.stream.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 4
        if at_end and n - self.first > MAX_SHOWN:
            if n - self.rendered > MAX_SHOWN - CHUNK:  # far behind (a long session opened): draw its end
                self._show_from(n - MAX_SHOWN)
                bar.setValue(bar.maximum())
                return
            drop = -(-(n - MAX_SHOWN - self.first) // CHUNK) * CHUNK  # whole chunks
            self._drop_head(min(drop, self.rendered - self.first))
            start = max(start, self.first)
        end = min(n, self.first + MAX_SHOWN)
        if start < end or start < self.rendered:
            self._draw(start, end)
        self._update_nav()
        if at_end:
            bar.setValue(bar.maximum())

    def _pending_ready(self, s) -> bool:
        """The first token drawn without its figures (``_pending_from``) may have them now: its plain step's
        batch ran, or (a window's token) a window ended."""
        i = self._pending_from
        if i >= len(s.tokens):
            return True
        if s.tokens[i].window is None:  # a redraw from it before its batch ran would draw it unmarked again
            return not s.figures_pending(s.tokens[i])
        return self._entries_seen != (len(s.receipts), len(s.discards))

    def _draw(self, start: int, end: int) -> None:
        """Replace tokens ``start..`` of the document with tokens ``start..end-1`` (one edit block)."""
        s = self.session
        doc = self.stream.document()
        cur = QTextCursor(doc)
        cur.beginEditBlock()
        if start < self.rendered:
            cur.setPosition(self._starts[start - self.first])
            cur.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cur.removeSelectedText()
            del self._starts[start - self.first:]
        cur.movePosition(QTextCursor.MoveOperation.End)
        if self._pending_from is not None and self._pending_from >= start:
            self._pending_from = None
        self._entries_seen = (len(s.receipts), len(s.discards))
        pos = cur.position()
        for t in s.tokens[start:end]:
            fmt = self._format_of(t)
            if self._pending_from is None and self._margins[t.index] is _PENDING:
                self._pending_from = t.index
            self._starts.append(pos)
            # The stream's text (a split character whole with the token completing it; nothing for
            # the tokens holding its first bytes); a token with no bytes at all shows as ∅.
            text = t.shown or ("" if t.text else "\u2205")
            cur.insertText(text, fmt)
            pos = cur.position()
        cur.endEditBlock()
        self.rendered = end

    def _drop_head(self, count: int) -> None:
        """Remove the first ``count`` shown tokens from the document."""
        if count <= 0:
            return
        cut = self._starts[count] if count < len(self._starts) else self.stream.document().characterCount() - 1
        cur = QTextCursor(self.stream.document())
        cur.setPosition(cut, QTextCursor.MoveMode.KeepAnchor)
        cur.removeSelectedText()
        self._starts = [p - cut for p in self._starts[count:]]
        self.first += count

    def _show_from(self, first: int) -> None:
        """Show tokens ``first..first+MAX_SHOWN-1`` (rebuilds the document)."""
        s = self.session
        n = len(s.tokens)
        first = max(0, min(first, n - 1 if n else 0))
        self.stream.clear()
        self._starts = []
        self._pending_from = None
        self.first = self.rendered = first
        self._draw(first, min(n, first + MAX_SHOWN))
        self._update_nav()

    def page(self, step: int) -> None:
        """Show the previous (``step`` < 0) or next ``MAX_SHOWN`` tokens of a long stream."""
        if self.session is None:
            return
        self._show_from(self.first + step * MAX_SHOWN)
        bar = self.stream.verticalScrollBar()
        bar.setValue(bar.maximum() if step < 0 else 0)

    def shown_range(self) -> tuple[int, int]:
        """(first, end): the generated-token indices in the document."""
        return self.first, self.rendered

    def _update_nav(self) -> None:
        n = len(self.session.tokens) if self.session is not None else 0
        partial = self.first > 0 or self.rendered < n
        if partial:
            text = f"showing tokens {self.first + 1:,}–{self.rendered:,} of {n:,}"
            if text != self.nav_label.text():
                self.nav_label.setText(text)
            self.earlier.setEnabled(self.first > 0)
            self.later.setEnabled(self.rendered < n)
        if partial != self.nav.isVisible():
            self.nav.setVisible(partial)
