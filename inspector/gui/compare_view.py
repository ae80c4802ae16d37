"""The Compare window: one prompt run with several proposal configurations,
side by side (``inspector.bench.compare``).

Top: the configurations, an editable table (label, source, draft max,
n-gram n_max / n_min / length (fixed or adaptive), other source options as ``key=value, ...``) with Add,
Remove and Defaults (plain, n-gram draft max 4, 8, 16), and Run / Cancel
with progress. Below: the results table (decode tokens/s, speedup vs plain,
expected speedup from the cost model, acceptance rate, mean accepted
length, windows, same output as plain) and two plots (decode tokens/s per
configuration; acceptance by proposal position per configuration), with
Export JSON / CSV.

Widgets only: ``AnalysisActions`` runs the comparison on the engine thread
and calls ``set_running`` / ``set_progress`` / ``set_result``; plot items
are updated with ``setData`` on ``refresh`` (the window's redraw timer).

Close (the button, Esc, Ctrl+W, or the title bar) hides the window. A
comparison in flight keeps running on the engine thread (the main window's
status bar shows its progress); Analysis > Compare configurations (Ctrl+K)
shows the window again with its progress or results. Cancel stops it.
Ctrl+C in either table copies the selected rows (``install_row_copy``).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QBrush, QColor, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from inspector.bench.compare import PLAIN, CompareConfig, CompareResult, default_configs
from inspector.sources.registry import NGRAM
from inspector.gui.table_copy import install_row_copy

CONFIG_HEADERS = ("label", "source", "draft max", "n_max", "n_min", "length", "other options (key=value, …)")
OPTIONS_COL = len(CONFIG_HEADERS) - 1
_NGRAM = {o.name: o for o in NGRAM.options}
"""The n-gram source's declared options: the table's n_max, n_min and length columns follow them."""
LENGTHS = tuple(_NGRAM["length"].choices)


def _ngram_spin(name: str, value: int) -> QSpinBox:
    o = _NGRAM[name]
    return _spin(int(o.minimum), int(o.control_max or o.maximum or 64), value)
"""The n-gram ``length`` option's values (the first is the default)."""
SPIN_WIDTH = "99999"
"""Spin boxes are this many digits wide (plus their arrows): the value never touches the arrows."""
RESULT_HEADERS = ("configuration", "decode tokens/s", "speedup vs plain", "expected speedup", "acceptance rate",
                  "mean accepted length", "windows", "same output as plain")
RESULT_TIPS = (
    "", "generated tokens / decode time (prefill excluded)",
    "decode tokens/s / the plain run's decode tokens/s",
    "what the cost model predicts from this run's windows (Cost model tab: Measure)",
    "accepted / proposed tokens over verified windows",
    "1 + accepted / windows: tokens committed per window",
    "verified proposal windows (receipts)",
    "the generated token ids equal the plain run's",
)
DODGE = 0.04
"""Sideways offset between configurations in the acceptance plot (proposal positions)."""
COLORS = ("#616161", "#1565c0", "#2e7d32", "#e65100", "#6a1b9a", "#00838f", "#c62828", "#9e9d24")


def parse_options(text: str) -> dict:
    """``"key=value, key=value"`` -> dict of strings. Raises ``ValueError`` naming the bad part."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"{part!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    return "n/a" if x is None else f"{x:{spec}}{suffix}"


def _tick(label: str) -> str:
    """A bar's axis label: long labels on two lines ("ngram draft_max 16" -> "ngram\ndraft_max 16")."""
    if len(label) <= 10 or " " not in label:
        return label
    head, _, tail = label.partition(" ")
    return f"{head}\n{tail}"


def _spin(lo: int, hi: int, value: int) -> QSpinBox:
    s = QSpinBox()
    s.setRange(lo, hi)
    s.setValue(value)
    s.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    # Room for the digits beside the arrows (a frameless spin box in a cell is cramped).
    s.setMinimumWidth(s.fontMetrics().horizontalAdvance(SPIN_WIDTH) + 36)
    return s


class CompareView(QWidget):
    """The Compare window (a top-level window owned by the main window).

    ``runRequested(configs)`` asks to run the list of ``CompareConfig``;
    ``cancelRequested`` asks to cancel (the configuration in flight stops; finished rows are shown).
    ``result``: the shown ``CompareResult`` or None.
    """

    runRequested = Signal(object)
    cancelRequested = Signal()

    def __init__(self, sources: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("spec-inspector — compare configurations")
        self.sources = list(sources) if PLAIN in sources else [*sources, PLAIN]
        self.result: CompareResult | None = None
        self.note = ""
        self._version = 0
        self._drawn = -1
        self._curves: list[pg.PlotDataItem] = []
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)

        # Configurations
        self.configs = QTableWidget(0, len(CONFIG_HEADERS))
        self.configs.setHorizontalHeaderLabels(CONFIG_HEADERS)
        self.configs.verticalHeader().setVisible(False)
        self.configs.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        h = self.configs.horizontalHeader()
        h.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        h.setSectionResizeMode(0, QHeaderView.ResizeMode.Interactive)
        h.setSectionResizeMode(len(CONFIG_HEADERS) - 1, QHeaderView.ResizeMode.Stretch)
        self.configs.setColumnWidth(0, 200)
        self.configs.verticalHeader().setDefaultSectionSize(max(30, _spin(0, 1, 0).sizeHint().height() + 4))
        self.configs.horizontalHeaderItem(5).setToolTip(
            "n-gram proposal length: fixed (everything that matched, up to draft max) or adaptive (cost-aware; "
            "may propose nothing where verifying is expensive)")
        self.add = QPushButton("Add")
        self.remove = QPushButton("Remove")
        self.defaults = QPushButton("Defaults")
        self.add.setToolTip("add a configuration (a copy of the selected one)")
        self.remove.setToolTip("remove the selected configurations")
        self.defaults.setToolTip("plain decoding and the n-gram source at draft max 4, 8 and 16")
        self.run = QPushButton("▶ Run comparison")
        self.run.setToolTip("run the current prompt once per configuration, one after the other, on the engine "
                            "thread (max tokens and sampling from the main window)")
        self.cancel = QPushButton("Cancel")
        self.cancel.setToolTip("stop the configuration in flight; the finished ones are shown")
        self.cancel.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(160)
        self.progress.hide()
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.prompt_label = QLabel("")
        self.prompt_label.setStyleSheet("color:#555")
        buttons = QHBoxLayout()
        for b in (self.add, self.remove, self.defaults):
            buttons.addWidget(b)
        buttons.addSpacing(16)
        buttons.addWidget(self.run)
        buttons.addWidget(self.cancel)
        buttons.addWidget(self.progress)
        buttons.addWidget(self.status, 1)
        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.addWidget(QLabel("<b>Configurations</b> — source <i>none</i> is plain decoding, the reference for "
                            "“speedup vs plain” (added first when missing)"))
        tl.addWidget(self.configs, 1)
        tl.addLayout(buttons)
        tl.addWidget(self.prompt_label)

        # Results
        self.results = QTableWidget(0, len(RESULT_HEADERS))
        self.results.setHorizontalHeaderLabels(RESULT_HEADERS)
        for i, tip in enumerate(RESULT_TIPS):
            self.results.horizontalHeaderItem(i).setToolTip(tip)
        self.results.verticalHeader().setVisible(False)
        self.results.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        rh = self.results.horizontalHeader()
        rh.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        rh.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.export_json = QPushButton("Export JSON…")
        self.export_csv = QPushButton("Export CSV…")
        for b in (self.export_json, self.export_csv):
            b.setEnabled(False)
        mid = QWidget()
        ml = QVBoxLayout(mid)
        ml.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        row.addWidget(QLabel("<b>Results</b>"), 1)
        row.addWidget(self.export_json)
        row.addWidget(self.export_csv)
        ml.addLayout(row)
        ml.addWidget(self.results, 1)
        install_row_copy(self.configs)
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

        self.add.clicked.connect(self._add_clicked)
        self.remove.clicked.connect(self._remove_clicked)
        self.cost_model = None
        """The window's measured ``CostModel`` (set by the window): Defaults adds the draft max its curve
        implies."""
        self.defaults.clicked.connect(lambda: self.set_configs(default_configs(self.cost_model)))
        self.run.clicked.connect(self._run_clicked)
        self.cancel.clicked.connect(self.cancelRequested.emit)
        self.export_json.clicked.connect(lambda: self._export("json"))
        self.export_csv.clicked.connect(lambda: self._export("csv"))
        self.set_configs(default_configs())
        self.resize(1100, 760)

    def keyPressEvent(self, event) -> None:
        """Esc closes the window (as in a dialog) unless a child used it first (a cell editor
        cancels its edit, an open list closes)."""
        if event.key() == Qt.Key.Key_Escape and event.modifiers() == Qt.KeyboardModifier.NoModifier:
            event.accept()
            self.close()
            return
        super().keyPressEvent(event)

    # -- configurations -----------------------------------------------------------------
    def add_config(self, c: CompareConfig) -> None:
        """Append a row for ``c`` (n-gram sizes from its options, default 4 and 2)."""
        t = self.configs
        r = t.rowCount()
        t.insertRow(r)
        t.setItem(r, 0, QTableWidgetItem(c.label))
        src = QComboBox()
        src.setFrame(False)
        src.addItems(self.sources if c.source in self.sources else [*self.sources, c.source])
        src.setCurrentText(c.source)
        t.setCellWidget(r, 1, src)
        opts = dict(c.options)
        n_max = int(opts.pop("n_max", _NGRAM["n_max"].default))
        n_min = int(opts.pop("n_min", _NGRAM["n_min"].default))
        length = str(opts.pop("length", _NGRAM["length"].default))
        for col, w in ((2, _spin(0, 64, c.draft_max)), (3, _ngram_spin("n_max", n_max)),
                       (4, _ngram_spin("n_min", n_min))):
            t.setCellWidget(r, col, w)
        lc = QComboBox()
        lc.addItems(LENGTHS if length in LENGTHS else [*LENGTHS, length])
        lc.setCurrentText(length)
        t.setCellWidget(r, 5, lc)
        t.setItem(r, OPTIONS_COL, QTableWidgetItem(", ".join(f"{k}={v}" for k, v in opts.items())))
        src.currentTextChanged.connect(lambda _t, combo=src: self._source_changed(combo))
        self._source_changed(src)

    def _row_of(self, widget) -> int:
        for r in range(self.configs.rowCount()):
            if self.configs.cellWidget(r, 1) is widget:
                return r
        return -1

    def _source_changed(self, combo: QComboBox) -> None:
        r = self._row_of(combo)
        name = combo.currentText()
        self.configs.cellWidget(r, 2).setEnabled(name != PLAIN)
        for col in (3, 4, 5):
            self.configs.cellWidget(r, col).setEnabled(name == "ngram")

    def set_configs(self, configs) -> None:
        """Replace the table's rows with ``configs`` (``CompareConfig``)."""
        self.configs.setRowCount(0)
        for c in configs:
            self.add_config(c)

    def config_list(self) -> list[CompareConfig]:
        """The table as ``CompareConfig`` objects. Raises ``ValueError`` naming the row and the problem."""
        out = []
        t = self.configs
        for r in range(t.rowCount()):
            source = t.cellWidget(r, 1).currentText()
            draft_max = 0 if source == PLAIN else t.cellWidget(r, 2).value()
            try:
                options = parse_options(t.item(r, OPTIONS_COL).text() if t.item(r, OPTIONS_COL) else "")
            except ValueError as exc:
                raise ValueError(f"row {r + 1}: {exc}") from None
            if source == "ngram":
                columns = {"n_max": t.cellWidget(r, 3).value(), "n_min": t.cellWidget(r, 4).value(),
                           "length": t.cellWidget(r, 5).currentText()}
                options = {**columns, **options}
                try:  # the declared ranges and n_min <= n_max; the free-text options are checked by the run
                    NGRAM.check_options(columns)
                except ValueError as exc:
                    raise ValueError(f"row {r + 1}: {exc}") from None
            if source != PLAIN and draft_max < 1:
                raise ValueError(f"row {r + 1}: draft max must be at least 1 for source {source}")
            label = (t.item(r, 0).text().strip() if t.item(r, 0) else "") or (
                "plain" if source == PLAIN else f"{source} draft_max {draft_max}")
            out.append(CompareConfig(label, source, draft_max, options))
        if not out:
            raise ValueError("add at least one configuration")
        return out

    def _add_clicked(self) -> None:
        rows = sorted({i.row() for i in self.configs.selectedIndexes()})
        try:
            configs = self.config_list()
        except ValueError:
            configs = []
        base = configs[rows[-1]] if rows and rows[-1] < len(configs) else CompareConfig("ngram draft_max 8", "ngram", 8)
        self.add_config(CompareConfig(base.label + " (copy)" if rows else base.label, base.source, base.draft_max,
                                      dict(base.options)))

    def _remove_clicked(self) -> None:
        for r in sorted({i.row() for i in self.configs.selectedIndexes()}, reverse=True):
            self.configs.removeRow(r)

    def _run_clicked(self) -> None:
        try:
            configs = self.config_list()
        except ValueError as exc:
            self._error("Check the configurations", str(exc))
            return
        self.runRequested.emit(configs)

    # -- running ---------------------------------------------------------------------
    def set_prompt_info(self, text: str) -> None:
        """What the comparison runs on (prompt, max tokens, sampling), shown under the buttons."""
        self.prompt_label.setText(text)

    def set_running(self, running: bool, text: str = "") -> None:
        """Busy state: Run and editing off, Cancel on, progress shown."""
        for w in (self.run, self.add, self.remove, self.defaults, self.configs):
            w.setEnabled(not running)
        self.cancel.setEnabled(running)
        self.progress.setVisible(running)
        if running:
            self.progress.setRange(0, 0)
        self.status.setText(text)

    def set_progress(self, done: int, total: int, label: str) -> None:
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.status.setText(f"running {done + 1}/{total}: {label} …")

    def set_result(self, result: CompareResult | None, note: str = "") -> None:
        """Show ``result`` (drawn on the next ``refresh``); ``note`` goes to the status line."""
        self.result = result
        self.note = note
        self._version += 1
        self.export_json.setEnabled(result is not None)
        self.export_csv.setEnabled(result is not None)

    # -- drawing ---------------------------------------------------------------------
    def refresh(self) -> None:
        if self._drawn == self._version:
            return
        self._drawn = self._version
        res = self.result
        self.status.setText(self.note)
        rows = res.rows if res is not None else ()
        t = self.results
        t.setRowCount(len(rows))
        for i, r in enumerate(rows):
            s = r.summary
            same = "n/a" if r.same_output_as_plain is None else ("yes" if r.same_output_as_plain else "no")
            cells = (r.config.label, _fmt(s.decode_tokens_per_s, ".1f"), _fmt(r.speedup_vs_plain, ".2f", "x"),
                     _fmt(r.expected_speedup, ".2f", "x"),
                     _fmt(None if s.acceptance_rate is None else 100 * s.acceptance_rate, ".1f", " %"),
                     _fmt(s.mean_accepted_length, ".2f"), str(s.windows), same)
            for col, text in enumerate(cells):
                it = QTableWidgetItem(text)
                if col:
                    it.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if col == 0:
                    it.setForeground(QBrush(QColor(COLORS[i % len(COLORS)])))
                if r.error:
                    it.setToolTip(r.error)
                    it.setBackground(QBrush(QColor("#ffebee")))
                elif col == 7 and r.same_output_as_plain is False:
                    it.setBackground(QBrush(QColor("#fff3e0")))
                    it.setToolTip("the output differs from plain decoding (batch arithmetic can flip a near-tie; "
                                  "sampling with temperature > 0 differs by design)")
                t.setItem(i, col, it)
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
        from inspector.bench.compare import write_compare_csv, write_compare_json

        if self.result is None:
            return False
        try:
            (write_compare_json if kind == "json" else write_compare_csv)(self.result, path)
        except OSError as exc:
            self._error("Export failed", f"cannot write {path}: {exc}")
            return False
        self.status.setText(f"written: {path}")
        return True

    def _error(self, title: str, message: str) -> None:
        box = QMessageBox(QMessageBox.Icon.Warning, title, message, QMessageBox.StandardButton.Ok, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.error_box = box
