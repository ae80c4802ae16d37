"""Runtime lock timing (pyqtgraph): wait and hold per operation kind, in microseconds.

Top row: wait and hold of every operation of the main session over time, one
series per kind (verify, repair = trim/retire, prefill, step) plus one for
all background sessions. Time is seconds since the run started: the first
lock operation recorded for the shown session (``run_start_us``), not since
the app (its scheduler) started. Bottom row: their distributions
(histograms). The legend is a row of its own above the plots (it never
covers a point); the main session's prefill, one operation per run, is drawn
as a larger diamond. Items are created once and updated with ``setData``.
Each plot keeps ``PLOT_MIN_PX`` of height: on a short tab (1024x640) the plots
and the totals under them scroll under the legend, and File > Export plots
saves them whole (``export_pixmap``).

While a served request is shown (``show_slots``: the window serves with several slots, llama-server's
``-np``), the points are coloured by slot instead: one series per slot ("slot k", the KV session each slot
ran, ``ServeSlots.session_slots``), every decode kind in it, so in the locked schedule each slot's waits for
the lock show apart; the operations of no slot's session (the KV rollback probe) in grey. The slot items are
made once, as many as the most slots shown so far.

Times are drawn on a log10 microsecond scale (``MicrosecondAxis``). A log
scale has no place for 0, and an uncontended lock is often acquired in under
a microsecond (recorded as 0 µs): such operations are drawn on a row of their
own below the scale, at ``ZERO_ROW``, labelled "0" and set off by a dashed
line, so a 0 µs wait is never read as 1 µs. Where the axis is short for its
decades, it labels every second (third, ...) decade so no two labels meet.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QPoint, QSize, Qt
from PySide6.QtGui import QColor, QFontMetricsF, QPainter, QPixmap
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

from inspector.session.session_record import SessionRecord
from inspector.gui.plots.timeline import set_limited
from inspector.gui.look.wording import count_noun

SERIES = (
    ("verify", "#1565c0"),
    ("repair", "#c62828"),
    ("prefill", "#6a1b9a"),
    ("step", "#2e7d32"),
    ("background", "#9e9e9e"),
)
KIND_TO_SERIES = {"verify": "verify", "trim": "repair", "retire": "repair", "prefill": "prefill", "step": "step"}
SLOT_COLOURS = ("#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a", "#c62828", "#00838f", "#ad1457", "#6d4c41")
"""Each slot's colour while a served request is shown (slot k: ``SLOT_COLOURS[k % 8]``)."""
OTHER_SERIES = "background"
"""While a served request is shown, the series of the operations of no slot's session (the KV rollback probe a
source asks for on its first request, sessions opened): grey, as background sessions are in a run."""
RUN_TIME, SERVED_TIME = "time since the run started (s)", "time since the request started (s)"
"""The time axes' label: a run's, a served request's (``show_slots``)."""
LOG_NOTE = " &nbsp; <span style='color:#555'>(log scale; the row marked 0 below the dashed line: 0 µs)</span>"
BINS = np.linspace(0, 6, 49)
"""Histogram bins: log10(microseconds) from 1 µs to 1 s."""
ZERO_ROW = -1.0
"""Where 0 µs is drawn (log10 axis units): one decade below 1 µs, on a row of its own."""
ZERO_EDGES = np.array([ZERO_ROW - 0.0625, ZERO_ROW + 0.0625])
"""The histogram's bin for 0 µs (as wide as the others), drawn at ``ZERO_ROW``."""
HIST_EDGES = np.concatenate([ZERO_EDGES, BINS])
"""Histogram edges: the 0 µs bin, an empty gap up to 1 µs, then ``BINS``."""
ZERO_LABEL = "0"
TICK_GAP_PX = 8
"""Least room (pixels) between two tick labels of a ``MicrosecondAxis``."""
WIDEST_LABELS = ("100 µs", "100 ms", "10 s")
"""The widest labels a ``MicrosecondAxis`` writes: a horizontal axis spaces its ticks for them."""
PLOT_MIN_PX = 130
"""Least height of each plot (pixels): its bottom axis and about 90 px of data; a shorter tab scrolls."""


def log_us(us: np.ndarray) -> np.ndarray:
    """Microseconds -> plot coordinate: log10(µs) for 1 µs and more, ``ZERO_ROW`` for 0 µs."""
    us = np.asarray(us, float)
    return np.where(us > 0, np.log10(np.maximum(us, 1.0)), ZERO_ROW)


def format_us(us: float) -> str:
    """A duration in microseconds as a short label: "0", "20 µs", "1 ms", "1.5 s"."""
    if us <= 0:
        return ZERO_LABEL
    if us < 1000:
        return f"{us:g} µs"
    if us < 1e6:
        return f"{us / 1000:g} ms"
    return f"{us / 1e6:g} s"


class MicrosecondAxis(pg.AxisItem):
    """An axis over ``log_us`` coordinates: ticks at whole decades (1 µs, 10 µs, ..., 1 s; also
    2 and 5 times a decade when fewer than three decades show and there is room), labelled in
    µs/ms/s, and the ``ZERO_ROW`` tick labelled "0"; every second (third, ...) decade when the axis
    is too short for each decade's label (``label_room``)."""

    def label_room(self) -> float:
        """Pixels one tick label needs along the axis: a line of text on a vertical axis, the widest label
        (``WIDEST_LABELS``) on a horizontal one, and ``TICK_GAP_PX``."""
        metrics = QFontMetricsF(self.style["tickFont"] or self.font())
        if self.orientation in ("left", "right"):
            return metrics.height() + TICK_GAP_PX
        return max(metrics.horizontalAdvance(s) for s in WIDEST_LABELS) + TICK_GAP_PX

    def tickValues(self, minVal, maxVal, size):
        lo, hi = min(minVal, maxVal), max(minVal, maxVal)
        decade_px = size / (hi - lo) if hi > lo and size > 0 else math.inf
        step = max(1, math.ceil(self.label_room() / decade_px))  # decades between two labels
        # Every step-th decade counted from the 0 row, so "0" and the next label are as far apart as any two.
        major = [float(k) for k in range(int(np.ceil(lo)), int(np.floor(hi)) + 1)
                 if k >= 0 and (k - ZERO_ROW) % step == 0]
        if lo <= ZERO_ROW <= hi:
            major.insert(0, ZERO_ROW)
        minor = []
        if hi - max(lo, 0.0) < 3 and np.log10(2) * decade_px >= self.label_room():  # 2 and 5 times a decade
            for k in range(int(np.floor(max(lo, 0.0))), int(np.ceil(hi)) + 1):
                minor += [v for v in (k + np.log10(2), k + np.log10(5)) if lo <= v <= hi and k >= 0]
        return [(float(step), major), (0.5, minor)]

    def tickStrings(self, values, scale, spacing):
        return [ZERO_LABEL if abs(v - ZERO_ROW) < 1e-9 else format_us(round(10 ** v, 6)) for v in values]


def run_start_us(session: SessionRecord) -> int:
    """Time zero of the time axis: ``started_us`` of the first lock operation recorded for the
    session (its run's first operation: the probe, open or prefill), in the scheduler's
    microseconds; 0 when there is none."""
    ops = session.lock_ops
    return min((op.started_us for op in ops), default=0)


class LockPlot(pg.PlotWidget):
    """A plot that asks for ``PLOT_MIN_PX`` of height and takes what the tab has beyond it (a scroll area
    sizes its page by the height its rows ask for: pyqtgraph's own 480 px would make four plots scroll
    on any screen)."""

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(super().sizeHint().width(), PLOT_MIN_PX)


class LockPlots(QWidget):
    """Lock wait/hold over time and their histograms, per operation kind."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session: SessionRecord | None = None
        self._drawn_ops = -1
        self._session_ref = None
        self.start_us = 0
        """``run_start_us`` of the drawn session: time 0 of the time axis (scheduler microseconds)."""
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(2)
        self.session_slots = None
        """While a served request is shown: ``() -> {KV session id: slot id}`` (``show_slots``), else None."""
        self.n_slots = 0
        self.kind_legend = " &nbsp; ".join(
            f"<span style='color:{color};font-size:14pt'>{'◆' if name == 'prefill' else '●'}</span>&nbsp;{name}"
            for name, color in SERIES) + LOG_NOTE
        self.legend = QLabel(self.kind_legend)
        self.legend.setWordWrap(True)  # two lines on a small screen, never wider than the tab
        self.kind_tip = ("one point per runtime operation under the lock; repair = trim or retire; "
                         "background = all background sessions; an operation that did not wait at all "
                         "(0 µs) is drawn on the row marked 0 at the bottom of the scale")
        self.legend.setToolTip(self.kind_tip)
        self.wait_plot = self._plot("lock wait", RUN_TIME, y_us=True)
        self.hold_plot = self._plot("lock hold", RUN_TIME, y_us=True)
        self.wait_hist = self._plot("operations", "lock wait (log scale; 0 = no wait)", x_us=True)
        self.hold_hist = self._plot("operations", "lock hold (log scale)", x_us=True)
        # No titles: a title row takes 30 px of a short plot, and the axes say what each plot shows.
        zero_pen = pg.mkPen("#9e9e9e", style=Qt.PenStyle.DashLine)
        for p, angle in ((self.wait_plot, 0), (self.hold_plot, 0), (self.wait_hist, 90), (self.hold_hist, 90)):
            p.addItem(pg.InfiniteLine(pos=ZERO_ROW / 2, angle=angle, pen=zero_pen))  # sets off the 0 µs row
        self.scatter_wait, self.scatter_hold, self.hist_wait, self.hist_hold = {}, {}, {}, {}
        for name, color in SERIES:
            big = name == "prefill"
            kw = dict(pen=None, symbol="d" if big else "o", symbolSize=11 if big else 5,
                      symbolPen=pg.mkPen("#ffffff") if big else None, symbolBrush=color)
            self.scatter_wait[name] = self.wait_plot.plot([], [], name=name, **kw)
            self.scatter_hold[name] = self.hold_plot.plot([], [], **kw)
            hpen = pg.mkPen(color, width=2)
            self.hist_wait[name] = self.wait_hist.plot([0, 1], [0], stepMode="center", pen=hpen)
            self.hist_hold[name] = self.hold_hist.plot([0, 1], [0], stepMode="center", pen=hpen)
        self.slot_wait: list[pg.PlotDataItem] = []
        self.slot_hold: list[pg.PlotDataItem] = []
        self.slot_hist_wait: list[pg.PlotDataItem] = []
        self.slot_hist_hold: list[pg.PlotDataItem] = []
        """One item per slot in each plot (``show_slots``), made once and kept (emptied when not drawn)."""
        self.totals = QLabel("")
        self.totals.setWordWrap(True)
        outer.addWidget(self.legend)
        # The plots and the totals scroll under the legend when the tab is shorter than they need.
        content = QWidget()
        grid = QGridLayout(content)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(4)
        grid.addWidget(self.wait_plot, 0, 0)
        grid.addWidget(self.hold_plot, 0, 1)
        grid.addWidget(self.wait_hist, 1, 0)
        grid.addWidget(self.hold_hist, 1, 1)
        grid.addWidget(self.totals, 2, 0, 1, 2)
        for p in self.plots():
            p.setMinimumHeight(PLOT_MIN_PX)
        self.scroll = QScrollArea()
        self.scroll.setWidget(content)
        self.scroll.setWidgetResizable(True)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        outer.addWidget(self.scroll, 1)

    def plots(self) -> tuple[pg.PlotWidget, ...]:
        """The four plots: wait and hold over time, their distributions."""
        return self.wait_plot, self.hold_plot, self.wait_hist, self.hold_hist

    def export_pixmap(self) -> QPixmap:
        """The legend and every plot whole (not only the part the scroll area shows), for File > Export
        plots. A tab not shown is laid out at this widget's size for the picture, then put back."""
        content, legend = self.scroll.widget(), self.legend
        saved = content.size(), legend.size()
        if not self.isVisible():
            width = self.width()
            legend.resize(width, legend.heightForWidth(width))
            content.resize(width, max(content.minimumSizeHint().height(), self.height() - legend.height()))
        pixmap = QPixmap(max(legend.width(), content.width()), legend.height() + content.height())
        pixmap.fill(QColor("white"))
        painter = QPainter(pixmap)
        legend.render(painter, QPoint(0, 0))
        content.render(painter, QPoint(0, legend.height()))
        painter.end()
        if not self.isVisible():
            content.resize(saved[0])
            legend.resize(saved[1])
        return pixmap

    @staticmethod
    def _plot(left: str, bottom: str, *, y_us: bool = False, x_us: bool = False) -> pg.PlotWidget:
        axes = {}
        if y_us:
            axes["left"] = MicrosecondAxis("left")
        if x_us:
            axes["bottom"] = MicrosecondAxis("bottom")
        p = LockPlot(background="w", axisItems=axes)
        p.setLabel("left", left)
        p.setLabel("bottom", bottom)
        for name in ("left", "bottom"):  # the ticks carry their units: no "(x0.001)" beside µs labels
            p.getAxis(name).enableAutoSIPrefix(False)
        p.showGrid(x=True, y=True, alpha=0.25)
        return p

    def set_session(self, session: SessionRecord) -> None:
        self.session = session
        self._drawn_ops = -1

    def series_counts(self) -> dict[str, int]:
        """Operations drawn per series (the kinds', and ``slot k`` for each slot drawn)."""
        counts = {k: (0 if v.xData is None else len(v.xData)) for k, v in self.scatter_wait.items()}
        for k, item in enumerate(self.slot_wait[:self.n_slots]):
            counts[f"slot {k}"] = 0 if item.xData is None else len(item.xData)
        return counts

    def show_slots(self, session_slots, n_slots: int) -> None:
        """Colour the points by slot (a served request is shown): ``session_slots()`` -> {KV session id: slot id}
        of the server's ``n_slots`` slots; ``None`` (0 slots): by operation kind again. Makes the slot items
        not made yet (once); the next ``refresh`` draws."""
        self.session_slots = session_slots
        self.n_slots = n_slots if session_slots is not None else 0
        while len(self.slot_wait) < self.n_slots:
            color = SLOT_COLOURS[len(self.slot_wait) % len(SLOT_COLOURS)]
            kw = dict(pen=None, symbol="o", symbolSize=6, symbolPen=None, symbolBrush=color)
            self.slot_wait.append(self.wait_plot.plot([], [], **kw))
            self.slot_hold.append(self.hold_plot.plot([], [], **kw))
            hpen = pg.mkPen(color, width=2)
            self.slot_hist_wait.append(self.wait_hist.plot([0, 1], [0], stepMode="center", pen=hpen))
            self.slot_hist_hold.append(self.hold_hist.plot([0, 1], [0], stepMode="center", pen=hpen))
        self._drawn_ops = -1

    def refresh(self) -> None:
        s = self.session
        if s is None or len(s.lock_ops) == self._drawn_ops:
            return
        ops = s.lock_ops
        self._drawn_ops = len(ops)
        self.start_us = run_start_us(s)
        if self.n_slots:
            self._draw_slots(ops, s.main_session_id)
            return
        self._clear_slots(0)
        self._time_label(RUN_TIME)
        if self.legend.text() != self.kind_legend:
            self.legend.setText(self.kind_legend)
            self.legend.setToolTip(self.kind_tip)
        main = s.main_session_id
        groups: dict[str, list] = {name: [] for name, _ in SERIES}
        for op in ops:
            if op.session_id == main:
                name = KIND_TO_SERIES.get(op.kind)
            elif op.session_id >= 0 and op.kind in KIND_TO_SERIES:
                name = "background"
            else:
                name = None
            if name is not None:
                groups[name].append((op.started_us, op.wait_us, op.hold_us))
        lines = []
        for name, _ in SERIES:
            g = np.array(groups[name], float).reshape(-1, 3)
            t = (g[:, 0] - self.start_us) / 1e6
            wait, hold = log_us(g[:, 1]), log_us(g[:, 2])
            set_limited(self.scatter_wait[name], t, wait)  # long sessions: downsampled
            set_limited(self.scatter_hold[name], t, hold)
            self.hist_wait[name].setData(HIST_EDGES, self._histogram(g[:, 1]))
            self.hist_hold[name].setData(HIST_EDGES, self._histogram(g[:, 2]))
            if len(g):
                zero = int((g[:, 1] == 0).sum())
                lines.append(f"<b>{name}</b> {count_noun(len(g), 'op')}, wait mean {g[:, 1].mean():,.0f} µs "
                             f"max {g[:, 1].max():,.0f} µs ({zero} at 0 µs), hold mean {g[:, 2].mean():,.0f} µs")
        self.totals.setText(" &nbsp;·&nbsp; ".join(lines))

    def _time_label(self, text: str) -> None:
        """The time axes' label (set only when it changes)."""
        for p in (self.wait_plot, self.hold_plot):
            axis = p.getAxis("bottom")
            if axis.labelText != text:
                p.setLabel("bottom", text)

    def _clear_slots(self, first: int) -> None:
        """Empty the slot items from slot ``first`` on."""
        for k in range(first, len(self.slot_wait)):
            if self.slot_wait[k].xData is not None and len(self.slot_wait[k].xData):
                for item in (self.slot_wait[k], self.slot_hold[k]):
                    item.setData([], [])
                for item in (self.slot_hist_wait[k], self.slot_hist_hold[k]):
                    item.setData([0, 1], [0])

    def _draw_slots(self, ops, main: int | None) -> None:
        """Every decode operation (``KIND_TO_SERIES`` kinds) of a slot's session, one series per slot; the kinds'
        series emptied; the legend and the totals per slot (``main``: the shown request's session)."""
        by_session = self.session_slots()
        n = self.n_slots
        groups: list[list] = [[] for _ in range(n + 1)]  # each slot's, then the other operations'
        for op in ops:
            slot = by_session.get(op.session_id)
            if slot is None or slot >= n:
                groups[n].append((op.started_us, op.wait_us, op.hold_us))
            elif op.kind in KIND_TO_SERIES:
                groups[slot].append((op.started_us, op.wait_us, op.hold_us))
        for name, _ in SERIES:
            g = np.array(groups[n] if name == OTHER_SERIES else [], float).reshape(-1, 3)
            t = (g[:, 0] - self.start_us) / 1e6
            set_limited(self.scatter_wait[name], t, log_us(g[:, 1]))
            set_limited(self.scatter_hold[name], t, log_us(g[:, 2]))
            self.hist_wait[name].setData(HIST_EDGES, self._histogram(g[:, 1]))
            self.hist_hold[name].setData(HIST_EDGES, self._histogram(g[:, 2]))
        self._clear_slots(n)
        shown = by_session.get(main)
        legend, lines = [], []
        for k in range(n + 1):
            g = np.array(groups[k], float).reshape(-1, 3)
            if k == n:  # drawn above, in the background series
                if len(g):
                    legend.append(f"<span style='color:{dict(SERIES)[OTHER_SERIES]};font-size:14pt'>●</span>"
                                  "&nbsp;no slot's (probe)")
                    lines.append(f"<b>no slot's</b> {count_noun(len(g), 'op')}, hold max {g[:, 2].max():,.0f} µs")
                break
            t = (g[:, 0] - self.start_us) / 1e6
            set_limited(self.slot_wait[k], t, log_us(g[:, 1]))
            set_limited(self.slot_hold[k], t, log_us(g[:, 2]))
            self.slot_hist_wait[k].setData(HIST_EDGES, self._histogram(g[:, 1]))
            self.slot_hist_hold[k].setData(HIST_EDGES, self._histogram(g[:, 2]))
            mine = " (this request)" if k == shown else ""
            legend.append(f"<span style='color:{SLOT_COLOURS[k % len(SLOT_COLOURS)]};font-size:14pt'>●</span>"
                          f"&nbsp;slot {k}{mine}")
            if len(g):
                zero = int((g[:, 1] == 0).sum())
                lines.append(f"<b>slot {k}</b> {count_noun(len(g), 'op')}, wait mean {g[:, 1].mean():,.0f} µs "
                             f"max {g[:, 1].max():,.0f} µs ({zero} at 0 µs), hold mean {g[:, 2].mean():,.0f} µs")
        self._time_label(SERVED_TIME)
        text = " &nbsp; ".join(legend) + LOG_NOTE
        if self.legend.text() != text:
            self.legend.setText(text)
            self.legend.setToolTip("served requests: one colour per slot (its KV session), each point a decode under "
                                   "the runtime lock (verify, repair, prefill, step) while the shown request ran; "
                                   "in the locked schedule the slots wait for each other here. Grey: operations of "
                                   "no slot's session (the KV rollback probe a source asks for first, a session "
                                   "opened), which the slots wait for too. An operation that did not wait at all "
                                   "(0 µs) is drawn on the row marked 0")
        self.totals.setText(" &nbsp;·&nbsp; ".join(lines))

    @staticmethod
    def _histogram(us: np.ndarray) -> np.ndarray:
        """Counts per ``HIST_EDGES`` bin: 0 µs, the empty gap, then log10 bins from 1 µs."""
        positive = us[us > 0]
        counts, _ = np.histogram(np.clip(np.log10(np.maximum(positive, 1.0)), 0.0, BINS[-1]), BINS)  # 1 s and more: last bin
        return np.concatenate([[int((us == 0).sum()), 0], counts])
