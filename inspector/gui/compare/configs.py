"""The Compare window's configurations panel (the top of ``CompareView``, ``inspector.gui.compare.view``).

It owns the editable configurations table (label, source, draft max, n-gram n_max / n_min / length
(fixed or adaptive), and the option cell: the source's other options as ``key=value, ...``, its
placeholder and tooltip listing the chosen source's declared options and defaults) with Add, Remove
and Defaults (plain, n-gram draft max 4, 8, 16); reading the table back as ``CompareConfig`` objects,
each row checked by its source's declaration (``inspector.bench.compare.check_config_options``,
shared with ``compare --config``); and the "Run on" choice (the main window's prompt, a bundled
conversation or a turns file: Open…) with the prompt's shared settings beside it. The panel's
widgets include the Run / Cancel / progress / status row under the table; the window
(``compare_view``) drives them, and owns the results table, the plots and export.

``CompareConfigsPanel`` is a widget the window owns (``CompareView.configs_panel``); what a
row's options cell offers for its source is ``inspector.gui.compare.option_cells``.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from inspector.bench.compare import check_config_options, default_configs
from inspector.sources.registry import PLAIN
from inspector.bench.compare_result import CompareConfig
from inspector.gui.compare.option_cells import (OPTION_COLUMNS, cell_options, column_options, describe,
                                                options_hint)
from inspector.gui.look.table_copy import install_row_copy
from inspector.prompts import TURNS_EXAMPLES, turns_path
from inspector.session.conversation import read_turns
from inspector.sources.descriptors import parse_options
from inspector.sources.ngram import NGRAM

CONFIG_HEADERS = ("label", "source", "draft max", "n_max", "n_min", "length", "other options (key=value, …)")
OPTIONS_COL = len(CONFIG_HEADERS) - 1
_NGRAM = {o.name: o for o in NGRAM.options}
"""The n-gram source's declared options: the table's n_max, n_min and length columns follow them."""
LENGTHS = tuple(_NGRAM["length"].choices)
"""The n-gram ``length`` option's values (the first is the default)."""


def _ngram_spin(name: str, value: int) -> QSpinBox:
    o = _NGRAM[name]
    return _spin(int(o.minimum), int(o.control_max or o.maximum or 64), value)


SPIN_WIDTH = "99999"
"""Spin boxes are this many digits wide (plus their arrows): the value never touches the arrows."""


AUTO_LABEL_ROLE = Qt.ItemDataRole.UserRole + 1
"""On a label cell: True while the label is automatic (it follows the row's settings)."""


def auto_label(source: str, draft_max: int, extra: dict) -> str:
    """A row's automatic label: ``plain``, or ``SOURCE draft_max N`` and its other options
    (``suffix draft_max 8 max_tree_depth=32``)."""
    if source == PLAIN:
        return "plain"
    return f"{source} draft_max {draft_max}" + "".join(f" {k}={v}" for k, v in extra.items())


def _spin(lo: int, hi: int, value: int) -> QSpinBox:
    s = QSpinBox()
    s.setRange(lo, hi)
    s.setValue(value)
    s.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    # Room for the digits beside the arrows (a frameless spin box in a cell is cramped).
    s.setMinimumWidth(s.fontMetrics().horizontalAdvance(SPIN_WIDTH) + 36)
    return s


class CompareConfigsPanel(QWidget):
    """The configurations panel of ``CompareView``: ``sources`` are the source names offered in each
    row. Its widgets: ``configs`` (the table), ``add``, ``remove``, ``defaults``, ``run``, ``cancel``,
    ``progress``, ``status``, ``input`` (what to run on), ``open_turns``, ``max_tokens``, ``repeats``,
    ``prompt_label``; the window connects Run and Cancel.

    ``problem(title, message)``: something the user chose cannot be used (a turns file): the
    window shows it."""

    problem = Signal(str, str)

    def __init__(self, sources: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.sources = list(sources)
        self.configs = QTableWidget(0, len(CONFIG_HEADERS))
        self.configs.itemChanged.connect(self._label_edited)
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
                            "engine thread (max tokens from this window, sampling from the main window)")
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
        self.max_tokens = _spin(1, 1 << 16, 128)
        self.max_tokens.setToolTip("most tokens each configuration generates (per turn in a conversation); "
                                   "taken from the main window's max tokens until you change it here")
        self.max_tokens.valueChanged.connect(lambda _v: self._max_tokens_changed())
        self._max_tokens_own = False  # True once the user set it here
        self.repeats = _spin(1, 100, 3)
        self.repeats.setToolTip("runs per configuration, in rounds (every configuration once per round, plain "
                                "first, so a slow phase of the machine reaches them all): tok/s and speedups are "
                                "medians of the rounds, the other columns the first round's")
        buttons = QHBoxLayout()
        for b in (self.add, self.remove, self.defaults):
            buttons.addWidget(b)
        buttons.addSpacing(16)
        buttons.addWidget(self.run)
        buttons.addWidget(self.cancel)
        buttons.addWidget(self.progress)
        buttons.addWidget(self.status, 1)
        tl = QVBoxLayout(self)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.addWidget(QLabel("<b>Configurations</b> — source <i>none</i> is plain decoding, the reference for "
                            "“speedup vs plain” (added first when missing)"))
        tl.addWidget(self.configs, 1)
        on = QHBoxLayout()
        on.addWidget(QLabel("Run on"))
        on.addWidget(self.input)
        on.addWidget(self.open_turns)
        on.addWidget(QLabel("max tokens"))
        on.addWidget(self.max_tokens)
        on.addWidget(QLabel("repeats"))
        on.addWidget(self.repeats)
        on.addWidget(self.prompt_label, 1)
        tl.addLayout(on)
        tl.addLayout(buttons)
        install_row_copy(self.configs)
        self.add.clicked.connect(self._add_clicked)
        self.remove.clicked.connect(self._remove_clicked)
        self.cost_model = None
        """The window's measured ``CostModel`` (set by the window): Defaults adds the draft max its curve
        implies."""
        self.defaults.clicked.connect(lambda: self.set_configs(default_configs(self.cost_model)))
        self.input.currentIndexChanged.connect(lambda _i: self._show_prompt_info())
        self.open_turns.clicked.connect(self._open_turns_clicked)

    # -- running (the window drives these) ---------------------------------------------
    def set_running(self, running: bool, text: str = "") -> None:
        """Busy state: Run and every setting off (the configurations table and its cells, what to run on,
        max tokens), Cancel on, progress shown; ``text`` in the status line."""
        for w in (self.run, self.add, self.remove, self.defaults, self.configs, self.input, self.open_turns,
                  self.max_tokens, self.repeats):
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

    # -- configurations -----------------------------------------------------------------
    def add_config(self, c: CompareConfig) -> None:
        """Append a row for ``c`` (n-gram sizes from its options, default 4 and 2). A label of the
        automatic form (``auto_label``; Defaults' labels) follows the row's source, draft max and
        options until the user types another one."""
        t = self.configs
        r = t.rowCount()
        t.insertRow(r)
        item = QTableWidgetItem(c.label)
        base = auto_label(c.source, c.draft_max, {})
        item.setData(AUTO_LABEL_ROLE, not c.label or c.label.startswith(base))
        with QSignalBlocker(t):  # not the user's edit (itemChanged)
            t.setItem(r, 0, item)
        src = QComboBox()
        src.setFrame(False)
        src.addItems(self.sources if c.source in self.sources else [*self.sources, c.source])
        for i in range(src.count()):
            d = describe(src.itemText(i))
            if d is not None and d.help:
                src.setItemData(i, d.help, Qt.ItemDataRole.ToolTipRole)
        src.setCurrentText(c.source)
        t.setCellWidget(r, 1, src)
        opts = dict(c.options)
        columns = column_options(c.source)  # another source's n_max (ngram-mod's) stays in its options cell
        shown = {k: opts.pop(k, _NGRAM[k].default) if k in columns else _NGRAM[k].default for k in OPTION_COLUMNS}
        n_max, n_min, length = int(shown["n_max"]), int(shown["n_min"]), str(shown["length"])
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
        t.cellWidget(r, 2).valueChanged.connect(lambda _v: self.refresh_labels())
        edit.editingFinished.connect(self.refresh_labels)
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
        columns = column_options(name)
        for key, col in OPTION_COLUMNS.items():
            self.configs.cellWidget(r, col).setEnabled(key in columns)
        edit = self.options_cell(r)
        placeholder, tip = options_hint(name)
        edit.setPlaceholderText(placeholder)
        edit.setToolTip(tip)
        edit.setEnabled(name != PLAIN)
        if chosen:
            declared = cell_options(name)
            try:
                given = parse_options(edit.text())
            except ValueError:  # left as typed: Run names the problem
                return
            if declared is not None:
                keep = {o.name for o in declared}
                edit.setText(", ".join(f"{k}={v}" for k, v in given.items() if k in keep))
            self.refresh_labels()

    def _label_edited(self, item: QTableWidgetItem) -> None:
        """A label the user typed stays as typed (an emptied one is automatic again)."""
        if item.column() == 0:
            with QSignalBlocker(self.configs):
                item.setData(AUTO_LABEL_ROLE, not item.text().strip())
            if not item.text().strip():
                self.refresh_labels()

    def refresh_labels(self) -> None:
        """Set every automatic label from its row's source, draft max and options (``auto_label``)."""
        t = self.configs
        with QSignalBlocker(t):  # not the user's edits (itemChanged)
            for r in range(t.rowCount()):
                item, src = t.item(r, 0), t.cellWidget(r, 1)
                if item is None or src is None or not item.data(AUTO_LABEL_ROLE):
                    continue
                source = src.currentText()
                try:
                    extra = parse_options(self.options_cell(r).text()) if source != PLAIN else {}
                except ValueError:
                    extra = {}
                text = auto_label(source, t.cellWidget(r, 2).value(), extra)
                if item.text() != text:
                    item.setText(text)

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
            used = column_options(source)
            if used:
                columns = {"n_max": t.cellWidget(r, 3).value(), "n_min": t.cellWidget(r, 4).value(),
                           "length": t.cellWidget(r, 5).currentText()}
                options = {**{k: v for k, v in columns.items() if k in used}, **options}
            if source != PLAIN and draft_max < 1:
                raise ValueError(f"{where}: draft max must be at least 1 for source {source}")
            try:
                check_config_options(source, options, draft_max)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            label = typed or auto_label(source, draft_max, extra)
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

    # -- what to run on --------------------------------------------------------------
    def _add_bundled_conversations(self) -> None:
        for name in TURNS_EXAMPLES:
            try:
                n = len(read_turns(turns_path(name)))
            except ValueError:  # a broken install: not offered
                continue
            self.input.addItem(f"conversation: {name} (bundled, {n} turns)", name)

    def add_turns_file(self, path: str) -> bool:
        """Offer the turns file ``path`` (``inspector.session.conversation.read_turns``) and choose it;
        a file that cannot be used gives a message naming it (and the turn: ``problem``) and returns False."""
        try:
            n = len(read_turns(path))
        except ValueError as exc:
            self.problem.emit("Cannot use this turns file", str(exc))
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
        key = self.input.currentData()
        if key is None:
            return None
        return key, tuple(read_turns(turns_path(key)))

    def _open_turns_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a turns file", "",
                                              "Turns files (*.txt *.json);;All files (*)")
        if path:
            self.add_turns_file(path)

    def set_prompt_info(self, prompt_name: str, max_tokens: int, details: str = "") -> None:
        """The main window's prompt (``prompt_name``: shown in the "Run on" choice) and what every run
        shares (``max_tokens``, per turn in a conversation; ``details``: sampling, cost model), shown
        beside the choice."""
        self.prompt_name = prompt_name
        self.prompt_details = (int(max_tokens), details)
        if not self._max_tokens_own:
            with QSignalBlocker(self.max_tokens):  # not the user's choice
                self.max_tokens.setValue(int(max_tokens))
        self.input.setItemText(0, f"prompt: {prompt_name}")
        self._show_prompt_info()

    def _max_tokens_changed(self) -> None:
        self._max_tokens_own = True  # the user's (set_prompt_info blocks its own change)
        self._show_prompt_info()

    def _show_prompt_info(self) -> None:
        if not self.prompt_details:
            return
        _n, details = self.prompt_details
        turns = self.input.currentData() is not None
        self.prompt_label.setText(f"{'per turn, ' if turns else ''}{details}{'; a row sums every turn' if turns else ''}")
