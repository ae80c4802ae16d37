"""The Audit window (issue 39, item 1): why did the shown run's output change?

Widgets only, given only what they show: ``set_running`` / ``set_progress`` while the engine thread
works, then ``set_result`` with an ``AuditShown`` (``inspector.gui.engine_thread.audit_job``), or
``set_refusal`` with one line. The result shows where the run parts from plain decoding (generated
token and KV position, the two tokens as text, the text before them), the verdict in a banner
(red and loud when "NOT EXPLAINED BY BATCH SHAPE": a real bug), and the table of which verify widths
pick which token with the smallest top-2 margin at each; or, when the run equals plain decoding, says
so instead.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from inspector.gui.engine_thread.audit_job import AuditShown
from inspector.gui.look.banner_colours import BANNER_DONE, BANNER_ERROR, BANNER_HINT, BANNER_WARN
from inspector.gui.look.screen_fit import keep_on_screen
from inspector.gui.look.table_copy import install_row_copy
from inspector.gui.look.wording import count_noun
from inspector.session.audit import BATCH_SHAPE, NOT_EXPLAINED, RUN_PREFIX, AuditResult, compact

HEADERS = ("verify width", "places tried", "picks", "smallest top-2 margin")
TIPS = ("rows in the verify batch (1 = plain decoding's one-token step)",
        "the rows a window of this width could have put the predicting row at (0 = the batch's first row)",
        "the target's pick for the position at this width (at which places, when they differ)",
        "top-1 minus top-2 logit over the places (logits; a near-tie is well below 1)")
RUN_COLOUR = "#ffcdd2"
"""Background of a pick that is the run's token (the token that differs)."""
PLAIN_COLOUR = "#c8e6c9"
"""Background of a pick that is plain decoding's token."""
OTHER_COLOUR = "#fff9c4"
"""Background of a pick that is neither stream's token."""


def verdict_style(verdict: str) -> str:
    """The banner style of a verdict: red for "not explained" (a bug), blue for batch-shape numerics,
    amber otherwise (no width reproduces plain decoding, or the run ended early)."""
    if verdict.startswith(NOT_EXPLAINED):
        return BANNER_ERROR
    if verdict.startswith(BATCH_SHAPE):
        return BANNER_HINT
    return BANNER_WARN


def quoted(text: str) -> str:
    """A token's text as Python shows it (quotes, ``\\n`` visible), HTML-escaped."""
    return html.escape(repr(text))


class AuditView(QWidget):
    """The Audit window (a top-level window owned by the main window). ``cancelRequested``: stop the
    audit; ``againRequested``: audit the shown run again (it may be another one by now)."""

    cancelRequested = Signal()
    againRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("spec-inspector — why did my output change?")
        self.shown: AuditShown | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(8, 8, 8, 8)
        self.run_info = QLabel("")
        self.run_info.setWordWrap(True)
        self.run_info.setTextFormat(Qt.TextFormat.RichText)
        lay.addWidget(self.run_info)

        busy = QHBoxLayout()
        self.progress = QProgressBar()
        self.progress.setTextVisible(True)
        self.cancel = QPushButton("Cancel")
        self.cancel.setToolTip("stop the audit (at its next decode)")
        self.cancel.clicked.connect(self.cancelRequested)
        self.again = QPushButton("Audit the shown run")
        self.again.setToolTip("audit the run the main window shows now (Analysis > Audit…, Ctrl+Shift+A)")
        self.again.clicked.connect(self.againRequested)
        busy.addWidget(self.progress, 1)
        busy.addWidget(self.cancel)
        busy.addStretch(0)
        busy.addWidget(self.again)
        lay.addLayout(busy)

        self.where = QLabel("")
        self.where.setWordWrap(True)
        self.where.setTextFormat(Qt.TextFormat.RichText)
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.where)
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        self.verdict.setTextFormat(Qt.TextFormat.RichText)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.verdict.hide()
        lay.addWidget(self.verdict)

        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(HEADERS)
        for i, tip in enumerate(TIPS):
            self.table.horizontalHeaderItem(i).setToolTip(tip)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        h = self.table.horizontalHeader()
        h.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        for c in (0, 1, 3):
            h.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        install_row_copy(self.table)
        lay.addWidget(self.table, 1)
        self.legend = QLabel(f"<span style='background:{PLAIN_COLOUR}'>&nbsp;plain decoding's token&nbsp;</span> "
                             f"<span style='background:{RUN_COLOUR}'>&nbsp;the run's token&nbsp;</span> "
                             f"<span style='background:{OTHER_COLOUR}'>&nbsp;another, or several&nbsp;</span> "
                             "· hover a pick for every place; Ctrl+C copies the selected rows")
        self.legend.setStyleSheet("color:#555")
        lay.addWidget(self.legend)
        self.note = QLabel("")
        self.note.setWordWrap(True)
        self.note.setTextFormat(Qt.TextFormat.RichText)
        self.note.setStyleSheet("color:#555")
        lay.addWidget(self.note)
        lay.addStretch(0)  # takes the room the table leaves when it is hidden (stretch 1 wins while shown)
        self.set_running(False)
        keep_on_screen(self, 820, 560)  # less on a smaller screen

    # -- states -------------------------------------------------------------------
    def set_run_info(self, html_text: str) -> None:
        """The line naming the run audited (rich text)."""
        self.run_info.setText(html_text)

    def set_running(self, running: bool, text: str = "") -> None:
        """Show the progress bar (``running``, with ``text``) and Cancel, or hide them."""
        self.progress.setVisible(running)
        self.cancel.setVisible(running)
        self.cancel.setEnabled(running)
        self.again.setVisible(not running)
        if running:
            self.shown = None
            self.progress.setRange(0, 0)  # busy until a count arrives
            self.progress.setFormat(text)
            self.where.setText(html.escape(text))
            self._show_verdict("", "")
            self._show_table(False)
            self.note.setText("")

    def set_progress(self, what: str, done: int, total: int) -> None:
        """What the engine thread does now; ``done`` of ``total`` verify batches (total 0: no count)."""
        if total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(done)
            self.progress.setFormat(f"{done}/{total} verify batches")
        else:
            self.progress.setRange(0, 0)
        self.where.setText(html.escape(f"{what} …"))

    def set_refusal(self, message: str) -> None:
        """Why the shown run cannot be audited, or why the audit failed (one line)."""
        self.set_running(False)
        self.shown = None
        self.where.setText("")
        self._show_verdict(html.escape(message), BANNER_WARN)
        self._show_table(False)
        self.note.setText("")

    def set_result(self, shown: AuditShown) -> None:
        """Show a finished audit: identical to plain decoding, or where it parts, the verdict and the table."""
        self.set_running(False)
        self.shown = shown
        a = shown.audit
        if a.identical:
            self.where.setText("")
            self._show_verdict(f"<b>Identical to {html.escape(a.reference)}</b> "
                               f"({count_noun(len(a.generated), 'token')}): the run committed exactly the tokens "
                               f"{html.escape(a.reference)} gives, so there is nothing to audit.", BANNER_DONE)
            self._show_table(False)
            self.note.setText("")
            return
        r = a.result
        p = r.position

        def tok(token: int, colour: str) -> str:
            if token < 0:
                return "<i>(that stream had ended)</i>"
            return (f"<span style='background:{colour}'>&nbsp;<b>{quoted(shown.text(token))}</b>&nbsp;</span> "
                    f"<span style='color:#666'>(id {token})</span>")

        self.where.setText(
            f"<b>Parts from {html.escape(a.reference)} at generated token {p}</b> (KV position "
            f"{a.prompt_length + p}):&nbsp; the run committed {tok(r.speculative_token, RUN_COLOUR)}, "
            f"{html.escape(a.reference)} gives {tok(r.plain_token, PLAIN_COLOUR)}"
            f"<br><span style='color:#555'>after “…{html.escape(a.context).replace(chr(10), '⏎')}”</span>")
        loud = r.verdict.startswith(NOT_EXPLAINED)
        head, _, rest = r.verdict.partition(": ")
        self._show_verdict(("⚠ " if loud else "") + f"<b>{html.escape(head)}</b>: {html.escape(rest)}",
                           verdict_style(r.verdict), loud)
        self._fill(r, shown)
        self._show_table(True)
        notes = [f"The target's pick for that position recomputed in verify batches of 1..{len(r.widths)} rows, "
                 "at every place a window of that width could have put the predicting row; the KV before "
                 + ("them as the run's own windows built it (its verify batches decoded again)." if r.prefix == RUN_PREFIX
                    else "them as plain decoding built it (width 1 at place 0 is plain decoding's own step).")]
        if len(a.tried) > 1:
            notes.append(f"With the KV as plain decoding built it: {html.escape(a.tried[0].verdict)}")
        self.note.setText("<br>".join(notes))

    def _show_table(self, shown: bool) -> None:
        if not shown:
            self.table.setRowCount(0)
        self.table.setVisible(shown)
        self.legend.setVisible(shown)

    def _show_verdict(self, html_text: str, style: str, loud: bool = False) -> None:
        self.verdict.setText(html_text)
        weight = "font-size:15px;border:2px solid #b71c1c;" if loud else ""
        self.verdict.setStyleSheet(f"QLabel {{ {style}; {weight} padding:8px; }}" if html_text else "")
        self.verdict.setVisible(bool(html_text))

    def _fill(self, r: AuditResult, shown: AuditShown) -> None:
        t = self.table
        t.setRowCount(len(r.widths))
        for i, w in enumerate(r.widths):
            places = [p.place for p in w.places]
            picks = "; ".join(
                repr(shown.text(tok)) + (f" (id {tok})" if len(w.tokens) == 1 else
                                         f" (id {tok}) at places {compact([p.place for p in w.places if p.token == tok])}")
                for tok in w.tokens)
            cells = (str(w.width), f"{len(places)} ({compact(places)})", picks, f"{w.min_margin:.4f} logits")
            colour = (OTHER_COLOUR if len(w.tokens) > 1 or w.tokens[0] not in (r.speculative_token, r.plain_token)
                      else RUN_COLOUR if w.tokens[0] == r.speculative_token else PLAIN_COLOUR)
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c == 2:
                    item.setBackground(QBrush(QColor(colour)))
                    item.setToolTip("\n".join(f"place {p.place} (batch from KV position {p.base}): "
                                              f"{shown.text(p.token)!r} over {shown.text(p.second)!r}, "
                                              f"margin {p.margin:.4f} logits" for p in w.places))
                if c in (0, 3):
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                t.setItem(i, c, item)

    # -- what tests and people read -----------------------------------------------------
    def verdict_text(self) -> str:
        """The verdict banner's text as shown (rich text; "" when hidden)."""
        return "" if self.verdict.isHidden() else self.verdict.text()

    def rows(self) -> list[tuple[str, ...]]:
        """The table's cells, row by row."""
        t = self.table
        return [tuple(t.item(i, c).text() for c in range(t.columnCount())) for i in range(t.rowCount())]
