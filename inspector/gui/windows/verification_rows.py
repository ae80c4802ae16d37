"""The Windows tab's rows table: one row per verification row of the window shown (row, KV position,
input token, proposed token, target prediction, the outcome, and the target's figures: p(proposed)
and its rank, p(target), the top-2 logit margin).

Rows whose KV entries the repair removed (position >= canonical_position) are struck through; the row
Step token holds before is marked. Functions on the ``QTableWidget`` ``WindowDetail`` owns (its
``rows``), and how a token reads in the tab (``token_text``).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QHeaderView, QTableWidget, QTableWidgetItem

from inspector.engine.classify import row_outcomes
from inspector.gui.look import outcomes as O
from inspector.gui.look.table_copy import install_row_copy
from inspector.gui.tokens.token_figures import margin_text, probability_text
from inspector.session.session_record import SessionRecord

HOLD_BACKGROUND = "#fff59d"
"""Background of the row Step token holds before."""
ROW_LABELS = {O.ACCEPTED: "accepted proposal token", O.CORRECTION: "correction", O.BONUS: "bonus token",
              O.BRANCH: "branch-conditioned (never output)", O.NOT_COMMITTED: "not committed"}
"""Outcome of a verification row in words (rows table, hold banner)."""

ROW_COLUMNS = ("row", "position", "input token", "proposed token", "target prediction", "outcome",
               "p(proposed)", "rank", "p(target)", "margin")
ROW_HEADERS = ("row", "pos.", "input", "proposed", "target", "outcome", "p(proposed)", "rank", "p(target)", "margin")
"""Short header labels of the rows table (``ROW_COLUMNS`` are their tooltips, with ``ROW_TIPS``)."""
ROW_TIPS = (
    "verification row (0: the current token's row)",
    "KV position of the row's input token (tokens)",
    "input token of the row: the current token, then the proposal tokens",
    "proposed token this row verifies",
    "target prediction: the token the target model predicts after the input token",
    "accepted, correction, bonus token, branch-conditioned (never output), not committed; trimmed: KV entry removed",
    "the target's probability of the proposed token on this row (0..1; the softmax of the logits at T=0, "
    "after the sampler chain at T>0); — on the bonus row; empty when the window has no figures",
    "rank of the proposed token among the target's logits on this row (1 = the target's top choice)",
    "the target's probability of its own prediction on this row (0..1)",
    "the target's top logit minus its second on this row (logits); a small margin is a near-tie",
)
OUTCOME_COLUMN = 5
"""Index of the outcome column (shown last)."""
FIGURE_COLUMNS = 6
"""Index of the first probability column (p(proposed), rank, p(target), margin). On screen (and in a
copy) they come before the outcome, which stays last and takes the table's spare width."""


def token_text(s: SessionRecord, t: int | None) -> str:
    """Token ``t`` of session ``s`` as the tab shows it: its text (newline and tab escaped) and its id;
    "—" for None."""
    if t is None:
        return "—"
    text = s.text_of(t).replace("\n", "\\n").replace("\t", "\\t")
    return f"'{text}'  ({t})"


def _item(text, *, color: str | None = None, align_right=False) -> QTableWidgetItem:
    it = QTableWidgetItem(str(text))
    it.setFlags(Qt.ItemFlag.ItemIsSelectable | Qt.ItemFlag.ItemIsEnabled)
    if color:
        it.setBackground(QBrush(QColor(color)))
    if align_right:
        it.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return it


def _figures(probs, row: int) -> tuple[str, str, str, str]:
    """(p(proposed), rank, p(target), margin) of verification row ``row`` as table texts;
    empty texts without figures (turned off, a schema v1 file, a window not verified yet, a row after the first
    mismatch: never judged, ``inspector.engine.window.judged_rows``)."""
    if probs is None or not 0 <= row < probs.rows:
        return "", "", "", ""
    rank = probs.proposed_rank[row]
    return (probability_text(probs.proposed_p[row]), "—" if rank is None else str(rank),
            probability_text(probs.predicted_p[row]), margin_text(probs.margin[row]))


def make_rows_table() -> QTableWidget:
    """The rows table, empty: short headers with ``ROW_COLUMNS``/``ROW_TIPS`` tooltips, the figure columns
    shown before the outcome (which stretches), Ctrl+C copying the selected rows."""
    rows = QTableWidget(0, len(ROW_COLUMNS))
    rows.setHorizontalHeaderLabels(ROW_HEADERS)
    for c, tip in enumerate(ROW_TIPS):
        rows.horizontalHeaderItem(c).setToolTip(f"{ROW_COLUMNS[c]}: {tip}")
    rows.verticalHeader().setVisible(False)
    rows.setWordWrap(False)
    rows.verticalHeader().setDefaultSectionSize(22)
    rows.setToolTip("struck through: KV entries the repair removed (position >= canonical_position)")
    rows_header = rows.horizontalHeader()
    rows_header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    rows_header.setStretchLastSection(True)
    for c in range(FIGURE_COLUMNS, len(ROW_COLUMNS)):  # the short figures before the long outcome texts
        rows_header.moveSection(rows_header.visualIndex(c), OUTCOME_COLUMN + c - FIGURE_COLUMNS)
    resize_row_columns(rows)
    install_row_copy(rows)  # Ctrl+C copies the selected rows as tab-separated text
    return rows


def fill_rows(table: QTableWidget, s: SessionRecord, current, proposal, preds, base, committed, canonical, after,
              held_row=None, probs=None) -> None:
    """The rows table: one row per verification row (KV position base + row), each with the
    engine's row outcome (``inspector.engine.classify.row_outcomes``) and the target's figures.

    ``s``: the session whose tokens these are; ``committed``: rows whose prediction was committed;
    ``canonical``: the repaired KV length (None while the window is still committing); ``held_row``: the
    row whose prediction Step token holds before committing (None otherwise); ``probs``: the
    receipt's ``WindowProbabilities`` (None: the figure columns stay empty)."""
    n_rows = len(proposal) + 1
    table.setRowCount(n_rows)
    strike = QFont()
    strike.setStrikeOut(True)
    outcomes = row_outcomes(proposal, preds, committed, held_row)
    for i, outcome in enumerate(outcomes):
        inp = current if i == 0 else proposal[i - 1]
        prop = proposal[i] if i < len(proposal) else None
        pred = preds[i] if i < len(preds) else None
        held = held_row is not None and i == held_row
        pred_text = "—" if pred is None else token_text(s, pred)
        removed = canonical is not None and after is not None and base + i >= canonical
        label = ROW_LABELS.get(outcome, outcome)
        if held:
            label = f"held: about to commit ({label})"
        if removed:
            label += " · trimmed"
        vals = (i, base + i, token_text(s, inp) + ("  [current]" if i == 0 else ""), token_text(s, prop), pred_text,
                label)
        vals += _figures(probs, i)
        for c, v in enumerate(vals):
            it = _item(v, color=HOLD_BACKGROUND if held else O.BACKGROUNDS.get(outcome),
                       align_right=c < 2 or c >= FIGURE_COLUMNS)
            if outcome in O.COLORS:
                it.setForeground(QBrush(QColor(O.COLORS[outcome])))
            if removed:
                it.setFont(strike)
            table.setItem(i, c, it)
    resize_row_columns(table)


def resize_row_columns(table: QTableWidget) -> None:
    """Size the rows table's columns to their texts, but the outcome's (shown last, it stretches)."""
    # At most draft max + 1 rows: sizing the columns to their texts is cheap (the outcome,
    # shown last, stretches to the table's width).
    for c in range(len(ROW_COLUMNS)):
        if c != OUTCOME_COLUMN:
            table.resizeColumnToContents(c)
