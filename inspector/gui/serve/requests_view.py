"""The Requests tab: the Serve switch with its port, address and Copy address; the requests served, one row
each; their plots (``RequestPlots``).

The view shows a ``RequestLog`` and never writes it; ``ServeActions`` starts and stops the server, fills the
log and decides what the other views show. ``requestPicked(id)``: the user picked a request's row;
``followChanged(on)``: the user turned "Follow the newest" on or off.
"""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (QAbstractItemView, QCheckBox, QComboBox, QHBoxLayout, QHeaderView, QLabel, QMenu,
                               QPushButton, QSpinBox, QSplitter, QTableView, QTabWidget, QToolButton, QVBoxLayout, QWidget)

from inspector.serve.prompt_cache import DEFAULT_CACHE_RAM_MIB
from inspector.gui.look.table_copy import install_row_copy
from inspector.gui.panel.widgets import ElidedLabel
from inspector.gui.serve.concurrency_lanes import ConcurrencyLanes
from inspector.gui.model.request_log import RequestLog
from inspector.gui.serve.request_plots import RequestPlots
from inspector.gui.serve.requests_table import REQUEST_HEADERS, WIDEST, RequestTableModel
from inspector.serve.server import DEFAULT_PORT
from inspector.serve.slots import BATCHED, SCHEDULES, WINDOW_SLOTS

NOT_SERVING = "not serving"
TABLE_SHARE = 40
"""Percent of the tab's height the table gets (the plots the rest) until the user drags the split."""
TABLE_MIN_PX = 50
"""The table's least height: its header and a row (on a small screen the token stream needs the room)."""
MAX_SLOTS = WINDOW_SLOTS
"""Most slots the window's Serve offers (``serve -np`` takes more)."""
SCHEDULE_TIPS = {
    "batched": "--schedule batched: every slot's rows of a step go into one llama_decode, as llama-server does",
    "locked": "--schedule locked: each slot decodes on its own, one at a time under the runtime lock (no "
              "cross-slot batching: the lock plots show the waits)",
}
ERROR_STYLE = "color:#b71c1c"
NOTE_STYLE = "color:#555"


class RequestsView(QWidget):
    """The Serve controls, the table of requests and the plots. ``serve_button`` shows the window's Serve
    action (``use_serve_action``); ``port``: the port to listen on (0: any free one)."""

    requestPicked = Signal(int)
    followChanged = Signal(bool)
    exportRequested = Signal()
    replayRequested = Signal()
    """Replay under other sources… clicked: the served session goes to the Compare window."""
    """Export session… was clicked (the serve actions ask where and write it)."""

    def __init__(self, log: RequestLog, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.log = log
        self.address = ""
        self._syncing = False
        lay = QVBoxLayout(self)
        lay.setContentsMargins(2, 2, 2, 0)
        row = QHBoxLayout()
        self.serve_button = QToolButton()
        self.serve_button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.serve_button.setMinimumWidth(self.fontMetrics().horizontalAdvance("● Serving") + 16)
        row.addWidget(self.serve_button)
        row.addWidget(QLabel("port"))
        self.port = QSpinBox()
        self.port.setRange(0, 65535)
        self.port.setValue(DEFAULT_PORT)
        self.port.setSpecialValueText("any")
        self.port.setToolTip("the port to listen on, on 127.0.0.1 (this machine only); any: a free one. "
                             f"llama-server's default is {DEFAULT_PORT}")
        row.addWidget(self.port)
        self.address_label = QLabel(NOT_SERVING)
        self.address_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.address_label.setToolTip("the address clients use: an OpenAI-compatible base URL is this + /v1")
        row.addWidget(self.address_label)
        self.copy = QPushButton("Copy address")
        self.copy.setToolTip("copy the address (OpenAI clients: base_url = address + /v1)")
        self.copy.setEnabled(False)
        self.copy.clicked.connect(self.copy_address)
        row.addWidget(self.copy)
        self.session_menu = QToolButton()  # one narrow button: the tab fits 1024 pixels with the full names inside
        self.session_menu.setText("Session")
        self.session_menu.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.session_menu.setToolTip("this server run's requests: export them as one conversation document, or "
                                     "replay them under other sources")
        menu = QMenu(self.session_menu)
        self.export = _menu_action(menu, "Export session…", self.exportRequested,
                                   "save this server run's requests as one conversation document (what serve "
                                   "--session writes): replay it under other sources with tune --turns or compare "
                                   "--turns")
        self.replay = _menu_action(menu, "Replay under other sources…", self.replayRequested,
                                   "run this server run's requests again, one conversation turn each, under the "
                                   "proposal sources you choose in the Compare window (what compare --turns does "
                                   "with an exported session)")
        menu.setToolTipsVisible(True)
        self.session_menu.setMenu(menu)
        row.addWidget(self.session_menu)
        row.addStretch(1)
        self.follow = QCheckBox("Follow the newest")
        self.follow.setChecked(True)
        self.follow.setToolTip("every view shows the newest request as it runs; picking an older row holds it "
                               "until you pick again")
        self.follow.clicked.connect(self.followChanged.emit)
        row.addWidget(self.follow)
        lay.addLayout(row)
        slots_row = QHBoxLayout()  # the slots box, then what serving does (elided: the tab stays narrow)
        slots_row.addWidget(QLabel("Slots (-np)"))
        self.slots = QSpinBox()
        self.slots.setRange(1, MAX_SLOTS)
        self.slots.setToolTip("-np: requests served at once, each in its own slot (KV sequence); more wait in "
                              "one queue. llama-server's default is 1")
        slots_row.addWidget(self.slots)
        self.schedule = QComboBox()
        self.schedule.addItems(SCHEDULES)
        for i, name in enumerate(SCHEDULES):
            self.schedule.setItemData(i, SCHEDULE_TIPS[name], Qt.ItemDataRole.ToolTipRole)
        self.schedule.setToolTip("--schedule (ours): how several slots share the model. " + "; ".join(
            SCHEDULE_TIPS.values()))
        slots_row.addWidget(self.schedule)
        self.kv_unified = QCheckBox("-kvu")
        self.kv_unified.setToolTip("-kvu (--kv-unified): every slot may use the whole context; off: the context "
                                   "is split, n_ctx / slots positions each (llama-server's default)")
        slots_row.addWidget(self.kv_unified)
        self.cache_ram = QCheckBox("-cram")
        self.cache_ram.setChecked(True)
        self.cache_ram.setToolTip(f"--cache-ram: keep earlier prompts' KV in host memory (up to "
                                  f"{DEFAULT_CACHE_RAM_MIB} MiB, llama-server's default) and restore the one a request "
                                  "shares most with; off: --cache-ram 0")
        slots_row.addWidget(self.cache_ram)
        self.slots.valueChanged.connect(self._slots_changed)
        self._slots_changed(self.slots.value())
        self.status = ElidedLabel("")
        self.status.setStyleSheet(NOTE_STYLE)
        slots_row.addWidget(self.status, 1)
        lay.addLayout(slots_row)

        self.model = RequestTableModel(log)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().setVisible(False)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.table.verticalHeader().setDefaultSectionSize(22)
        self.table.setMinimumHeight(TABLE_MIN_PX)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        fm = self.table.fontMetrics()
        pad = fm.horizontalAdvance("MM")
        for c, widest in enumerate(WIDEST):
            header.resizeSection(c, max(fm.horizontalAdvance(widest), fm.horizontalAdvance(REQUEST_HEADERS[c])) + pad)
        install_row_copy(self.table)
        self.table.selectionModel().currentRowChanged.connect(self._row_changed)
        self.plots = RequestPlots(log)
        self.lanes = ConcurrencyLanes()
        self.lanes.requestPicked.connect(self.pick_row)
        self.pages = QTabWidget()  # one at a time: the tab is a small part of the window
        self.pages.setDocumentMode(True)
        self.pages.addTab(self.plots, "Speculation")
        self.pages.setTabToolTip(0, "how speculation paid per request over time, and against the context length")
        self.pages.addTab(self.lanes, "Slots")
        self.pages.setTabToolTip(1, "which slot ran which request when (Slots (-np) > 1: requests at once), and "
                                    "what each decode step of the batched schedule carried")
        self.split = QSplitter(Qt.Orientation.Vertical)
        self.split.addWidget(self.table)
        self.split.addWidget(self.pages)
        self.split.setSizes([TABLE_SHARE, 100 - TABLE_SHARE])  # scaled to the tab's height when it is laid out
        lay.addWidget(self.split, 1)

    def use_serve_action(self, action) -> None:
        """Show the window's checkable Serve action as this tab's switch."""
        self.serve_button.setDefaultAction(action)

    def _slots_changed(self, n: int) -> None:
        """The schedule and -kvu mean something only with more than one slot."""
        serving = not self.slots.isEnabled()
        self.schedule.setEnabled(n > 1 and not serving)
        self.kv_unified.setEnabled(n > 1 and not serving)

    def enable_slots(self, on: bool) -> None:
        """The slots box can be changed (not while serving)."""
        self.slots.setEnabled(on)
        self.cache_ram.setEnabled(on)
        self._slots_changed(self.slots.value())

    def slot_options(self) -> dict:
        """The slots box as ``ServeOptions`` fields: ``n_parallel``, ``schedule``, ``kv_unified``,
        ``cache_ram_mib`` (MiB; 0: no prompt cache)."""
        n = self.slots.value()
        return {"n_parallel": n, "schedule": self.schedule.currentText() if n > 1 else BATCHED,
                "kv_unified": n > 1 and self.kv_unified.isChecked(),
                "cache_ram_mib": DEFAULT_CACHE_RAM_MIB if self.cache_ram.isChecked() else 0}

    def show_lanes(self) -> None:
        """Show the Slots page (several slots serve)."""
        self.pages.setCurrentWidget(self.lanes)

    def pick_row(self, rid: int) -> None:
        """Select request ``rid``'s row as a click on it does (``requestPicked``): a bar clicked in the lanes."""
        self.model.sync()
        r = self.model.row_of(rid)
        if r >= 0:
            self.table.selectRow(r)
            self.table.scrollTo(self.model.index(r, 0))

    # -- what ServeActions says -------------------------------------------------------------
    def show_address(self, address: str) -> None:
        """The address served on ("" when not serving): shown, and Copy address enabled."""
        self.address = address
        self.address_label.setText(f"<b>{address}</b>" if address else NOT_SERVING)
        self.copy.setEnabled(bool(address))

    def say(self, text: str, error: bool = False) -> None:
        """One line under the switch: what serving does, or why it could not start (``error``)."""
        self.status.setStyleSheet(ERROR_STYLE if error else NOTE_STYLE)
        self.status.setText(text)

    def copy_address(self) -> None:
        """Put the address on the clipboard."""
        if self.address:
            QGuiApplication.clipboard().setText(self.address)

    def set_follow(self, on: bool) -> None:
        """Tick "Follow the newest" or not (no ``followChanged``)."""
        self.follow.setChecked(on)

    def select_request(self, rid: int | None) -> None:
        """Select request ``rid``'s row (the one the views show) without ``requestPicked``."""
        self.model.sync()
        r = self.model.row_of(rid) if rid is not None else -1
        sel = self.table.selectionModel()
        self._syncing = True
        try:
            if r < 0:
                sel.clearSelection()
            elif sel.currentIndex().row() != r or not sel.isRowSelected(r):
                index = self.model.index(r, 0)
                sel.setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect
                                    | QItemSelectionModel.SelectionFlag.Rows)
                self.table.scrollTo(index)
        finally:
            self._syncing = False

    def _row_changed(self, current, _previous) -> None:
        if self._syncing or not current.isValid():
            return
        self.requestPicked.emit(self.model.rows[current.row()].id)

    # -- redraw ------------------------------------------------------------------------------
    def set_session(self, _session) -> None:
        """Not a session view (it shows the server's traffic): nothing to do."""

    def refresh(self) -> None:
        """Redraw the table and the plots when the log moved (the redraw tick, while the tab is shown)."""
        if self.model.sync():
            self.select_request(self.log.shown)
        self.lanes.shown = self.log.shown
        self.lanes.refresh()
        self.plots.refresh()


def _menu_action(menu: QMenu, text: str, signal, tip: str):
    """A menu entry, off until a server run recorded requests, that emits ``signal`` when chosen."""
    action = menu.addAction(text)
    action.setToolTip(tip)
    action.setEnabled(False)
    action.triggered.connect(lambda _checked=False: signal.emit())
    return action
