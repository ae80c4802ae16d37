"""Runtime lock timing (pyqtgraph): wait and hold per operation kind, in microseconds.

Top row: wait and hold of every operation of the main session over time
(seconds since the scheduler started), one series per kind (verify, repair
= trim/retire, prefill, step) plus one for all background sessions. Bottom
row: their distributions (histograms on a log10 microsecond axis). The
legend is a row of its own above the plots (it never covers a point); the
main session's prefill, one operation per run, is drawn as a larger diamond.
Items are created once and updated with ``setData``.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from inspector.gui.session_model import SessionData
from inspector.gui.timeline import set_limited

SERIES = (
    ("verify", "#1565c0"),
    ("repair", "#c62828"),
    ("prefill", "#6a1b9a"),
    ("step", "#2e7d32"),
    ("background", "#9e9e9e"),
)
KIND_TO_SERIES = {"verify": "verify", "trim": "repair", "retire": "repair", "prefill": "prefill", "step": "step"}
BINS = np.linspace(0, 6, 49)
"""Histogram bins: log10(microseconds) from 1 µs to 1 s."""


class LockPlots(QWidget):
    """Lock wait/hold over time and their histograms, per operation kind."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session: SessionData | None = None
        self._drawn_ops = -1
        self._session_ref = None
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        self.legend = QLabel(" &nbsp; ".join(
            f"<span style='color:{color};font-size:14pt'>{'◆' if name == 'prefill' else '●'}</span>&nbsp;{name}"
            for name, color in SERIES))
        self.legend.setToolTip("one point per runtime operation under the lock; repair = trim or retire; "
                               "background = all background sessions")
        self.wait_plot = self._plot("lock wait (µs)", "time (s)")
        self.hold_plot = self._plot("lock hold (µs)", "time (s)")
        self.wait_hist = self._plot("operations", "lock wait, log10 µs")
        self.hold_hist = self._plot("operations", "lock hold, log10 µs")
        for p in (self.wait_plot, self.hold_plot):
            p.setLogMode(y=True)
        self.wait_plot.setTitle("Lock wait per operation")
        self.hold_plot.setTitle("Lock hold per operation")
        self.wait_hist.setTitle("Wait distribution")
        self.hold_hist.setTitle("Hold distribution")
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
        self.totals = QLabel("")
        self.totals.setWordWrap(True)
        grid.addWidget(self.legend, 0, 0, 1, 2)
        grid.addWidget(self.wait_plot, 1, 0)
        grid.addWidget(self.hold_plot, 1, 1)
        grid.addWidget(self.wait_hist, 2, 0)
        grid.addWidget(self.hold_hist, 2, 1)
        grid.addWidget(self.totals, 3, 0, 1, 2)

    @staticmethod
    def _plot(left: str, bottom: str) -> pg.PlotWidget:
        p = pg.PlotWidget(background="w")
        p.setLabel("left", left)
        p.setLabel("bottom", bottom)
        p.showGrid(x=True, y=True, alpha=0.25)
        return p

    def set_session(self, session: SessionData) -> None:
        self.session = session
        self._drawn_ops = -1

    def series_counts(self) -> dict[str, int]:
        """Operations drawn per series."""
        return {k: (0 if v.xData is None else len(v.xData)) for k, v in self.scatter_wait.items()}

    def refresh(self) -> None:
        s = self.session
        if s is None or len(s.lock_ops) == self._drawn_ops:
            return
        ops = s.lock_ops
        self._drawn_ops = len(ops)
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
            t = g[:, 0] / 1e6
            wait = np.maximum(g[:, 1], 1.0)  # log axis: 0 µs is drawn at 1 µs
            hold = np.maximum(g[:, 2], 1.0)
            set_limited(self.scatter_wait[name], t, wait)  # long sessions: downsampled
            set_limited(self.scatter_hold[name], t, hold)
            hw, _ = np.histogram(np.log10(wait), BINS)
            hh, _ = np.histogram(np.log10(hold), BINS)
            self.hist_wait[name].setData(BINS, hw)
            self.hist_hold[name].setData(BINS, hh)
            if len(g):
                lines.append(f"<b>{name}</b> {len(g)} ops, wait mean {g[:, 1].mean():,.0f} µs "
                             f"max {g[:, 1].max():,.0f} µs, hold mean {g[:, 2].mean():,.0f} µs")
        self.totals.setText(" &nbsp;·&nbsp; ".join(lines))
