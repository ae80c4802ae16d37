"""A tree window drawn (the Windows tab's **Tree** tab; issue 40): every node of the one batch, the
path the walk accepted, the nodes rejected at the mismatch, the branches never reached, and what the
target committed after the walk (its correction or bonus token).

Columns are depths (KV position base + depth, the current token at depth 0); lanes are branches, the
kept branch on top, and a row shared by several branches is drawn once, in the top-most lane of its
branches. ``tree_layout`` is the pure part (tested on tiny trees); ``TreeDrawing`` paints it and, while
Step token holds inside a tree window, marks the node about to be committed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from PySide6.QtCore import QEvent, QPoint, QRect, QSize, Qt, QTimer
from PySide6.QtGui import QBrush, QColor, QFontMetrics, QPainter, QPen
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QToolTip, QVBoxLayout, QWidget

from inspector.engine.records import TreeReceipt
from inspector.engine.tree import children, depths, leaves, row_branches, walk_tree
from inspector.gui.look import outcomes as O
from inspector.gui.windows.tree_text import short_summary, tree_summary

ROOT = "current token"
REJECTED = "rejected"
"""A child of the root or of an accepted node whose token is not the target's prediction there."""
NOT_REACHED = "not reached"
"""A node below a rejected one: decoded in the batch, never compared (its prediction is branch-conditioned)."""
KINDS = {ROOT: ("#212121", "#ffffff"), O.ACCEPTED: (O.COLORS[O.ACCEPTED], O.BACKGROUNDS[O.ACCEPTED]),
         REJECTED: (O.COLORS[O.CORRECTION], "#fff8f8"), NOT_REACHED: ("#9e9e9e", "#fafafa"),
         O.NOT_COMMITTED: ("#9e9e9e", "#fafafa"),
         O.CORRECTION: (O.COLORS[O.CORRECTION], O.BACKGROUNDS[O.CORRECTION]),
         O.BONUS: (O.COLORS[O.BONUS], O.BACKGROUNDS[O.BONUS])}
"""(text colour, fill) per node kind."""
LEGEND = ("green: accepted · red: rejected where the target predicted otherwise · dashed: the token the "
          "target committed after the walk (correction or bonus) · grey: never reached")
CHAIN_TEXT = "This window proposed one chain: the rows table below is the whole of it."
NO_RECEIPT_TEXT = "No receipt: this proposal was discarded or its window failed (the Receipt tab says why)."
NO_WINDOW_TEXT = "No window selected: pick a window in the table above or a token in the text."
HOLD_COLOR = "#f9a825"
"""Border of the node Step token holds before (the row table's hold colour, darker to show as a line)."""
BOX_H, LANE_H, GAP_X, PAD, MARGIN, MAX_BOX_W = 20, 26, 14, 10, 4, 90
"""Sizes in pixels: box height, lane pitch, space between columns, text padding, border, widest box."""


@dataclass(frozen=True)
class NodeBox:
    """One box of the drawing. ``row``: the tree's verification row (0: the current token; -1: the
    committed correction or bonus, which is no row of the batch); ``parent``: the parent's row (None for
    the root); ``token``: the token id shown; ``kind``: ``ROOT``, an outcome or ``REJECTED``/``NOT_REACHED``."""

    row: int
    depth: int
    lane: int
    parent: int | None
    token: int
    kind: str


def tree_layout(tree: TreeReceipt, accepted: int, current_token: int, committed: int) -> list[NodeBox]:
    """The boxes of a tree window, in row order, then the committed correction or bonus (when
    ``committed`` > ``accepted``: the receipt's ``canonical_prediction_count``).

    ``accepted``: the receipt's accepted proposal tokens (the kept branch's first rows). The kept branch
    is lane 0; the other branches follow in leaf order; a row's lane is the least of its branches'. A
    correction (the walk stopped where the kept branch goes on) gets lane 1, the other branches one lower.
    Raises nothing for a well-formed ``TreeReceipt``."""
    parents = tree.node_parents
    leaf_rows = leaves(parents)
    kept_leaf = tree.branch_rows[-1]
    lane_of_leaf = {leaf: i for i, leaf in enumerate([kept_leaf] + [lf for lf in leaf_rows if lf != kept_leaf])}
    lanes = [min(lane_of_leaf[leaf_rows[b]] for b in bs) for bs in row_branches(parents)]
    depth = depths(parents)
    accepted_rows = set(tree.branch_rows[:accepted])
    last = tree.branch_rows[accepted - 1] if accepted else 0
    kids = children(parents)
    boxes = [NodeBox(0, 0, 0, None, current_token, ROOT)]
    for r in range(1, len(parents) + 1):
        token, parent = tree.node_token_ids[r - 1], parents[r - 1]
        if r in accepted_rows:
            kind = O.ACCEPTED
        elif parent == 0 or parent in accepted_rows:  # compared with the target's prediction at its parent
            kind = O.NOT_COMMITTED if token == tree.row_predictions[parent] else REJECTED
        else:
            kind = NOT_REACHED
        boxes.append(NodeBox(r, depth[r], lanes[r], parent, token, kind))
    if committed > accepted and last < len(tree.row_predictions):
        if not kids[last]:  # a full accept: the bonus goes on the kept branch's lane
            boxes.append(NodeBox(-1, depth[last] + 1, 0, last, tree.row_predictions[last], O.BONUS))
        else:  # the correction gets a lane of its own under the kept branch, whose rejected rows go on
            boxes = [b if b.lane == 0 else replace(b, lane=b.lane + 1) for b in boxes]
            boxes.append(NodeBox(-1, depth[last] + 1, 1, last, tree.row_predictions[last], O.CORRECTION))
    return boxes


def walk_accepted(tree: TreeReceipt) -> int:
    """How many rows the walk accepted (``inspector.engine.tree.walk_tree`` on the recorded predictions),
    known as soon as the batch is decoded, so Step token can draw the walk before the receipt exists. The
    receipt's ``accepted_proposal_tokens`` is this unless the commits stopped inside the walk (an
    end-of-generation token, a stop string, max tokens)."""
    return len(walk_tree(tree.node_token_ids, tree.node_parents, tree.row_predictions).accepted_rows)


def held_box(tree: TreeReceipt, row: int, accepted: int) -> int:
    """The box committed by chain row ``row``'s prediction (Step token's held row): the kept branch's
    node ``row`` + 1 while accepted, else the correction or bonus (-1)."""
    return tree.branch_rows[row] if row < accepted else -1


class TreeDrawing(QWidget):
    """Paints ``tree_layout``'s boxes and the edges between them; a tooltip per node names its row, KV
    position, token and the target's prediction there. Sized to the drawing (put it in a scroll area)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.boxes: list[NodeBox] = []
        self._rects: dict[int, QRect] = {}
        self._tree: TreeReceipt | None = None
        self._text_of: Callable[[int], str] = str
        self._base = 0
        self.held_row: int | None = None
        """The tree row whose committed token Step token holds before (None: no hold)."""
        self._size = QSize(0, 0)

    def set_tree(self, tree: TreeReceipt | None, accepted: int = 0, current_token: int | None = None,
                 committed: int = 0, text_of: Callable[[int], str] = str, base_position: int = 0,
                 held_row: int | None = None) -> None:
        """Draw ``tree`` (None: nothing); ``current_token``: the root's token (None: not known);
        ``text_of(token id)``: a token's text; ``held_row``: the box to mark (a tree row, or -1 for the
        committed correction or bonus)."""
        self._tree, self._text_of, self._base, self.held_row = tree, text_of, base_position, held_row
        root = -1 if current_token is None else current_token
        self.boxes = [] if tree is None else tree_layout(tree, accepted, root, committed)
        self._place()
        self.resize(self._size)  # its scroll area shows it at its own size
        self.updateGeometry()
        self.update()

    def label(self, box: NodeBox) -> str:
        """A box's text: the token's text, quoted, newlines and tabs visible ("current" when the current
        token is not known)."""
        return "current" if box.token < 0 else repr(self._text_of(box.token))

    def _place(self) -> None:
        fm = QFontMetrics(self.font())
        widths: dict[int, int] = {}
        for b in self.boxes:
            widths[b.depth] = min(MAX_BOX_W, max(widths.get(b.depth, 0), fm.horizontalAdvance(self.label(b)) + PAD))
        x_of, x = {}, MARGIN
        for d in sorted(widths):
            x_of[d] = x
            x += widths[d] + GAP_X
        self._rects = {b.row: QRect(x_of[b.depth], MARGIN + b.lane * LANE_H, widths[b.depth], BOX_H)
                       for b in self.boxes}
        lanes = max((b.lane for b in self.boxes), default=-1) + 1
        self._size = QSize(x - GAP_X + MARGIN if self.boxes else 0, 2 * MARGIN + lanes * LANE_H)

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return self._size

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt's name
        return self._size

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt's name
        if not self.boxes:
            return
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        fm = p.fontMetrics()
        for b in self.boxes:  # edges first, under the boxes
            if b.parent is None:
                continue
            a, c = self._rects[b.parent], self._rects[b.row]
            start, end = QPoint(a.right(), a.center().y()), QPoint(c.left(), c.center().y())
            mid = (start.x() + end.x()) // 2
            color = QColor(KINDS[b.kind][0] if b.kind != NOT_REACHED else "#bdbdbd")
            p.setPen(QPen(color, 1.5 if b.kind == O.ACCEPTED else 1.0))
            p.drawPolyline([start, QPoint(mid, start.y()), QPoint(mid, end.y()), end])
        for b in self.boxes:
            rect = self._rects[b.row]
            fg, bg = KINDS[b.kind]
            held = self.held_row is not None and b.row == self.held_row
            pen = QPen(QColor(HOLD_COLOR if held else fg), 3 if held else 1)
            if b.row == -1:
                pen.setStyle(Qt.PenStyle.DashLine)
            p.setPen(pen)
            p.setBrush(QBrush(QColor(bg)))
            p.drawRoundedRect(rect, 4, 4)
            p.setPen(QColor(fg))
            text = fm.elidedText(self.label(b), Qt.TextElideMode.ElideRight, rect.width() - PAD // 2)
            p.drawText(rect, Qt.AlignmentFlag.AlignCenter, text)
        p.end()

    def rect_of(self, row: int) -> QRect | None:
        """Where the box of ``row`` (-1: the correction or bonus) is drawn, None when there is none."""
        return self._rects.get(row)

    def box_at(self, point: QPoint) -> NodeBox | None:
        """The box under ``point`` (widget coordinates), or None."""
        return next((b for b in self.boxes if self._rects[b.row].contains(point)), None)

    def tooltip_of(self, box: NodeBox) -> str:
        """A box's tooltip: its row, KV position, token and what the target predicted after it."""
        t = self._tree
        text = f"{self.label(box)} ({box.token})"
        if box.row == -1:
            return f"{box.kind}: {text}, committed after the walk at KV position {self._base + box.depth}"
        where = f"row {box.row}, KV position {self._base + box.depth}"
        prediction = t.row_predictions[box.row] if t is not None and box.row < len(t.row_predictions) else None
        after = "" if prediction is None else \
            f"; the target predicts {repr(self._text_of(prediction))} ({prediction}) after it"
        return f"{box.kind}: {text} · {where}{after}"

    def event(self, event) -> bool:  # noqa: D102 - Qt's tooltip event: the node under the mouse, else the legend
        if event.type() == QEvent.Type.ToolTip:
            box = self.box_at(event.pos())
            QToolTip.showText(event.globalPos(), LEGEND if box is None else self.tooltip_of(box), self)
            return True
        return super().event(event)


class TreeTab(QWidget):
    """The Tree tab: one summary line (its tooltip: the whole summary and the legend) above the window's
    ``TreeDrawing``, which scrolls to the end of the walk; a window that proposed a chain says so."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(3, 3, 3, 3)
        lay.setSpacing(2)
        self.summary = QLabel(CHAIN_TEXT)
        self.summary.setWordWrap(True)
        self.drawing = TreeDrawing()
        self.scroll = QScrollArea()
        self.scroll.setWidget(self.drawing)
        self.scroll.setFrameShape(QFrame.Shape.NoFrame)
        lay.addWidget(self.summary)
        lay.addWidget(self.scroll, 1)
        self._focus: QRect | None = None

    def _show(self, tree: TreeReceipt, accepted: int, line: str, **drawing) -> None:
        self.summary.setText(line)
        self.summary.setToolTip(f"{tree_summary(tree, accepted)}\n{LEGEND}")
        self.drawing.set_tree(tree, accepted, **drawing)
        held = drawing.get("held_row")
        self._focus = self.drawing.rect_of(held if held is not None else
                                           (tree.branch_rows[accepted - 1] if accepted else 0))
        self._scroll_to_focus()

    def _scroll_to_focus(self) -> None:
        """The end of the walk (or the held node) in view, what follows it beside it; again when the tab
        is shown (a hidden scroll area has no size to scroll in)."""
        if self._focus is not None:
            self.scroll.ensureVisible(self._focus.right(), self._focus.center().y(), 60, 20)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().showEvent(event)
        QTimer.singleShot(0, self._scroll_to_focus)  # after the scroll area's layout

    def show_receipt(self, receipt, current_token: int | None, text_of: Callable[[int], str],
                     empty_text: str = NO_RECEIPT_TEXT) -> None:
        """Draw a verified window's tree (``receipt.tree``), or say it proposed a chain or, without a receipt,
        ``empty_text`` (by default: the window has none)."""
        tree = None if receipt is None else receipt.tree
        if tree is None:
            self.summary.setText(CHAIN_TEXT if receipt is not None else empty_text)
            self.summary.setToolTip("")
            self.drawing.set_tree(None)
            self._focus = None
            return
        accepted = receipt.accepted_proposal_tokens
        self._show(tree, accepted, short_summary(tree, accepted), current_token=current_token,
                   committed=receipt.canonical_prediction_count, text_of=text_of,
                   base_position=receipt.base_position)

    def show_hold(self, tree: TreeReceipt, row: int, current_token: int | None, text_of: Callable[[int], str],
                  base_position: int) -> None:
        """Draw the tree Step token holds in, the node about to be committed (chain row ``row``'s) marked."""
        accepted = walk_accepted(tree)
        self._show(tree, accepted, f"{short_summary(tree, accepted)} · holding before row {row}'s token",
                   current_token=current_token, committed=accepted + 1, text_of=text_of,
                   base_position=base_position, held_row=held_box(tree, row, accepted))

