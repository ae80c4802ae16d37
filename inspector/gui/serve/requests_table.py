"""The Requests tab's table model: one row per served request, oldest first.

A ``QAbstractTableModel`` over ``RequestLog.rows`` (``ServedRequest``); ``sync`` (on the redraw tick, when the
log's ``version`` moved) appends new requests and repaints the rest: a running request's figures grow as it
commits (``RequestLog.figures``). Copied rows (``inspector.gui.look.table_copy``) are headed with
``REQUEST_COLUMNS``.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt
from PySide6.QtGui import QBrush, QColor

from inspector.gui.look.table_copy import COPY_HEADER_ROLE
from inspector.gui.model.request_log import RequestLog
from inspector.serve.job import ServedRequest

REQUEST_COLUMNS = ("request", "arrived", "endpoint", "prompt tokens", "reused", "output tokens", "windows",
                   "acceptance", "tokens/s", "began", "ended as")
REQUEST_HEADERS = ("#", "arrived", "endpoint", "prompt", "reused", "output", "windows", "accept.", "tok/s",
                   "began", "ended")
REQUEST_TIPS = (
    "request id (in arrival order)",
    "when the request arrived (local time)",
    "the HTTP route it came by",
    "prompt tokens (through the chat template for /v1/chat/completions)",
    "prompt tokens kept from the slot's cache (the longest prefix shared with the previous request): not decoded again",
    "generated tokens",
    "proposal windows",
    "accepted / proposed proposal tokens",
    "decode tokens/s: generated tokens / decode time, prefill excluded",
    "warm: the proposal source remembered earlier requests when this one began (hover for what); cold: it did not",
    "how it ended: eog (end of generation), length, stop (a stop string), context_full, cancelled (the client "
    "went away, or Serve was turned off), error; waiting / running while it has not ended",
)
WIDEST = ("9999", "00:00:00", "/v1/chat/completions", "prompt", "reused", "output", "windows", "accept.",
          "999.9", "began", "context_full")
"""The widest value (or header) of each column: widths are set from these."""
STATE_COLORS = {"waiting": "#eeeeee", "running": "#e3f2fd", "error": "#ffcdd2", "cancelled": "#eeeeee"}
_BRUSHES = {k: QBrush(QColor(v)) for k, v in STATE_COLORS.items()}
_RIGHT = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
_NUMERIC = {"request", "prompt tokens", "reused", "output tokens", "windows", "acceptance", "tokens/s"}


def arrival_text(epoch_s: float) -> str:
    """An arrival time (seconds since the epoch) as local ``HH:MM:SS``."""
    return time.strftime("%H:%M:%S", time.localtime(epoch_s))


def ended_text(row: ServedRequest) -> str:
    """The ``ended as`` cell: how it ended, or ``waiting`` / ``running…``."""
    if row.state == "waiting":
        return "waiting"
    if row.state == "running":
        return "running…"
    return row.ended_as or "?"


class RequestTableModel(QAbstractTableModel):
    """Rows of a ``RequestLog``; ``sync`` follows it (append, repaint, reset when the server's list dropped
    its oldest rows)."""

    def __init__(self, log: RequestLog) -> None:
        super().__init__()
        self.log = log
        self.rows: list[ServedRequest] = []
        self._version = -1
        self._cells: dict[int, tuple] = {}  # request id -> its cells, since the last sync

    def sync(self) -> bool:
        """Follow the log when its version moved; returns whether anything was redrawn."""
        if self.log.version == self._version:
            return False
        self._version = self.log.version
        self._cells = {}
        new = list(self.log.rows)
        old = self.rows
        if not old or not new or new[0] is not old[0] or len(new) < len(old):
            self.beginResetModel()
            self.rows = new
            self.endResetModel()
            return True
        if len(new) > len(old):
            self.beginInsertRows(QModelIndex(), len(old), len(new) - 1)
            self.rows = new
            self.endInsertRows()
        if old:
            self.dataChanged.emit(self.index(0, 0), self.index(len(old) - 1, len(REQUEST_COLUMNS) - 1))
        return True

    def row_of(self, rid: int) -> int:
        """The table row of request ``rid`` (-1 when not listed)."""
        for i in range(len(self.rows) - 1, -1, -1):
            if self.rows[i].id == rid:
                return i
        return -1

    def values(self, row: ServedRequest) -> tuple:
        """The cells of ``row`` (see ``REQUEST_COLUMNS``)."""
        cells = self._cells.get(row.id)
        if cells is None:
            cells = self._cells[row.id] = self._values(row)
        return cells

    def _values(self, row: ServedRequest) -> tuple:
        f = self.log.figures(row)
        started = row.state != "waiting"
        acc = f"{f.acceptance:.0%}" if f.acceptance is not None else ("—" if started else "")
        tps = f"{f.tokens_per_s:.1f}" if f.tokens_per_s is not None else ""
        began = ("warm" if row.warm else "cold") if started else ""
        return (row.id, arrival_text(row.arrived), row.endpoint, row.prompt_tokens, row.reused if started else "",
                f.output_tokens if started else "", f.windows if started else "", acc, tps, began, ended_text(row))

    # -- QAbstractTableModel --------------------------------------------------------------
    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else len(REQUEST_COLUMNS)

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        row = self.rows[index.row()]
        col = REQUEST_COLUMNS[index.column()]
        if role == Qt.ItemDataRole.DisplayRole:
            return str(self.values(row)[index.column()])
        if role == Qt.ItemDataRole.TextAlignmentRole and col in _NUMERIC:
            return int(_RIGHT.value)
        if role == Qt.ItemDataRole.BackgroundRole:
            key = row.state if row.state != "done" else row.ended_as
            return _BRUSHES.get(key)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(row, col)
        return None

    def _tooltip(self, row: ServedRequest, col: str) -> str | None:
        if col == "began" and row.warm:
            return f"began warm: {row.warm}"
        if col == "ended as" and row.error:
            return row.error
        if col == "acceptance":
            f = self.log.figures(row)
            return f"{f.accepted} of {f.proposed} proposal tokens accepted" if f.proposed else "nothing proposed"
        return f"request {row.id}: click to show it in every view"

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if orientation != Qt.Orientation.Horizontal:
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return REQUEST_HEADERS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return REQUEST_TIPS[section]
        if role == COPY_HEADER_ROLE:
            return REQUEST_COLUMNS[section]
        return None
