"""Ctrl+C on a table copies the selected rows, not one cell.

``install_row_copy(view)`` makes the standard Copy key (Ctrl+C; Cmd+C on
macOS) on ``view`` put the selected rows on the clipboard as tab-separated
text: a header line, then one line per selected row (rows in view order,
every visible column, in the order the header shows them). A cell shown by a
widget (a combo box or spin box in an editable table) is copied as the widget's text. Tabs and line breaks
inside a cell become spaces, so each row stays one line.

A model may give a longer header for the copy than its column header shows:
``headerData(section, Horizontal, COPY_HEADER_ROLE)`` (e.g. ``proposed`` for
the column headed ``prop.``); without one the shown header is used.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QGuiApplication, QKeySequence
from PySide6.QtWidgets import QAbstractButton, QAbstractItemView, QAbstractSpinBox, QComboBox, QLineEdit, QTableView

COPY_HEADER_ROLE = int(Qt.ItemDataRole.UserRole.value) + 17
"""Header data role a model may answer with the column name to copy (instead of the shown header)."""


def _clean(value) -> str:
    text = "" if value is None else str(value)
    return text.replace("\t", " ").replace("\r\n", " ").replace("\n", " ").replace("\r", " ")


def _widget_text(w) -> str | None:
    if isinstance(w, QComboBox):
        return w.currentText()
    if isinstance(w, QAbstractSpinBox):
        return w.text()
    if isinstance(w, QLineEdit):
        return w.text()
    if isinstance(w, QAbstractButton):
        return w.text()
    return None


def selected_rows(view: QAbstractItemView) -> list[int]:
    """Rows (model rows of ``view.model()``) with a selected cell, in order; the current row when none is."""
    sm = view.selectionModel()
    if sm is None:
        return []
    rows = sorted({i.row() for i in sm.selectedIndexes()})
    if not rows and view.currentIndex().isValid():
        rows = [view.currentIndex().row()]
    return rows


def selected_rows_text(view: QAbstractItemView) -> str:
    """The selected rows of ``view`` as tab-separated text with a header line ("" when nothing is selected)."""
    model = view.model()
    rows = selected_rows(view)
    if model is None or not rows:
        return ""
    hidden = view.isColumnHidden if isinstance(view, QTableView) else (lambda _c: False)
    cols = [c for c in range(model.columnCount()) if not hidden(c)]
    if isinstance(view, QTableView):  # in the order shown (a header may show columns moved)
        cols.sort(key=view.horizontalHeader().visualIndex)
    horizontal = Qt.Orientation.Horizontal
    header = []
    for c in cols:
        name = model.headerData(c, horizontal, COPY_HEADER_ROLE)
        header.append(_clean(name if name else model.headerData(c, horizontal, Qt.ItemDataRole.DisplayRole)))
    lines = ["\t".join(header)]
    for r in rows:
        cells = []
        for c in cols:
            index = model.index(r, c)
            value = model.data(index, Qt.ItemDataRole.DisplayRole)
            if value is None:
                value = _widget_text(view.indexWidget(index))
            cells.append(_clean(value))
        lines.append("\t".join(cells))
    return "\n".join(lines) + "\n"


class _RowCopy(QObject):
    """Event filter on a view: the Copy key copies the selected rows (``selected_rows_text``)."""

    def __init__(self, view: QAbstractItemView) -> None:
        super().__init__(view)
        self.view = view

    def eventFilter(self, obj, event) -> bool:
        t = event.type()
        if t in (QEvent.Type.ShortcutOverride, QEvent.Type.KeyPress) and event.matches(QKeySequence.StandardKey.Copy):
            if self.view.state() == QAbstractItemView.State.EditingState:
                return False  # an open cell editor copies its own selected text
            event.accept()  # ShortcutOverride: the key goes to the view, no window shortcut takes it
            if t == QEvent.Type.KeyPress:
                copy_selected_rows(self.view)
                return True
        return False


def copy_selected_rows(view: QAbstractItemView) -> str:
    """Put ``selected_rows_text(view)`` on the clipboard (nothing when no row is selected); returns the text."""
    text = selected_rows_text(view)
    if text:
        QGuiApplication.clipboard().setText(text)
    return text


def install_row_copy(view: QAbstractItemView) -> None:
    """Make Ctrl+C (the platform's Copy key) on ``view`` copy its selected rows as tab-separated
    text with a header line, instead of the current cell. Installing twice has no further effect."""
    if view.property("_row_copy_installed"):
        return
    view.setProperty("_row_copy_installed", True)
    view.installEventFilter(_RowCopy(view))
