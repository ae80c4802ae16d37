"""The implicit bounded suffix trie and SuffixDecoding's candidates and score (see the package docstring).

Tokens live in one int32 array, sequences separated by -1 and ``PAD`` -1s before the first; a node
(a string of at most ``max_tree_depth`` tokens) is the array of positions where its string ends,
found by a vectorized scan: its count is that array's size, a child the subset followed by one token.
"""

from __future__ import annotations

import heapq
from typing import Iterator

import numpy as np

MAX_DEPTH = 64
"""Largest ``max_tree_depth``; also the -1 padding before the first token of every array."""
PAD = MAX_DEPTH
SMALL = 48
"""Nodes with at most this many occurrences pick their best child in plain Python (else numpy)."""


def best_child(nxt: np.ndarray) -> tuple[int, int]:
    """(token, count) of the most frequent token >= 0 in ``nxt`` (the tokens after each occurrence of a
    node; ties: the latest), or (-1, 0) when no occurrence continues."""
    if nxt.size <= SMALL:
        counts: dict[int, int] = {}
        last: dict[int, int] = {}
        for j, t in enumerate(nxt.tolist()):
            if t >= 0:
                counts[t] = counts.get(t, 0) + 1
                last[t] = j
        if not counts:
            return -1, 0
        token = max(counts, key=lambda t: (counts[t], last[t]))
        return token, counts[token]
    valid = nxt[nxt >= 0]
    if valid.size == 0:
        return -1, 0
    # Reversed, the first index of a token is its latest occurrence.
    vals, first, counts = np.unique(valid[::-1], return_index=True, return_counts=True)
    i = int(np.lexsort((-first, counts))[-1])  # the largest count, then the smallest reversed index
    return int(vals[i]), int(counts[i])


class GreedyPath:
    """The greedy path from one node (``ends``: the positions in ``a`` where its string ends), grown on
    demand: the most frequent child while the path probability (the product of count(child) /
    count(node), a node's count including the occurrences that end there) stays >= ``min_prob``.
    ``tokens`` and ``probs`` (the path probability after each token) grow together."""

    def __init__(self, a: np.ndarray, ends: np.ndarray, min_prob: float) -> None:
        self.a, self.ends, self.min_prob = a, ends, min_prob
        self.size = ends.size
        self.tokens: list[int] = []
        self.probs: list[float] = []
        self.prob = 1.0
        self.done = False

    def grow(self, limit: int) -> None:
        """Extend the path to ``limit`` tokens, or until no child qualifies."""
        while not self.done and len(self.tokens) < limit:
            nxt = self.a[self.ends + 1]
            token, count = best_child(nxt)
            prob = self.prob * count / self.ends.size if count else 0.0
            if count == 0 or prob < self.min_prob:
                self.done = True
                break
            self.prob = prob
            self.tokens.append(token)
            self.probs.append(prob)
            self.ends = self.ends[nxt == token] + 1


def candidates(a: np.ndarray, end: int, pattern, max_tokens: int, depth: int, max_spec_factor: float,
               max_spec_offset: float, min_token_prob: float, earlier_only: bool = False,
               ) -> Iterator[tuple[int, tuple[int, ...], tuple[float, ...]]]:
    """SuffixDecoding's candidate per match length over the tokens ``a[:end]`` (``PAD`` -1 before the
    first, -1 between sequences and after the last): for m = 1 .. len(pattern) - 1 while the last m
    tokens of ``pattern`` (the stream's last tokens, at most ``depth``) occur, (m, tokens, path
    probabilities) of the greedy path from that node, at most ``floor(max_spec_factor * m +
    max_spec_offset)``, ``max_tokens`` and ``depth - m`` tokens; lengths whose path is empty are left out.
    ``earlier_only``: ``a[:end]`` ends with the pattern itself (the request's own stream); its occurrence
    there is left out of the counts (arctic-inference counts it: a string seen once before then has
    probability 1/2), so a probability is the share of the earlier occurrences."""
    if len(pattern) < 2 or max_tokens < 1:
        return
    ends = np.flatnonzero(a[: end - 1 if earlier_only else end] == pattern[-1])
    path = None
    for m in range(1, len(pattern)):
        if m > 1:
            ends = ends[a[ends - (m - 1)] == pattern[-m]]
        if ends.size == 0:
            return  # no node for this match length (nor for longer ones)
        limit = min(max_tokens, int(m * max_spec_factor + max_spec_offset + 1e-6), depth - m)
        if limit <= 0:
            continue
        if path is None or path.size != ends.size:  # nested sets: the same size is the same node
            path = GreedyPath(a, ends, min_token_prob)
        path.grow(limit)
        if path.tokens:
            yield m, tuple(path.tokens[:limit]), tuple(path.probs[:limit])


MATCHED_AT_ONCE = 16
"""Nodes with at most this many occurrences get every occurrence's match length in one vectorized
comparison (``nodes``) instead of one filter per match length."""


def nodes(a: np.ndarray, end: int, pattern, earlier_only: bool = False) -> Iterator[tuple[int, int, np.ndarray]]:
    """The distinct nodes of the suffixes of ``pattern`` over ``a[:end]`` (as ``candidates``), shortest
    first: (m_lo, m_hi, ends), the suffixes of m_lo..m_hi tokens all occurring at the same places
    (``ends``: where they end), so they share one greedy path. m_hi <= len(pattern) - 1."""
    top = len(pattern) - 1
    if top < 1:
        return
    ends = np.flatnonzero(a[: end - 1 if earlier_only else end] == pattern[-1])
    m_lo = 1
    m = 1
    while ends.size:
        if ends.size <= MATCHED_AT_ONCE:
            # How far back each occurrence matches (-1 separators and PAD never equal a token).
            back = np.asarray(pattern[::-1][:top], dtype=np.int32)
            eq = a[ends[:, None] - np.arange(top)[None, :]] == back[None, :]
            lengths = np.where(eq.all(axis=1), top, np.argmin(eq, axis=1))
            for v in np.unique(lengths[lengths >= m]).tolist():
                yield m_lo, v, ends
                ends = ends[lengths > v]
                lengths = lengths[lengths > v]
                m_lo = v + 1
            return
        if m == top:
            yield m_lo, m, ends
            return
        shorter = ends[a[ends - m] == pattern[-m - 1]]
        if shorter.size != ends.size:
            yield m_lo, m, ends
            m_lo = m + 1
        ends = shorter
        m += 1


def speculate(a: np.ndarray, end: int, pattern, max_tokens: int, depth: int, max_spec_factor: float,
              max_spec_offset: float, min_token_prob: float) -> tuple[tuple[int, ...], float, int]:
    """SuffixDecoding's linear draft (arctic-inference ``SuffixTree::speculate``): of ``candidates``, the
    one with the largest score, the sum of its path probabilities (the longer match on a tie). Returns
    (tokens, score, match length); no tokens when nothing qualifies."""
    best: tuple[tuple[int, ...], float, int] = ((), 0.0, 0)
    for m, tokens, probs in candidates(a, end, pattern, max_tokens, depth, max_spec_factor, max_spec_offset,
                                       min_token_prob):
        score = sum(probs)
        if score >= best[1]:
            best = (tokens, score, m)
    return best


def match_ends(a: np.ndarray, end: int, pattern, m: int, earlier_only: bool = False) -> np.ndarray:
    """Where the last ``m`` tokens of ``pattern`` occur in ``a[:end]`` (the positions of their last
    token; ``earlier_only`` as in ``candidates``): the node of that match length."""
    ends = np.flatnonzero(a[: end - 1 if earlier_only else end] == pattern[-1])
    for j in range(2, m + 1):
        ends = ends[a[ends - (j - 1)] == pattern[-j]]
    return ends


def best_first_tree(a: np.ndarray, ends: np.ndarray, min_prob: float, budget: int,
                    max_depth: int) -> tuple[list[int], list[int], list[float]]:
    """SuffixDecoding's tree draft (arctic-inference ``SuffixTree::speculate`` with a tree budget): from
    the node whose string ends at ``ends``, take continuations best first by path probability (count of
    the child / count of its parent, multiplied along the path, as ``GreedyPath``) while it is at least
    ``min_prob``, at most ``budget`` tokens and ``max_depth`` deep. Returns (tokens, parents, path
    probabilities) in the order taken, parents as rows (0: the node itself; ``inspector.engine.tree``):
    every parent comes before its children, and a row's first child is its most probable."""
    tokens: list[int] = []
    parents: list[int] = []
    probs: list[float] = []
    heap: list = []
    order = 0

    def push_children(node_ends: np.ndarray, prob: float, row: int, depth: int) -> None:
        nonlocal order
        if depth >= max_depth or node_ends.size == 0:
            return
        nxt = a[node_ends + 1]
        valid = nxt[nxt >= 0]
        if valid.size == 0:
            return
        values, counts = np.unique(valid, return_counts=True)
        for t, c in zip(values.tolist(), counts.tolist()):
            p = prob * c / node_ends.size
            if p >= min_prob:
                heapq.heappush(heap, (-p, order, t, row, depth + 1, node_ends))
                order += 1

    push_children(ends, 1.0, 0, 0)
    while heap and len(tokens) < budget:
        neg, _, t, parent, depth, parent_ends = heapq.heappop(heap)
        tokens.append(t)
        parents.append(parent)
        probs.append(-neg)
        push_children(parent_ends[a[parent_ends + 1] == t] + 1, -neg, len(tokens), depth)
    return tokens, parents, probs


class TokenStream:
    """A request's tokens (prompt + output) in a growing int32 array: ``PAD`` -1s, the tokens, -1s."""

    def __init__(self, tokens) -> None:
        self.n = 0
        self.a = np.full(PAD + max(256, 2 * len(tokens)) + 1, -1, dtype=np.int32)
        self.extend(tokens)

    @property
    def end(self) -> int:
        """Index after the last token in ``a``."""
        return PAD + self.n

    def extend(self, tokens) -> None:
        """Append ``tokens`` (ids >= 0)."""
        k = len(tokens)
        if not k:
            return
        if self.end + k + 1 > self.a.size:
            grown = np.full(max(self.end + k + 1, 2 * self.a.size), -1, dtype=np.int32)
            grown[: self.end] = self.a[: self.end]
            self.a = grown
        self.a[self.end : self.end + k] = np.asarray(tokens, dtype=np.int32)
        self.n += k

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` tokens."""
        self.a[PAD + n : self.end] = -1
        self.n = n

    def last(self) -> int:
        """The last token, -1 when empty."""
        return int(self.a[self.end - 1]) if self.n else -1

    def tokens(self, start: int = 0) -> np.ndarray:
        """A copy of the tokens from ``start``."""
        return self.a[PAD + start : self.end].copy()
