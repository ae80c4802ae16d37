"""The "Cost model" tab: what a verify batch costs the target on this machine.

Top plot: the measured verify cost c(k) in milliseconds for a batch of
k = 1..16 verification rows (left axis), and the speedup ceiling
k * c(1) / c(k) (right axis: the speedup over plain decoding if a window of
k rows accepted every proposal token). Bottom plot: the break-even accepted
length per k, c(k) / c(1) - 1 accepted proposal tokens a window of k rows
needs to match plain decoding, against the k - 1 it can accept at most.
The label states the ceiling ("best possible speedup 1.9x at 14 rows").

Widgets only: ``AnalysisActions`` measures (on the engine thread) and calls
``set_cost_model``; the plot items are created once and updated with
``setData`` on ``refresh`` (the window's redraw timer).
"""

from __future__ import annotations

import html

from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QApplication, QHBoxLayout, QLabel, QProgressBar, QPushButton, QScrollArea,
                               QStackedWidget, QVBoxLayout, QWidget)

from inspector.gui.look.wording import count_noun
from inspector.llama.cost_model import NOMINAL_ACCEPTANCE, auto_draft_max, verify_cost_diagnosis
from inspector.llama.cost_progress import PLAN, estimate_text, progress_text

COST_PEN = "#1565c0"
CEILING_PEN = "#e65100"
BREAK_EVEN_BRUSH = "#90caf9"
LAYOUT_PENS = ("#1565c0", "#6a1b9a", "#2e7d32", "#c62828")
"""Colours of the weight layouts' c(k) curves (the loaded layout's is ``COST_PEN``)."""
EMPTY_LABEL = "No cost model measured yet."
EMPTY_TEXT = ("Press <b>Measure</b>: the loaded model decodes the prompt, then verify batches of 1..16 rows after "
              "it (a warm-up round, then 3 timed rounds). On 2 cores about 5 s after a short prompt; longer "
              "prompts cost more (the 6,700-token long example about 1.5 min). Progress, time left and Cancel "
              "are shown meanwhile.")
PLOT_MIN_WIDTH = 460
PLOT_MIN_HEIGHT = 420
"""The plots' smallest size: a smaller tab (1024x640) scrolls them instead of squeezing the c(k) plot to its
legend and axes."""
PROGRESS_STEPS = 1000
"""The progress bar's range while a measurement reports its share done."""


class ScrollingPlots(pg.GraphicsLayoutWidget):
    """Plots that hand the mouse wheel to ``scroll_area`` (the ``QScrollArea`` around them; set after it is
    made): at 1024x640 the tab's plots scroll, and the wheel zoomed a curve instead (its axis read -5000 ms).
    Qt does not pass a wheel event a view accepted on to its parents, so it is given to the area's scroll bar."""

    scroll_area = None

    def wheelEvent(self, ev) -> None:
        area = self.scroll_area
        if area is None:
            ev.ignore()
            return
        d = ev.angleDelta()
        bar = area.horizontalScrollBar() if abs(d.x()) > abs(d.y()) else area.verticalScrollBar()
        QApplication.sendEvent(bar, ev)


class CostView(QWidget):
    """Cost-model plots, the ceiling label, Measure and Export buttons."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.measured = None
        """The shown ``inspector.gui.engine_thread.analysis.CostMeasured``, or None."""
        self._version = 0
        self._drawn = -1
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.setSpacing(4)
        top = QHBoxLayout()
        self.measure = QPushButton("Measure")
        self.measure.setToolTip("time verify batches of 1..16 rows on the loaded model after the prompt (engine "
                                "thread; not while a run goes): seconds after a short prompt, minutes after a "
                                "long one (its prefill, and c(k) grows with the context)")
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)
        self.busy.setMaximumWidth(120)
        self.busy.hide()
        self.cancel = QPushButton("Cancel")
        self.cancel.setToolTip("stop after the decode in flight: the batch sizes measured so far are kept and used")
        self.cancel.hide()
        self._plan = ""
        self._estimate = ""
        self.ceiling_label = QLabel(EMPTY_LABEL)
        self.ceiling_label.setWordWrap(True)
        self.ceiling_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.export = QPushButton("Export PNG…")
        self.export.setToolTip("save the c(k) and break-even plots as a PNG image")
        self.export.setEnabled(False)
        self.try_layouts = QPushButton("Try weight types")
        self.try_layouts.setToolTip("convert the loaded model to Q8_0 and Q4_0 (llama.cpp quantize, cached) and "
                                    "measure c(k) of each: on a CPU the weight type decides whether extra rows are cheap")
        self.use_layout = QPushButton("Use …")
        self.use_layout.setToolTip("load the model in the layout with the best ceiling (a converted file: the "
                                   "greedy text may differ from the original's; bench --weights checks it)")
        self.use_layout.hide()
        self.use_draft_max = QPushButton("Use draft max …")
        self.use_draft_max.setToolTip("set draft max to the proposal length of the curve's best window (best rows "
                                      "- 1): right when proposals are mostly accepted; lower it when they are not")
        self.use_draft_max.hide()
        self.layouts: list = []
        """(weight type, ``CostMeasured``) of "Try weight types", the loaded layout first."""
        self._layout_curves: list = []
        # Two rows, each narrower than the tab at 1024x640: in one row the buttons, the progress bar and Cancel
        # made the window 1,209 px wide during a measurement (issue 54).
        top.addWidget(self.measure)
        top.addWidget(self.busy)
        top.addWidget(self.cancel)
        top.addStretch(1)
        top.addWidget(self.export)
        lay.addLayout(top)
        second = QHBoxLayout()
        second.addWidget(self.try_layouts)
        second.addWidget(self.use_layout)
        second.addWidget(self.use_draft_max)
        second.addStretch(1)
        lay.addLayout(second)
        # The figures and the diagnosis in a scrolling column right of the plots: above them (five
        # lines at 1280x800) they left the c(k) plot about 70 px high.
        self.ceiling_label.setStyleSheet("color:#222")
        self.ceiling_label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.figures = QScrollArea()
        self.figures.setWidget(self.ceiling_label)
        self.figures.setWidgetResizable(True)
        self.figures.setFrameShape(QScrollArea.Shape.NoFrame)
        self.figures.setMinimumWidth(260)
        self.figures.setMaximumWidth(380)

        self.layout_widget = ScrollingPlots()
        self.layout_widget.setBackground("w")
        self.title = self.layout_widget.addLabel("", row=0, col=0, color="#333", size="10pt")
        # Legends in their own rows above the plots: never on top of the data.
        self.cost_legend = self._legend(row=1)
        self.cost_plot = self.layout_widget.addPlot(row=2, col=0)
        p = self.cost_plot
        p.setLabel("bottom", "verification rows k")
        p.setLabel("left", "c(k), ms", color=COST_PEN)
        p.setLabel("right", "speedup ceiling, x", color=CEILING_PEN)
        p.showGrid(x=True, y=True, alpha=0.2)
        self.cost_curve = p.plot([], [], pen=pg.mkPen(COST_PEN, width=2), symbol="o", symbolSize=7,
                                 symbolBrush=COST_PEN, symbolPen=None, name="c(k): median verify time, ms")
        self.ceiling_vb = pg.ViewBox()
        p.scene().addItem(self.ceiling_vb)
        p.getAxis("right").linkToView(self.ceiling_vb)
        self.ceiling_vb.setXLink(p)
        self.ceiling_curve = pg.PlotDataItem([], [], pen=pg.mkPen(CEILING_PEN, width=2, style=Qt.PenStyle.DashLine),
                                             symbol="s", symbolSize=6, symbolBrush=CEILING_PEN, symbolPen=None)
        self.best_point = pg.ScatterPlotItem([], [], symbol="star", size=18, brush=CEILING_PEN, pen=pg.mkPen("#bf360c"))
        self.even_line = pg.InfiniteLine(pos=1.0, angle=0, pen=pg.mkPen("#9e9e9e", style=Qt.PenStyle.DotLine))
        for item in (self.ceiling_curve, self.best_point, self.even_line):
            self.ceiling_vb.addItem(item)
        # No plot titles (they cost the plots 50 px at 1280x800): the legends and axes name everything.
        self.cost_legend.addItem(self.cost_curve, "verify cost c(k): median ms")
        self.cost_legend.addItem(self.ceiling_curve, "ceiling k·c(1)/c(k): speedup if all accepted")
        p.vb.sigResized.connect(self._sync_views)

        self.break_legend = self._legend(row=3)
        self.break_plot = self.layout_widget.addPlot(row=4, col=0)
        b = self.break_plot
        b.setLabel("bottom", "verification rows k")
        b.setLabel("left", "accepted proposal tokens")
        b.showGrid(x=False, y=True, alpha=0.2)
        self.break_bars = pg.BarGraphItem(x=[], height=[], width=0.6, brush=BREAK_EVEN_BRUSH,
                                          name="needed to match plain decoding: c(k)/c(1) − 1")
        b.addItem(self.break_bars)
        self.max_line = b.plot([], [], pen=pg.mkPen("#2e7d32", width=2), name="most it can accept: k − 1")
        self.break_legend.addItem(self.break_bars, "break-even: c(k)/c(1) − 1 accepted")
        self.break_legend.addItem(self.max_line, "most accepted: k − 1")
        b.setXLink(p)
        b.showAxis("right")
        b.getAxis("right").setStyle(showValues=False)
        for plot in (p, b):  # equal axis widths: k lines up in both plots
            plot.getAxis("left").setWidth(60)
            plot.getAxis("right").setWidth(60)
            plot.setMouseEnabled(x=False, y=False)  # no dragging or zooming: the axes are the measurement's
            plot.hideButtons()
        self.ceiling_vb.setMouseEnabled(x=False, y=False)
        self.layout_widget.ci.layout.setRowStretchFactor(2, 3)
        self.layout_widget.ci.layout.setRowStretchFactor(4, 2)
        # Before Measure: the hint, not empty 0..1 axes.
        self.empty_hint = QLabel(EMPTY_TEXT)
        self.empty_hint.setWordWrap(True)
        self.empty_hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_hint.setStyleSheet("color:#555;font-size:11pt;padding:16px;background:white")
        self.layout_widget.setMinimumSize(PLOT_MIN_WIDTH, PLOT_MIN_HEIGHT)
        self.plots = QScrollArea()
        self.plots.setWidget(self.layout_widget)
        self.layout_widget.scroll_area = self.plots
        self.plots.setWidgetResizable(True)
        self.plots.setFrameShape(QScrollArea.Shape.NoFrame)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.empty_hint)
        self.stack.addWidget(self.plots)
        body = QHBoxLayout()
        body.addWidget(self.stack, 3)
        body.addWidget(self.figures, 1)
        lay.addLayout(body, 1)

    def _legend(self, row: int) -> pg.LegendItem:
        """A two-column legend in its own layout row (above its plot)."""
        legend = pg.LegendItem(colCount=2, labelTextColor="#333", horSpacing=16, verSpacing=-4)
        self.layout_widget.addItem(legend, row=row, col=0)
        return legend

    def _sync_views(self) -> None:
        self.ceiling_vb.setGeometry(self.cost_plot.vb.sceneBoundingRect())
        self.ceiling_vb.linkedViewChanged(self.cost_plot.vb, self.ceiling_vb.XAxis)

    # -- data -----------------------------------------------------------------------
    def set_cost_model(self, measured) -> None:
        """Show a ``CostMeasured`` (drawn on the next ``refresh``); the weight layouts of another model go."""
        self.measured = measured
        if self.layouts and (measured is None or measured.model_path != self.layouts[0][1].model_path):
            self.layouts = []
            self.use_layout.hide()
        self._version += 1

    def set_busy(self, busy: bool, text: str = "", cancellable: bool = False) -> None:
        """Show the measuring state: busy bar on (no share known yet), Measure off, ``text`` in the label,
        Cancel shown when ``cancellable``. A curve set while the tab was never shown is drawn first: while
        busy the tab keeps what it shows (a measurement started with Ctrl+M showed "Press Measure…" instead)."""
        if busy:
            self.refresh()
        self.busy.setVisible(busy)
        self.busy.setRange(0, 0)
        self.cancel.setVisible(busy and cancellable)
        self.cancel.setEnabled(busy and cancellable)
        for button in (self.measure, self.try_layouts, self.use_layout, self.use_draft_max):
            button.setEnabled(not busy)
        if busy:
            self._plan = self._estimate = ""
            self.ceiling_label.setText(text or "measuring…")
        else:
            self._drawn = -1

    def set_progress(self, p) -> None:
        """Show a measurement's ``CostProgress``: the share done on the bar, what it measures now and the
        time left, and what the whole measurement costs at this context length once estimated."""
        if not self.busy.isVisible():
            return
        if p.stage == PLAN:
            self._plan = progress_text(p)
            now = "starting …"
        else:
            self.busy.setRange(0, PROGRESS_STEPS)
            self.busy.setValue(int(p.fraction * PROGRESS_STEPS))
            now = progress_text(p)
        self._estimate = estimate_text(p) or self._estimate
        self.ceiling_label.setText(
            f"<p><b>Measuring c(k)</b> {html.escape(self._plan)}</p>"
            + (f"<p>{html.escape(self._estimate)}</p>" if self._estimate else "")
            + f"<p>Now: {html.escape(now)}</p><p>Cancel keeps the batch sizes measured so far.</p>")

    def set_layouts(self, layouts) -> None:
        """Show every layout's c(k) (list of (weight type, ``CostMeasured``), the loaded one first) next
        to the loaded model's, and offer the layout with the best ceiling when it is not the loaded one."""
        self.layouts = list(layouts)
        if self.layouts and self.measured is None:
            self.measured = self.layouts[0][1]
        best = self.offered_layout()
        self.use_layout.setVisible(best is not None)
        if best is not None:
            self.use_layout.setText(f"Use {best[0]} form")
        self._version += 1

    def suggested_draft_max(self) -> int:
        """The draft max the shown curve implies: its best window's rows - 1 (0 when none is shown)."""
        return self.measured.model.best_draft_max if self.measured is not None else 0

    def offered_layout(self):
        """(weight type, ``CostMeasured``) with the best ceiling when it beats the loaded layout, else None."""
        if len(self.layouts) < 2:
            return None
        best = max(self.layouts, key=lambda tm: tm[1].model.ceiling)
        return None if best is self.layouts[0] else best

    def _draw_layouts(self) -> str:
        """Draw the layouts' curves (one colour each); returns their legend line for the label."""
        for item in self._layout_curves:
            self.cost_plot.removeItem(item)
            self.cost_legend.removeItem(item)
        self._layout_curves = []
        parts = []
        for i, (t, m) in enumerate(self.layouts):
            cm = m.model
            color = LAYOUT_PENS[i % len(LAYOUT_PENS)]
            k = np.arange(1, len(cm.row_ms) + 1)
            if i:  # the loaded layout is the main curve already
                curve = self.cost_plot.plot(k, np.array(cm.row_ms, float), pen=pg.mkPen(color, width=2),
                                            symbol="t", symbolSize=6, symbolBrush=color, symbolPen=None)
                self._layout_curves.append(curve)
                self.cost_legend.addItem(curve, f"c(k) of the {t} form (ceiling {cm.ceiling:.1f}x)")
            parts.append(f"<span style='color:{color if i else COST_PEN}'><b>{t}</b></span>: ceiling "
                         f"{cm.ceiling:.1f}x, c(1) {cm.row_ms[0]:.1f} ms, c({len(cm.row_ms)}) {cm.row_ms[-1]:.1f} ms")
        return "<br>".join(parts)

    def ceiling_text(self) -> str:
        """"best possible speedup 1.9x at 14 rows" for the shown model ("" when none)."""
        if self.measured is None:
            return ""
        cm = self.measured.model
        return f"best possible speedup {cm.ceiling:.1f}x at {count_noun(cm.best_rows, 'row')}"

    def point_count(self) -> int:
        """Measured batch sizes drawn (tests)."""
        x, _ = self.cost_curve.getData()
        return 0 if x is None else len(x)

    def refresh(self) -> None:
        if self._drawn == self._version or self.busy.isVisible():
            return
        self._drawn = self._version
        m = self.measured
        self.export.setEnabled(m is not None)
        if m is None:
            self.ceiling_label.setText(EMPTY_LABEL)
            self.stack.setCurrentWidget(self.empty_hint)
            self.use_draft_max.hide()  # nothing measured for this model: nothing to suggest
            return
        self.stack.setCurrentWidget(self.plots)
        cm = m.model
        k = np.arange(1, len(cm.row_ms) + 1)
        cost = np.array(cm.row_ms, float)
        ceiling = k * cost[0] / cost
        self.cost_curve.setData(k, cost)
        self.ceiling_curve.setData(k, ceiling)
        self.best_point.setData([cm.best_rows], [cm.ceiling])
        self.break_bars.setOpts(x=k, height=np.array([cm.break_even(int(i)) for i in k]), width=0.6)
        self.max_line.setData(k, k - 1)
        self.ceiling_vb.setYRange(0, max(1.2, float(ceiling.max()) * 1.1), padding=0)
        self.cost_plot.setYRange(0, float(cost.max()) * 1.1, padding=0)
        self.cost_plot.setXRange(0.5, len(cost) + 0.5, padding=0)
        self._sync_views()
        threads = self._threads(m)
        self.title.setText(self._title(with_model=False))  # the model panel names the model; a PNG does
        self.use_draft_max.setText(f"Use draft max {self.suggested_draft_max()}")
        self.use_draft_max.setVisible(self.suggested_draft_max() >= 1)
        layouts = self._draw_layouts()
        if layouts:
            top = max(float(cost.max()), *(max(lm.model.row_ms) for _t, lm in self.layouts))
            self.cost_plot.setYRange(0, top * 1.1, padding=0)
        partial = (f"<p><b>Partial curve</b> (cancelled: {html.escape(m.partial)}): shown and used until you "
                   "Measure again, not stored.</p>") if m.partial else ""
        self.ceiling_label.setText(
            f"<p><b>{self.ceiling_text()}</b></p>{partial}"
            f"<p>c(1) = {cost[0]:.1f} ms, c({len(cost)}) = {cost[-1]:.1f} ms ({threads}"
            + (f", after a prompt of {count_noun(m.prompt_tokens, 'token')}" if m.prompt_tokens else
               ", stored by bench or compare")
            + (f"; {html.escape(m.layers)}: every decode also pays the round trip to the server"
               if m.layers and "RPC" in m.layers else "") + ").</p>"
            f"<p>A window must accept more than its bar to beat plain decoding. The best window is "
            f"{cm.best_rows} rows: draft max {cm.best_draft_max} if every proposal token is accepted; draft max "
            f"<i>auto</i> takes {auto_draft_max(cm).value} (the most tokens per ms if "
            f"{NOMINAL_ACCEPTANCE:.0%} are).</p><p>{html.escape(verify_cost_diagnosis(cm, m.weight_types))}</p>"
            + (f"<p>Weight layouts:<br>{layouts}</p>" if layouts else ""))

    def export_png(self, path: str, width: int = 1200) -> bool:
        """Write both plots (title included) as a PNG ``width`` pixels wide (pyqtgraph's ImageExporter)."""
        import pyqtgraph.exporters as ex

        self.refresh()
        self.stack.setCurrentWidget(self.plots)
        self.title.setText(self._title(with_model=True))
        try:
            exporter = ex.ImageExporter(self.layout_widget.scene())
            exporter.parameters()["width"] = width
            return exporter.export(path) is not False
        finally:
            self.title.setText(self._title(with_model=False))

    def _title(self, with_model: bool) -> str:
        """The plots' title: the ceiling and the thread count (and the model file, for a PNG)."""
        m = self.measured
        if m is None:
            return ""
        model = f"<br>{Path(m.model_path).name}" if with_model else ""  # a second line: wider than the plots
        where = f"<br>{m.layers}" if m.layers and "CPU" not in m.layers else ""  # e.g. 30/30 layers on RPC0[...]
        return f"<b>{self.ceiling_text()}</b>{model} · {self._threads(m)}{where}"

    @staticmethod
    def _threads(m) -> str:
        """"2 CPU threads", or "2 client threads" when the layers ran on an RPC server (its own count)."""
        remote = bool(m.layers) and "RPC" in m.layers
        return count_noun(m.n_threads, "client thread" if remote else "CPU thread")
