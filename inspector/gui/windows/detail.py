"""Window list and the detail of the selected window.

The rows table lists the verification rows (row, KV position, input token,
proposed token, target prediction, the target's figures: p(proposed) and its
rank, p(target), the top-2 logit margin; then the outcome); rows whose KV entries the
repair removed (position >= canonical_position) are struck through, and
predictions past the committed ones are marked branch-conditioned (never
output): its columns and cells are ``inspector.gui.windows.verification_rows``'s.
Below: the receipt's positions and timings, and its raw JSON.
"""

from __future__ import annotations

import bisect
import html
import json
import time

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QFont, QTextOption
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHeaderView,
    QPlainTextEdit,
    QSplitter,
    QTableView,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from inspector.engine.records import decision_id_text
from inspector.engine.classify import token_outcome
from inspector.session.session_record import SessionRecord
from inspector.gui.look.table_copy import install_row_copy
from inspector.gui.windows.table import WIDEST, WINDOW_HEADERS, WindowTableModel
from inspector.gui.windows.tree_drawing import CHAIN_TEXT, NO_WINDOW_TEXT, TreeTab, walk_accepted
from inspector.gui.windows.tree_text import tree_branches_html, tree_summary
from inspector.gui.windows.verification_rows import ROW_LABELS, fill_rows, make_rows_table, token_text

EMPTY_TEXT = "Select a window."
FOLLOW_S = 0.5
"""Shortest time between two follows of the newest window while a run goes (seconds)."""
DETAIL_MIN_WIDTH = 250
"""The Receipt pane's least width: its field names and values side by side, never a letter a line."""
FIELD_KEYS = ("source", "decision", "proposal", "correction / bonus", "positions", "repair", "generated",
              "time (µs)", "lock (µs)", "held", "repaired state", "discard")
"""Names of the Receipt pane's fields (its first column is as wide as the widest)."""
KEY_PAD = 8
"""Pixels between a field's name and its value in the Receipt pane."""


def fields_table(rows) -> str:
    """The Receipt pane's HTML table of ``(name, value HTML)`` rows: names grey and never wrapped."""
    body = "".join(f"<tr><td style='color:#555;padding-right:{KEY_PAD}px;white-space:nowrap'>{k}</td><td>{v}</td></tr>"
                   for k, v in rows)
    return f"<table cellspacing='0'>{body}</table>"


class WindowDetail(QWidget):
    """Windows table (one row per verified or failed window; a virtualized
    ``QTableView``) and the selected window's rows, receipt fields and raw JSON.

    While the newest window is selected, the selection follows new windows.
    The raw JSON is rendered when its tab is shown.
    """

    windowSelected = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.session: SessionRecord | None = None
        self._drawn_version = -1
        self.selected: int | None = None
        self._raw_for: int | None = None  # window whose raw JSON is in ``raw``
        self._follow_pending = False  # new windows arrived while following: select the newest
        self._followed_at = 0.0  # time.monotonic() of the last follow (s)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        # Top: the windows table (as wide as its columns) beside the selected window's
        # receipt; below, the full width for the rows table (six columns of token texts).
        outer = QSplitter(Qt.Orientation.Vertical)
        outer.setChildrenCollapsible(False)
        self.outer_splitter = outer
        split = QSplitter(Qt.Orientation.Horizontal)
        split.setChildrenCollapsible(False)
        self.splitter = split
        self.model = WindowTableModel()
        self.windows = QTableView()
        self.windows.setModel(self.model)
        self.windows.verticalHeader().setVisible(False)
        self.windows.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)
        self.windows.verticalHeader().setDefaultSectionSize(22)
        self.windows.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        # Extended: Ctrl+C copies every selected window; the detail shows the current one.
        self.windows.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        install_row_copy(self.windows)
        self.windows.setWordWrap(False)
        self.windows.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        header = self.windows.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        fm = self.windows.fontMetrics()
        pad = fm.horizontalAdvance("MM")
        for c, widest in enumerate(WIDEST):
            header.resizeSection(c, max(fm.horizontalAdvance(widest), fm.horizontalAdvance(WINDOW_HEADERS[c])) + pad)
        # Every column (and a scroll bar) when there is room; on a small screen the first columns, the
        # rest a horizontal scroll away (the window still fits 1024 px).
        self._table_width = header.length() + self.windows.verticalScrollBar().sizeHint().width() + 4
        self.windows.setMinimumWidth(sum(header.sectionSize(c) for c in range(4)) + 24)
        self.windows.selectionModel().selectionChanged.connect(self._selection_changed)
        split.addWidget(self.windows)

        self.detail_tabs = QTabWidget()
        # A text browser, not a word-wrapped label: new text never changes its size
        # hint, so showing a window does not re-lay out the main window.
        self.fields = QTextBrowser()
        self.fields.setFrameShape(QFrame.Shape.NoFrame)
        self.fields.setOpenLinks(False)
        self.fields.document().setDocumentMargin(3)
        # Words (a decision id, a figure) never break inside; the decision id is elided to fit instead.
        self.fields.setWordWrapMode(QTextOption.WrapMode.WordWrap)
        self.fields.setHtml(EMPTY_TEXT)
        self._fields_of = None  # () -> the shown fields' HTML again (the decision id is elided to the width)
        self._decision_width = -1  # the decision id's room when the fields were drawn (px)
        self.fields.viewport().installEventFilter(self)
        self.raw = QPlainTextEdit()
        self.raw.setReadOnly(True)
        self.raw.setFont(QFont("DejaVu Sans Mono", 9))
        self.detail_tabs.addTab(self.fields, "Receipt")
        self.detail_tabs.addTab(self.raw, "Raw JSON")
        self.tree_tab = TreeTab()
        self.detail_tabs.addTab(self.tree_tab, "Tree")
        self.detail_tabs.setTabToolTip(self.detail_tabs.indexOf(self.tree_tab), "a tree window drawn: the accepted path, the rejected nodes, the "
                                          "branches never reached, the committed correction")
        self.detail_tabs.currentChanged.connect(lambda _i: self._show_raw())
        split.addWidget(self.detail_tabs)
        split.setCollapsible(0, False)
        split.setCollapsible(1, False)
        tab_names = self.detail_tabs.tabBar()  # the detail tabs' names whole ("Ra" was all that showed)
        self.detail_tabs.setMinimumWidth(max(DETAIL_MIN_WIDTH, sum(tab_names.tabSizeHint(i).width()
                                                               for i in range(tab_names.count())) + 8))
        split.setStretchFactor(0, 0)  # the windows table keeps its width; the receipt takes the rest
        split.setStretchFactor(1, 1)
        split.setSizes([self._table_width, 880 - self._table_width])
        outer.addWidget(split)

        self.rows = make_rows_table()
        outer.addWidget(self.rows)
        outer.setStretchFactor(0, 1)
        outer.setStretchFactor(1, 1)
        outer.setSizes([260, 200])
        lay.addWidget(outer)

    def set_session(self, session: SessionRecord) -> None:
        self.session = session
        self._drawn_version = -1
        self.selected = None
        self._raw_for = None
        self._follow_pending = False
        self.model.set_session(session)
        self.rows.setRowCount(0)
        self.tree_tab.show_receipt(None, None, str, NO_WINDOW_TEXT)
        self._set_fields(None)
        self.raw.setPlainText("")
        self.refresh()

    def window_count(self) -> int:
        """Rows of the Windows table (verified and failed windows)."""
        return self.model.rowCount()

    def refresh(self) -> None:
        """Add rows for new windows (cheap when nothing changed: one version check).

        While the newest window is selected, the selection follows new windows,
        at most every ``FOLLOW_S`` seconds (a run makes 10-20 windows a second;
        drawing each one's detail would only cost the engine time)."""
        s = self.session
        if s is None:
            return
        if s.version != self._drawn_version:
            self._drawn_version = s.version
            n = self.model.rowCount()
            follow = self._follow_pending or self.selected is None or \
                bool(n and self.selected == self.model.window_at(n - 1))
            if self.model.sync() and follow:
                self._follow_pending = True
        if self._follow_pending and self.isVisible() and time.monotonic() - self._followed_at >= FOLLOW_S:
            self._followed_at = time.monotonic()
            self.select_window(self.model.window_at(self.model.rowCount() - 1))

    def _selection_changed(self, *_a) -> None:
        rows = self.windows.selectionModel().selectedRows()
        if not rows:
            return
        current = self.windows.selectionModel().currentIndex()
        row = current.row() if current.isValid() and any(r.row() == current.row() for r in rows) else rows[-1].row()
        w = self.model.window_at(row)
        self._follow_pending = False
        if w != self.selected:
            self.selected = w
            self._show_window(w)
            self.windowSelected.emit(w)

    def select_window(self, window_index: int) -> None:
        """Select window ``window_index`` (1-based) in the table and show its rows."""
        self.model.sync()
        row = self.model.row_of(window_index)
        if row is None:
            return
        self._follow_pending = False
        self.windows.selectRow(row)
        self.windows.scrollTo(self.model.index(row, 0))
        if self.selected != window_index:
            self.selected = window_index
            self._show_window(window_index)

    # -- detail ----------------------------------------------------------------------
    def _show_window(self, w: int) -> None:
        e = self.session.window(w)
        if e is None:
            return
        r, d = e.receipt, e.discard
        if r is not None:
            canonical, after = r.canonical_position, r.position_after_verification
        else:
            canonical, after = d.partial.canonical_position, d.partial.position_after_verification
        base, committed = e.base_position, len(e.committed)
        self.tree_tab.show_receipt(r, self._current_token(w, base), self.session.text_of)
        fill_rows(self.rows, self.session, self._current_token(w, base), e.proposal, e.predictions, base, committed,
                  canonical, after, probs=r.probabilities if r is not None else None)
        self._set_fields(lambda: self._fields_html(w, r, d, e.accepted, base, after, canonical, committed))
        self._raw_for = None
        self._show_raw()

    def show_in_flight(self, info: dict) -> None:
        """Show the window Step token holds in (no receipt yet): its proposal, the rows verified
        so far and the held row. ``info``: the worker's hold record (``proposal``, ``predictions``,
        ``base_position``, ``committed``, ``row``, ``token``, ``window``); a plain step shows nothing here."""
        if info.get("window") is None or "proposal" not in info:
            return
        self._follow_pending = False
        self.windows.clearSelection()
        self.selected = None
        w, row = info["window"], info["row"]
        proposal, preds, base = info["proposal"], info["predictions"], info["base_position"]
        current = self._current_token(w, base)
        fill_rows(self.rows, self.session, current, proposal, preds, base, len(info.get("committed", ())),
                  None, info.get("position_after_verification"), held_row=row)
        kind = ROW_LABELS.get(token_outcome(row, info["token"], proposal), "")
        e = html.escape
        decision = decision_id_text(info.get("decision_id", b""))
        tree = info.get("tree")
        if tree is not None:
            self.tree_tab.show_hold(tree, row, current, self.session.text_of, base)
        else:  # a window held before its verification ended: a chain, no receipt yet
            self.tree_tab.show_receipt(None, current, self.session.text_of, CHAIN_TEXT)
        rows = [
            ("decision", None),
            ("proposal", f"{len(proposal)} tokens · committed so far {len(info.get('committed', ()))}"),
            *([("tree", e(tree_summary(tree, walk_accepted(tree))) + " (the Tree tab marks the held node)")]
              if tree is not None else []),
            ("held", f"row {row} (KV position {base + row}): {e(token_text(self.session, info['token']))} — {kind}"),
            ("positions", f"base {base} → verified {info.get('position_after_verification')} → canonical: "
                          "after the commit loop and repair"),
        ]
        self._set_fields(lambda: f"<b>Window {w}</b> — <b>committing</b> (no receipt until it is repaired)"
                         + fields_table(self._with_decision(rows, decision)))
        self.raw.setPlainText("")
        self._raw_for = None

    def _show_raw(self) -> None:
        """Render the selected window's raw JSON if its tab is shown (and it is not there yet)."""
        w = self.selected
        if w is None or w == self._raw_for or self.detail_tabs.currentWidget() is not self.raw:
            return
        s = self.session
        self._raw_for = w
        e = s.window(w)
        self.raw.setPlainText(self._raw_json(w, e.receipt if e else None, e.discard if e else None))

    def _current_token(self, w: int, base: int) -> int | None:
        """The current token of window ``w``: the committed token at position ``base``
        (positions of generated tokens increase by one: a binary search)."""
        toks = self.session.tokens
        i = bisect.bisect_left(toks, base, key=lambda t: t.position)
        return toks[i].token if i < len(toks) and toks[i].position == base else None

    def _fields_html(self, w, r, d, accepted, base, after, canonical, committed) -> str:
        s = self.session
        e = html.escape
        if r is not None:
            head = f"<b>Window {w}</b> — <b>{r.disposition}</b>"
            nxt = r.correction_or_boundary_token
            decision = decision_id_text(r.decision_id)
            rows = [
                ("source", e(r.source)),
                ("decision", None),
                ("proposal", f"{r.proposal_token_count} tokens · accepted {r.accepted_proposal_tokens} · "
                             f"committed {committed}"),
                ("correction / bonus", e(token_text(s, nxt)) if nxt is not None else "none (stopped)"),
                *([("grammar", f"forbids proposal token {r.grammar_rejected_row + 1} "
                               f"({e(token_text(s, r.proposal_token_ids[r.grammar_rejected_row]))}): never accepted")]
                  if r.grammar_rejected_row is not None else []),
                *([("tree", e(tree_summary(r.tree, r.accepted_proposal_tokens)) + " (drawn in the Tree tab)"),
                   ("branches", tree_branches_html(r.tree, r.accepted_proposal_tokens, s.text_of))]
                  if r.tree is not None else []),
                ("positions", f"base {base} → verified {after} → canonical {canonical}"),
                ("repair", "retire the checkpoint (nothing to trim)" if r.repair == "retire" and not r.trimmed_rows
                 else f"{r.repair} · trimmed {r.trimmed_rows} rows"),
                ("generated", f"{r.generated_token_count} tokens so far"),
                # One figure per line: the panel is narrow, and a figure split over two lines misreads.
                ("time (µs)", f"proposal {r.proposal_elapsed_us:,}<br>verification {r.verification_elapsed_us:,}<br>"
                              f"repair {r.repair_elapsed_us:,}<br>total {r.total_elapsed_us:,}"),
                ("lock (µs)", f"wait {r.runtime_lock_wait_us:,}<br>hold {r.runtime_lock_hold_us:,}<br>"
                              f"{r.runtime_lock_acquires} acquisitions"),
            ]
        else:
            p = d.partial
            head = f"<b>Window {w}</b> — <b style='color:#c62828'>error</b>: {e(d.error or d.reason)}"
            after_s = "not verified" if after is None else str(after)
            rows = [
                ("proposal", f"{len(d.proposal_token_ids)} tokens · committed before the error {committed}"),
                ("positions", f"base {base} → verified {after_s} → canonical {canonical}"),
                ("repaired state", "session retired (resume opens a new one)" if p.session_retired
                 else f"KV cache trimmed to the canonical position {canonical}"),
                ("discard", e(d.reason)),
                ("decision", None),
            ]
            decision = decision_id_text(d.decision_id)
        return head + fields_table(self._with_decision(rows, decision))

    # -- the decision id: one line, elided to the pane's width (all of it in the tooltip) ----------
    def _set_fields(self, make_html) -> None:
        """Show the fields ``make_html()`` gives (None: "Select a window."); drawn again when the pane's
        width changes the room for the decision id."""
        self._fields_of = make_html
        self._decision_width = self.decision_room()
        self.fields.setToolTip("")
        self.fields.setHtml(EMPTY_TEXT if make_html is None else make_html())

    def decision_room(self) -> int:
        """Pixels the Receipt pane has for the decision id beside its field name."""
        fm = self.fields.fontMetrics()
        names = max(fm.horizontalAdvance(k) for k in FIELD_KEYS) + KEY_PAD
        margins = 2 * int(self.fields.document().documentMargin()) + 8  # the table's cell borders and padding
        return max(fm.horizontalAdvance("MMMM"), self.fields.viewport().width() - names - margins)

    def _with_decision(self, rows, decision: str) -> list:
        """``rows`` with the ``("decision", None)`` row's value: the id on one line (never wrapped),
        elided in the middle when it is wider than ``decision_room``; the pane's tooltip then holds it."""
        fm = self.fields.fontMetrics()
        shown = fm.elidedText(decision, Qt.TextElideMode.ElideMiddle, self._decision_width)
        if shown != decision:
            self.fields.setToolTip(f"decision {decision}")
        cell = f"<span style='white-space:pre'>{html.escape(shown)}</span>"
        return [(k, cell if v is None else v) for k, v in rows]

    def eventFilter(self, obj, ev) -> bool:
        """The Receipt pane was resized: draw its fields again if the decision id's room changed."""
        if ev.type() == QEvent.Type.Resize and obj is self.fields.viewport() and self._fields_of is not None:
            if self.decision_room() != self._decision_width:
                self._set_fields(self._fields_of)
        return False

    def _raw_json(self, w, r, d) -> str:
        s = self.session
        if r is not None:
            doc = r.to_json()
            doc["proposal_token_texts"] = [s.text_of(t) for t in r.proposal_token_ids]
            doc["verification_row_prediction_texts"] = [s.text_of(t) for t in r.verification_row_predictions]
            return json.dumps(doc, indent=1, ensure_ascii=False)
        return json.dumps(d.to_json(), indent=1, ensure_ascii=False)
