"""The comparison dialog's views of two runs side by side (issue 57): the Windows table aligned by KV position with
each window's change, and A's and B's statistics overlaid in two colours (``DiffDialog``,
``inspector.gui.files.receipts_diff``). Each view gets the data it shows (``inspector.session.diff``), nothing else.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QHBoxLayout, QTableWidget, QTableWidgetItem, QWidget

from inspector.session.diff import AlignedWindow, Figure

A_COLOUR, B_COLOUR = "#1f77b4", "#ff7f0e"
"""A's curves and B's (the shown run, the file), as the headline names them."""
GAINED, LOST = "#d8f0d8", "#f8d8d8"
"""The background of a change cell: B accepted more there, or fewer."""


def _cell(text: str, right: bool = True) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    if right:
        item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
    return item


class AlignedWindowsTable(QTableWidget):
    """One row per KV position where either run began a window: each run's accepted / proposed tokens there
    ("-" where it began none) and B's change in accepted tokens, green where B gained, red where it lost."""

    HEADERS = ("KV position", "A accepted / proposed", "B accepted / proposed", "change")

    def __init__(self, windows: tuple[AlignedWindow, ...], parent: QWidget | None = None) -> None:
        super().__init__(len(windows), len(self.HEADERS), parent)
        self.setHorizontalHeaderLabels(self.HEADERS)
        self.verticalHeader().setVisible(False)
        for r, w in enumerate(windows):
            self.setItem(r, 0, _cell(str(w.base_position)))
            for col, side in ((1, w.a), (2, w.b)):
                self.setItem(r, col, _cell("-" if side is None else f"{side[1]} / {side[0]}"))
            change = w.change
            cell = _cell("" if change is None else f"{change:+d}")
            if change:
                cell.setBackground(QBrush(QColor(GAINED if change > 0 else LOST)))
            self.setItem(r, 3, cell)
        self.resizeColumnsToContents()


def cumulative_accepted(windows: tuple[AlignedWindow, ...], side: str) -> tuple[list[int], list[int]]:
    """(KV positions, accepted proposal tokens so far) of one run's windows (``side``: "a" or "b"), in order."""
    xs, ys, total = [], [], 0
    for w in windows:
        got = getattr(w, side)
        if got is not None:
            total += got[1]
            xs.append(w.base_position)
            ys.append(total)
    return xs, ys


class ComparisonPlots(QWidget):
    """A's and B's acceptance per draft position, and their accepted proposal tokens summed along the KV
    position, each pair of curves made once in two colours."""

    def __init__(self, by_position: tuple[Figure, ...], windows: tuple[AlignedWindow, ...],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        self.by_position = pg.PlotWidget(background="w")
        self.by_position.setTitle("Acceptance per draft position", size="8pt")
        self.by_position.setLabel("bottom", "draft position (1-based)")
        self.by_position.setYRange(0, 1.05)
        self.cumulative = pg.PlotWidget(background="w")
        self.cumulative.setTitle("Accepted proposal tokens so far", size="8pt")
        self.cumulative.setLabel("bottom", "KV position")
        self.curves: dict[str, list] = {}
        """"a" and "b": each run's (acceptance, cumulative) curves."""
        self.by_position.addLegend(offset=(-10, 10))  # acceptance falls to the right: the legend there
        self.cumulative.addLegend(offset=(10, 10))  # the sums rise to the right: the legend at the top left
        for side, colour in (("a", A_COLOUR), ("b", B_COLOUR)):
            values = [(i + 1, getattr(f, side)) for i, f in enumerate(by_position) if getattr(f, side) is not None]
            pen = pg.mkPen(colour, width=2)
            acc = self.by_position.plot([x for x, _ in values], [y for _, y in values], pen=pen, symbol="o",
                                        symbolBrush=colour, symbolSize=5, name=side.upper())
            xs, ys = cumulative_accepted(windows, side)
            cum = self.cumulative.plot(xs, ys, pen=pen, name=side.upper())
            self.curves[side] = [acc, cum]
        positions = range(1, len(by_position) + 1)  # whole proposal positions only, however wide the plot
        self.by_position.getAxis("bottom").setTicks([[(i, str(i)) for i in positions]])
        row.addWidget(self.by_position, 1)
        row.addWidget(self.cumulative, 1)
