"""The Requests tab's concurrency lanes (pyqtgraph): which slot ran which request when, and what each decode
step carried.

Top: a lane per slot (``serve -np N``) on a time axis (seconds since Serve began). Each request is a bar in
the lane of the slot that ran it, from a slot taking it until it ended (or now, while it runs), with a tick
where its first token went to the client; the ``queue`` lane above holds a thin line per request from its
arrival to a slot taking it (its wait). Below, with the batched schedule: each decode step is a thin column, a
cell in the lane of every slot whose rows rode in it, coloured by the kind of rows (prompt, plain, draft), so
one sees which slots a step joined; between the two, each slot's KV length over the steps (``KvLanes``).
Clicking a bar picks its request (``requestPicked``).

The widget gets only a ``feed`` (a callable returning a ``LanesFeed`` or None); the items are made once and
updated with ``setData`` / ``setOpts`` on the view's redraw tick; what is drawn is bounded (the newest
``KEEP_REQUESTS`` requests and ``KEEP_STEPS`` steps).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from inspector.engine.step_batch import DRAFT, PLAIN, PROMPT
from inspector.gui.serve.kv_lanes import KvLanes, slot_parts
from inspector.serve.job import ServedRequest

KEEP_REQUESTS = 500
"""The newest requests drawn."""
KEEP_STEPS = 2000
"""The newest decode steps drawn."""
LABELS = 24
"""Request ids written in their bars (the newest ones: a pool of text items made once)."""
QUEUE_LANE = -1
"""The lane (y) of requests still waiting for a slot; slot ``i``'s lane is ``i`` (the y axis is inverted)."""
BAR_HALF = 0.32
"""Half a bar's height (lanes are 1 apart)."""
CELL_HALF = 0.42
STATE_COLORS = {"running": "#1e88e5", "done": "#90a4ae", "error": "#e53935", "cancelled": "#bdbdbd"}
"""Bar colour by how the request is doing (``done``: ended well; ``error`` / ``cancelled``: ``ended_as``)."""
WAIT_COLOR = "#757575"
FIRST_COLOR = "#212121"
SHOWN_COLOR = "#ff6f00"
LABEL_COLOR = "#0d1b2a"
KIND_COLORS = {PROMPT: "#fb8c00", PLAIN: "#43a047", DRAFT: "#8e24aa"}
"""A step cell's colour by the kind of rows the slot put in it."""
KINDS = (PROMPT, PLAIN, DRAFT)
LANES_MIN_PX = 48
"""The lanes plot's least height (the tab is a small part of the window)."""
STEP_LANE_PX = 9
"""Height of a slot's row in the steps strip (pixels)."""
MIN_CELL_PX = 2.0
"""A step cell is at least this wide on screen (a decode of a few ms is under a pixel at a minute's span)."""


@dataclass(frozen=True)
class LanesFeed:
    """What the lanes show: the requests' ``rows`` (oldest first, updated in place by the server), the batched
    schedule's ``steps`` (a ``StepBatch``, None with the locked schedule or one slot), which slot each KV
    session belongs to (``slot_of_session``: the step records name sessions), the number of slots and the
    positions (tokens) one slot's request may use (``n_ctx_slot``; 0: not known)."""

    rows: Sequence[ServedRequest]
    steps: object | None
    slot_of_session: Mapping[int, int]
    n_slots: int
    n_ctx_slot: int = 0


@dataclass(frozen=True)
class RequestBars:
    """The geometry of the drawn requests (seconds since Serve began; ``lane``: slot, or ``QUEUE_LANE``):
    ``start`` is when a slot took it (its arrival while it waits), ``end`` when it ended (now while it runs),
    ``first`` its first token (NaN: none yet), ``state`` its colour key (``STATE_COLORS``)."""

    ids: np.ndarray
    lane: np.ndarray
    arrived: np.ndarray
    start: np.ndarray
    end: np.ndarray
    first: np.ndarray
    state: tuple[str, ...]


@dataclass(frozen=True)
class StepCells:
    """The geometry of the drawn steps: one cell per (step, slot whose rows rode in it): its step ``index``,
    ``x0`` / ``x1`` (seconds since Serve began), ``lane`` (slot), ``kind`` (``KINDS``) and ``rows``."""

    index: np.ndarray
    x0: np.ndarray
    x1: np.ndarray
    lane: np.ndarray
    kind: tuple[str, ...]
    rows: np.ndarray

    def slots_per_step(self) -> dict[int, int]:
        """How many slots' rows each step carried (step index: slots)."""
        seen: dict[int, set] = {}
        for i, lane in zip(self.index.tolist(), self.lane.tolist()):
            seen.setdefault(i, set()).add(lane)
        return {i: len(s) for i, s in seen.items()}


def state_key(row: ServedRequest) -> str:
    """The colour key of ``row``'s bar: ``running`` (or waiting), ``error``, ``cancelled`` or ``done``."""
    if row.state != "done":
        return "running"
    return row.ended_as if row.ended_as in ("error", "cancelled") else "done"


def request_bars(rows: Sequence[ServedRequest], origin: float, now: float, keep: int = KEEP_REQUESTS) -> RequestBars:
    """The bars of the newest ``keep`` of ``rows`` (``ServedRequest``: times in seconds since the epoch), in
    seconds since ``origin``; ``now``: where a running or waiting request's bar ends (seconds since the epoch).
    A request that ended without a slot taking it (cancelled while it waited) shows only its wait, in the
    queue lane."""
    rows = list(rows[-keep:]) if keep else []
    ids, lane, arrived, start, end, first, state = [], [], [], [], [], [], []
    for r in rows:
        taken = r.started is not None and r.slot >= 0
        stop = r.ended if r.ended is not None else now
        ids.append(r.id)
        lane.append(r.slot if taken else QUEUE_LANE)
        arrived.append(r.arrived)
        start.append(r.started if taken else r.arrived)
        end.append(max(stop, r.started) if taken else stop)
        first.append(r.first_token_at if r.first_token_at is not None else np.nan)
        state.append(state_key(r))
    f = np.asarray
    return RequestBars(f(ids, int), f(lane, int), f(arrived, float) - origin, f(start, float) - origin,
                       f(end, float) - origin, f(first, float) - origin, tuple(state))


def wait_ends(bars: RequestBars) -> np.ndarray:
    """Where each request's wait ends: a slot took it (``start``), or it ended (now while it waits)."""
    return np.where(bars.lane == QUEUE_LANE, bars.end, bars.start)


def waiting_segments(bars: RequestBars) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of the wait lines, in pairs (``connect="pairs"``), all in the queue lane: from a request's arrival
    to a slot taking it (or its end, now while it waits). In the queue lane they stay seen after a slot took
    the request (its own lane is taken by the request before it, then)."""
    x1 = wait_ends(bars)
    keep = x1 > bars.arrived
    x = np.column_stack([bars.arrived[keep], x1[keep]]).ravel()
    return x, np.full(len(x), float(QUEUE_LANE))


def step_cells(steps: Sequence, slot_of_session: Mapping[int, int], zero_s: float,
               min_width_s: float = 0.0) -> StepCells:
    """The cells of ``steps`` (``StepRecord``: ``started_us`` / ``decode_us`` in microseconds since the step
    batch's epoch), the epoch being ``zero_s`` seconds after Serve began; a cell is at least ``min_width_s``
    wide. Only the parts a slot's request put in a step are drawn (``slot_parts``: not a probe's)."""
    index, x0, x1, lane, kind, rows = [], [], [], [], [], []
    for s in steps:
        a = zero_s + s.started_us * 1e-6
        b = a + max(s.decode_us * 1e-6, min_width_s)
        for slot, p in slot_parts(s, slot_of_session):
            index.append(s.index)
            x0.append(a)
            x1.append(b)
            lane.append(slot)
            kind.append(p.kind)
            rows.append(p.rows)
    f = np.asarray
    return StepCells(f(index, int), f(x0, float), f(x1, float), f(lane, int), tuple(kind), f(rows, int))


def bar_at(bars: RequestBars, x: float, y: float, slack: float = 0.0) -> int | None:
    """The id of the request whose bar (a slot's lane) or wait line (the queue lane) is at (``x``, ``y``) (view
    coordinates; ``slack``: seconds of tolerance either side), the newest when several are; None when none is."""
    lane = int(round(y))
    if abs(y - lane) > 0.5:
        return None
    if lane == QUEUE_LANE:
        hit = (bars.arrived - slack <= x) & (x <= wait_ends(bars) + slack)
    else:
        hit = (bars.lane == lane) & (bars.start - slack <= x) & (x <= bars.end + slack)
    found = np.flatnonzero(hit)
    return int(bars.ids[found[-1]]) if len(found) else None


def newest_steps(batch, keep: int = KEEP_STEPS) -> list:
    """The newest ``keep`` steps of ``batch`` (a ``StepBatch``), oldest first. Its deque grows on the engine's
    thread: the copy is one C-level pass (no Python code runs between its items, so no append lands in it);
    should one land anyway the copy is taken again."""
    for _ in range(3):
        try:
            return list(itertools.islice(reversed(batch.steps), keep))[::-1]
        except RuntimeError:  # "deque mutated during iteration"
            continue
    return []


class ConcurrencyLanes(QWidget):
    """The lanes of the requests and the steps of the batched schedule (module docstring). ``feed()``: a
    ``LanesFeed`` or None (nothing served yet); ``attach`` gives a new server's feed. ``requestPicked(id)``:
    the user clicked a request's bar. ``shown``: the id of the request the views show (outlined)."""

    requestPicked = Signal(int)

    def __init__(self, feed: Callable[[], LanesFeed | None] = lambda: None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.feed = feed
        self.origin = time.time()
        # The rows' times are epoch seconds (time.time()); the steps' are perf_counter_ns since StepBatch.epoch_ns.
        # One offset between the two clocks, measured once at the same moment, converts the steps' to the rows'.
        self.perf_to_epoch = time.time() - time.perf_counter()
        self.shown: int | None = None
        self.bars = request_bars([], 0.0, 0.0)
        self.cells = step_cells([], {}, 0.0)
        self._drawn = None  # what the last redraw showed, to skip a tick when nothing moved
        self._lanes = -2
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.legend = QLabel(
            "<b>Slots</b> "
            + " ".join(f"<span style='color:{STATE_COLORS[k]}'>■</span> {k}" for k in ("running", "done", "error"))
            + f" &nbsp;<span style='color:{WAIT_COLOR}'>━</span> waiting &nbsp;<b style='color:{FIRST_COLOR}'>|</b> "
              "first token"
            + " &nbsp;│&nbsp; <b>Steps</b> "
            + " ".join(f"<span style='color:{KIND_COLORS[k]}'>■</span> {k}" for k in KINDS))
        self.legend.setToolTip("each request in the lane of the slot that ran it: the line is its wait in the "
                               "queue, the bar its run, the tick its first token; click a bar to show that request. "
                               "Below (batched schedule): each slot's KV length over time, then each decode "
                               "step, a cell per slot whose rows it carried (prompt tokens, a plain step's one row, "
                               "a window's draft rows)")
        self.legend.setWordWrap(True)
        lay.addWidget(self.legend)
        self.lanes_plot = pg.PlotWidget(background="w")
        lp = self.lanes_plot.getPlotItem()
        self.lanes_plot.setMinimumHeight(LANES_MIN_PX)
        lp.invertY(True)
        lp.setMouseEnabled(y=False)
        lp.hideButtons()
        lp.showGrid(x=True, alpha=0.2)
        lp.setLabel("bottom", "seconds since Serve began")
        self.waits = lp.plot([], [], pen=pg.mkPen(WAIT_COLOR, width=1.5), connect="pairs")
        edge = pg.mkPen("w", width=1)  # a request that began as the one before it ended still shows as two bars
        self.bar_items = {k: pg.BarGraphItem(x0=[], x1=[], y0=[], y1=[], brush=c, pen=edge)
                          for k, c in STATE_COLORS.items()}
        for item in self.bar_items.values():
            lp.addItem(item)
        self.shown_item = pg.BarGraphItem(x0=[], x1=[], y0=[], y1=[], brush=None, pen=pg.mkPen(SHOWN_COLOR, width=2))
        lp.addItem(self.shown_item)
        self.firsts = pg.ScatterPlotItem([], [], symbol="|", size=18, pen=None, brush=FIRST_COLOR)
        lp.addItem(self.firsts)
        self.labels = [pg.TextItem("", color=LABEL_COLOR, anchor=(0.0, 0.5)) for _ in range(LABELS)]
        for t in self.labels:
            t.setZValue(5)
            t.hide()
            lp.addItem(t, ignoreBounds=True)
        self.steps_plot = pg.PlotWidget(background="w")
        sp = self.steps_plot.getPlotItem()
        sp.invertY(True)
        sp.setMouseEnabled(y=False)
        sp.hideButtons()
        sp.setXLink(lp)
        sp.setLabel("bottom", "seconds since Serve began")
        sp.getAxis("left").setToolTip("each decode step: a cell in the row of every slot whose rows it carried "
                                      "(rows in the order of the lanes above)")
        self.cell_items = {k: pg.BarGraphItem(x0=[], x1=[], y0=[], y1=[], brush=KIND_COLORS[k], pen=None)
                           for k in KINDS}
        for item in self.cell_items.values():
            sp.addItem(item)
        self.steps_note = QLabel("")
        self.steps_note.setStyleSheet("color:#555")
        self.kv = KvLanes()
        self.kv.link(lp)
        lay.addWidget(self.lanes_plot, 1)
        lay.addWidget(self.kv, 1)
        lay.addWidget(self.steps_plot)
        lay.addWidget(self.steps_note)
        self.steps_plot.hide()
        self.kv.hide()
        lp.scene().sigMouseClicked.connect(self._clicked)
        for axis in ("left",):
            lp.getAxis(axis).setWidth(56)
            sp.getAxis(axis).setWidth(56)
            self.kv.plot.getPlotItem().getAxis(axis).setWidth(56)

    def attach(self, feed: Callable[[], LanesFeed | None]) -> None:
        """Show a new server's traffic from now on (its times count from now)."""
        self.feed = feed
        self.origin = time.time()
        self._drawn = None
        self.lanes_plot.getPlotItem().enableAutoRange(x=True)

    def _set_lanes(self, n: int) -> None:
        """Label the y axes for ``n`` slots (once per count)."""
        if n == self._lanes:
            return
        self._lanes = n
        ticks = [(QUEUE_LANE, "queue")] + [(i, f"slot {i}") for i in range(n)]
        self.lanes_plot.getPlotItem().getAxis("left").setTicks([ticks, []])
        self.lanes_plot.getPlotItem().setYRange(QUEUE_LANE - 0.5, n - 0.5, padding=0)
        self.steps_plot.getPlotItem().getAxis("left").setTicks([[((n - 1) / 2, "steps")], []])
        self.steps_plot.getPlotItem().setYRange(-0.5, n - 0.5, padding=0)
        self.steps_plot.setFixedHeight(STEP_LANE_PX * n + self.fontMetrics().height() * 3 + 8)

    def refresh(self) -> None:
        """Redraw from the feed (the redraw tick): every tick while a request waits or runs, else when the
        requests or steps changed."""
        feed = self.feed()
        if feed is None:
            return
        rows = feed.rows
        recent = rows[-64:]
        live = any(r.state != "done" for r in recent)
        batch = feed.steps
        key = (len(rows), rows[-1].id if rows else 0, sum(r.ended is not None for r in recent), live,
               getattr(batch, "step_count", 0), self.shown, feed.n_slots)  # a request's end is drawn once more
        if not live and key == self._drawn:
            return
        self._drawn = key
        self._set_lanes(feed.n_slots)
        now = time.time()
        self.bars = bars = request_bars(rows, self.origin, now)
        self._draw_bars(bars)
        if batch is None:
            self.cells = step_cells([], {}, 0.0)
            self._show_steps(False)
            self.steps_note.setText("" if feed.n_slots == 1 else
                                    "locked schedule: each slot decodes on its own under the runtime lock "
                                    "(no shared steps to show)")
            self.steps_note.setVisible(feed.n_slots > 1)
            return
        self._show_steps(True)
        self.steps_note.hide()
        zero_s = self.perf_to_epoch + batch.epoch_ns * 1e-9 - self.origin
        (x_lo, x_hi), width_px = self.lanes_plot.getPlotItem().viewRange()[0], max(1, self.lanes_plot.width())
        steps = newest_steps(batch)
        self.cells = cells = step_cells(steps, feed.slot_of_session, zero_s, MIN_CELL_PX * (x_hi - x_lo) / width_px)
        self.kv.draw(steps, feed.slot_of_session, zero_s, feed.n_slots, feed.n_ctx_slot)
        for k, item in self.cell_items.items():
            m = np.asarray([c == k for c in cells.kind], bool).reshape(-1)
            item.setOpts(x0=cells.x0[m], x1=cells.x1[m], y0=cells.lane[m] - CELL_HALF, y1=cells.lane[m] + CELL_HALF)

    def _show_steps(self, on: bool) -> None:
        """The KV lanes and the steps strip under the lanes (the time axis moves down to it), or the lanes alone."""
        if on == self.steps_plot.isVisibleTo(self):
            return
        self.steps_plot.setVisible(on)
        self.kv.setVisible(on)
        lp = self.lanes_plot.getPlotItem()
        lp.showAxis("bottom", not on)

    def _draw_bars(self, bars: RequestBars) -> None:
        x, y = waiting_segments(bars)
        self.waits.setData(x, y)
        ran = bars.lane != QUEUE_LANE
        for k, item in self.bar_items.items():
            m = ran & np.asarray([s == k for s in bars.state], bool).reshape(-1)
            item.setOpts(x0=bars.start[m], x1=bars.end[m], y0=bars.lane[m] - BAR_HALF, y1=bars.lane[m] + BAR_HALF)
        m = ran & (bars.ids == (self.shown if self.shown is not None else -1))
        self.shown_item.setOpts(x0=bars.start[m], x1=bars.end[m], y0=bars.lane[m] - BAR_HALF,
                                y1=bars.lane[m] + BAR_HALF)
        has = ran & ~np.isnan(bars.first)
        self.firsts.setData(bars.first[has], bars.lane[has].astype(float))
        newest = np.flatnonzero(ran)[-LABELS:]
        for t, i in itertools.zip_longest(self.labels, newest):
            if t is None:
                break
            if i is None:
                t.hide()
                continue
            t.setText(f"#{bars.ids[i]}")
            t.setPos(float(bars.start[i]), float(bars.lane[i]))  # inside the bar, from its start
            t.show()

    def _clicked(self, ev) -> None:
        vb = self.lanes_plot.getPlotItem().vb
        if ev.button() != Qt.MouseButton.LeftButton or not vb.sceneBoundingRect().contains(ev.scenePos()):
            return
        p = vb.mapSceneToView(ev.scenePos())
        x_lo, x_hi = vb.viewRange()[0]
        rid = bar_at(self.bars, p.x(), p.y(), slack=3 * (x_hi - x_lo) / max(1, self.lanes_plot.width()))
        if rid is not None:
            self.pick(rid)

    def pick(self, rid: int) -> None:
        """Pick request ``rid`` as a click on its bar does."""
        self.requestPicked.emit(rid)

    def bar_centre(self, rid: int) -> tuple[float, float] | None:
        """(x, y) in view coordinates of the middle of request ``rid``'s bar (tests), None when not drawn."""
        found = np.flatnonzero(self.bars.ids == rid)
        if not len(found):
            return None
        i = found[-1]
        return float((self.bars.start[i] + self.bars.end[i]) / 2), float(self.bars.lane[i])
