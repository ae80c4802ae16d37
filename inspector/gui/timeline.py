"""The KV position timeline (pyqtgraph): positions per window, in tokens.

Per window: ``base_position`` (KV length before verification),
``position_after_verification`` (base + rows), ``canonical_position`` (after
repair), and the live KV length traced through each window (grows by the
verify batch, drops back by the trim). Failed windows are marked in red.
Plot items are created once and updated with ``setData``; a long session's
series are downsampled to ``MAX_POINTS`` (peak: the extremes of each stretch).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QVBoxLayout, QWidget

from inspector.gui.session_model import SessionData


MAX_POINTS = 2000
"""Most points a plot series draws (about; twice as many for a line); longer series
are downsampled (``set_limited``)."""


def set_limited(item: pg.PlotDataItem, x: np.ndarray, y: np.ndarray) -> None:
    """``item.setData(x, y)``, downsampled to about ``MAX_POINTS`` points when longer:
    a line keeps the minimum and maximum of each stretch of ``ds`` points (no spike is
    lost), symbols keep every ``ds``-th point. Symbols for tens of thousands of points
    would take pyqtgraph seconds per redraw. ``item.xData`` stays the full series."""
    ds = -(-len(x) // MAX_POINTS) if len(x) > MAX_POINTS else 1
    line = item.opts.get("pen") is not None
    item.setDownsampling(ds=ds, auto=False, method="peak" if line else "subsample")
    item.setData(x, y)


class Timeline(QWidget):
    """KV positions (tokens) against window index."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session: SessionData | None = None
        self._drawn_version = -1
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.plot = pg.PlotWidget(background="w")
        self.plot.setLabel("bottom", "window")
        self.plot.setLabel("left", "KV position (tokens)")
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.addLegend(offset=(10, 10))
        self.live = self.plot.plot([], [], pen=pg.mkPen("#90a4ae", width=1.5), name="live KV length")
        self.base = self.plot.plot([], [], pen=None, symbol="o", symbolSize=7, symbolBrush="#455a64",
                                   symbolPen=None, name="base_position")
        self.after = self.plot.plot([], [], pen=None, symbol="t1", symbolSize=9, symbolBrush="#ef6c00",
                                    symbolPen=None, name="position_after_verification")
        self.canonical = self.plot.plot([], [], pen=None, symbol="s", symbolSize=7, symbolBrush="#2e7d32",
                                        symbolPen=None, name="canonical_position")
        self.failed = self.plot.plot([], [], pen=None, symbol="x", symbolSize=12, symbolBrush="#c62828",
                                     symbolPen=pg.mkPen("#c62828", width=2), name="failed window (canonical)")
        lay.addWidget(self.plot)

    def set_session(self, session: SessionData) -> None:
        self.session = session
        self._drawn_version = -1

    def point_count(self) -> int:
        """Windows drawn (verified + failed)."""
        return len(self.base.xData if self.base.xData is not None else []) + \
            len(self.failed.xData if self.failed.xData is not None else [])

    def refresh(self) -> None:
        s = self.session
        if s is None or s.version == self._drawn_version:
            return
        self._drawn_version = s.version
        xs, base, after, canon, lx, ly, fx, fy = [], [], [], [], [], [], [], []
        for e in s.windows():
            w = e.window_index
            if e.receipt is not None:
                r = e.receipt
                b, a, c = r.base_position, r.position_after_verification, r.canonical_position
                xs.append(w)
                base.append(b)
                after.append(a)
                canon.append(c)
            else:
                p = e.discard.partial
                b, a, c = p.base_position, p.position_after_verification, p.canonical_position
                fx.append(w)
                fy.append(c)
                if a is None:
                    a = b
            lx += [w - 0.3, w, w + 0.3]
            ly += [b, a, c]
        x = np.array(xs, float)
        set_limited(self.base, x, np.array(base, float))
        set_limited(self.after, x, np.array(after, float))
        set_limited(self.canonical, x, np.array(canon, float))
        set_limited(self.failed, np.array(fx, float), np.array(fy, float))
        set_limited(self.live, np.array(lx, float), np.array(ly, float))
        kv = s.kv_length
        self.plot.setTitle(f"live KV length {kv if kv is not None else '—'} · canonical position "
                           f"{s.canonical_position if s.canonical_position is not None else '—'} (tokens)")
