"""The event log: the engine's ordered events (verify, commit, repair, error, discard, ...).

A table model that only appends (``beginInsertRows``), so the redraw timer
adds the new events in one batch. Time is milliseconds since the request
started (``EngineEvent.t_us`` / 1000). Rows are selected whole; Ctrl+C copies
the selected rows as tab-separated text (``install_row_copy``).
"""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QCheckBox, QHBoxLayout, QHeaderView, QTableView, QVBoxLayout, QWidget

from inspector.session.session_record import SessionRecord
from inspector.gui.look.table_copy import install_row_copy

COLUMNS = ("seq", "time (ms)", "kind", "window", "row", "token", "position", "detail")
KIND_COLORS = {"error": "#ffcdd2", "discard": "#fff3e0", "repair": "#e3f2fd", "verify": "#f1f8e9", "finish": "#ede7f6"}


class EventModel(QAbstractTableModel):
    """Rows of ``SessionRecord.events`` (append-only)."""

    def __init__(self) -> None:
        super().__init__()
        self.session: SessionRecord | None = None
        self.n = 0

    def set_session(self, s: SessionRecord) -> None:
        self.beginResetModel()
        self.session = s
        self.n = 0
        self.endResetModel()
        self.sync()

    def sync(self) -> None:
        s = self.session
        if s is None or len(s.events) == self.n:
            return
        new = len(s.events)
        self.beginInsertRows(QModelIndex(), self.n, new - 1)
        self.n = new
        self.endInsertRows()

    def rowCount(self, parent=QModelIndex()) -> int:
        return 0 if parent.isValid() else self.n

    def columnCount(self, parent=QModelIndex()) -> int:
        return len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.ItemDataRole.DisplayRole):
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index, role=Qt.ItemDataRole.DisplayRole):
        e = self.session.events[index.row()]
        c = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if c == 5:
                return "" if e.token is None else f"{self.session.text_of(e.token)!r} ({e.token})"
            v = (e.seq, f"{e.t_us / 1000:.1f}", e.kind, e.window, e.row, None, e.position, e.detail)[c]
            return "" if v is None else str(v)
        if role == Qt.ItemDataRole.BackgroundRole and e.kind in KIND_COLORS:
            return QColor(KIND_COLORS[e.kind])
        if role == Qt.ItemDataRole.UserRole:
            return e.kind
        return None


class _KindFilter(QSortFilterProxyModel):
    def __init__(self) -> None:
        super().__init__()
        self.hide_commits = False

    def filterAcceptsRow(self, row, parent) -> bool:
        if not self.hide_commits:
            return True
        kind = self.sourceModel().session.events[row].kind
        return kind not in ("commit", "step")


class EventLog(QWidget):
    """Event table with a "hide commits" switch; follows the newest event."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = EventModel()
        self.proxy = _KindFilter()  # in use only while commits are hidden (it asks Python about every row)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        self.hide_commits = QCheckBox("hide commit and step events")
        self.hide_commits.toggled.connect(self._toggle)
        top.addWidget(self.hide_commits)
        top.addStretch(1)
        lay.addLayout(top)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)  # no per-row sizing
        self.table.verticalHeader().setDefaultSectionSize(20)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        install_row_copy(self.table)
        for i, w in enumerate((50, 80, 70, 60, 40, 140, 70)):
            self.table.setColumnWidth(i, w)
        lay.addWidget(self.table)

    def _toggle(self, on: bool) -> None:
        self.proxy.hide_commits = on
        widths = [self.table.columnWidth(i) for i in range(len(COLUMNS))]
        self.proxy.setSourceModel(self.model if on else None)
        self.table.setModel(self.proxy if on else self.model)
        for i, w in enumerate(widths):
            self.table.setColumnWidth(i, w)

    def set_session(self, s: SessionRecord) -> None:
        self.model.set_session(s)

    def refresh(self) -> None:
        bar = self.table.verticalScrollBar()
        at_end = bar.value() >= bar.maximum() - 2
        before = self.model.n
        self.model.sync()
        if at_end and self.model.n != before:
            self.table.scrollToBottom()

    def kinds(self) -> list[str]:
        """Event kinds in order (for tests and export)."""
        s = self.model.session
        return [] if s is None else [e.kind for e in s.events[: self.model.n]]
