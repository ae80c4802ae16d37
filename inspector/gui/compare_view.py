"""The Compare window: one prompt (or one conversation) run with several proposal
configurations, side by side (``inspector.bench.compare``).

Top: the configurations, an editable table (label, source, draft max,
n-gram n_max / n_min / length (fixed or adaptive), the source's other options as ``key=value, ...``:
the cell's placeholder and tooltip list the chosen source's declared options and defaults) with Add,
Remove and Defaults (plain, n-gram draft max 4, 8, 16), what to run on (the main window's prompt, the
bundled conversation or a turns file: Open…), and Run / Cancel with progress (per turn for a
conversation). Options are checked by the source's declaration before anything runs
(``inspector.bench.compare.check_config_options``). Below: the results table (decode tokens/s, speedup vs plain,
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

import os

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
    QLineEdit,
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

from inspector.bench.compare import PLAIN, CompareConfig, CompareResult, check_config_options, default_configs
from inspector.sources.registry import NGRAM
from inspector.gui.table_copy import install_row_copy

CONFIG_HEADERS = ("label", "source", "draft max", "n_max", "n_min", "length", "other options (key=value, …)")
OPTIONS_COL = len(CONFIG_HEADERS) - 1
_NGRAM = {o.name: o for o in NGRAM.options}
"""The n-gram source's declared options: the table's n_max, n_min and length columns follow them."""
LENGTHS = tuple(_NGRAM["length"].choices)
"""The n-gram ``length`` option's values (the first is the default)."""
NGRAM_COLUMNS = {"n_max": 3, "n_min": 4, "length": 5}
"""The n-gram options with a column of their own (column index); the others go in the options cell."""


def _ngram_spin(name: str, value: int) -> QSpinBox:
    o = _NGRAM[name]
    return _spin(int(o.minimum), int(o.control_max or o.maximum or 64), value)


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


def _describe(source: str):
    """The source's ``SourceDescriptor``, or None when it cannot be read (a broken plugin)."""
    from inspector.sources.registry import describe_source

    try:
        return describe_source(source)
    except Exception:  # noqa: BLE001 - an entry point that fails to import: no hint, the run reports it
        return None


def _cell_options(source: str) -> list:
    """The declared options of ``source`` that belong in the options cell (not set by a column or by
    the generation's draft max); None when the source does not declare its options."""
    d = _describe(source)
    if d is None or d.options is None:
        return None
    skip = NGRAM_COLUMNS if source == "ngram" else {}
    return [o for o in d.options if o.name not in skip and not o.from_setting]


def _default_text(o) -> str:
    if o.default is None or o.default == "":
        return ""
    return f"{o.default:g}" if isinstance(o.default, float) else str(o.default)


def _range_text(o) -> str:
    if o.convert is not None:  # a custom check: its help says what it takes
        return ""
    if o.kind == "choice":
        return "one of " + ", ".join(o.choices)
    if o.kind in ("int", "float"):
        word = "whole number" if o.kind == "int" else "number"
        lo, hi = o.minimum, o.maximum
        if lo is not None and hi is not None:
            return f"{word} {lo:g} to {hi:g}"
        if lo is not None:
            return f"{word} >= {lo:g}"
        return f"{word} <= {hi:g}" if hi is not None else word
    return "file name" if o.kind == "path" else "text"


def options_hint(source: str) -> tuple[str, str]:
    """(placeholder, tooltip) of a row's "other options" cell for ``source``: its declared options
    (those without a column of their own) with their defaults, what each takes and what it does."""
    if source == PLAIN:
        return "plain decoding takes no options", "source none (plain decoding) takes no options"
    opts = _cell_options(source)
    if opts is None:
        return ("key=value, … (this source does not declare its options)",
                f"source {source} does not declare its options: they are passed to it as typed")
    if not opts:
        return "no further options", f"source {source}: every option has a column of its own"
    d = _describe(source)
    given = [f"{o.name}={_default_text(o)}" for o in opts if _default_text(o)]
    unset = [o.name for o in opts if not _default_text(o)]
    placeholder = "defaults: " + ", ".join(given) if given else ""
    if unset:
        placeholder += ("; " if placeholder else "") + "optional: " + ", ".join(unset)
    lines = [f"{source}: {d.help}" if d.help else source,
             "Options as key=value, separated by commas; empty: the defaults."]
    for o in opts:
        takes = _range_text(o)
        lines.append(f"• {o.name} (default {_default_text(o) or 'not set'}{'; ' + takes if takes else ''}): {o.help}")
    return placeholder, "\n".join(lines)


def turns_text(run) -> str:
    """A conversation row's turns, one line each (tokens, windows, accepted, why it ended); "" for a
    run that is not a conversation (``inspector.bench.compare.TurnsRun``)."""
    gens = getattr(run, "generations", None)
    if not gens:
        return ""
    lines = [f"{len(gens)} turn{'s' if len(gens) != 1 else ''}, summed in this row:"]
    for n, g in enumerate(gens, 1):
        accepted = sum(x.accepted_proposal_tokens for x in g.receipts)
        lines.append(f"turn {n}: {len(g.generated)} tokens, {len(g.receipts)} windows, {accepted} accepted, "
                     f"ended: {g.finish_reason or 'n/a'}")
    return "\n".join(lines)


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
        self.run.setToolTip("run the prompt or conversation once per configuration, one after the other, on the "
                            "engine thread (max tokens and sampling from the main window)")
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
        self.prompt_label.setWordWrap(True)
        self.prompt_name = "the main window's prompt"
        self.prompt_details: tuple = ()
        self.input = QComboBox()
        self.input.setToolTip("what every configuration runs on: the main window's prompt, or a conversation "
                              "(each configuration answers every turn with its own history; a row sums the turns)")
        self.input.addItem(f"prompt: {self.prompt_name}", None)
        self._add_bundled_conversations()
        self.open_turns = QPushButton("Open turns file…")
        self.open_turns.setToolTip("a conversation of your own: a JSON list of user messages, or messages "
                                   "separated by lines holding only ---")
        self.open_turns.setAutoDefault(False)
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
        on = QHBoxLayout()
        on.addWidget(QLabel("Run on"))
        on.addWidget(self.input)
        on.addWidget(self.open_turns)
        on.addWidget(self.prompt_label, 1)
        tl.addLayout(on)
        tl.addLayout(buttons)

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
        self.input.currentIndexChanged.connect(lambda _i: self._show_prompt_info())
        self.open_turns.clicked.connect(self._open_turns_clicked)
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
        for i in range(src.count()):
            d = _describe(src.itemText(i))
            if d is not None and d.help:
                src.setItemData(i, d.help, Qt.ItemDataRole.ToolTipRole)
        src.setCurrentText(c.source)
        t.setCellWidget(r, 1, src)
        opts = dict(c.options)
        columns = c.source == "ngram"  # another source's n_max (ngram-mod's) stays in its options cell
        n_max = int(opts.pop("n_max", _NGRAM["n_max"].default) if columns else _NGRAM["n_max"].default)
        n_min = int(opts.pop("n_min", _NGRAM["n_min"].default) if columns else _NGRAM["n_min"].default)
        length = str(opts.pop("length", _NGRAM["length"].default) if columns else _NGRAM["length"].default)
        for col, w in ((2, _spin(0, 64, c.draft_max)), (3, _ngram_spin("n_max", n_max)),
                       (4, _ngram_spin("n_min", n_min))):
            t.setCellWidget(r, col, w)
        lc = QComboBox()
        lc.addItems(LENGTHS if length in LENGTHS else [*LENGTHS, length])
        lc.setCurrentText(length)
        t.setCellWidget(r, 5, lc)
        edit = QLineEdit(", ".join(f"{k}={v}" for k, v in opts.items()))
        edit.setFrame(False)
        edit.setClearButtonEnabled(True)
        t.setCellWidget(r, OPTIONS_COL, edit)
        src.currentTextChanged.connect(lambda _t, combo=src: self._source_changed(combo, chosen=True))
        self._source_changed(src)

    def _row_of(self, widget) -> int:
        for r in range(self.configs.rowCount()):
            if self.configs.cellWidget(r, 1) is widget:
                return r
        return -1

    def options_cell(self, row: int) -> QLineEdit:
        """The "other options" editor of ``row`` (``key=value, ...``)."""
        return self.configs.cellWidget(row, OPTIONS_COL)

    def _source_changed(self, combo: QComboBox, chosen: bool = False) -> None:
        """Enable the columns the row's source uses and show its options in the options cell's
        placeholder and tooltip; ``chosen`` (the user picked another source): options the new
        source does not declare are dropped from the cell."""
        r = self._row_of(combo)
        name = combo.currentText()
        self.configs.cellWidget(r, 2).setEnabled(name != PLAIN)
        for col in NGRAM_COLUMNS.values():
            self.configs.cellWidget(r, col).setEnabled(name == "ngram")
        edit = self.options_cell(r)
        placeholder, tip = options_hint(name)
        edit.setPlaceholderText(placeholder)
        edit.setToolTip(tip)
        edit.setEnabled(name != PLAIN)
        if chosen:
            declared = _cell_options(name)
            try:
                given = parse_options(edit.text())
            except ValueError:  # left as typed: Run names the problem
                return
            if declared is not None:
                keep = {o.name for o in declared}
                edit.setText(", ".join(f"{k}={v}" for k, v in given.items() if k in keep))

    def set_configs(self, configs) -> None:
        """Replace the table's rows with ``configs`` (``CompareConfig``)."""
        self.configs.setRowCount(0)
        for c in configs:
            self.add_config(c)

    def config_list(self) -> list[CompareConfig]:
        """The table as ``CompareConfig`` objects, each row's options checked by its source's declaration
        (``check_config_options``, as ``compare --config``). Raises ``ValueError`` naming the row, its
        label and the problem (the source, the option, the observed value and what it takes)."""
        out = []
        t = self.configs
        for r in range(t.rowCount()):
            source = t.cellWidget(r, 1).currentText()
            draft_max = 0 if source == PLAIN else t.cellWidget(r, 2).value()
            typed = t.item(r, 0).text().strip() if t.item(r, 0) else ""
            where = f"row {r + 1}" + (f" ({typed})" if typed else "")
            try:
                options = parse_options(self.options_cell(r).text() if source != PLAIN else "")
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            extra = dict(options)
            if source == "ngram":
                columns = {"n_max": t.cellWidget(r, 3).value(), "n_min": t.cellWidget(r, 4).value(),
                           "length": t.cellWidget(r, 5).currentText()}
                options = {**columns, **options}
            if source != PLAIN and draft_max < 1:
                raise ValueError(f"{where}: draft max must be at least 1 for source {source}")
            try:
                check_config_options(source, options, draft_max)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            label = typed or ("plain" if source == PLAIN else f"{source} draft_max {draft_max}" + "".join(
                f" {k}={v}" for k, v in extra.items()))
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
        try:
            conversation = self.conversation()
        except ValueError as exc:  # TurnsFileError: the file changed since it was opened
            self._error("Cannot read the conversation", str(exc))
            return
        self.runRequested.emit(configs, conversation)

    # -- what to run on --------------------------------------------------------------
    def _add_bundled_conversations(self) -> None:
        from inspector.prompts import TURNS_EXAMPLES, turns_path
        from inspector.session.conversation import read_turns

        for name in TURNS_EXAMPLES:
            try:
                n = len(read_turns(turns_path(name)))
            except ValueError:  # a broken install: not offered
                continue
            self.input.addItem(f"conversation: {name} (bundled, {n} turns)", name)

    def add_turns_file(self, path: str) -> bool:
        """Offer the turns file ``path`` (``inspector.session.conversation.read_turns``) and choose it;
        a file that cannot be used gives a message naming it (and the turn) and returns False."""
        from inspector.session.conversation import read_turns

        try:
            n = len(read_turns(path))
        except ValueError as exc:
            self._error("Cannot use this turns file", str(exc))
            return False
        i = self.input.findData(path)
        if i < 0:
            self.input.addItem(f"conversation: {os.path.basename(path)} ({n} turns)", path)
            i = self.input.count() - 1
            self.input.setItemData(i, path, Qt.ItemDataRole.ToolTipRole)
        self.input.setCurrentIndex(i)
        return True

    def choose_conversation(self, name_or_path: str | None) -> bool:
        """Choose what to run on: None (the main window's prompt), a bundled conversation's name
        (``inspector.prompts.TURNS_EXAMPLES``) or a turns file (offered first). Returns False when
        it cannot be used."""
        i = self.input.findData(name_or_path) if name_or_path is not None else 0
        if i >= 0:
            self.input.setCurrentIndex(i)
            return True
        return self.add_turns_file(name_or_path)

    def conversation(self) -> tuple[str, tuple[str, ...]] | None:
        """The chosen conversation as (its bundled name or file, its user messages), read now; None
        for the main window's prompt. Raises ``TurnsFileError`` (a ``ValueError``) naming the file."""
        from inspector.prompts import turns_path
        from inspector.session.conversation import read_turns

        key = self.input.currentData()
        if key is None:
            return None
        return key, tuple(read_turns(turns_path(key)))

    def _open_turns_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a turns file", "",
                                              "Turns files (*.txt *.json);;All files (*)")
        if path:
            self.add_turns_file(path)

    # -- running ---------------------------------------------------------------------
    def set_prompt_info(self, prompt_name: str, max_tokens: int, details: str = "") -> None:
        """The main window's prompt (``prompt_name``: shown in the "Run on" choice) and what every run
        shares (``max_tokens``, per turn in a conversation; ``details``: sampling, cost model), shown
        beside the choice."""
        self.prompt_name = prompt_name
        self.prompt_details = (int(max_tokens), details)
        self.input.setItemText(0, f"prompt: {prompt_name}")
        self._show_prompt_info()

    def _show_prompt_info(self) -> None:
        if not self.prompt_details:
            return
        n, details = self.prompt_details
        turns = self.input.currentData() is not None
        self.prompt_label.setText(f"max tokens {n}{' per turn' if turns else ''}{', ' + details if details else ''}"
                                  f"{'; a row sums every turn' if turns else ''}")

    def set_running(self, running: bool, text: str = "") -> None:
        """Busy state: Run and editing off, Cancel on, progress shown."""
        for w in (self.run, self.add, self.remove, self.defaults, self.configs, self.input, self.open_turns):
            w.setEnabled(not running)
        self.cancel.setEnabled(running)
        self.progress.setVisible(running)
        if running:
            self.progress.setRange(0, 0)
        self.status.setText(text)

    def set_progress(self, done: int, total: int, label: str) -> None:
        """A configuration starts (``done`` finished of ``total``) on the prompt."""
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.status.setText(f"running {done + 1}/{total}: {label} …")

    def set_turn_progress(self, turn: int, turns: int, done: int, total: int, label: str) -> None:
        """Turn ``turn`` (1-based) of ``turns`` starts for configuration ``done + 1`` of ``total``."""
        self.progress.setRange(0, total * turns)
        self.progress.setValue(done * turns + turn - 1)
        self.status.setText(f"turn {turn}/{turns}, configuration {done + 1}/{total}: {label} …")

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
        runs = res.runs if res is not None else ()
        t = self.results
        t.setRowCount(len(rows))
        for i, r in enumerate(rows):
            turns_tip = turns_text(runs[i]) if i < len(runs) else ""
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
                    if turns_tip:
                        it.setToolTip(turns_tip)
                if r.error:
                    it.setToolTip(r.error + (f"\n{turns_tip}" if col == 0 and turns_tip else ""))
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
