"""The KV position timeline (pyqtgraph): positions per decode step, in tokens.

The x-axis is the decode step (``WindowReceipt.decode_step``: 0 for the first
step after the prefill): every proposal window and every plain one-token step
is one decode step, and the prefill sits at step -1 (the KV length after it: the
prompt; the first generated token comes from its last row, as in llama.cpp), so windows and the plain steps between them share one
axis with integer ticks. Per window: ``base_position`` (KV length before
verification), ``position_after_verification`` (base + rows),
``canonical_position`` (after repair). Per plain step: the KV length after it
(base + 1). The live KV length line runs through every decode step: it rises
by the verify batch and drops back by the trim in a window, and rises by one
token in a plain step (after the last window too). Failed windows are marked
in red. Plot items are created once and updated with ``setData``; a long
session's series are downsampled to ``MAX_POINTS`` (peak: the extremes of
each stretch).

The decode step of a plain step is not recorded in the session; it is the
decode step of the window before it (its receipt, or the failed window's
discard) plus the plain steps since that window (-1 plus the plain steps when
no window came before). A ``position_mismatch`` or invalid-proposal discard
shares its decode step with the plain step that follows it.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from inspector.engine.no_proposal import reason_code
from inspector.engine.profit import OwnC1, cumulative_profit_us
from inspector.engine.records import DISCARD, PREFILL, STEP, VERIFY
from inspector.session.session_record import SessionRecord


MAX_POINTS = 2000
"""Most points a plot series draws (about; twice as many for a line); longer series
are downsampled (``set_limited``)."""
HALF = 0.3
"""Half the width of one decode step on the live KV line (fraction of a step)."""


def set_limited(item: pg.PlotDataItem, x: np.ndarray, y: np.ndarray) -> None:
    """``item.setData(x, y)``, downsampled to about ``MAX_POINTS`` points when longer:
    a line keeps the minimum and maximum of each stretch of ``ds`` points (no spike is
    lost), symbols keep every ``ds``-th point. Symbols for tens of thousands of points
    would take pyqtgraph seconds per redraw. ``item.xData`` stays the full series."""
    ds = -(-len(x) // MAX_POINTS) if len(x) > MAX_POINTS else 1
    line = item.opts.get("pen") is not None
    item.setDownsampling(ds=ds, auto=False, method="peak" if line else "subsample")
    item.setData(x, y)


class IntegerAxis(pg.AxisItem):
    """An axis whose ticks are whole numbers only (decode steps, window counts): a tick
    spacing below 1 becomes 1, so no tick falls between two steps."""

    def tickSpacing(self, minVal, maxVal, size):
        levels = super().tickSpacing(minVal, maxVal, size)
        out = []
        for spacing, offset in levels:
            spacing = max(1.0, float(round(spacing)))
            if all(spacing != s for s, _ in out):
                out.append((spacing, 0.0))
        return out or [(1.0, 0.0)]

    def tickValues(self, minVal, maxVal, size):
        return [(spacing, [v for v in values if float(v).is_integer()])
                for spacing, values in super().tickValues(minVal, maxVal, size)]


LANE_COLORS = ("#78909c", "#8d6e63", "#5c6bc0", "#26a69a", "#ec407a", "#ffa000")
"""Colors of the reason lane's rows, in order of first appearance."""
LEGEND = (
    ("━", "#90a4ae", "10pt", "live KV length"),
    ("●", "#455a64", "10pt", "base_position"),
    ("▲", "#ef6c00", "10pt", "position_after_verification"),
    ("◆", "#6a1b9a", "10pt", "tree window: base + its rows"),
    ("■", "#2e7d32", "10pt", "canonical_position"),
    ("•", "#78909c", "10pt", "plain step"),
    ("✕", "#c62828", "10pt", "failed window"),
    ("★", "#e65100", "12pt", "prefill"),
)
"""The legend row above the KV plot: (mark, colour, mark size, name), as the plot draws each series."""
LEGEND_MIN_PLOT_PX = 180
"""The KV plot's least height (pixels) under the legend row: a shorter timeline hides the legend (its entries
stay in the plot's tooltip) and the plot keeps that row's height."""
LANE_AXIS_PX = 78
"""Width of both plots' left axes (pixels): room for a reason code, and the x axes line up."""
LANE_ROW_PX = 14
"""Height of one reason row (pixels)."""
PROFIT_PX = 84
"""Height of the cumulative profit plot (pixels)."""
KV_MIN_PX = 180
"""The KV plot's least height (pixels) beside the profit plot: a shorter timeline (a small screen) hides the
profit plot (Statistics and the plot's tooltip keep the run's balance)."""


class Timeline(QWidget):
    """KV positions (tokens) against the decode step (windows and plain steps)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session: SessionRecord | None = None
        self._drawn_version = -1
        self._reset_steps()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.plot = pg.PlotWidget(background="w", axisItems={"bottom": IntegerAxis("bottom")})
        self.plot.setLabel("bottom", "decode step")
        self.plot.setLabel("left", "KV position (tokens)")
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.setToolTip("● base_position (KV length before the window) · ▲ position_after_verification · "
                             "◆ a tree window's base + all its rows (KV cells of its one batch; its other branches leave at "
                             "once, ▲ is the kept branch's end) · ■ canonical_position (after the repair) · small dots: plain steps (KV length after) · "
                             "× failed window · ★ the prefill and the first token · line: live KV length")
        # A margin after the last step, so its markers are not on the frame.
        self.plot.getPlotItem().getViewBox().setDefaultPadding(0.03)
        self.live = self.plot.plot([], [], pen=pg.mkPen("#90a4ae", width=1.5), name="live KV length")
        self.base = self.plot.plot([], [], pen=None, symbol="o", symbolSize=7, symbolBrush="#455a64",
                                   symbolPen=None, name="base_position")
        self.after = self.plot.plot([], [], pen=None, symbol="t1", symbolSize=9, symbolBrush="#ef6c00",
                                    symbolPen=None, name="position_after_verification")
        self.tree = self.plot.plot([], [], pen=None, symbol="d", symbolSize=9, symbolBrush="#6a1b9a",
                                   symbolPen=None, name="tree window: base + its rows")
        self.canonical = self.plot.plot([], [], pen=None, symbol="s", symbolSize=7, symbolBrush="#2e7d32",
                                        symbolPen=None, name="canonical_position")
        self.plain = self.plot.plot([], [], pen=None, symbol="o", symbolSize=4, symbolBrush="#78909c",
                                    symbolPen=None, name="plain step (KV length after)")
        self.failed = self.plot.plot([], [], pen=None, symbol="x", symbolSize=12, symbolBrush="#c62828",
                                     symbolPen=pg.mkPen("#c62828", width=2), name="failed window (canonical)")
        self.prefill = self.plot.plot([], [], pen=None, symbol="star", symbolSize=13, symbolBrush="#e65100",
                                      symbolPen=None, name="prefill → first token")
        # The legend is a row of its own above the plot (issue 36, 8: inside the plot it covered points, on
        # the screen and in File > Export plots); it hides when the timeline is short (``fit_profit``).
        self.legend = QLabel(" &nbsp; ".join(
            f"<span style='color:{color};font-size:{size}'>{glyph}</span>&nbsp;{name}"
            for glyph, color, size, name in LEGEND))
        self.legend.setWordWrap(True)
        self.legend.setContentsMargins(6, 0, 0, 0)
        self.legend.setToolTip(self.plot.toolTip())
        lay.addWidget(self.legend)
        lay.addWidget(self.plot)
        # Why no window: the plain steps by reason, on the KV plot's decode-step axis (issue 28).
        self.lane = pg.PlotWidget(background="w")
        self.lane.setXLink(self.plot)
        self.lane.setMouseEnabled(x=True, y=False)
        self.lane.setToolTip("why no window ran at these decode steps: each plain step's reason (the engine's or "
                             "the source's; Statistics says what each means)")
        self.lane.getAxis("bottom").setStyle(showValues=False)
        self.lane_marks = pg.ScatterPlotItem(size=6, pen=None, symbol="s")
        self.lane.addItem(self.lane_marks)
        self.lane.hide()
        lay.addWidget(self.lane)
        # What the windows saved against plain decoding so far (issue 28): the running sum of each
        # window's profit (``inspector.engine.profit``), on the same decode-step axis.
        self.cost_model = None
        self._own_c1 = OwnC1()
        self.profit_plot = pg.PlotWidget(background="w")
        self.profit_plot.setXLink(self.plot)
        self.profit_plot.setMouseEnabled(x=True, y=False)
        self.profit_plot.setLabel("left", "profit (ms)")
        self.profit_plot.getAxis("bottom").setStyle(showValues=False)
        self.profit_plot.showGrid(x=True, y=True, alpha=0.25)
        self.profit_plot.addItem(pg.InfiniteLine(pos=0, angle=0, pen=pg.mkPen("#9e9e9e", width=1)))
        self.profit = self.profit_plot.plot([], [], pen=pg.mkPen("#2e7d32", width=2), symbol="o", symbolSize=4,
                                            symbolBrush="#2e7d32", symbolPen=None)
        self.profit_plot.setFixedHeight(PROFIT_PX)
        self.profit_plot.hide()
        self.profit_ready = False
        """The profit line has data (a window and a c(1)); shown when there is room (``fit_profit``)."""
        lay.addWidget(self.profit_plot)
        for axis in (self.plot.getAxis("left"), self.lane.getAxis("left"), self.profit_plot.getAxis("left")):
            axis.setWidth(LANE_AXIS_PX)  # the same left edge: a lane mark sits under its decode step

    def _reset_steps(self) -> None:
        # Plain steps read from the session's events so far (append-only): for each,
        # (window before it or None, plain steps since that window, KV length after it).
        self._events_read = 0
        self._prefill_kv: int | None = None
        self._last_window: int | None = None
        self._since_window = 0
        self._plain: list[tuple[int | None, int, int]] = []
        self._plain_reasons: list[str] = []  # each plain step's reason code (inspector.engine.no_proposal)

    def set_session(self, session: SessionRecord) -> None:
        self.session = session
        self._drawn_version = -1
        self._reset_steps()

    def set_cost_model(self, cost_model) -> None:
        """Take ``c(1)`` from ``cost_model`` (``inspector.llama.cost_model.CostModel`` or None) for the
        profit line when the run has no plain step of its own."""
        self.cost_model = cost_model
        self._drawn_version = -1

    def profit_c1(self) -> tuple[float | None, str]:
        """(``c(1)`` in microseconds, where it comes from) for the profit line: the run's own plain steps,
        else the cost model; (None, why) when neither is known."""
        s = self.session
        own = None if s is None else self._own_c1.of(id(s), s.lock_ops, s.main_session_id)
        if own is not None:
            return own, "plain steps of this run"
        if self.cost_model is not None:
            return self.cost_model.cost(1) * 1000, "the cost model"
        return None, "no plain step and no cost model to give c(1)"

    def point_count(self) -> int:
        """Windows drawn (verified + failed)."""
        return len(self.base.xData if self.base.xData is not None else []) + \
            len(self.failed.xData if self.failed.xData is not None else [])

    def plain_step_count(self) -> int:
        """Plain steps drawn."""
        return 0 if self.plain.xData is None else len(self.plain.xData)

    def _read_events(self, s: SessionRecord) -> None:
        events = s.events
        for i in range(self._events_read, len(events)):
            e = events[i]
            if e.kind == VERIFY or (e.kind == DISCARD and e.window is not None):
                if e.window != self._last_window:
                    self._last_window, self._since_window = e.window, 0
            elif e.kind == STEP and e.position is not None:
                self._since_window += 1
                self._plain.append((self._last_window, self._since_window, e.position))
                self._plain_reasons.append(reason_code(e.detail or ""))
            elif e.kind == PREFILL and e.position is not None and e.token is not None:
                self._prefill_kv = e.position  # the prompt's KV length; the first token came from its last row
        self._events_read = len(events)

    def decode_steps(self) -> tuple[dict[int, int], list[tuple[int, int]]]:
        """(window index -> decode step, [(decode step, KV length after) per plain step]), as drawn.
        A plain step after a window whose receipt has not arrived yet is left out until it does."""
        s = self.session
        if s is None:
            return {}, []
        self._read_events(s)
        steps = {e.window_index: e.decode_step for e in s.windows()}
        plain = []
        for window, k, position in self._plain:
            anchor = -1 if window is None else steps.get(window)
            if anchor is not None:
                plain.append((anchor + k, position))
        return steps, plain

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self.fit_profit()

    def fit_profit(self) -> None:
        """Show the profit plot when it has data and leaves the KV plot ``KV_MIN_PX``, then the legend row
        when the KV plot keeps ``LEGEND_MIN_PLOT_PX`` under it (from the timeline's own height, so showing
        one never flips the other back)."""
        gap = self.layout().spacing()
        room = self.height() - (self.lane.maximumHeight() + gap if not self.lane.isHidden() else 0)
        profit = self.profit_ready and room - PROFIT_PX - gap >= KV_MIN_PX
        self.profit_plot.setVisible(profit)
        room -= PROFIT_PX + gap if profit else 0
        legend = self.legend.heightForWidth(max(self.width(), 1)) + gap
        self.legend.setVisible(room - legend >= LEGEND_MIN_PLOT_PX)

    def reason_steps(self) -> list[tuple[int, str]]:
        """(decode step, reason code) of each plain step drawn (``decode_steps``' plain steps, in order)."""
        s = self.session
        if s is None:
            return []
        steps = {e.window_index: e.decode_step for e in s.windows()}
        out = []
        for (window, k, _position), code in zip(self._plain, self._plain_reasons):
            anchor = -1 if window is None else steps.get(window)
            if anchor is not None:
                out.append((anchor + k, code or "-"))
        return out

    def _draw_lane(self) -> None:
        """The "why no window" lane: one row per reason code, a mark at each plain step's decode step."""
        marks = self.reason_steps()
        codes = list(dict.fromkeys(code for _d, code in marks))
        self.lane.setVisible(bool(codes))
        if not codes:
            return
        row = {c: i for i, c in enumerate(codes)}
        brushes = [pg.mkBrush(LANE_COLORS[row[c] % len(LANE_COLORS)]) for _d, c in marks]
        self.lane_marks.setData(x=np.array([d for d, _c in marks], float),
                                y=np.array([row[c] for _d, c in marks], float), brush=brushes)
        self.lane.getAxis("left").setTicks([[(i, c) for i, c in enumerate(codes)]])
        self.lane.setYRange(-0.6, len(codes) - 0.4, padding=0)
        self.lane.setFixedHeight(LANE_ROW_PX * len(codes) + 30)

    def refresh(self) -> None:
        s = self.session
        if s is None or s.version == self._drawn_version:
            return
        self._drawn_version = s.version
        steps, plain = self.decode_steps()
        xs, base, after, canon, fx, fy, tx, ty = [], [], [], [], [], [], [], []
        line: list[tuple[float, float, float, float, float, float]] = []  # x0 y0 x1 y1 x2 y2 per step
        for e in s.windows():
            d = steps[e.window_index]
            if e.receipt is not None:
                r = e.receipt
                b, a, c = r.base_position, r.position_after_verification, r.canonical_position
                xs.append(d)
                base.append(b)
                after.append(a)
                canon.append(c)
                if r.tree is not None:
                    tx.append(d)
                    ty.append(b + r.tree.rows)
            else:
                p = e.discard.partial
                b, a, c = p.base_position, p.position_after_verification, p.canonical_position
                fx.append(d)
                fy.append(c)
                if a is None:
                    a = b
            line.append((d - HALF, b, d, a, d + HALF, c))
        for d, position in plain:
            line.append((d - HALF, position - 1, d, position - 0.5, d + HALF, position))
        if self._prefill_kv is not None:
            line.append((-1 - HALF, self._prefill_kv, -1, self._prefill_kv, -1 + HALF, self._prefill_kv))
        pts = np.array(sorted(line), float).reshape(-1, 6)
        x = np.array(xs, float)
        set_limited(self.base, x, np.array(base, float))
        set_limited(self.after, x, np.array(after, float))
        set_limited(self.canonical, x, np.array(canon, float))
        set_limited(self.tree, np.array(tx, float), np.array(ty, float))
        set_limited(self.failed, np.array(fx, float), np.array(fy, float))
        pre = [] if self._prefill_kv is None else [self._prefill_kv]
        self.prefill.setData(np.array([-1.0] * len(pre)), np.array(pre, float))
        set_limited(self.plain, np.array([d for d, _ in plain], float), np.array([p for _, p in plain], float))
        set_limited(self.live, pts[:, 0::2].ravel(), pts[:, 1::2].ravel())
        kv = s.kv_length
        self.plot.setTitle(f"live KV length {kv if kv is not None else '—'} · canonical position "
                           f"{s.canonical_position if s.canonical_position is not None else '—'} (tokens)")
        self._draw_lane()
        self._draw_profit(s)

    def _draw_profit(self, s: SessionRecord) -> None:
        """The cumulative profit line: after each window, what the windows so far saved (above 0) or
        lost against plain decoding of their tokens at ``c(1)`` (``profit_c1``), in milliseconds."""
        c1, source = self.profit_c1()
        receipts = s.receipts
        self.profit_ready = bool(receipts) and c1 is not None
        self.fit_profit()
        if not receipts or c1 is None:
            self.profit_plot.setToolTip(f"cumulative profit: {source}")
            return
        steps, total = cumulative_profit_us(receipts, c1)
        set_limited(self.profit, np.array(steps, float), np.array(total, float) / 1000)
        self.profit_plot.setToolTip(
            f"cumulative profit after each window: committed tokens × c(1) − (proposal + verification + repair), "
            f"summed; c(1) {c1 / 1000:.1f} ms from {source}. Net {total[-1] / 1000:+.1f} ms after "
            f"{len(total)} windows (Statistics: windows vs plain)")
