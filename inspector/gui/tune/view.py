"""The Tune window (issue 28): what other model-free sources and settings would have done on the shown
greedy run, predicted without the model (``inspector.bench.tune``).

Widgets only: ``inspector.gui.tune.actions.TuneActions`` builds the recording from the session, runs the
grid off the GUI thread and the Verify run on the engine thread, and calls ``set_recording`` /
``set_refusal`` / ``set_running`` / ``set_progress`` / ``set_rows`` / ``set_verified``. The view shows the
configurations best first (a sortable table; Ctrl+C copies the selected rows), a heatmap of the predicted
speedup of one source over two of its options (or draft max; each cell the best over the others, with its
draft max), Copy as llama-server flags for the selected row, and Verify (the selected row run for real,
predicted beside measured). A sampled or stop-string run shows why it cannot be replayed instead.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from inspector.bench.tune import DRAFT_MAX_GRID, MODEL_FREE, TuneRow
from inspector.gui.look.screen_fit import keep_on_screen
from inspector.gui.look.table_copy import install_row_copy

ALL_SOURCES = "all model-free sources"
"""The source picker's first entry: every ``MODEL_FREE`` source."""
DRAFT_MAX = "draft max"
"""The heatmap axis choice for the draft max (the other choices are the source's option names)."""
HEADERS = ("configuration", "predicted speedup", "tokens/s", "windows", "accepted/proposed",
           "mean accepted length")
TIPS = ("source:draft_max=N,options (double-click or Verify to run it for real)",
        "plain decoding of the same output at c(1) / the predicted decode time",
        "predicted decode tokens/s (prefill excluded)", "replayed proposal windows",
        "accepted / proposed proposal tokens over the replayed windows",
        "1 + accepted / windows: tokens committed per window")
ROW_ROLE = Qt.ItemDataRole.UserRole + 1
"""Item data role of a table row's index into the shown rows (column 0)."""


def parse_draft_maxes(text: str) -> tuple[int, ...]:
    """Draft max values typed as ``"2, 4, 8"`` (whole numbers >= 1, duplicates dropped, in order);
    empty: ``DRAFT_MAX_GRID``. Raises ``ValueError`` naming a bad value."""
    out: list[int] = []
    for part in text.replace(";", ",").replace(" ", ",").split(","):
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            raise ValueError(f"draft max must be whole numbers >= 1, observed {part!r}") from None
        if n < 1:
            raise ValueError(f"draft max must be whole numbers >= 1, observed {n}")
        if n not in out:
            out.append(n)
    return tuple(out) or DRAFT_MAX_GRID


def axis_keys(rows, source: str) -> list[str]:
    """The heatmap axis choices of ``source`` among ``rows``: its option names, then ``DRAFT_MAX``."""
    keys: list[str] = []
    for r in rows:
        if r.source == source:
            keys += [k for k in r.options if k not in keys]
    return keys + [DRAFT_MAX]


def _value(row: TuneRow, key: str):
    return row.draft_max if key == DRAFT_MAX else row.options.get(key)


def heat_grid(rows, source: str, x_key: str, y_key: str | None):
    """The heatmap of ``source``'s rows: ``(x values, y values, speedup, best)`` with ``speedup[j, i]``
    the best predicted speedup where ``x_key`` is ``x values[i]`` and ``y_key`` is ``y values[j]`` (NaN
    where no row; a single row of cells when ``y_key`` is None or equals ``x_key``) and ``best[j][i]``
    the ``TuneRow`` that reached it (None where no row)."""
    mine = [r for r in rows if r.source == source]
    if y_key == x_key:
        y_key = None
    xs = sorted({_value(r, x_key) for r in mine}, key=lambda v: (isinstance(v, str), v))
    ys = [None] if y_key is None else sorted({_value(r, y_key) for r in mine}, key=lambda v: (isinstance(v, str), v))
    speed = np.full((len(ys), len(xs)), np.nan)
    best: list[list[TuneRow | None]] = [[None] * len(xs) for _ in ys]
    for r in mine:
        i = xs.index(_value(r, x_key))
        j = 0 if y_key is None else ys.index(_value(r, y_key))
        if best[j][i] is None or r.speedup > best[j][i].speedup:
            best[j][i] = r
            speed[j, i] = r.speedup
    return xs, ys, speed, best


class _NumberItem(QTableWidgetItem):
    """A cell that sorts by its number (``Qt.UserRole``), not its text."""

    def __lt__(self, other) -> bool:
        a, b = self.data(Qt.ItemDataRole.UserRole), other.data(Qt.ItemDataRole.UserRole)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return a < b
        return self.text() < other.text()


def _cell(text: str, number=None) -> QTableWidgetItem:
    it = _NumberItem(text)
    if number is not None:
        it.setData(Qt.ItemDataRole.UserRole, float(number))
        it.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return it


class TuneView(QWidget):
    """The Tune window (a top-level window owned by the main window).

    ``tuneRequested(sources, draft_maxes)``: predict the grid of ``sources`` (names) and draft max values;
    ``cancelRequested``: stop it (the rows predicted so far are shown); ``verifyRequested(row)``: run the
    ``TuneRow`` for real; ``copyRequested(row)``: copy its llama-server flags. ``rows``: the shown rows,
    best predicted first.
    """

    tuneRequested = Signal(object, object)
    cancelRequested = Signal()
    verifyRequested = Signal(object)
    copyRequested = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("spec-inspector — tune from this run")
        self.rows: list[TuneRow] = []
        lay = QVBoxLayout(self)
        lay.setContentsMargins(6, 6, 6, 6)
        self.info = QLabel("")
        self.info.setWordWrap(True)
        lay.addWidget(self.info)
        self.pages = QStackedWidget()
        self.refusal = QLabel("")
        self.refusal.setWordWrap(True)
        self.refusal.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.refusal.setStyleSheet("QLabel { background: #fff3e0; padding: 12px; }")
        content = QWidget()
        self.pages.addWidget(content)
        self.pages.addWidget(self.refusal)
        lay.addWidget(self.pages, 1)
        cl = QVBoxLayout(content)
        cl.setContentsMargins(0, 0, 0, 0)

        controls = QHBoxLayout()
        self.source = QComboBox()
        self.source.addItems([ALL_SOURCES, *MODEL_FREE])
        self.source.setToolTip("the sources to replay: every model-free one, or one")
        self.draft_maxes = QLineEdit(", ".join(map(str, DRAFT_MAX_GRID)))
        self.draft_maxes.setToolTip("draft max values to try for every configuration (whole numbers >= 1)")
        self.tune = QPushButton("▶ Tune")
        self.tune.setToolTip("replay every configuration of the grid over this run's output (no model)")
        self.cancel = QPushButton("Cancel")
        self.cancel.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(180)
        self.progress.hide()
        self.status = QLabel("")
        self.status.setWordWrap(True)
        # Two lines, always: a message never makes the row taller, so the table below never moves under
        # the pointer (the whole text is in the tooltip when it is longer).
        self.status.setFixedHeight(2 * self.status.fontMetrics().lineSpacing() + 4)
        self.status.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)  # its start, cut below
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
        self.status.setToolTip("")
        for w in (QLabel("source"), self.source, QLabel("draft max"), self.draft_maxes, self.tune, self.cancel,
                  self.progress):
            controls.addWidget(w)
        controls.addWidget(self.status, 1)
        cl.addLayout(controls)

        split = QSplitter(Qt.Orientation.Horizontal)
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        self.table = QTableWidget(0, len(HEADERS))
        self.table.setHorizontalHeaderLabels(HEADERS)
        for i, tip in enumerate(TIPS):
            self.table.horizontalHeaderItem(i).setToolTip(tip)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        h = self.table.horizontalHeader()
        h.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)  # sized to the rows once they are shown
        h.setStretchLastSection(True)
        install_row_copy(self.table)
        ll.addWidget(self.table, 1)
        buttons = QHBoxLayout()
        self.copy_flags = QPushButton("Copy as llama-server flags")
        self.copy_flags.setToolTip("copy `llama-server --spec-type …` for the selected configuration")
        self.verify = QPushButton("Verify")
        self.verify.setToolTip("run the selected configuration for real on this run's prompt (and plain decoding "
                               "beside it) and show predicted against measured")
        for b in (self.copy_flags, self.verify):
            b.setEnabled(False)
            buttons.addWidget(b)
        buttons.addStretch(1)
        ll.addLayout(buttons)
        self.verified = QLabel("")
        self.verified.setWordWrap(True)
        self.verified.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        ll.addWidget(self.verified)
        split.addWidget(left)

        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        axes = QHBoxLayout()
        self.heat_source = QComboBox()
        self.heat_x = QComboBox()
        self.heat_y = QComboBox()
        for label, w in (("heatmap of", self.heat_source), ("x", self.heat_x), ("y", self.heat_y)):
            axes.addWidget(QLabel(label))
            axes.addWidget(w, 1)
        rl.addLayout(axes)
        self.plot = pg.PlotWidget(background="w", title="Predicted speedup (best over the other settings)")
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.image = pg.ImageItem(axisOrder="row-major")
        self.plot.addItem(self.image)
        self.colorbar = pg.ColorBarItem(values=(0.5, 1.5), colorMap=pg.colormap.get("viridis"), interactive=False,
                                        label="speedup")
        self.colorbar.setImageItem(self.image, insert_in=self.plot.getPlotItem())
        self._texts: list[pg.TextItem] = []
        self.heat: tuple | None = None
        """What the heatmap shows: ``heat_grid``'s (x values, y values, speedup, best), or None."""
        rl.addWidget(self.plot, 1)
        split.addWidget(right)
        split.setSizes([620, 480])
        cl.addWidget(split, 1)

        close = QAction("Close", self)
        close.setShortcut(QKeySequence("Ctrl+W"))
        close.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        close.triggered.connect(self.close)
        self.addAction(close)
        self.tune.clicked.connect(self.request_tune)
        self.cancel.clicked.connect(self.cancelRequested.emit)
        self.copy_flags.clicked.connect(lambda: self._with_selected(self.copyRequested))
        self.verify.clicked.connect(lambda: self._with_selected(self.verifyRequested))
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.heat_source.currentTextChanged.connect(self._heat_source_changed)
        self.heat_x.currentTextChanged.connect(lambda _t: self.draw_heatmap())
        self.heat_y.currentTextChanged.connect(lambda _t: self.draw_heatmap())
        keep_on_screen(self, 1150, 680)  # less on a smaller screen


    def say(self, text: str) -> None:
        """Show ``text`` in the status line (two lines at most; all of it in the line's tooltip)."""
        self.status.setText(text)
        self.status.setToolTip(text)
    def keyPressEvent(self, event) -> None:
        """Esc closes the window (as the Compare window)."""
        if event.key() == Qt.Key.Key_Escape and event.modifiers() == Qt.KeyboardModifier.NoModifier:
            event.accept()
            self.close()
            return
        super().keyPressEvent(event)

    # -- input -----------------------------------------------------------------------
    def set_recording(self, text: str) -> None:
        """Show the view's content for a replayable run, described by ``text``."""
        self.info.setText(text)
        self.pages.setCurrentIndex(0)

    def set_refusal(self, reason: str) -> None:
        """Show why the shown run cannot be replayed instead of the view's content."""
        self.info.setText("")
        self.refusal.setText(f"<b>Cannot tune from this run:</b> {reason}")
        self.pages.setCurrentIndex(1)

    def refused(self) -> str:
        """The refusal shown ("" when the content is shown)."""
        return self.refusal.text() if self.pages.currentIndex() == 1 else ""

    def request_tune(self) -> None:
        """Ask for the grid of the picked sources and draft max values (``tuneRequested``), as Tune does;
        a bad draft max list is said in the status line."""
        try:
            draft_maxes = parse_draft_maxes(self.draft_maxes.text())
        except ValueError as exc:
            self.say(str(exc))
            return
        s = self.source.currentText()
        self.tuneRequested.emit(MODEL_FREE if s == ALL_SOURCES else (s,), draft_maxes)

    # -- running ---------------------------------------------------------------------
    def set_running(self, running: bool, text: str = "") -> None:
        """Busy state of the grid: Tune and the picker off, Cancel on, the progress bar shown."""
        for w in (self.tune, self.source, self.draft_maxes):
            w.setEnabled(not running)
        self.cancel.setEnabled(running)
        self.progress.setVisible(running)
        self.say(text)

    def set_progress(self, done: int, total: int) -> None:
        """``done`` of ``total`` configurations replayed."""
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)
        self.say(f"replayed {done}/{total} configurations …")

    def set_rows(self, rows, text: str = "") -> None:
        """Show ``rows`` (``TuneRow``, best predicted first) in the table and the heatmap."""
        self.rows = list(rows)
        t = self.table
        t.setSortingEnabled(False)
        t.clearContents()
        t.setRowCount(len(self.rows))
        for i, r in enumerate(self.rows):
            mal = r.mean_accepted_length
            first = _cell(r.label)
            first.setData(ROW_ROLE, i)
            cells = (first, _cell(f"{r.speedup:.2f}x", r.speedup), _cell(f"{r.tokens_per_s:.1f}", r.tokens_per_s),
                     _cell(str(r.windows), r.windows),
                     _cell(f"{r.accepted}/{r.proposed}", r.accepted / r.proposed if r.proposed else 0.0),
                     _cell("n/a" if mal is None else f"{mal:.2f}", mal or 0.0))
            for col, it in enumerate(cells):
                t.setItem(i, col, it)
        t.setSortingEnabled(True)
        t.sortByColumn(1, Qt.SortOrder.DescendingOrder)
        t.resizeColumnsToContents()
        if self.rows:
            t.selectRow(0)
        self.say(text)
        sources = [s for s in MODEL_FREE if any(r.source == s for r in self.rows)]
        keep = self.heat_source.currentText()
        self.heat_source.blockSignals(True)
        self.heat_source.clear()
        self.heat_source.addItems(sources)
        self.heat_source.blockSignals(False)
        if keep in sources:
            self.heat_source.setCurrentText(keep)
        elif self.rows:
            self.heat_source.setCurrentText(self.rows[0].source)  # the best row's source
        self._heat_source_changed(self.heat_source.currentText())

    def selected_row(self) -> TuneRow | None:
        """The ``TuneRow`` of the selected table row, or None."""
        items = self.table.selectedItems()
        rows = {it.row() for it in items}
        if not rows:
            return None
        i = self.table.item(min(rows), 0).data(ROW_ROLE)
        return self.rows[i] if isinstance(i, int) and 0 <= i < len(self.rows) else None

    def _selection_changed(self) -> None:
        on = self.selected_row() is not None
        self.copy_flags.setEnabled(on)
        self.verify.setEnabled(on)

    def _with_selected(self, signal) -> None:
        row = self.selected_row()
        if row is not None:
            signal.emit(row)

    def set_verifying(self, text: str) -> None:
        """A Verify run goes (``text`` says which): Verify off until ``set_verified``."""
        self.verify.setEnabled(False)
        self.verified.setText(text)

    def set_verified(self, text: str) -> None:
        """Show the Verify result (rich text: predicted beside measured)."""
        self.verified.setText(text)
        self._selection_changed()

    # -- heatmap ---------------------------------------------------------------------
    def _heat_source_changed(self, source: str) -> None:
        keys = axis_keys(self.rows, source) if source else []
        for combo, pick in ((self.heat_x, 0), (self.heat_y, 1)):
            combo.blockSignals(True)
            combo.clear()
            combo.addItems(keys)
            if keys:
                combo.setCurrentIndex(min(pick, len(keys) - 1))
            combo.blockSignals(False)
        self.draw_heatmap()

    def draw_heatmap(self) -> None:
        """Draw the chosen source's predicted speedup over the chosen axes (items made once, updated)."""
        source, xk, yk = self.heat_source.currentText(), self.heat_x.currentText(), self.heat_y.currentText()
        if not source or not xk:
            self.heat = None
            self.image.clear()
            for t in self._texts:
                t.hide()
            return
        xs, ys, speed, best = heat_grid(self.rows, source, xk, yk or None)
        self.heat = (xs, ys, speed, best)
        finite = speed[np.isfinite(speed)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        if hi - lo < 1e-6:
            lo, hi = lo - 0.05, hi + 0.05
        self.image.setImage(np.where(np.isfinite(speed), speed, lo), levels=(lo, hi))
        self.image.setRect(QRectF(-0.5, -0.5, len(xs), len(ys)))
        self.colorbar.setLevels((lo, hi))
        one_row = len(ys) == 1 and ys[0] is None
        self.plot.setLabel("bottom", xk)
        self.plot.setLabel("left", "" if one_row else yk)
        self.plot.getAxis("bottom").setTicks([[(i, str(v)) for i, v in enumerate(xs)]])
        self.plot.getAxis("left").setTicks([[(j, "" if v is None else str(v)) for j, v in enumerate(ys)]])
        self.plot.setXRange(-0.5, len(xs) - 0.5, padding=0)
        self.plot.setYRange(-0.5, len(ys) - 0.5, padding=0)
        cells = [(i, j) for j in range(len(ys)) for i in range(len(xs))]
        while len(self._texts) < len(cells):
            t = pg.TextItem(anchor=(0.5, 0.5))
            self.plot.addItem(t)
            self._texts.append(t)
        show_dm = DRAFT_MAX not in (xk, yk)
        for n, t in enumerate(self._texts):
            if n >= len(cells):
                t.hide()
                continue
            i, j = cells[n]
            r = best[j][i]
            s = speed[j, i]
            text = "—" if r is None or math.isnan(s) else f"{s:.2f}x" + (f"\ndm {r.draft_max}" if show_dm else "")
            light = r is not None and (s - lo) / (hi - lo) > 0.6  # viridis turns yellow at the top
            t.setText(text, color="#212121" if light else "#fafafa")
            t.setPos(i, j)
            t.show()
