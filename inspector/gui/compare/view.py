"""The Compare window: one prompt (or one conversation) run with several proposal
configurations, side by side (``inspector.bench.compare``).

This module owns the window itself: running (Run / Cancel, progress per configuration and per turn
for a conversation), the results table (decode tokens/s, speedup vs plain, expected speedup from the
cost model, acceptance rate, mean accepted length, windows, same output as plain; a conversation's
row has a per-turn tooltip; its columns and cells: ``inspector.gui.compare.results_table``), the two
plots (decode tokens/s per configuration; acceptance by proposal position per configuration), Export
JSON / CSV, and closing. The top of the window, the
configurations panel (the editable configurations table with its option cells, Add / Remove /
Defaults, and what to run on: the main window's prompt, a bundled conversation or a turns file), is
``inspector.gui.compare.configs.CompareConfigsPanel``.

Widgets only: ``AnalysisActions`` runs the comparison on the engine thread
and calls ``set_running`` (every setting locked while it runs) / ``set_progress`` / ``show_rows``
(each configuration's row as it finishes) / ``set_result``; plot items
are updated with ``setData`` on ``refresh`` (the window's redraw timer). "Also through llama-server",
which one and building it are ``inspector.gui.compare.server_choice.ServerChoice`` (``server_choice``).

Close (the button, Esc, Ctrl+W, or the title bar) hides the window. A
comparison in flight keeps running on the engine thread (the main window's
status bar shows its progress); Analysis > Compare configurations (Ctrl+K)
shows the window again with its progress or results. Cancel stops it.
Ctrl+C in either table copies the selected rows (``install_row_copy``).

The configurations panel is a widget the window owns (``configs_panel``); the window keeps the
panel's widgets and methods that others use under its own public names (``configs``, ``run``,
``config_list``, ``choose_conversation``, ...).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from inspector.bench.compare import default_configs
from inspector.sources.registry import PLAIN
from inspector.bench.compare_result import CompareConfig, CompareResult
from inspector.bench.compare_result import write_compare_csv, write_compare_json
from inspector.gui.compare.configs import CompareConfigsPanel
from inspector.gui.compare.results_table import COLORS, make_results_table, show_result_rows
from inspector.gui.compare.server_choice import ServerChoice
from inspector.gui.look.screen_fit import keep_on_screen
from inspector.gui.look.table_copy import install_row_copy

DODGE = 0.04
"""Sideways offset between configurations in the acceptance plot (proposal positions)."""


def _tick(label: str) -> str:
    """A bar's axis label: long labels on two lines ("ngram draft_max 16" -> "ngram\ndraft_max 16")."""
    if len(label) <= 10 or " " not in label:
        return label
    head, _, tail = label.partition(" ")
    return f"{head}\n{tail}"


class CompareView(QWidget):
    """The Compare window (a top-level window owned by the main window).

    ``runRequested(configs, conversation)`` asks to run the list of ``CompareConfig`` on the main
    window's prompt (``conversation`` None) or over a conversation (``(name, turns)``: its name and
    user messages, see ``conversation``);
    ``cancelRequested`` asks to cancel (the configuration in flight stops; finished rows are shown).
    ``result``: the shown ``CompareResult`` or None.
    """

    runRequested = Signal(object, object)
    cancelRequested = Signal()

    def __init__(self, sources: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("spec-inspector — compare configurations")
        self.sources = list(sources) if PLAIN in sources else [*sources, PLAIN]
        self.result: CompareResult | None = None
        self.note: str | None = ""
        self._version = 0
        self._drawn = -1
        self._curves: list[pg.PlotDataItem] = []
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)

        # Configurations
        self.configs_panel = CompareConfigsPanel(self.sources)
        """The top of the window: the configurations table, what to run on, Run / Cancel and progress."""
        top = self.configs_panel
        top.problem.connect(self.show_error)
        self.configs, self.add, self.remove, self.defaults = top.configs, top.add, top.remove, top.defaults
        self.run, self.cancel, self.progress, self.status = top.run, top.cancel, top.progress, top.status
        self.input, self.open_turns, self.max_tokens, self.prompt_label = (top.input, top.open_turns, top.max_tokens,
                                                                           top.prompt_label)
        self.repeats = top.repeats

        # Results
        self.results = make_results_table()
        self.export_json = QPushButton("Export JSON…")
        self.export_csv = QPushButton("Export CSV…")
        for b in (self.export_json, self.export_csv):
            b.setEnabled(False)
        mid = QWidget()
        ml = QVBoxLayout(mid)
        ml.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(QLabel("<b>Results</b>"), 0, Qt.AlignmentFlag.AlignTop)
        self.server_choice = ServerChoice()
        """Also through llama-server, which one, and building it (``ServerChoice``)."""
        self.with_server, self.server_target = self.server_choice.with_server, self.server_choice.server_target
        row.addWidget(self.server_choice, 1)
        row.addWidget(self.export_json, 0, Qt.AlignmentFlag.AlignTop)
        row.addWidget(self.export_csv, 0, Qt.AlignmentFlag.AlignTop)
        ml.addLayout(row)
        ml.addWidget(self.results, 1)
        install_row_copy(self.results)

        # Plots
        self.tps_plot = pg.PlotWidget(background="w", title="Decode tokens/s")
        self.tps_plot.setLabel("left", "tokens/s")
        self.tps_plot.getAxis("bottom").setHeight(42)  # two-line configuration labels
        self.tps_bars = pg.BarGraphItem(x=[], height=[], width=0.6, brushes=[])
        self.tps_plot.addItem(self.tps_bars)
        self.plain_line = pg.InfiniteLine(angle=0, pen=pg.mkPen("#616161", style=Qt.PenStyle.DashLine))
        self.plain_line.hide()
        self.tps_plot.addItem(self.plain_line)
        self.pos_plot = pg.PlotWidget(background="w", title="Acceptance by proposal position")
        self.pos_plot.setLabel("bottom", "proposal position (1-based)")
        self.pos_plot.setLabel("left", "accepted share")
        self.pos_plot.setYRange(0, 1.05)
        self.pos_plot.getAxis("bottom").setTickSpacing(1, 1)
        self.pos_legend = self.pos_plot.addLegend(offset=(10, -10))  # bottom left: acceptance falls to the right
        plots = QWidget()
        pl = QHBoxLayout(plots)
        pl.setContentsMargins(0, 0, 0, 0)
        pl.addWidget(self.tps_plot, 1)
        pl.addWidget(self.pos_plot, 1)

        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(mid)
        split.addWidget(plots)
        split.setSizes([230, 190, 320])
        lay.addWidget(split, 1)
        self.splitter = split
        self.close_button = QPushButton("Close")
        self.close_button.setToolTip("hide this window (Esc, Ctrl+W); a comparison in flight keeps running "
                                     "(Ctrl+K shows it again; Cancel stops it)")
        self.close_button.setAutoDefault(False)
        bottom = QHBoxLayout()
        bottom.addStretch(1)
        bottom.addWidget(self.close_button)
        lay.addLayout(bottom)
        self.close_action = QAction("Close", self)
        self.close_action.setShortcut(QKeySequence("Ctrl+W"))
        self.close_action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.close_action.triggered.connect(self.close)
        self.addAction(self.close_action)
        self.close_button.clicked.connect(self.close)

        self.run.clicked.connect(self._run_clicked)
        self.cancel.clicked.connect(self.cancelRequested.emit)
        self.export_json.clicked.connect(lambda: self._export("json"))
        self.export_csv.clicked.connect(lambda: self._export("csv"))
        self.set_configs(default_configs())
        keep_on_screen(self, 1100, 760)  # less on a smaller screen

    # -- the configurations panel (``CompareConfigsPanel``) ----------------------------------
    @property
    def cost_model(self):
        """The main window's measured ``CostModel`` or None: Defaults adds the draft max its curve implies."""
        return self.configs_panel.cost_model

    @cost_model.setter
    def cost_model(self, model) -> None:
        self.configs_panel.cost_model = model

    def set_configs(self, configs) -> None:
        """Replace the configurations table's rows with ``configs`` (``CompareConfig``)."""
        self.configs_panel.set_configs(configs)

    def config_list(self) -> list[CompareConfig]:
        """The table as ``CompareConfig`` objects (``CompareConfigsPanel.config_list``). Raises
        ``ValueError`` naming the row, its label and the problem."""
        return self.configs_panel.config_list()

    def options_cell(self, row: int) -> QLineEdit:
        """The "other options" editor of ``row`` (``key=value, ...``)."""
        return self.configs_panel.options_cell(row)

    def add_turns_file(self, path: str) -> bool:
        """Offer the turns file ``path`` and choose it; False (and a message) when it cannot be used."""
        return self.configs_panel.add_turns_file(path)

    def choose_conversation(self, name_or_path: str | None) -> bool:
        """Choose what to run on: None (the main window's prompt), a bundled conversation's name or a
        turns file (``CompareConfigsPanel.choose_conversation``). False when it cannot be used."""
        return self.configs_panel.choose_conversation(name_or_path)

    def conversation(self) -> tuple[str, tuple[str, ...]] | None:
        """The chosen conversation as (its name or file, its user messages), None for the main window's
        prompt. Raises ``TurnsFileError`` (a ``ValueError``) naming the file."""
        return self.configs_panel.conversation()

    def set_prompt_info(self, prompt_name: str, max_tokens: int, details: str = "") -> None:
        """The main window's prompt and what every run shares (``CompareConfigsPanel.set_prompt_info``)."""
        self.configs_panel.set_prompt_info(prompt_name, max_tokens, details)

    def llama_server_target(self) -> str | None:
        """What "also through llama-server" asks for: the typed path or URL, "" for the one built from our
        llama.cpp, None when unticked (``CompareRequest.llama_server``)."""
        return self.server_choice.target()

    def keyPressEvent(self, event) -> None:
        """Esc closes the window (as in a dialog) unless a child used it first (a cell editor
        cancels its edit, an open list closes)."""
        if event.key() == Qt.Key.Key_Escape and event.modifiers() == Qt.KeyboardModifier.NoModifier:
            event.accept()
            self.close()
            return
        super().keyPressEvent(event)

    def _run_clicked(self) -> None:
        try:
            configs = self.config_list()
        except ValueError as exc:
            self.show_error("Check the configurations", str(exc))
            return
        try:
            conversation = self.conversation()
        except ValueError as exc:  # TurnsFileError: the file changed since it was opened
            self.show_error("Cannot read the conversation", str(exc))
            return
        self.runRequested.emit(configs, conversation)

    # -- running ---------------------------------------------------------------------
    def set_running(self, running: bool, text: str = "") -> None:
        """Busy state: Run and every setting off (configurations, what to run on, max tokens, which
        llama-server), Cancel on, progress shown; ``text`` in the status line."""
        self.server_choice.set_running(running)
        self.configs_panel.set_running(running, text)
        for b in (self.export_json, self.export_csv):  # a partial result is not exported
            b.setEnabled(not running and self.result is not None)

    def set_progress(self, done: int, total: int, label: str) -> None:
        """A configuration starts (``done`` finished of ``total``) on the prompt."""
        self.configs_panel.set_progress(done, total, label)

    def set_turn_progress(self, turn: int, turns: int, done: int, total: int, label: str) -> None:
        """Turn ``turn`` (1-based) of ``turns`` starts for configuration ``done + 1`` of ``total``."""
        self.configs_panel.set_turn_progress(turn, turns, done, total, label)

    def set_result(self, result: CompareResult | None, note: str = "") -> None:
        """Show ``result`` (drawn on the next ``refresh``); ``note`` goes to the status line."""
        self.result = result
        self.note = note
        self._version += 1
        self.export_json.setEnabled(result is not None)
        self.export_csv.setEnabled(result is not None)

    def show_rows(self, partial: CompareResult) -> None:
        """The rows finished so far while the comparison runs (drawn on the next ``refresh``; the status
        line keeps the progress, export waits for the end)."""
        self.result = partial
        self.note = None
        self._version += 1

    # -- drawing ---------------------------------------------------------------------
    def refresh(self) -> None:
        if self._drawn == self._version:
            return
        self._drawn = self._version
        res = self.result
        if self.note is not None:  # None: rows shown while it runs, the progress stays
            self.status.setText(self.note)
        rows = res.rows if res is not None else ()
        runs = res.runs if res is not None else ()
        server = res.llama_server if res is not None else ()
        show_result_rows(self.results, rows, runs, server)
        self._draw_plots(rows)

    def _draw_plots(self, rows) -> None:
        n = len(rows)
        x = np.arange(n)
        tps = np.array([r.summary.decode_tokens_per_s or 0.0 for r in rows], float)
        self.tps_bars.setOpts(x=x, height=tps, width=0.6,
                              brushes=[pg.mkBrush(COLORS[i % len(COLORS)]) for i in range(n)])
        self.tps_plot.getAxis("bottom").setTicks([[(i, _tick(r.config.label)) for i, r in enumerate(rows)]])
        plain = next((r.summary.decode_tokens_per_s for r in rows if r.config.source == PLAIN), None)
        self.plain_line.setVisible(bool(plain))
        if plain:
            self.plain_line.setValue(plain)
        self.tps_plot.setXRange(-0.6, max(0, n - 1) + 0.6, padding=0)
        while len(self._curves) < n:
            i = len(self._curves)
            c = pg.PlotDataItem([], [], pen=pg.mkPen(COLORS[i % len(COLORS)], width=2), symbol="o", symbolSize=6,
                                symbolBrush=COLORS[i % len(COLORS)], symbolPen=None)
            self.pos_plot.addItem(c)
            self._curves.append(c)
        self.pos_legend.clear()
        for i, c in enumerate(self._curves):
            by_pos = rows[i].summary.acceptance_by_position if i < n else []
            if by_pos:  # dodged a little sideways, so equal curves stay visible
                dodge = (i - (n - 1) / 2) * DODGE
                c.setData(np.arange(1, len(by_pos) + 1) + dodge, np.array(by_pos, float))
                self.pos_legend.addItem(c, rows[i].config.label)
            else:
                c.setData([], [])

    def row_count(self) -> int:
        """Result rows shown (tests)."""
        return self.results.rowCount()

    # -- export ----------------------------------------------------------------------
    def _export(self, kind: str) -> None:
        if self.result is None:
            return
        name = "compare.json" if kind == "json" else "compare.csv"
        flt = "JSON (*.json)" if kind == "json" else "CSV (*.csv)"
        path, _ = QFileDialog.getSaveFileName(self, f"Export comparison as {kind.upper()}", name, flt)
        if path:
            self.export(path, kind)

    def export(self, path: str, kind: str = "json") -> bool:
        """Write the shown result (``write_compare_json`` / ``write_compare_csv``); errors become a dialog."""
        if self.result is None:
            return False
        try:
            (write_compare_json if kind == "json" else write_compare_csv)(self.result, path)
        except OSError as exc:
            self.show_error("Export failed", f"cannot write {path}: {exc}")
            return False
        self.status.setText(f"written: {path}")
        return True

    def show_error(self, title: str, message: str) -> None:
        """A warning over this window (not modal to the main window); ``error_box`` keeps the last one."""
        box = QMessageBox(QMessageBox.Icon.Warning, title, message, QMessageBox.StandardButton.Ok, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.error_box = box
