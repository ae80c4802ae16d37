"""File > Compare with receipts… (issue 57): the shown run beside another receipts document of the same prompt.

``ReceiptsComparison`` reads the other document and makes the shown session's (``FileActions.shown_document``) on
a background thread, pairs their requests by prompt and compares the first pair (``inspector.session.diff``, what
``spec-inspector diff`` prints); ``DiffDialog`` shows it: what differs in the setup, then in tabs both outputs one
above the other with the token where they part marked, the windows aligned by KV position with each one's change
(``inspector.gui.files.diff_views``), the figures side by side with B / A, and A's and B's statistics overlaid.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (QDialog, QDialogButtonBox, QFileDialog, QLabel, QTableWidget, QTableWidgetItem,
                               QTabWidget, QTextEdit, QVBoxLayout, QWidget)

from inspector.gui.files.diff_views import AlignedWindowsTable, ComparisonPlots
from inspector.gui.files.session_store import BackgroundJob
from inspector.gui.model.window_model import WindowModel
from inspector.receipts import load_document
from inspector.session.diff import (AlignedWindow, RunDiff, aligned_windows, diff_documents, matched_requests,
                                    parting_side, requests_of, value_text)

PART_COLOUR = "#ffd7a8"
"""The background of the token where the outputs part (and of what follows it on the other side)."""


@dataclass(frozen=True)
class Comparison:
    """The shown run (A) against a receipts file (B): the first pair of requests with the same prompt, its diff,
    both requests' output token texts, their windows aligned by KV position, and how many pairs there were."""

    path: str
    diff: RunDiff
    a_texts: tuple[str, ...]
    b_texts: tuple[str, ...]
    pairs: int
    windows: tuple[AlignedWindow, ...] = ()


def compare_documents(a: dict, b: dict, path: str) -> Comparison:
    """``Comparison`` of documents ``a`` (shown) and ``b`` (read from ``path``). Raises ``DiffRefused`` when no
    request of one has a prompt of the other's."""
    pairs, _only_a, _only_b = matched_requests(a, b)
    i, j = pairs[0]
    ra, rb = requests_of(a)[i], requests_of(b)[j]
    return Comparison(path, diff_documents(ra, rb), tuple(ra["output"].get("token_texts") or ()),
                      tuple(rb["output"].get("token_texts") or ()), len(pairs), aligned_windows(ra, rb))


def output_html(texts, part: int | None) -> str:
    """An output's token texts as HTML, the tokens from ``part`` on marked (None: nothing marked)."""
    def esc(t: str) -> str:
        return html.escape(t).replace("\n", "<br>")

    if part is None:
        return esc("".join(texts))
    return esc("".join(texts[:part])) + f'<span style="background:{PART_COLOUR}">' + esc("".join(texts[part:])) + \
        "</span>"


class DiffDialog(QDialog):
    """A ``Comparison``: the setup that differs, then tabs: the two outputs (A above B) with the parting marked,
    the windows aligned by KV position (``AlignedWindowsTable``), the figures with B / A (a table), and A's and
    B's statistics overlaid (``ComparisonPlots``). Not modal."""

    def __init__(self, parent, c: Comparison, a_name: str) -> None:
        super().__init__(parent)
        d = c.diff
        self.setWindowTitle(f"Compare: {a_name} / {Path(c.path).name}")
        self.headline = QLabel()
        self.headline.setWordWrap(True)
        self.headline.setToolTip(f"B: {c.path}")
        part = d.parting.index if d.parting is not None else None
        if d.outputs_equal:
            said = f"<b>Outputs equal</b> ({d.a_tokens} tokens)."
        else:
            p = d.parting
            said = (f"<b>Outputs part at generated token {p.index}</b>: A "
                    f"{html.escape(parting_side(p.a_token, p.a_text, p.a_margin))}, B "
                    f"{html.escape(parting_side(p.b_token, p.b_text, p.b_margin))}.")
        setup = "; ".join(f"{s.name}: {html.escape(value_text(s.a))} → {html.escape(value_text(s.b))}" for s in d.setup)
        more = f" {c.pairs} requests matched by prompt; the first is shown (all: spec-inspector diff)." \
            if c.pairs > 1 else ""
        self.headline.setText(f"A: {html.escape(a_name)} · B: {html.escape(Path(c.path).name)}<br>{said}<br>"
                              f"Setup: {setup or 'the same'}.{more}")
        self.outputs = []
        layout = QVBoxLayout(self)
        layout.addWidget(self.headline)
        self.tabs = QTabWidget()
        outputs = QWidget()
        column = QVBoxLayout(outputs)
        for name, texts in (("A", c.a_texts), ("B", c.b_texts)):
            view = QTextEdit()
            view.setReadOnly(True)
            view.setHtml(f"<b>{name}</b> " + output_html(texts, part))
            view.setMinimumHeight(60)
            self.outputs.append(view)
            column.addWidget(view, 1)
        self.tabs.addTab(outputs, "Outputs")
        self.windows = AlignedWindowsTable(c.windows)
        self.tabs.addTab(self.windows, f"Windows ({sum(w.a is not None for w in c.windows)} / "
                                       f"{sum(w.b is not None for w in c.windows)})")
        rows = d.figures + d.by_position
        self.figures = QTableWidget(len(rows), 4)
        self.figures.setHorizontalHeaderLabels(["figure", "A", "B", "B / A"])
        self.figures.verticalHeader().setVisible(False)
        for r, f in enumerate(rows):
            for col, value in enumerate((f.name, value_text(f.a), value_text(f.b), value_text(f.ratio, 2))):
                item = QTableWidgetItem(value)
                item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
                if col:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.figures.setItem(r, col, item)
        self.figures.resizeColumnsToContents()
        self.tabs.addTab(self.figures, "Figures")
        self.plots = ComparisonPlots(d.by_position, c.windows)
        self.tabs.addTab(self.plots, "Plots")
        layout.addWidget(self.tabs, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, parent=self)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.resize(760, 600)


class ReceiptsComparison(QObject):
    """File > Compare with receipts…: ``compare_dialog`` asks for the file, ``compare_with(path)`` compares it with
    the shown session on a background thread and opens a ``DiffDialog``; the model's ``receiptsCompared``
    (``Comparison`` or None, error) tells the end. ``shown_document``: ``FileActions.shown_document``."""

    compared = Signal(object, str)

    def __init__(self, model: WindowModel, shown_document, parent, start_dir) -> None:
        super().__init__(parent)
        self.model, self.shown_document, self.parent_widget, self.start_dir = model, shown_document, parent, start_dir
        self.jobs: list[BackgroundJob] = []
        self.dialog: DiffDialog | None = None
        """The last comparison shown."""
        self.compared.connect(model.receiptsCompared)

    def compare_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.parent_widget, "Compare with receipts", str(self.start_dir()),
                                              "Receipts (*.json)")
        if path:
            self.compare_with(path)

    def compare_with(self, path: str) -> BackgroundJob | None:
        """Compare the shown session with the receipts document at ``path`` on a background thread; None when
        nothing shown makes a document (a box says so)."""
        document = self.shown_document("compare")
        if document is None:
            return None
        j = BackgroundJob(lambda: compare_documents(document(), load_document(path), path), self)
        j.done.connect(self._done)
        self.jobs.append(j)
        self.model.say(f"comparing with {Path(path).name} …")
        j.start()
        return j

    def _done(self, result, error: str) -> None:
        if error:
            self.model.show_error("Compare with receipts", error)
            self.compared.emit(None, error)
            return
        name = Path(self.model.session.document_path or "").name or "the shown run"
        self.dialog = DiffDialog(self.parent_widget, result, name)
        self.dialog.open()
        self.model.say("outputs equal" if result.diff.outputs_equal else
                       f"outputs part at generated token {result.diff.parting.index}")
        self.compared.emit(result, "")
