"""The By position tab (issue 39, long contexts): a run's windows and plain steps against the KV
position at which each ran, so a long prompt shows which of acceptance and cost moves as the cache
grows. Three charts on one linked x axis (KV position, tokens): the share of each window's proposal
accepted; c(1) (each plain step's time) beside the verify cost per row of each window (ms); each
window's profit against plain decoding (ms, green saved, red lost). Above them one line says where the
windows stopped paying and why (``inspector.gui.plots.position_figures``, which computes everything
shown). Plot items are made once and updated with ``setData`` on the window's redraw timer.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from inspector.gui.plots.position_figures import PositionFigures, position_figures
from inspector.gui.plots.probability import TITLE_SIZE
from inspector.gui.plots.timeline import IntegerAxis, set_limited
from inspector.session.session_record import SessionRecord

ACCEPT_COLOUR = "#1e88e5"
STEP_COLOUR = "#78909c"
ROW_COLOUR = "#ef6c00"
SAVED_COLOUR = "#2e7d32"
LOST_COLOUR = "#c62828"
COST_TITLE = (f'<span style="color:{STEP_COLOUR}">●</span> c(1) · '
              f'<span style="color:{ROW_COLOUR}">▲</span> verify / row')
PROFIT_TITLE = (f'Profit (<span style="color:{SAVED_COLOUR}">saved</span> / '
                f'<span style="color:{LOST_COLOUR}">lost</span>)')
PLOT_MIN = (150, 110)
"""Smallest chart (pixels): three side by side fit the tab at 1024x640."""
X_LABEL = "KV position"
"""The x axis of the three charts (tokens: the KV length before the window or step; the tooltips say it)."""
EMPTY_SPAN = 16
"""The KV positions (tokens) the axis spans before anything was drawn."""


def _points(colour: str, symbol: str = "o", size: int = 6) -> dict:
    return dict(pen=None, symbol=symbol, symbolSize=size, symbolBrush=colour, symbolPen=None)


class PositionsView(QWidget):
    """Acceptance, c(1) and verify cost per row, and profit against the KV position of each window
    (``base_position``) and plain step (the KV length before it)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session: SessionRecord | None = None
        self.cost_model = None
        self.figures = PositionFigures()
        """What the charts show now (``position_figures``)."""
        self._key: tuple | None = None
        self._span: tuple[int, int] | None = None  # the positions the x axis was last fitted to
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.verdict.setToolTip(
            "where the run's windows stopped paying: its windows in up to 4 groups by KV position, each group's "
            "speedup = committed tokens × c(1) / the time they spent; under 1.00x it stops paying, because of "
            "acceptance (fewer tokens per window than the first group) or cost (as many, but verification cost "
            "more) — the rule bench --context-lengths applies to whole runs")
        self.top = QHBoxLayout()
        self.top.addWidget(self.verdict, 1)
        lay.addLayout(self.top)
        row = QHBoxLayout()
        self.accept_plot = self._plot("Acceptance per window", "accepted share",
                                      "each window's accepted proposal tokens / proposed tokens, at its "
                                      "base_position (the KV length before its verify batch)")
        self.accept_plot.setYRange(-0.05, 1.05, padding=0)  # a window that accepted nothing shows whole
        self.accept_plot.setMouseEnabled(x=True, y=False)
        self.accept = self.accept_plot.plot([], [], **_points(ACCEPT_COLOUR))
        self.cost_plot = self._plot(COST_TITLE, "ms",
                                    "grey: each plain step's time holding the runtime (c(1) at the KV length "
                                    "before it); orange: each window's verification time / its rows. Attention "
                                    "reads every cached position, so both grow with the position")
        self.steps = self.cost_plot.plot([], [], **_points(STEP_COLOUR, size=5))
        self.rows = self.cost_plot.plot([], [], **_points(ROW_COLOUR, "t1", 8))
        self.profit_plot = self._plot(PROFIT_TITLE, "ms",
                                      "each window's profit: committed tokens × c(1) − (proposal + "
                                      "verification + repair), c(1) from this run's plain steps, else the "
                                      "cost model's (as Statistics and the KV timeline count it)")
        self.profit_plot.addItem(pg.InfiniteLine(pos=0, angle=0, pen=pg.mkPen("#9e9e9e", width=1)))
        self.saved = self.profit_plot.plot([], [], **_points(SAVED_COLOUR))
        self.lost = self.profit_plot.plot([], [], **_points(LOST_COLOUR))
        for plot in (self.cost_plot, self.profit_plot):
            plot.setXLink(self.accept_plot)
        for plot in (self.accept_plot, self.cost_plot, self.profit_plot):
            row.addWidget(plot, 1)
        lay.addLayout(row, 1)

    def add_to_top(self, widget: QWidget) -> None:
        """Put ``widget`` (e.g. a button back to the page beside this one) left of the stopping line."""
        self.top.insertWidget(0, widget, 0, Qt.AlignmentFlag.AlignTop)

    @staticmethod
    def _plot(title: str, y_label: str, tip: str) -> pg.PlotWidget:
        plot = pg.PlotWidget(background="w", axisItems={"bottom": IntegerAxis("bottom")})
        plot.setTitle(title, size=TITLE_SIZE)
        plot.setLabel("bottom", X_LABEL)
        plot.setLabel("left", y_label)
        plot.showGrid(x=True, y=True, alpha=0.25)
        plot.getPlotItem().getViewBox().setDefaultPadding(0.05)
        plot.setToolTip(f"{tip}\nx: the KV position in tokens (the KV length before the window's verify batch, or "
                        "before the plain step)")
        plot.setMinimumSize(*PLOT_MIN)
        return plot

    def set_session(self, session: SessionRecord) -> None:
        self.session = session
        self._key = self._span = None

    def set_cost_model(self, cost_model) -> None:
        """Take c(1) from ``cost_model`` (``inspector.llama.cost_model.CostModel`` or None) for the profits
        when the run has no plain step of its own."""
        self.cost_model = cost_model
        self._key = None

    def refresh(self) -> None:
        """Draw again when the session got windows, events or lock operations since the last time."""
        s = self.session
        if s is None:
            return
        key = (id(s), len(s.receipts), len(s.events), len(s.lock_ops), s.main_session_id, id(self.cost_model))
        if key == self._key:
            return
        self._key = key
        c1 = None if self.cost_model is None else self.cost_model.cost(1) * 1000
        f = position_figures(s.receipts, s.events, s.lock_ops, s.main_session_id, c1)
        self.figures = f
        if self.verdict.text() != f.verdict:
            self.verdict.setText(f.verdict)
        wx = np.asarray(f.window_x, dtype=float)
        set_limited(self.accept, wx, np.asarray(f.acceptance, dtype=float))
        set_limited(self.steps, np.asarray(f.step_x, dtype=float), np.asarray(f.step_ms, dtype=float))
        set_limited(self.rows, wx, np.asarray(f.verify_row_ms, dtype=float))
        profit = np.asarray(f.profit_ms, dtype=float)
        px = wx if len(profit) else wx[:0]
        gain = profit >= 0
        set_limited(self.saved, px[gain], profit[gain])
        set_limited(self.lost, px[~gain], profit[~gain])
        xs = f.window_x + f.step_x
        span = (min(xs), max(xs)) if xs else None
        if span is None:
            span = (0, EMPTY_SPAN)  # nothing yet (a new session): not the last session's positions
        if span != self._span:  # every window and step in view (the three axes are linked)
            self._span = span
            self.accept_plot.setXRange(span[0] - 0.5, span[1] + 0.5, padding=0.03)
