"""Token trees: a proposal of several candidate continuations, verified in one batch (issue 40).

A tree proposal is ``token_ids`` with ``parents``: token i (0-based) sits on verification row i + 1,
and ``parents[i]`` is the row of its parent (0: the current token, the root, on row 0). A chain is
the tree whose parents are 0, 1, 2, ... Parents come before children (``parents[i] <= i``), so the
rows are in an order llama.cpp can decode in one batch.

The encoding in the batch is llama.cpp's own (``examples/speculative/speculative.cpp``, llama.cpp
0c1e570, ``n_seq_dft``): one KV sequence per leaf (a *branch*: the rows from the root to that leaf),
each row on the sequences of the leaves below it, its position base + its depth. A row attends to the
cells of its first sequence at positions up to its own: its ancestors, nothing of other branches.

The walk (``walk_tree``) is the chain's rule node by node: at each row the target's prediction picks
the child with that token, if there is one, and the walk stops at the first row none matches, whose
prediction is the correction (greedy, or the sampled token of ``sample_match``: the committed token is
always the target's own at that prefix, so the output is plain decoding's). The window then keeps one
branch, the one through the last accepted row (continued by first children to a leaf), and is a chain
window on it: the same classification, commit loop and repair (``inspector.engine.window``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

INVALID_TREE = "invalid_tree"
"""Discard reason for a proposal whose ``parents`` do not describe a tree (``tree_shape_error``)."""


def is_chain(parents: Sequence[int]) -> bool:
    """True when ``parents`` is a single branch (every token the child of the one before)."""
    return all(p == i for i, p in enumerate(parents))


def tree_shape_error(token_ids: Sequence[int], parents: Sequence[int]) -> str | None:
    """Why ``parents`` is not a tree over ``token_ids`` (one line), or None when it is: one parent per
    token, each a row before the token's own (0 <= parents[i] <= i), and no two children of one row with
    the same token (the walk could not tell them apart)."""
    if len(parents) != len(token_ids):
        return f"{len(parents)} parents for {len(token_ids)} tokens"
    seen: set[tuple[int, int]] = set()
    for i, (p, t) in enumerate(zip(parents, token_ids)):
        if not 0 <= p <= i:
            return f"token {i} (row {i + 1}) has parent row {p}: expected 0..{i}"
        if (p, t) in seen:
            return f"row {p} has two children with token {t}"
        seen.add((p, t))
    return None


def depths(parents: Sequence[int]) -> list[int]:
    """Each row's depth (row 0, the root: 0; a token: its parent's + 1): the row's position is the
    window's base position + its depth."""
    out = [0]
    for p in parents:
        out.append(out[p] + 1)
    return out


def children(parents: Sequence[int]) -> list[list[int]]:
    """Each row's child rows, in row order."""
    out: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, p in enumerate(parents):
        out[p].append(i + 1)
    return out


def leaves(parents: Sequence[int]) -> list[int]:
    """The rows without children, in row order (the root alone when there are no tokens)."""
    kids = children(parents)
    return [r for r in range(len(kids)) if not kids[r]]


def row_branches(parents: Sequence[int]) -> list[tuple[int, ...]]:
    """For each row, the branches through it: the ordinals (in ``leaves`` order) of the leaves below it
    or at it. The root is on every branch; a leaf on its own only. These are the rows' sequence ids in
    the batch (branch 0 the session's own sequence, the others borrowed ones)."""
    leaf_rows = leaves(parents)
    on: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for b, leaf in enumerate(leaf_rows):
        r = leaf
        while True:
            on[r].append(b)
            if r == 0:
                break
            r = parents[r - 1]
    return [tuple(x) for x in on]


def branch_rows(parents: Sequence[int], leaf: int) -> list[int]:
    """The rows from the root's child down to ``leaf`` (a row), in order; empty for the root."""
    rows = []
    r = leaf
    while r != 0:
        rows.append(r)
        r = parents[r - 1]
    rows.reverse()
    return rows


@dataclass(frozen=True, slots=True)
class TreeWalk:
    """The outcome of walking a verified tree (``walk_tree``).

    ``accepted_rows``: the rows whose tokens the target accepted, root's child first.
    ``branch_rows``: the kept branch, root's child to a leaf; starts with ``accepted_rows``.
    ``leaf``: the kept branch's leaf row; ``branch``: its ordinal in ``leaves`` order (its sequence).
    """

    accepted_rows: tuple[int, ...]
    branch_rows: tuple[int, ...]
    leaf: int
    branch: int


def walk_tree(token_ids: Sequence[int], parents: Sequence[int], predictions: Sequence[int]) -> TreeWalk:
    """Walk a verified tree from the root: at each row take the child whose token equals the row's
    prediction; stop at the first row with none (``predictions``: one per row, row 0 the root's). The
    kept branch continues from the last accepted row by first children to a leaf, as a chain keeps its
    rejected tail until repair trims it."""
    kids = children(parents)
    accepted: list[int] = []
    r = 0
    while True:
        want = predictions[r]
        nxt = next((c for c in kids[r] if token_ids[c - 1] == want), None)
        if nxt is None:
            break
        accepted.append(nxt)
        r = nxt
    leaf = r
    while kids[leaf]:
        leaf = kids[leaf][0]
    return TreeWalk(tuple(accepted), tuple(branch_rows(parents, leaf)), leaf, leaves(parents).index(leaf))


def spread_parents(n_nodes: int, branches: int) -> tuple[int, ...]:
    """The parents of a tree of ``n_nodes`` tokens in ``branches`` chains from the root, dealt round
    robin (token i on chain i mod branches): equal branches, the shape the cost model times for trees
    (``inspector.llama.cost_model.measure_tree_costs``). One branch is the chain."""
    b = max(1, min(branches, n_nodes))
    last = [0] * b
    parents = []
    for i in range(n_nodes):
        parents.append(last[i % b])
        last[i % b] = i + 1
    return tuple(parents)
