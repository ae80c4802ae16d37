"""The Compare window's results table: its columns (ours, then llama-server's four when the comparison
ran through llama-server too), their headers and tooltips, and the cells of each configuration's row
(a ``CompareResult``'s rows, ``inspector.bench.compare_result``), with the texts they are made of.

Functions on the ``QTableWidget`` the window owns (``CompareView.results``); ``COLORS`` are the
configurations' colours, shared with the window's plots.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

RESULT_HEADERS = ("configuration", "decode tokens/s", "speedup vs plain", "expected speedup", "acceptance rate",
                  "mean accepted length", "windows", "same output as plain")
RESULT_TIPS = (
    "", "generated tokens / decode time (prefill excluded)",
    "decode tokens/s / the plain run's decode tokens/s",
    "what the cost model predicts from this run's windows (Cost model tab: Measure)",
    "accepted / proposed tokens over verified windows",
    "1 + accepted / windows: tokens committed per window",
    "verified proposal windows (receipts)",
    "the generated token ids equal the plain run's",
)
WINDOWS_COLUMN = 6
"""The windows column: "60 (5 tree)" when some verified token trees; its tooltip, rows per token."""
SERVER_HEADERS = ("llama-server\ntokens/s", "drafted\nours / server", "accepted\nours / server",
                  "same as\nllama-server")
SERVER_TIPS = (
    "llama-server's timings.predicted_per_second on the same prompt tokens (greedy, its flags for this row)",
    "proposal tokens drafted: ours / llama-server's draft_n",
    "proposal tokens accepted: ours / llama-server's draft_n_accepted",
    "the same generated tokens and the same windows (drafted, accepted, accepted per draft position); "
    "else where the outputs part and our target's top-2 logit margin there",
)
"""Columns added after ``RESULT_HEADERS`` when the comparison ran through llama-server too."""
COLORS = ("#616161", "#1565c0", "#2e7d32", "#e65100", "#6a1b9a", "#00838f", "#c62828", "#9e9d24")


def turns_text(run) -> str:
    """A conversation row's turns, one line each (tokens, windows, accepted, why it ended); "" for a
    run that is not a conversation (``inspector.bench.compare.TurnsRun``)."""
    gens = getattr(run, "generations", None)
    if not gens:
        return ""
    lines = [f"{len(gens)} turn{'s' if len(gens) != 1 else ''}, summed in this row:"]
    for n, g in enumerate(gens, 1):
        accepted = sum(x.accepted_proposal_tokens for x in g.receipts)
        lines.append(f"turn {n}: {len(g.generated)} tokens, {len(g.receipts)} windows, {accepted} accepted, "
                     f"ended: {g.finish_reason or 'n/a'}")
    return "\n".join(lines)


def two_lines(label: str) -> str:
    """A header on two lines, split at the space nearest its middle ("mean accepted\nlength");
    a label without a space, or already on two lines, as it is."""
    if "\n" in label or " " not in label:
        return label
    spaces = [i for i, ch in enumerate(label) if ch == " "]
    cut = min(spaces, key=lambda i: abs(i - len(label) / 2))
    return label[:cut] + "\n" + label[cut + 1:]


def figure_text(x: float | None, spec: str, suffix: str = "") -> str:
    """A figure as a cell's text (``spec``: its format, ``suffix`` after it); "n/a" for None."""
    return "n/a" if x is None else f"{x:{spec}}{suffix}"


def make_results_table() -> QTableWidget:
    """The results table, empty: ``RESULT_HEADERS`` with their tooltips, read only, the configuration's
    column stretched and the others as wide as their texts."""
    table = QTableWidget(0, len(RESULT_HEADERS))
    table.setHorizontalHeaderLabels(RESULT_HEADERS)
    for i, tip in enumerate(RESULT_TIPS):
        table.horizontalHeaderItem(i).setToolTip(tip)
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    rh = table.horizontalHeader()
    rh.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    rh.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    return table


def show_result_rows(t: QTableWidget, rows, runs, server) -> None:
    """Fill ``t`` with a row per ``CompareRow`` of ``rows`` (``runs``: their runs, for a conversation's
    per-turn tooltip; ``server``: their ``ServerRow``, empty when llama-server was not compared)."""
    if t.columnCount() != len(RESULT_HEADERS) + (len(SERVER_HEADERS) if server else 0):
        set_result_columns(t, bool(server))
    t.setRowCount(len(rows))
    for i, r in enumerate(rows):
        turns_tip = turns_text(runs[i]) if i < len(runs) else ""
        s = r.summary
        same = "n/a" if r.same_output_as_plain is None else ("yes" if r.same_output_as_plain else "no")
        cells = (r.config.label, figure_text(s.decode_tokens_per_s, ".1f"),
                 figure_text(r.speedup_vs_plain, ".2f", "x"), figure_text(r.expected_speedup, ".2f", "x"),
                 figure_text(None if s.acceptance_rate is None else 100 * s.acceptance_rate, ".1f", " %"),
                 figure_text(s.mean_accepted_length, ".2f"),
                 f"{s.windows} ({r.tree_windows} tree)" if r.tree_windows else str(s.windows), same)
        for col, text in enumerate(cells):
            it = QTableWidgetItem(text)
            if col:
                it.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            if col == 0:
                it.setForeground(QBrush(QColor(COLORS[i % len(COLORS)])))
                tip = "\n".join(x for x in (turns_tip, r.warm and f"warm: {r.warm}: its source remembered "
                                             "earlier requests, so this is no cold run") if x)
                if tip:
                    it.setToolTip(tip)
                if r.warm:  # italic: a warm row (the tooltip says what it remembered)
                    font = it.font()
                    font.setItalic(True)
                    it.setFont(font)
            if col == WINDOWS_COLUMN and r.rows_per_token is not None:
                it.setToolTip(f"{r.rows_per_token:.2f} rows verified per generated token (a tree window's "
                              "every node, one per plain step)")
            if r.error:
                it.setToolTip(r.error + (f"\n{turns_tip}" if col == 0 and turns_tip else ""))
                it.setBackground(QBrush(QColor("#ffebee")))
            elif col == 7 and r.same_output_as_plain is False:
                it.setBackground(QBrush(QColor("#fff3e0")))
                it.setToolTip("the output differs from plain decoding (batch arithmetic can flip a near-tie; "
                              "sampling with temperature > 0 differs by design)")
            t.setItem(i, col, it)
        if server:
            set_server_cells(t, i, server[i])


def set_result_columns(t: QTableWidget, server: bool) -> None:
    """Our columns, and llama-server's four after them when ``server``: then every header takes two
    lines (twelve columns fit 1024 px) and llama-server's tokens/s is shown beside ours (moved on
    screen only: the columns' indices stay ``RESULT_HEADERS`` then ``SERVER_HEADERS``)."""
    h = t.horizontalHeader()
    for visual in range(h.count()):  # back to the natural order before the columns change
        h.moveSection(h.visualIndex(visual), visual)
    headers = RESULT_HEADERS + (SERVER_HEADERS if server else ())
    t.setColumnCount(len(headers))
    t.setHorizontalHeaderLabels([two_lines(x) for x in headers] if server else list(headers))
    for i, tip in enumerate(RESULT_TIPS + (SERVER_TIPS if server else ())):
        t.horizontalHeaderItem(i).setToolTip(tip)
    if server:
        h.moveSection(h.visualIndex(len(RESULT_HEADERS)), 2)


def set_server_cells(t: QTableWidget, i: int, v) -> None:
    """Row ``i``'s llama-server columns from its ``ServerRow``: figures, or the error / note across them."""
    first = len(RESULT_HEADERS)
    if v.drafted is None:  # an error or a note instead of figures: said in the last column, whole in its tooltip
        cells = ("", "", "", "failed" if v.error else "not compared")
    else:
        cells = (figure_text(v.tokens_per_s, ".1f"), f"{v.ours_drafted} / {v.drafted}",
                 f"{v.ours_accepted} / {v.accepted}",
                 "yes" if v.same_output and v.same_windows else
                 ("windows differ" if v.same_output else v.describe_output()))
    tip = "\n".join(x for x in (v.error, v.note, " ".join(v.flags) and "llama-server " + " ".join(v.flags)) if x)
    for k, text in enumerate(cells):
        it = QTableWidgetItem(text)
        it.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if tip:
            it.setToolTip(tip)
        if v.error:
            it.setBackground(QBrush(QColor("#ffebee")))
        elif k == 3 and v.drafted is not None and not (v.same_output and v.same_windows):
            it.setBackground(QBrush(QColor("#fff3e0")))
        t.setItem(i, first + k, it)
