"""A tree window's branches in words, for the Receipt pane (``inspector.engine.tree``).

One line per branch (root's child to leaf): its tokens, the accepted ones green, the kept branch first
and marked; rows of the other branches were decoded in the same batch and left the KV cache at once.
"""

from __future__ import annotations

import html
from typing import Callable

from inspector.engine.records import TreeReceipt
from inspector.engine.tree import branch_rows, leaves

ACCEPTED_COLOR = "#2e7d32"
OTHER_COLOR = "#757575"


def kept_branch(tree: TreeReceipt) -> tuple[int, int]:
    """(the kept branch's number, 1-based in leaf order; the number of branches)."""
    leaf_rows = leaves(tree.node_parents)
    return leaf_rows.index(tree.branch_rows[-1]) + 1, len(leaf_rows)


def tree_disposition(disposition: str, tree: TreeReceipt) -> str:
    """A tree window's disposition with the branch it describes, short enough for the Windows table at 1024
    pixels: "full_accept · br 2/3" (``full_accept`` is the kept branch accepted whole: a tree as a whole is never
    accepted, only one branch is kept; ``tree_disposition_tip`` says it in words)."""
    kept, n = kept_branch(tree)
    return f"{disposition} · br {kept}/{n}"


def tree_disposition_tip(disposition: str, tree: TreeReceipt) -> str:
    """"full_accept of branch 2 of 3 (the kept one): the other branches' rows were dropped"."""
    kept, n = kept_branch(tree)
    return f"{disposition} of branch {kept} of {n} (the kept one): the other branches' rows were dropped"


def tree_summary(tree: TreeReceipt, accepted: int) -> str:
    """"9 rows in one batch · 3 branches · kept branch 2 (rows 4, 6, 7)"."""
    kept, n_branches = kept_branch(tree)
    rows = ", ".join(map(str, tree.branch_rows))
    return (f"{tree.rows} rows in one batch · {n_branches} branches · kept branch {kept} (rows {rows}), "
            f"{accepted} accepted")


def short_summary(tree: TreeReceipt, accepted: int) -> str:
    """"9 rows · 2 branches · 6 accepted" (the Tree tab is narrow; its tooltip has ``tree_summary``)."""
    return f"{tree.rows} rows · {len(leaves(tree.node_parents))} branches · {accepted} accepted"


def tree_branches_html(tree: TreeReceipt, accepted: int, text_of: Callable[[int], str], most: int = 8) -> str:
    """The branches as HTML lines (at most ``most``; the kept one first, marked ✓): each token quoted,
    the accepted ones of the kept branch green, the other branches grey; a row shared with the kept
    branch is shown on every branch through it."""
    parents = tree.node_parents
    kept_leaf = tree.branch_rows[-1]
    accepted_rows = set(tree.branch_rows[:accepted])
    order = [kept_leaf] + [leaf for leaf in leaves(parents) if leaf != kept_leaf]
    lines = []
    for n, leaf in enumerate(order[:most]):
        cells = []
        for r in branch_rows(parents, leaf):
            t = html.escape(repr(text_of(tree.node_token_ids[r - 1])))
            color = ACCEPTED_COLOR if r in accepted_rows else (None if n == 0 else OTHER_COLOR)
            cells.append(f"<span style='color:{color}'>{t}</span>" if color else t)
        mark = "✓ " if n == 0 else ""
        lines.append(mark + " ".join(cells))
    if len(order) > most:
        lines.append(f"… {len(order) - most} more branches")
    return "<br>".join(lines)
