"""The Windows table's model: one row per proposal window, verified or failed.

A ``QAbstractTableModel`` over ``SessionRecord.windows()`` (virtualized: the view
asks only for the rows it shows, so 20,000 windows cost nothing to display).
New windows are appended with ``beginInsertRows`` on the redraw timer; a
failed window (an index but no receipt: the engine's error discarded it) is a
row marked ``failed (no receipt)``, so the table numbers windows as the event
log does. A row's tooltip names the window's decision (``decision_id_text``:
the text when the bytes are printable, ``ngram:1:n2:L2``, else hex) and
decode step. Copied rows (``inspector.gui.look.table_copy``) are headed with
``WINDOW_COLUMNS``.
"""

from __future__ import annotations

import bisect

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt
from PySide6.QtGui import QBrush, QColor

from inspector.engine.records import decision_id_text
from inspector.engine.stats import SLOW_VERIFICATION_FACTOR, SLOW_VERIFICATION_HINT
from inspector.session.entries import WindowEntry
from inspector.session.session_record import SessionRecord
from inspector.gui.look.table_copy import COPY_HEADER_ROLE
from inspector.gui.windows.tree_text import tree_disposition, tree_disposition_tip

WINDOW_COLUMNS = ("window", "disposition", "proposed", "accepted", "committed", "base", "canonical", "trimmed",
                  "verification ms")
WINDOW_HEADERS = ("#", "disposition", "prop.", "acc.", "comm.", "base", "canon.", "trim", "verify ms")
WINDOW_TIPS = (
    "window index (1-based; failed windows are numbered too, as in the event log)",
    "full_accept, first_mismatch, stopped (a tree window: of the branch it kept, \"br 2/3\": branch 2 of 3); "
    "failed (no receipt): the window raised an error and was discarded; "
    "cancelled (no receipt): Stop (or an injected cancellation) ended it, repaired first",
    "proposal tokens (a tree window: all its nodes, \"tree\"; the Receipt pane lists its branches)",
    "accepted proposal tokens", "committed tokens (canonical predictions)",
    "base_position (tokens)", "canonical_position after repair (tokens)", "KV rows removed by the repair",
    "verification_elapsed_us in ms; red: more than 5x the run's median (llama.cpp's threads waited for a core)",
)
WIDEST = ("99999", "first_mismatch · br 9/9", "99 tree", "acc.", "comm.", "99999", "99999", "trim", "99999.9")
"""The widest value (or header) of each column: column widths are set from these, so nothing is cut."""
FAILED = "failed (no receipt)"
CANCELLED = "cancelled (no receipt)"
"""A window the request's cancellation ended (Stop, or an injected cancellation): repaired, not a failure."""
DISPOSITION_COLORS = {"full_accept": "#e8f5e9", "first_mismatch": "#fff3e0", "stopped": "#ede7f6", FAILED: "#ffcdd2",
                      CANCELLED: "#eeeeee"}
_BRUSHES = {k: QBrush(QColor(v)) for k, v in DISPOSITION_COLORS.items()}
_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
_DISPLAY = int(Qt.ItemDataRole.DisplayRole.value)
_BACKGROUND = int(Qt.ItemDataRole.BackgroundRole.value)
_ALIGN = int(Qt.ItemDataRole.TextAlignmentRole.value)
_TOOLTIP = int(Qt.ItemDataRole.ToolTipRole.value)
_FOREGROUND = int(Qt.ItemDataRole.ForegroundRole.value)
_SLOW = QBrush(QColor("#c62828"))
SLOW_COLUMN = WINDOW_COLUMNS.index("verification ms")


def entry_values(e: WindowEntry) -> tuple:
    """The row of window entry ``e`` (see ``WINDOW_COLUMNS``; tokens and positions in tokens)."""
    if e.receipt is not None:
        r = e.receipt
        proposed = r.proposal_token_count if r.tree is None else f"{len(r.tree.node_token_ids)} tree"
        disposition = r.disposition if r.tree is None else tree_disposition(r.disposition, r.tree)
        disposition = disposition if r.grammar_rejected_row is None else f"{disposition} (grammar)"
        return (r.window_index, disposition, proposed, r.accepted_proposal_tokens,
                r.canonical_prediction_count, r.base_position, r.canonical_position, r.trimmed_rows,
                f"{r.verification_elapsed_us / 1000:.1f}")
    d, p = e.discard, e.discard.partial
    trimmed = "" if p.position_after_verification is None else p.position_after_verification - p.canonical_position
    return (p.window_index, CANCELLED if d.cancelled else FAILED, len(d.proposal_token_ids), "", len(p.committed_tokens),
            p.base_position, p.canonical_position, trimmed, "")


class WindowTableModel(QAbstractTableModel):
    """Rows of ``SessionRecord.windows()``, by window index; ``sync`` appends new ones."""

    def __init__(self) -> None:
        super().__init__()
        self.session: SessionRecord | None = None
        self.entries: list[WindowEntry] = []
        self._keys: list[int] = []  # window index of each row (sorted: bisect)
        self._synced = -1  # windows when last synced
        self._text: dict[int, tuple] = {}  # row -> display texts (rows drawn lately; bounded)

    def set_session(self, s: SessionRecord | None) -> None:
        self.beginResetModel()
        self.session = s
        self.entries, self._keys, self._synced, self._text = [], [], -1, {}
        self.endResetModel()
        self.sync()

    def sync(self) -> int:
        """Take the session's new windows; returns how many rows were added (0: unchanged)."""
        s = self.session
        if s is None:
            return 0
        count = len(s.windows())
        if count == self._synced:
            return 0
        self._synced = count
        entries = s.windows()
        old = len(self.entries)
        if len(entries) < old or (old and entries[old - 1].window_index != self._keys[-1]):
            self.beginResetModel()  # a window arrived out of order: rebuild (never happens live)
            self.entries, self._keys, self._text = list(entries), [e.window_index for e in entries], {}
            self.endResetModel()
            return len(entries)
        if len(entries) == old:
            return 0
        self.beginInsertRows(QModelIndex(), old, len(entries) - 1)
        self.entries.extend(entries[old:])  # the model's own rows: the record's list grows before Qt is told
        self._keys.extend(e.window_index for e in entries[old:])
        self.endInsertRows()
        return len(entries) - old

    def _slow(self, e: WindowEntry) -> bool:
        """The window's verification took more than ``SLOW_VERIFICATION_FACTOR`` x the run's median."""
        limit = self.session.slow_verification_us() if self.session is not None else None
        return limit is not None and e.receipt is not None and e.receipt.verification_elapsed_us > limit

    def row_of(self, window_index: int) -> int | None:
        """The row showing window ``window_index``, or None."""
        i = bisect.bisect_left(self._keys, window_index)
        return i if i < len(self._keys) and self._keys[i] == window_index else None

    def window_at(self, row: int) -> int:
        return self._keys[row]

    # -- QAbstractTableModel -------------------------------------------------------------
    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.entries)

    def columnCount(self, parent=QModelIndex()) -> int:
        return len(WINDOW_COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return WINDOW_HEADERS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return WINDOW_TIPS[section]
        if role == COPY_HEADER_ROLE:
            return WINDOW_COLUMNS[section]
        return None

    def data(self, index, role=_DISPLAY):
        # Called for every visible cell and role at each paint: plain int compares, cached rows.
        r = index.row()
        if role == _DISPLAY:
            row = self._text.get(r)
            if row is None:
                if len(self._text) > 4096:
                    self._text.clear()
                row = self._text[r] = tuple(str(v) for v in entry_values(self.entries[r]))
            return row[index.column()]
        if role == _BACKGROUND:
            e = self.entries[r]
            return _BRUSHES.get((CANCELLED if e.discard.cancelled else FAILED) if e.receipt is None
                                else e.receipt.disposition)
        if role == _ALIGN:
            return None if index.column() == 1 else _RIGHT
        if role == _FOREGROUND:
            return _SLOW if index.column() == SLOW_COLUMN and self._slow(self.entries[r]) else None
        if role == _TOOLTIP:
            e = self.entries[r]
            if e.receipt is None:
                d = e.discard
                return (f"window {e.window_index} failed: {d.error or d.reason}. It has an index but no receipt. "
                        f"Decision {decision_id_text(d.decision_id)} ({d.source}), decode step {d.decode_step}.")
            rc = e.receipt
            tip = (f"window {rc.window_index} · decision {decision_id_text(rc.decision_id)} ({rc.source}) · "
                   f"decode step {rc.decode_step}")
            if rc.tree is not None:
                tip += "\n" + tree_disposition_tip(rc.disposition, rc.tree)
            if rc.grammar_rejected_row is not None:
                tip += (f"\nthe grammar forbids proposal token {rc.grammar_rejected_row + 1}: a draft token the "
                        "grammar forbids is never accepted")
            if self._slow(e):
                tip += (f"\nslow verification: {rc.verification_elapsed_us / 1000:,.1f} ms, more than "
                        f"{SLOW_VERIFICATION_FACTOR:g}x the run's median. {SLOW_VERIFICATION_HINT}")
            return tip
        return None
