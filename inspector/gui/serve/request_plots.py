"""The Requests tab's plots (pyqtgraph): how speculation paid per request over time, and against the context.

Left: each request's acceptance (accepted / proposed proposal tokens, left axis) and decode tokens/s (right
axis) at its arrival time; the request the views show is ringed. Right: every window's acceptance against its
base position (the context length it ran at: ``ServedRequest.context_at_windows``), with the acceptance of all
windows in each stretch of context joined by a line, so a long context where speculation stops paying shows
as the line falling. Items are made once and updated with ``setData`` when the ``RequestLog`` moved.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from inspector.gui.plots.timeline import IntegerAxis
from inspector.gui.model.request_log import RequestLog

ACCEPT_COLOR = "#1565c0"
SPEED_COLOR = "#2e7d32"
WINDOW_COLOR = (21, 101, 192, 70)
"""Each window's point: translucent, so where many fall on one value it darkens."""
BINNED_COLOR = "#c62828"
SHOWN_COLOR = "#ff6f00"
CONTEXT_BINS = 12
"""Stretches of context (equal widths from the smallest to the largest base position) the line sums over."""


def binned_acceptance(points: np.ndarray, bins: int = CONTEXT_BINS) -> tuple[np.ndarray, np.ndarray]:
    """(middle base position, accepted / proposed of the windows there) per stretch of context that proposed
    anything; ``points``: rows of (base position, accepted, proposed)."""
    points = np.asarray(points, float).reshape(-1, 3)
    if not len(points):
        return np.zeros(0), np.zeros(0)
    lo, hi = points[:, 0].min(), points[:, 0].max()
    if hi <= lo:
        prop = points[:, 2].sum()
        return (np.array([lo]), np.array([points[:, 1].sum() / prop])) if prop else (np.zeros(0), np.zeros(0))
    edges = np.linspace(lo, hi, bins + 1)
    k = np.clip(np.searchsorted(edges, points[:, 0], side="right") - 1, 0, bins - 1)
    acc = np.bincount(k, points[:, 1], bins)
    prop = np.bincount(k, points[:, 2], bins)
    keep = prop > 0
    mids = (edges[:-1] + edges[1:]) / 2
    return mids[keep], acc[keep] / prop[keep]


LABEL_PX = 80
"""Pixels a clock-time label ("12:03:21") needs on the arrival axis."""


class ClockAxis(pg.DateAxisItem):
    """Arrival times as this machine's clock reads them, "12:03:21" at every zoom (tenths added when ticks are
    less than a second apart; the month and day when they are days apart): pyqtgraph's date axis labels a few
    seconds of requests "21.000 22.000 ...", which a trial did not read as times."""

    def tickValues(self, minVal, maxVal, size):
        """pyqtgraph's ticks a second apart or more; where it has none such (it jumps from minutes to
        milliseconds over a few seconds, and labels with tenths are too wide to draw: the axis showed none), whole
        seconds at the first of 1, 2, 5, 10, 15, 30 apart that leaves ``LABEL_PX`` pixels per label."""
        levels = [(spacing, values) for spacing, values in super().tickValues(minVal, maxVal, size)
                  if spacing >= 1 and len(values)]
        if levels or not math.isfinite(maxVal - minVal) or maxVal - minVal > 600:
            return levels
        fit = max(1, int(size // LABEL_PX))
        step = next((s for s in (1, 2, 5, 10, 15, 30) if (maxVal - minVal) / s <= fit), 60)
        return [(float(step), [float(v) for v in range(math.ceil(minVal / step) * step, math.floor(maxVal) + 1, step)])]

    def tickStrings(self, values, scale, spacing):
        fmt = "%m-%d %H:%M" if spacing >= 86_400 else "%H:%M:%S"
        out = []
        for v in values:
            try:
                text = time.strftime(fmt, time.localtime(v))
            except (OverflowError, OSError, ValueError):  # far outside the clock's range (an empty axis zoomed out)
                out.append("")
                continue
            out.append(text + (f".{int(v * 10) % 10}" if spacing < 1 else ""))
        return out


class RequestPlots(QWidget):
    """Acceptance and tokens/s per request over time; acceptance against the context length of each window."""

    def __init__(self, log: RequestLog, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.log = log
        self._version = -1
        self._shown: int | None = None
        self._rows_version = -1
        self._done = (np.zeros(0), np.zeros(0), np.zeros(0), np.zeros((0, 3)))  # finished requests' ``_series``
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        self.legend = QLabel(
            f"<b>Per request</b> <span style='color:{ACCEPT_COLOR}'>●</span> acceptance "
            f"<span style='color:{SPEED_COLOR}'>■</span> tokens/s (right) "
            f"<span style='color:{SHOWN_COLOR}'>○</span> shown &nbsp;│&nbsp; <b>By context length</b> "
            f"<span style='color:#5c8fd6'>●</span> a window "
            f"<span style='color:{BINNED_COLOR}'>━</span> per stretch")
        self.legend.setToolTip("left: each request's accepted / proposed proposal tokens and its decode tokens/s "
                               "at its arrival time; right: each window's acceptance at the context length it ran "
                               "at (its base position), and the acceptance of all windows in each of "
                               f"{CONTEXT_BINS} stretches of context")
        self.legend.setWordWrap(True)
        self.per_request = pg.PlotWidget(background="w", axisItems={"bottom": ClockAxis("bottom")})
        pr = self.per_request.getPlotItem()
        pr.setLabel("left", "acceptance (%)")
        pr.setLabel("bottom", "arrival time")
        pr.showGrid(x=True, y=True, alpha=0.25)
        pr.setYRange(0, 100)
        pr.showAxis("right")
        pr.setLabel("right", "tokens/s")
        self.speed_box = pg.ViewBox()
        pr.scene().addItem(self.speed_box)
        pr.getAxis("right").linkToView(self.speed_box)
        self.speed_box.setXLink(pr)
        pr.vb.sigResized.connect(self._fit_speed_box)
        self.acceptance = pr.plot([], [], pen=pg.mkPen(ACCEPT_COLOR, width=1.5), symbol="o", symbolSize=7,
                                  symbolBrush=ACCEPT_COLOR, symbolPen=None)
        self.speed = pg.PlotDataItem([], [], pen=pg.mkPen(SPEED_COLOR, width=1.5), symbol="s", symbolSize=6,
                                     symbolBrush=SPEED_COLOR, symbolPen=None)
        self.speed_box.addItem(self.speed)
        self.span = pr.plot([], [], pen=None, symbol="o", symbolSize=1, symbolBrush=(0, 0, 0, 0), symbolPen=None)
        """Every request's arrival time, unseen: the time axis spans requests that proposed nothing too."""
        self.shown_mark = pr.plot([], [], pen=None, symbol="o", symbolSize=15, symbolBrush=None,
                                  symbolPen=pg.mkPen(SHOWN_COLOR, width=2))
        self.by_context = pg.PlotWidget(background="w", axisItems={"bottom": IntegerAxis("bottom")})  # whole tokens
        bc = self.by_context.getPlotItem()
        bc.setLabel("left", "acceptance (%)")
        bc.setLabel("bottom", "base position of the window (tokens)")
        bc.getAxis("bottom").enableAutoSIPrefix(False)
        bc.showGrid(x=True, y=True, alpha=0.25)
        bc.setYRange(0, 100)
        self.windows = bc.plot([], [], pen=None, symbol="o", symbolSize=5, symbolBrush=WINDOW_COLOR, symbolPen=None)
        self.binned = bc.plot([], [], pen=pg.mkPen(BINNED_COLOR, width=2), symbol="o", symbolSize=6,
                              symbolBrush=BINNED_COLOR, symbolPen=None)
        grid.addWidget(self.legend, 0, 0, 1, 2)
        grid.addWidget(self.per_request, 1, 0)
        grid.addWidget(self.by_context, 1, 1)

    def _fit_speed_box(self) -> None:
        vb = self.per_request.getPlotItem().vb
        self.speed_box.setGeometry(vb.sceneBoundingRect())
        self.speed_box.linkedViewChanged(vb, self.speed_box.XAxis)

    def refresh(self) -> None:
        """Redraw when the log moved or another request is shown (finished requests are counted again only when
        the rows were read again; a running one at every call)."""
        log = self.log
        if log.version == self._version and log.shown == self._shown:
            return
        self._version, self._shown = log.version, log.shown
        if log.rows_version != self._rows_version:
            self._rows_version = log.rows_version
            self._done = self._series([r for r in log.rows if r.state == "done"])
        running = self._series([r for r in log.rows if r.state == "running"])
        t, acc, tps, points = (np.concatenate([a, b]) for a, b in zip(self._done, running))
        has_acc, has_tps = ~np.isnan(acc), ~np.isnan(tps)
        self.acceptance.setData(t[has_acc], acc[has_acc])
        self.speed.setData(t[has_tps], tps[has_tps])
        self.span.setData(t, np.zeros(len(t)))
        row = log.row(log.shown) if log.shown is not None else None
        figures = log.figures(row) if row is not None and row.state != "waiting" else None
        if figures is not None and figures.acceptance is not None:
            self.shown_mark.setData([row.arrived], [100 * figures.acceptance])
        else:
            self.shown_mark.setData([], [])
        self.windows.setData(points[:, 0], 100 * points[:, 1] / points[:, 2])
        x, y = binned_acceptance(points)
        self.binned.setData(x, 100 * y)

    def _series(self, rows) -> tuple:
        """(arrival times, acceptance %, tokens/s, windows' (base position, accepted, proposed)) of ``rows``,
        in order; NaN where a request proposed nothing or decoded nothing yet."""
        figures = [self.log.figures(r) for r in rows]
        t = np.array([r.arrived for r in rows], float)
        acc = np.array([np.nan if f.acceptance is None else 100 * f.acceptance for f in figures], float)
        tps = np.array([np.nan if f.tokens_per_s is None else f.tokens_per_s for f in figures], float)
        points = np.array([w for f in figures for w in f.context_at_windows if w[2] > 0], float).reshape(-1, 3)
        return t, acc, tps, points

    def drawn_points(self) -> dict[str, int]:
        """Points drawn per item (tests)."""
        return {name: 0 if item.xData is None else len(item.xData)
                for name, item in (("acceptance", self.acceptance), ("tokens_per_s", self.speed),
                                   ("windows", self.windows), ("binned", self.binned))}
