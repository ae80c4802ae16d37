"""The "Synthetic acceptance" tab, next to Cost model: would a better draft pay on this machine?

A heatmap of the speedup over plain decoding the measured cost model predicts for a draft of mean
acceptance length tau (x: 1..8 tokens committed per window) costing f x c(1) per proposed token
(y: 0..0.5), with the break-even line (speedup 1: the draft pays below it) and a colour bar
(``inspector.bench.synthetic_map``: instant, no run). The runs the window knows are marked where they
landed (the shown run, and the rows of the last comparison): their own mean acceptance length and
proposal time per token over c(1). "Measure for real" runs the synthetic source on the engine thread
(``inspector.bench.synthetic_table``, minutes; ``SyntheticActions`` wires it): each measured cell is
a square coloured on the same scale with its measured speedup written in it.

Widgets only: the plot items are made once and updated with ``setData``/``setImage`` on ``refresh``
(the window's redraw timer), when what they show changed.
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QRectF, Qt
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QProgressBar, QPushButton, QScrollArea, QStackedWidget,
                               QVBoxLayout, QWidget)

from inspector.bench.synthetic_map import (COST_MAX, TAU_MAX, TAU_MIN, break_even_line, break_even_tau, grid_values,
                                           landing, predicted_grid)
from inspector.bench.synthetic_table import COST_FRACTIONS, MEAN_LENGTHS

CELLS = len(MEAN_LENGTHS) * len(COST_FRACTIONS)
"""Cells of the measured table (24)."""
TAUS = grid_values(TAU_MIN, TAU_MAX, 71)
"""The heatmap's mean acceptance lengths (tokens per window), 0.1 apart."""
FRACTIONS = grid_values(0.0, COST_MAX, 51)
"""The heatmap's draft costs (fractions of c(1) per proposed token), 0.01 apart."""
LINE_TAUS = grid_values(TAU_MIN, TAU_MAX, 141)
"""Where the break-even line is computed (0.05 apart)."""
SLOWER, EVEN, FASTER = "#c62828", "#f5f5f5", "#1565c0"
"""Colours below, at and above speedup 1."""
LINE_PEN = "#111111"
RUN_BRUSH, COMPARE_BRUSH = "#ffca28", "#ffffff"
EMPTY_TEXT = ("No cost model yet: press <b>Measure</b> in the <b>Cost model</b> tab (a few seconds). This tab then "
              "predicts the speedup of a draft for every mean acceptance length and draft cost.")


def speedup_colours(low: float, high: float) -> pg.ColorMap:
    """Red below speedup 1, pale at 1, blue above, over levels ``low``..``high`` (1 strictly inside)."""
    one = (1.0 - low) / (high - low)
    return pg.ColorMap([0.0, one * 0.5, one, one + (1 - one) * 0.5, 1.0],
                       [SLOWER, "#ef9a9a", EVEN, "#90caf9", FASTER])


def label_place(x: float, y: float, width: float, height: float, left: bool, placed: list) -> float | None:
    """The height (draft cost) for a label of ``width`` x ``height`` (data units) whose bottom corner is at
    (``x``, ``y``), reaching left of ``x`` when ``left``: the nearest free one a label height at a time, so it
    covers no label in ``placed`` ((x0, x1, y0, y1) each; its own is appended). None when there is no room
    (a crowded or small plot: the mark goes unlabelled, the text beside the plot names it)."""
    x0, x1 = (x - width, x) if left else (x, x + width)
    for k in (0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5, 6, 7, 8):
        yk = y + k * height
        if -0.04 <= yk <= COST_MAX + 0.04 - height and not any(
                x0 < px1 and px0 < x1 and yk < py1 and py0 < yk + height for px0, px1, py0, py1 in placed):
            placed.append((x0, x1, yk, yk + height))
            return yk
    return None


class SyntheticView(QWidget):
    """Heatmap, break-even line, marks of real runs, measured cells; Measure for real and Cancel buttons."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.cost_model = None
        """The ``CostModel`` the map predicts from, or None."""
        self.session = None
        self.compare = None
        self.measured: dict | None = None
        """``synthetic_table``'s result (possibly its first rows only), or None."""
        self.landings: list = []
        """The ``Landing``s drawn, the shown run first (tests)."""
        self.run_marked = False
        """Whether ``landings`` begins with the shown run's."""
        self._map_version = 0  # the cost model or the measured cells changed
        self._marks_version = 0  # the runs marked changed
        self._drawn = None
        self._map_drawn = None
        self._pays = ""
        """The break-even sentence of the drawn map (computed with it: tens of ms)."""
        self._resized = False  # the plot's size changed: the labels are placed again (they are sized in pixels)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.setSpacing(4)
        top = QHBoxLayout()
        self.measure = QPushButton("Measure for real (minutes)")
        self.measure.setToolTip("run the synthetic source on the loaded model at mean acceptance lengths 1..8 and "
                                "draft costs 0, 0.25, 0.5 c(1) after the current prompt, beside plain decoding "
                                "(engine thread; bench --synthetic does the same from the command line)")
        self.cancel = QPushButton("Cancel")
        self.cancel.hide()
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(160)
        self.progress.hide()
        self.status = QLabel("")
        self.status.setStyleSheet("color:#444")
        for w in (self.measure, self.cancel, self.progress):
            top.addWidget(w)
        top.addWidget(self.status, 1)
        lay.addLayout(top)

        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setBackground("w")
        self.plot = self.plots.addPlot(row=0, col=0)
        p = self.plot
        p.setLabel("bottom", "mean acceptance length τ, tokens per window")
        p.setLabel("left", "draft cost, × c(1)")
        p.setMouseEnabled(False, False)
        p.hideButtons()
        p.getAxis("bottom").setTickSpacing(1, 0.5)
        p.getAxis("left").setTickSpacing(0.1, 0.05)
        for axis in ("left", "bottom"):
            p.getAxis(axis).enableAutoSIPrefix(False)
        self.image = pg.ImageItem()
        p.addItem(self.image)
        self.bar = pg.ColorBarItem(values=(0.5, 2.0), colorMap=speedup_colours(0.5, 2.0), interactive=False,
                                   colorMapMenu=False, label="predicted speedup, ×", width=18)
        self.bar.setImageItem(self.image, insert_in=p)
        self.line = p.plot([], [], pen=pg.mkPen(LINE_PEN, width=3, style=Qt.PenStyle.DashLine))
        self.cells = pg.ScatterPlotItem([], [], symbol="s", size=34, pen=pg.mkPen("#222", width=1.5))
        p.addItem(self.cells)
        self.cell_texts = [pg.TextItem("", color="#111", anchor=(0.5, 0.5)) for _ in range(CELLS)]
        for t in self.cell_texts:
            p.addItem(t)
            t.hide()
        self.marks = pg.ScatterPlotItem([], [], size=15)
        p.addItem(self.marks)
        self.mark_texts: list[pg.TextItem] = []
        # A margin around the map: the measured squares at its edges (tau 1 and 8, cost 0 and 0.5) show whole.
        p.setXRange(TAU_MIN - 0.35, TAU_MAX + 0.35, padding=0)
        p.setYRange(-0.04, COST_MAX + 0.04, padding=0)
        self.leaders = p.plot([], [], pen=pg.mkPen("#555", width=1))
        p.vb.sigResized.connect(self._plot_resized)
        # The legend is a line of text above the plot, not a row of the plot: at 1024x640 a legend row
        # made the plot wider than the tab.
        self.legend = QLabel("<span style='font-size:12pt'><b>╌╌</b></span> break-even: speedup 1 "
                             "(a draft pays below it) &nbsp; <span style='color:#b8860b;font-size:12pt'>★</span> "
                             "the shown run &nbsp; ○ compare rows &nbsp; ■ measured")
        self.legend.setStyleSheet("color:#333;background:white;padding:2px 6px")
        self.legend.setWordWrap(True)
        self.text = QLabel("")
        self.text.setWordWrap(True)
        self.text.setStyleSheet("color:#222")
        self.text.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        side = QScrollArea()
        side.setWidget(self.text)
        side.setWidgetResizable(True)
        side.setFrameShape(QScrollArea.Shape.NoFrame)
        side.setMinimumWidth(200)
        side.setMaximumWidth(340)
        self.empty_hint = QLabel(EMPTY_TEXT)
        self.empty_hint.setWordWrap(True)
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_hint.setStyleSheet("color:#555;font-size:11pt;padding:40px;background:white")
        page = QWidget()  # the legend line above the plots
        page_lay = QVBoxLayout(page)
        page_lay.setContentsMargins(0, 0, 0, 0)
        page_lay.setSpacing(0)
        page_lay.addWidget(self.legend)
        page_lay.addWidget(self.plots, 1)
        self.page = page
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty_hint)
        self.stack.addWidget(page)
        body = QHBoxLayout()
        body.addWidget(self.stack, 3)
        body.addWidget(side, 1)
        lay.addLayout(body, 1)

    # -- data -----------------------------------------------------------------------------
    def set_cost_model(self, cm) -> None:
        """Predict from ``cm`` (a ``CostModel``, or None: the hint); drawn on the next ``refresh``."""
        self.cost_model = cm
        self._map_version += 1
        self._marks_version += 1

    def set_session(self, session) -> None:
        """Mark the shown run (a ``SessionRecord``: its receipts and source name) where it lands."""
        self.session = session
        self._marks_version += 1

    def set_compare(self, result) -> None:
        """Mark each row of a comparison (``CompareResult`` with its runs kept) where it landed."""
        self.compare = result
        self._marks_version += 1

    def set_measured(self, result: dict | None) -> None:
        """Show the measured table's cells (``synthetic_table``'s result so far)."""
        self.measured = result
        self._map_version += 1

    def set_running(self, running: bool, text: str = "") -> None:
        """The measured table runs (Cancel and the progress bar shown, Measure off) or not; ``text``: status."""
        self.measure.setEnabled(not running)
        self.cancel.setVisible(running)
        self.cancel.setEnabled(running)
        self.progress.setVisible(running)
        if running:
            self.progress.setRange(0, CELLS)
            self.progress.setValue(0)
        self.status.setText(text)

    def set_progress(self, done: int, total: int, text: str) -> None:
        """(cells done, cells in all, what runs now)."""
        self.progress.setRange(0, total)
        self.progress.setValue(done)
        self.status.setText(f"{done}/{total} cells · {text}")

    # -- drawing --------------------------------------------------------------------------
    def _landings(self) -> list:
        """The ``Landing``s to mark: the shown run's first (``run_marked`` says whether it has one)."""
        c1 = self.cost_model.row_ms[0]
        out = []
        s = self.session
        at = None if s is None or not s.receipts else landing(s.source_name or "this run", s.receipts, c1)
        self.run_marked = at is not None
        if at is not None:
            out.append(at)
        r = self.compare
        if r is not None:
            for row, run in zip(r.rows, r.runs or ()):
                at = None if run is None or row.error else landing(row.config.label, run.receipts, c1)
                if at is not None:
                    out.append(at)
        return out

    def refresh(self) -> None:
        """Redraw what changed: the map (image, line, colour bar, measured cells) when the cost model or the
        measured table did, the marks and the text when the runs did (a live run: at each new window)."""
        key = (self._map_version, self._marks_version, None if self.session is None else self.session.version)
        if self._drawn == key and not self._resized:
            return
        self._drawn = key
        cm = self.cost_model
        if cm is None:
            self.stack.setCurrentWidget(self.empty_hint)
            self.text.setText("")
            self.landings = []
            self._map_drawn = None
            return
        self.stack.setCurrentWidget(self.page)
        fresh = self._map_drawn != self._map_version
        if fresh:
            self._map_drawn = self._map_version
            self._draw_map(cm)
        landings = self._landings()
        if fresh or landings != self.landings or self._resized:
            self._resized = False
            self.landings = landings
            self._draw_marks(cm)
            text = self._text(cm)
            if text != self.text.text():
                self.text.setText(text)

    def _plot_resized(self, *_args) -> None:
        self._resized = True

    def _draw_map(self, cm) -> None:
        grid = np.array(predicted_grid(cm, TAUS, FRACTIONS), float)  # rows: draft costs, columns: tau
        measured = [r for r in (self.measured or {}).get("rows", []) if r.get("speedup")]
        # The scale is the prediction's (a measured cell outside it takes the end colour; its number says).
        low, high = min(float(grid.min()), 0.95), max(float(grid.max()), 1.05)
        colours = speedup_colours(low, high)
        self.image.setImage(grid.T, levels=(low, high), autoLevels=False)  # ImageItem: [x, y]
        dx, dy = TAUS[1] - TAUS[0], FRACTIONS[1] - FRACTIONS[0]
        self.image.setRect(QRectF(TAU_MIN - dx / 2, -dy / 2, (TAU_MAX - TAU_MIN) + dx, COST_MAX + dy))
        self.bar.setColorMap(colours)
        self.bar.setLevels((low, high))
        line = [(t, f if 0.0 <= f <= COST_MAX else np.nan) for t, f in break_even_line(cm, LINE_TAUS)]
        self.line.setData([t for t, _ in line], [f for _, f in line], connect="finite")  # on the map only
        self._draw_cells(measured, colours, low, high)
        pays = []
        for f in COST_FRACTIONS:
            tau = break_even_tau(cm, f, steps=36)  # a scan 0.2 apart, then bisection
            pays.append(f"at {f:g} c(1): " + (f"τ ≥ {tau:.2f}" if tau is not None else f"never up to τ {TAU_MAX:g}"))
        self._pays = "; ".join(pays)

    def _draw_cells(self, measured, colours, low, high) -> None:
        brushes = [pg.mkBrush(colours.map((min(max(r["speedup"], low), high) - low) / (high - low), mode="qcolor"))
                   for r in measured]
        self.cells.setData([r["mean_length"] for r in measured], [r["cost_fraction"] for r in measured],
                           brush=brushes)
        for i, t in enumerate(self.cell_texts):
            if i < len(measured):
                r = measured[i]
                t.setText(f"{r['speedup']:.2f}")
                t.setPos(r["mean_length"], r["cost_fraction"])
                t.show()
            else:
                t.hide()

    def _draw_marks(self, cm) -> None:
        spots = []
        while len(self.mark_texts) < len(self.landings):  # made once each, then reused
            t = pg.TextItem("", color="#111", anchor=(0, 1), fill=pg.mkBrush(255, 255, 255, 210))
            self.plot.addItem(t)
            self.mark_texts.append(t)
        placed: list = []
        leaders: list = []  # (mark, its label's corner) pairs
        px, py = self.plot.vb.viewPixelSize()  # data units per pixel: labels are measured in pixels
        if not (0 < px < 1 and 0 < py < 0.1):  # not laid out yet: about the 1280x800 window's
            px, py = 0.013, 0.0017
        for i, at in enumerate(self.landings):
            x = min(max(at.mean_length, TAU_MIN), TAU_MAX)
            y = min(max(at.cost_fraction, 0.0), COST_MAX)
            run = i == 0 and self.run_marked
            spots.append({"pos": (x, y), "symbol": "star" if run else "o", "brush": RUN_BRUSH if run else COMPARE_BRUSH,
                          "pen": pg.mkPen("#222", width=1.5), "size": 19 if run else 13})
            off = (f" (τ {at.mean_length:.1f} →)" if at.mean_length > TAU_MAX else "") + \
                (f" (↑ {at.cost_fraction:.2f} c(1))" if at.cost_fraction > COST_MAX else "")  # off the map
            t = self.mark_texts[i]
            t.setText(f"{at.label}{off}")  # its figures are in the text beside the plot
            left = x > TAU_MAX - 1.8  # near the right edge the label goes left of its mark
            t.setAnchor((1, 1) if left else (0, 1))
            box = t.textItem.boundingRect()
            lx = x - 0.1 if left else x + 0.1
            ly = label_place(lx, y + 0.01, box.width() * px, box.height() * py, left, placed)
            t.setVisible(ly is not None)
            if ly is not None:
                t.setPos(lx, ly)
                leaders += [(x, y), (lx, ly)]
        for t in self.mark_texts[len(self.landings):]:
            t.hide()
        self.marks.setData(spots)
        self.leaders.setData([p[0] for p in leaders], [p[1] for p in leaders], connect="pairs")

    def mark_positions(self) -> list[tuple[float, float]]:
        """(x, y) of the drawn marks (tests)."""
        x, y = self.marks.getData()
        return [(float(a), float(b)) for a, b in zip(x, y)] if self.landings else []

    def _text(self, cm) -> str:
        parts = [f"<p><b>Predicted from the cost model</b> (c(1) = {cm.row_ms[0]:.1f} ms, draft max 8, each position "
                 "right at one constant rate): the colour is the speedup over plain decoding of a draft whose "
                 "windows commit τ tokens on average (across) and that spends the given share of a plain step "
                 "c(1) per proposed token (up).</p>"
                 f"<p>A draft pays {self._pays}.</p>"]
        if self.landings:
            items = []
            for at in self.landings:
                s = predicted_grid(cm, [min(at.mean_length, TAU_MAX)], [at.cost_fraction])[0][0]
                items.append(f"<li><b>{html.escape(at.label)}</b>: τ {at.mean_length:.2f} over "
                             f"{at.windows} windows, proposing {at.draft_ms:.2f} ms per token = "
                             f"{at.cost_fraction:.3f} c(1): predicted {s:.2f}x</li>")
            parts.append("<p>Where the runs landed (windows only: plain steps are not on the map):</p><ul>"
                         + "".join(items) + "</ul>")
        else:
            parts.append("<p>Run, or compare configurations, to mark where your sources land.</p>")
        m = self.measured
        if m and m.get("rows"):
            done = [r for r in m["rows"] if r.get("speedup")]
            parts.append(f"<p><b>Measured</b> ({len(done)} cells, {m['max_new_tokens']} tokens each, plain "
                         f"{m['plain_tokens_per_s']:.1f} tokens/s): squares with the measured speedup, on the "
                         "same colour scale.</p>")
        return "".join(parts)
