"""The Statistics tab's probability charts (issue 15): acceptance against the probability of
the proposed token, from ``inspector.engine.probability_stats`` (judged proposal tokens only).

- ``AcceptancePlot``: judged proposal tokens binned by probability (x, 0..1) with accepted /
  judged per bin (y, 0..1) and the judged count above each bar; a dashed diagonal marks
  "accepted with probability p". Used for the target's p of the proposed token and, for
  draft sources, the draft's q (its calibration).
- ``no_figures_reason``: why a session has no probability figures (turned off, a file written
  before them), or None.

Plot items are made once; ``draw`` only sets their data (the view redraws on its timer).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont

from inspector.engine.probability_stats import DEFAULT_EDGES, ProbabilityBin
from inspector.session.session_record import SessionRecord

TURNED_OFF = ("No probability figures: they were turned off for this run (the run settings' "
              "“probabilities” box); turn it on and run again to see acceptance against the target's "
              "probability of each proposed token.")
BEFORE_FIGURES = ("No probability figures: this file was written before per-row probabilities "
                  "(receipts schema v1).")
NONE_RECORDED = "No probability figures in this run's receipts."
TITLE_SIZE = "9pt"
LABEL_PT = 7
"""Point size of the count labels above the bars."""
INSIDE_ABOVE = 0.8
"""A bar taller than this (accepted / judged) has its count inside its top instead of above it."""


def no_figures_reason(session: SessionRecord | None) -> str | None:
    """Why ``session`` has no probability figures (a sentence for the Statistics tab), or None when it
    has them or may still get them (a live run before its first window)."""
    if session is None:
        return None
    state = session.probabilities_state
    if state == "off":
        return TURNED_OFF
    if state == "v1":
        return BEFORE_FIGURES
    receipts = session.receipts
    if receipts and all(r.probabilities is None for r in receipts):
        return NONE_RECORDED
    return None


class AcceptancePlot(pg.PlotWidget):
    """Accepted / judged proposal tokens per probability bin (bars at the bin centres), the
    judged count of each non-empty bin above its bar, and the diagonal y = x (dashed)."""

    def __init__(self, title: str, x_label: str, tip: str, edges=DEFAULT_EDGES, brush: str = "#42a5f5") -> None:
        super().__init__(background="w")
        self.setTitle(title, size=TITLE_SIZE)
        self.edges = tuple(float(e) for e in edges)
        lo, hi = np.array(self.edges[:-1]), np.array(self.edges[1:])
        self.centres = (lo + hi) / 2
        self.setLabel("bottom", x_label)
        self.setLabel("left", "accepted / judged")
        self.setToolTip(tip)
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()
        self.diagonal = pg.PlotDataItem([0, 1], [0, 1], pen=pg.mkPen("#9e9e9e", width=1, style=Qt.PenStyle.DashLine))
        self.addItem(self.diagonal)
        self.bars = pg.BarGraphItem(x=self.centres, height=np.zeros(len(self.centres)), width=(hi - lo) * 0.8,
                                    brush=brush)
        self.addItem(self.bars)
        font = QFont()
        font.setPointSize(LABEL_PT)
        self.count_labels: list[pg.TextItem] = []
        for c in self.centres:
            t = pg.TextItem("", color="#424242", anchor=(0.5, 1.0))
            t.setFont(font)
            t.setPos(float(c), 0.0)
            self.addItem(t)
            self.count_labels.append(t)
        self.setXRange(self.edges[0], self.edges[-1], padding=0.02)
        self.setYRange(0, 1.12, padding=0)
        self.bins: list[ProbabilityBin] = []
        """The bins drawn last (``draw``)."""

    def draw(self, bins: list[ProbabilityBin]) -> None:
        """Show ``bins`` (``acceptance_by_probability`` with this plot's edges): bar heights are the
        acceptance (0 for an empty bin), labels the judged counts ("" for an empty bin)."""
        if [(b.lo, b.hi) for b in bins] != list(zip(self.edges, self.edges[1:])):
            raise ValueError(f"bins do not match the plot's edges {self.edges}")
        self.bins = list(bins)
        self.bars.setOpts(height=np.array([b.rate or 0.0 for b in bins], float))
        for b, label, c in zip(bins, self.count_labels, self.centres):
            text = str(b.judged) if b.judged else ""
            if label.toPlainText() != text:
                label.setText(text)
            rate = float(b.rate or 0.0)
            # Above a short bar; inside the top of a tall one: above a bar near 1.0 the label left the plot at
            # the Statistics tab's sizes (its top cut off in a trial).
            label.setAnchor((0.5, 0.0) if rate > INSIDE_ABOVE else (0.5, 1.0))
            label.setPos(float(c), rate)

    def counts(self) -> list[int]:
        """The judged counts the labels show, one per bin (0 for an empty bin)."""
        return [int(t.toPlainText() or 0) for t in self.count_labels]
