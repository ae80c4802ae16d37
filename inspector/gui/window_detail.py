"""Window list and the detail of the selected window.

The rows table lists the verification rows (row, KV position, input token,
proposed token, target prediction, outcome); rows whose KV entries the
repair removed (position >= canonical_position) are struck through, and
predictions past the committed ones are marked branch-conditioned (never
output). Below: the receipt's positions and timings, and its raw JSON.
"""

from __future__ import annotations

import html
import json

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from inspector.gui import outcomes as O
from inspector.gui.session_model import SessionData, WindowEntry

WINDOW_COLUMNS = ("window", "disposition", "proposed", "accepted", "committed", "base", "canonical", "trimmed")
WINDOW_HEADERS = ("#", "disposition", "prop.", "acc.", "comm.", "base", "canon.", "trim")
ROW_COLUMNS = ("row", "position", "input token", "proposed token", "target prediction", "outcome")
DISPOSITION_COLORS = {"full_accept": "#e8f5e9", "first_mismatch": "#fff3e0", "stopped": "#ede7f6", "error": "#ffcdd2"}


def _tok(s: SessionData, t: int | None) -> str:
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


class WindowDetail(QWidget):
    """Windows table (one row per verified or failed window) and the selected window's rows."""

    windowSelected = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session: SessionData | None = None
        self._drawn_windows = 0
        self._drawn_version = -1
        self.selected: int | None = None
        self._rows_sized = False
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        split = QSplitter(Qt.Orientation.Horizontal)
        self.splitter = split
        self.windows = QTableWidget(0, len(WINDOW_COLUMNS))
        self.windows.setHorizontalHeaderLabels(WINDOW_HEADERS)
        for i, tip in enumerate(WINDOW_COLUMNS):
            self.windows.horizontalHeaderItem(i).setToolTip(tip)
        self.windows.verticalHeader().setVisible(False)
        self.windows.verticalHeader().setDefaultSectionSize(22)
        self.windows.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.windows.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.windows.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.windows.itemSelectionChanged.connect(self._selection_changed)
        split.addWidget(self.windows)

        right = QSplitter(Qt.Orientation.Vertical)
        self.rows = QTableWidget(0, len(ROW_COLUMNS))
        self.rows.setHorizontalHeaderLabels(ROW_COLUMNS)
        self.rows.verticalHeader().setVisible(False)
        self.rows.setWordWrap(False)
        self.rows.verticalHeader().setDefaultSectionSize(22)
        self.rows.setToolTip("struck through: KV entries the repair removed (position >= canonical_position)")
        self.rows.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.rows.horizontalHeader().setStretchLastSection(True)
        right.addWidget(self.rows)
        tabs = QTabWidget()
        self.fields = QLabel("Select a window.")
        self.fields.setTextFormat(Qt.TextFormat.RichText)
        self.fields.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.fields.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.fields.setWordWrap(True)
        self.raw = QPlainTextEdit()
        self.raw.setReadOnly(True)
        self.raw.setFont(QFont("DejaVu Sans Mono", 9))
        tabs.addTab(self.fields, "Receipt")
        tabs.addTab(self.raw, "Raw JSON")
        right.addWidget(tabs)
        right.setSizes([260, 200])
        split.addWidget(right)
        split.setSizes([360, 520])
        lay.addWidget(split)

    def set_session(self, session: SessionData) -> None:
        self.session = session
        self._drawn_windows = 0
        self._drawn_version = -1
        self.selected = None
        self.windows.setRowCount(0)
        self.rows.setRowCount(0)
        self.fields.setText("Select a window.")
        self.raw.setPlainText("")
        self.refresh()

    def window_count(self) -> int:
        return self.windows.rowCount()

    def refresh(self) -> None:
        """Add rows for new windows (the table is append-only; failed windows appear once known)."""
        s = self.session
        if s is None or s.version == self._drawn_version:
            return
        self._drawn_version = s.version
        entries = s.windows()
        if len(entries) == self._drawn_windows:
            return
        follow = self.selected is None or self.selected == self._last_index()
        first = self._drawn_windows == 0
        self.windows.setRowCount(len(entries))
        for i, e in enumerate(entries[self._drawn_windows:], start=self._drawn_windows):
            self._fill_window_row(i, e)
        self._drawn_windows = len(entries)
        if first:
            self.windows.resizeColumnsToContents()
        if follow and entries and self.isVisible():
            self.select_window(entries[-1].window_index)

    def _last_index(self) -> int | None:
        n = self.windows.rowCount()
        if not n:
            return None
        return int(self.windows.item(n - 1, 0).text())

    def _fill_window_row(self, i: int, e: WindowEntry) -> None:
        if e.receipt is not None:
            r = e.receipt
            vals = (r.window_index, r.disposition, r.proposal_token_count, r.accepted_proposal_tokens,
                    r.canonical_prediction_count, r.base_position, r.canonical_position, r.trimmed_rows)
            color = DISPOSITION_COLORS.get(r.disposition)
        else:
            d, p = e.discard, e.discard.partial
            trimmed = "" if p.position_after_verification is None else p.position_after_verification - p.canonical_position
            vals = (p.window_index, "error", len(d.proposal_token_ids), "", len(p.committed_tokens),
                    p.base_position, p.canonical_position, trimmed)
            color = DISPOSITION_COLORS["error"]
        for c, v in enumerate(vals):
            self.windows.setItem(i, c, _item(v, color=color, align_right=c != 1))

    def _selection_changed(self) -> None:
        items = self.windows.selectedItems()
        if not items:
            return
        w = int(self.windows.item(items[0].row(), 0).text())
        if w != self.selected:
            self.selected = w
            self._show_window(w)
            self.windowSelected.emit(w)

    def select_window(self, window_index: int) -> None:
        """Select window ``window_index`` (1-based) in the table and show its rows."""
        for i in range(self.windows.rowCount()):
            if int(self.windows.item(i, 0).text()) == window_index:
                self.windows.selectRow(i)
                self.windows.scrollToItem(self.windows.item(i, 0))
                if self.selected != window_index:
                    self.selected = window_index
                    self._show_window(window_index)
                return

    # -- detail ----------------------------------------------------------------------
    def _show_window(self, w: int) -> None:
        s = self.session
        r = s.receipts_by_window.get(w)
        d = s.failed_windows.get(w)
        if r is not None:
            proposal, preds = r.proposal_token_ids, r.verification_row_predictions
            base, committed = r.base_position, r.canonical_prediction_count
            canonical, after = r.canonical_position, r.position_after_verification
            accepted = r.accepted_proposal_tokens
        elif d is not None:
            p = d.partial
            proposal, preds = d.proposal_token_ids, p.verification_row_predictions
            base, committed = p.base_position, len(p.committed_tokens)
            canonical, after = p.canonical_position, p.position_after_verification
            accepted = sum(1 for i in range(min(committed, len(proposal))) if preds[i] == proposal[i])
        else:
            return
        current = self._current_token(w, base)
        n_rows = len(proposal) + 1
        self.rows.setRowCount(n_rows)
        strike = QFont()
        strike.setStrikeOut(True)
        first_mismatch = next((i for i in range(min(len(preds), len(proposal))) if preds[i] != proposal[i]), None)
        for i in range(n_rows):
            inp = current if i == 0 else proposal[i - 1]
            prop = proposal[i] if i < len(proposal) else None
            pred = preds[i] if i < len(preds) else None
            if i < committed:
                outcome = O.classify_row(i, pred, proposal)
                pred_text = _tok(s, pred)
            elif pred is None:
                outcome, pred_text = "not verified", "—"
            elif first_mismatch is not None and i > first_mismatch:
                outcome, pred_text = O.BRANCH, _tok(s, pred)
            else:
                outcome, pred_text = O.NOT_COMMITTED, _tok(s, pred)
            removed = after is not None and base + i >= canonical
            label = {O.ACCEPTED: "accepted", O.CORRECTION: "correction", O.BONUS: "bonus token",
                     O.BRANCH: "branch-conditioned (never output)", O.NOT_COMMITTED: "not committed"}.get(outcome, outcome)
            if removed:
                label += " · trimmed"
            vals = (i, base + i, _tok(s, inp) + ("  [current]" if i == 0 else ""), _tok(s, prop), pred_text, label)
            for c, v in enumerate(vals):
                it = _item(v, color=O.BACKGROUNDS.get(outcome), align_right=c < 2)
                if outcome in O.COLORS:
                    it.setForeground(QBrush(QColor(O.COLORS[outcome])))
                if removed:
                    it.setFont(strike)
                self.rows.setItem(i, c, it)
        if not self._rows_sized:
            self._rows_sized = True
            self.rows.resizeColumnsToContents()
        self.fields.setText(self._fields_html(w, r, d, accepted, base, after, canonical, committed))
        self.raw.setPlainText(self._raw_json(w, r, d))

    def _current_token(self, w: int, base: int) -> int | None:
        """The current token of window ``w``: the committed token at position ``base``."""
        s = self.session
        for t in reversed(s.tokens):
            if t.position == base:
                return t.token
            if t.position < base:
                break
        return None

    def _fields_html(self, w, r, d, accepted, base, after, canonical, committed) -> str:
        s = self.session
        e = html.escape
        if r is not None:
            head = f"<b>Window {w}</b> — <b>{r.disposition}</b> · source {e(r.source)} · decision {e(r.decision_id)}"
            rows = [
                ("proposal", f"{r.proposal_token_count} tokens; accepted {r.accepted_proposal_tokens}; committed {committed}"),
                ("correction / bonus token", e(_tok(s, r.correction_or_boundary_token)) if r.correction_or_boundary_token is not None else "none (stopped)"),
                ("positions (tokens)", f"base {base} → after verification {after} → canonical {canonical} "
                                       f"(trimmed {r.trimmed_rows}; repair: {r.repair})"),
                ("generated so far", f"{r.generated_token_count} tokens"),
                ("time (µs)", f"proposal {r.proposal_elapsed_us:,} · verification {r.verification_elapsed_us:,} · "
                              f"repair {r.repair_elapsed_us:,} · total {r.total_elapsed_us:,}"),
                ("runtime lock (µs)", f"wait {r.runtime_lock_wait_us:,} · hold {r.runtime_lock_hold_us:,} · "
                                      f"acquisitions {r.runtime_lock_acquires}"),
            ]
        else:
            p = d.partial
            head = f"<b>Window {w}</b> — <b style='color:#c62828'>error</b>: {e(d.error or d.reason)}"
            after_s = "not verified" if after is None else str(after)
            rows = [
                ("proposal", f"{len(d.proposal_token_ids)} tokens; committed before the error {committed}"),
                ("positions (tokens)", f"base {base} → after verification {after_s} → canonical {canonical}"),
                ("repaired state", "session retired (resume opens a new one)" if p.session_retired
                 else f"KV cache trimmed to the canonical position {canonical}"),
                ("discard", f"{d.reason} (decision {e(d.decision_id)})"),
            ]
        body = "".join(f"<tr><td style='color:#555;padding-right:12px'>{k}</td><td>{v}</td></tr>" for k, v in rows)
        return f"{head}<table>{body}</table>"

    def _raw_json(self, w, r, d) -> str:
        s = self.session
        if s.document is not None and r is not None:
            for win in s.document["windows"]:
                if win["window_index"] == w:
                    return json.dumps(win, indent=1, ensure_ascii=False)
        if r is not None:
            doc = r.to_json()
            doc["proposal_token_texts"] = [s.text_of(t) for t in r.proposal_token_ids]
            doc["verification_row_prediction_texts"] = [s.text_of(t) for t in r.verification_row_predictions]
            return json.dumps(doc, indent=1, ensure_ascii=False)
        return json.dumps(d.to_json(), indent=1, ensure_ascii=False)
