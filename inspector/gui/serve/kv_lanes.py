"""The Slots page's KV lanes (pyqtgraph): how long each slot's KV sequence is over time, with the batched schedule.

A lane per slot (slot 0 on top, as in the request lanes above), on the lanes' time axis (seconds since Serve
began; the x axis is linked to theirs, so zoom and pan move both). In its lane, a slot's KV length (tokens) is a
step line over the decode steps that carried its rows: during a step, the length before its rows
(``kv_end - rows``); once the step was decoded, the length after them (``kv_end``); it holds until the slot's next
step, which starts where the sequence was left: lower when a window's rejected rows were trimmed, or when a new
request reset the sequence to the prefix it reused. Every lane has the same height: 0 tokens at its foot,
``scale`` tokens near its top (the largest length drawn rounded up to 1, 2 or 5 x 10^k, at most the slot's
context when that holds it); the label above says the scale.

``ConcurrencyLanes`` makes it once, draws it on its redraw tick with the same newest steps as its steps strip
(``KEEP_STEPS``) and hides it with the strip (the locked schedule, one slot: no steps).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

KV_COLOR = "#00838f"
"""The KV lines' colour (one for every slot: the lane says which)."""
KV_FILL = (0, 131, 143, 40)
"""The area under a lane's line (RGBA)."""
LANE_FOOT = 0.06
"""Where 0 tokens is in a lane (a lane is 1 high: slot ``i`` of ``n`` spans ``[n-1-i, n-i)``)."""
LANE_FILL = 0.84
"""The height of ``scale`` tokens in a lane (the rest keeps lanes apart)."""
KV_MIN_PX = 48
"""The KV plot's least height (the tab is a small part of the window)."""
NOTE_STYLE = "color:#555"


@dataclass(frozen=True)
class KvLines:
    """The KV lines of the drawn steps, one per slot: ``x[i]`` (seconds since Serve began) and ``kv[i]`` (tokens)
    are the points of slot ``i``'s step line (empty: no step carried its rows); ``scale``: the tokens a lane's
    height stands for (``kv_scale``)."""

    x: tuple[np.ndarray, ...]
    kv: tuple[np.ndarray, ...]
    scale: int

    @property
    def largest(self) -> int:
        """The largest KV length drawn (tokens; 0 when nothing is)."""
        return max((int(k.max()) for k in self.kv if len(k)), default=0)

    def y(self, slot: int) -> np.ndarray:
        """Slot ``slot``'s line in view coordinates (``lane_y``)."""
        return lane_y(self.kv[slot], slot, len(self.kv), self.scale)


def slot_parts(step, slot_of_session: Mapping[int, int]) -> Iterator[tuple[int, object]]:
    """(slot, part) for each part (``SlotRows``) of ``step`` (a ``StepRecord``) that a slot's request put in it.
    Left out: parts of sessions no slot owns, and every part of a step no session with a request joined
    (``active`` 0: guests only, such as the KV rollback probe Serve runs first, whose spare session id, a KV
    sequence id, a slot opens again later)."""
    if step.active == 0:
        return
    for p in step.parts:
        slot = slot_of_session.get(p.session_id)
        if slot is not None:
            yield slot, p


def nice_ceiling(n: float) -> int:
    """The least of 1, 2, 5, 10, 20, 50, ... at or above ``n``."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if m * step >= n:
                return m * step
        step *= 10


def kv_scale(largest: int, n_ctx_slot: int = 0) -> int:
    """The tokens a lane's height stands for: ``largest`` (tokens) rounded up (``nice_ceiling``), at most
    ``n_ctx_slot`` (a slot's context, positions; 0: not known) when that holds ``largest``; at least 1."""
    scale = nice_ceiling(max(1, largest))
    if 0 < n_ctx_slot and largest <= n_ctx_slot:
        scale = min(scale, n_ctx_slot)
    return scale


def lane_base(slot: int, n_slots: int) -> float:
    """The foot of slot ``slot``'s lane (y; slot 0's lane is the top one)."""
    return float(n_slots - 1 - slot)


def lane_y(kv: np.ndarray, slot: int, n_slots: int, scale: int) -> np.ndarray:
    """KV lengths ``kv`` (tokens) of slot ``slot`` as y in its lane: 0 at ``LANE_FOOT`` above the lane's foot,
    ``scale`` tokens ``LANE_FILL`` higher."""
    return lane_base(slot, n_slots) + LANE_FOOT + LANE_FILL * np.asarray(kv, float) / max(1, scale)


def kv_lines(steps: Sequence, slot_of_session: Mapping[int, int], zero_s: float, n_slots: int,
             n_ctx_slot: int = 0) -> KvLines:
    """The KV lines of ``steps`` (``StepRecord``, oldest first: ``started_us`` / ``decode_us`` in microseconds
    since the step batch's epoch, which is ``zero_s`` seconds after Serve began) for ``n_slots`` slots. For each
    part of a step (``SlotRows``: ``kv_end`` and ``rows`` in tokens) a slot's request put in it (``slot_parts``):
    the points (start, kv_end - rows), (end, kv_end - rows), (end, kv_end), after a point (start, the slot's
    length after its previous step) that holds the line until this step. Parts with ``kv_end`` unknown (-1) are
    left out. ``n_ctx_slot``: a slot's context (positions; 0: not known), for the scale."""
    xs: list[list[float]] = [[] for _ in range(n_slots)]
    ks: list[list[int]] = [[] for _ in range(n_slots)]
    for s in steps:
        a = zero_s + s.started_us * 1e-6
        b = a + s.decode_us * 1e-6
        for slot, p in slot_parts(s, slot_of_session):
            if not 0 <= slot < n_slots or p.kv_end < 0:
                continue
            before = max(0, p.kv_end - p.rows)
            x, k = xs[slot], ks[slot]
            if k:
                x.append(a)
                k.append(k[-1])
            x += (a, b, b)
            k += (before, before, p.kv_end)
    largest = max((max(k) for k in ks if k), default=0)
    return KvLines(tuple(np.asarray(x, float) for x in xs), tuple(np.asarray(k, float) for k in ks),
                   kv_scale(largest, n_ctx_slot))


class KvLanes(QWidget):
    """The KV lanes (module docstring): a one-line note with the scale over a plot with a lane per slot. The
    owner links its x axis (``link``) and calls ``draw`` on its redraw tick; ``lines``: what was drawn last."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.lines = kv_lines([], {}, 0.0, 0)
        self._lanes = -1
        self._scale = (-1, -1)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        self.note = QLabel("")
        self.note.setStyleSheet(NOTE_STYLE)
        lay.addWidget(self.note)
        self.plot = pg.PlotWidget(background="w")
        self.plot.setMinimumHeight(KV_MIN_PX)
        pi = self.plot.getPlotItem()
        pi.setMouseEnabled(y=False)
        pi.hideButtons()
        pi.showGrid(x=True, alpha=0.2)
        pi.hideAxis("bottom")  # the steps strip under it has the time axis
        lay.addWidget(self.plot, 1)
        self.curves: list[pg.PlotDataItem] = []
        """One line per slot (made when a slot count first needs it, then only updated)."""

    def link(self, plot_item: pg.PlotItem) -> None:
        """Share ``plot_item``'s x axis (the request lanes'): zoom and pan move both."""
        self.plot.getPlotItem().setXLink(plot_item)

    def _set_lanes(self, n: int) -> None:
        """Lanes and lines for ``n`` slots (once per count)."""
        if n == self._lanes:
            return
        self._lanes = n
        pi = self.plot.getPlotItem()
        while len(self.curves) < n:
            curve = pi.plot([], [], pen=pg.mkPen(KV_COLOR, width=1.5), brush=pg.mkBrush(*KV_FILL))
            self.curves.append(curve)
        for i, curve in enumerate(self.curves):
            curve.setFillLevel(lane_base(i, n) + LANE_FOOT if i < n else None)
            if i >= n:
                curve.setData([], [])
        pi.getAxis("left").setTicks([[(lane_base(i, n) + 0.5, f"slot {i}") for i in range(n)], []])
        pi.setYRange(0, max(1, n), padding=0)

    def draw(self, steps: Sequence, slot_of_session: Mapping[int, int], zero_s: float, n_slots: int,
             n_ctx_slot: int = 0) -> None:
        """Draw ``steps`` (``StepRecord``, oldest first; the caller bounds them) for ``n_slots`` slots: ``kv_lines``
        with the same arguments (``zero_s``: the step batch's epoch in seconds since Serve began)."""
        self._set_lanes(n_slots)
        self.lines = lines = kv_lines(steps, slot_of_session, zero_s, n_slots, n_ctx_slot)
        for i in range(n_slots):
            self.curves[i].setData(lines.x[i], lines.y(i))
        if (lines.scale, n_ctx_slot) != self._scale:
            self._scale = (lines.scale, n_ctx_slot)
            context = f"; a slot's context: {n_ctx_slot} tokens" if n_ctx_slot else ""
            self.note.setText(f"<b>KV</b> per slot: each lane 0–{lines.scale} tokens{context}")
            self.plot.getPlotItem().getAxis("left").setToolTip(
                f"each slot's KV length (its sequence in the KV cache, tokens), a lane each, 0–{lines.scale} tokens "
                f"high{context}: it rises by a step's rows as the step is decoded and drops where a window's "
                "rejected rows were trimmed or a new request kept only the prefix it reused")
