"""Acceptance against the probabilities of the proposed tokens (issue 15), from receipts only.

A proposal token is *judged* when a verification row decided it: indices
0..accepted_proposal_tokens-1 of a window were accepted, and for disposition
``first_mismatch`` index ``accepted_proposal_tokens`` was rejected. Later proposal
tokens were never judged (their rows are branch-conditioned), and a ``stopped``
window judged what it accepted, and the rejected token when its correction was committed. Only judged tokens count here, so these
figures never read a branch-conditioned row.

- ``acceptance_by_probability``: judged tokens binned by the target's probability p
  of the proposed token (``which="target"``, the row's ``proposed_p``) or by the
  draft's probability q of it (``which="draft"``, ``draft_q``: draft sources only);
  per bin, accepted / judged. Against q this is the draft's calibration: a
  well-calibrated greedy draft's bins lie near the diagonal.
- ``probability_by_position``: per proposal position (1-based), judged and accepted
  tokens, accepted / judged (acceptance given the earlier tokens were accepted) and
  the mean target p of the judged proposed tokens.

Receipts without probability figures (turned off, schema v1 files) are skipped by
both; ``has_probabilities`` says whether any receipt has them. Pure Python, no Qt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from inspector.engine.records import WindowReceipt
TARGET = "target"
DRAFT = "draft"
DEFAULT_EDGES = tuple(i / 10 for i in range(11))
"""Bin edges 0, 0.1, ..., 1.0 (probability)."""


@dataclass(frozen=True, slots=True)
class ProbabilityBin:
    """Judged proposal tokens whose probability lies in [``lo``, ``hi``) (the last bin includes
    ``hi``). ``judged``/``accepted``: token counts; ``mean_p``: the mean probability (0..1) of the
    bin's judged tokens, None when it is empty."""

    lo: float
    hi: float
    judged: int
    accepted: int
    mean_p: float | None

    @property
    def rate(self) -> float | None:
        """accepted / judged (0..1), None for an empty bin."""
        return self.accepted / self.judged if self.judged else None

    @property
    def centre(self) -> float:
        """The middle of the bin (probability)."""
        return (self.lo + self.hi) / 2


@dataclass(frozen=True, slots=True)
class PositionFigures:
    """One proposal position (1-based ``position``) over the receipts with figures.

    ``offered``: windows whose proposal had this position; ``judged``/``accepted``: judged and
    accepted tokens at it; ``mean_p``: the mean target probability (0..1) of the judged proposed
    tokens at it, None when none was judged."""

    position: int
    offered: int
    judged: int
    accepted: int
    mean_p: float | None

    @property
    def rate(self) -> float | None:
        """accepted / judged (0..1): acceptance given the earlier tokens were accepted; None when
        no token was judged here."""
        return self.accepted / self.judged if self.judged else None


def judged_count(receipt: WindowReceipt) -> int:
    """How many proposal tokens of ``receipt`` a verification row judged: the accepted ones, plus the
    rejected one when its correction was committed (a ``first_mismatch`` window, or a ``stopped`` one
    whose correction ended the text) (tokens)."""
    a = receipt.accepted_proposal_tokens
    r = receipt
    rejected = (a < r.proposal_token_count and a < r.canonical_prediction_count
                and r.verification_row_predictions[a] != r.proposal_token_ids[a])
    return a + (1 if rejected else 0)


def judged_tokens(receipts: Iterable[WindowReceipt], which: str = TARGET) -> list[tuple[int, float, bool]]:
    """``(position, probability, accepted)`` of every judged proposal token with a figure.

    ``position``: 0-based proposal index; ``probability``: the target's p of the proposed token
    (``which="target"``) or the draft's q (``which="draft"``), 0..1; receipts without the figure
    (no probabilities, or no ``draft_q`` for ``which="draft"``) give nothing. Raises ``ValueError``
    for another ``which``."""
    if which not in (TARGET, DRAFT):
        raise ValueError(f"which must be {TARGET!r} or {DRAFT!r}, observed {which!r}")
    out = []
    for r in receipts:
        p = r.probabilities
        if p is None:
            continue
        column = p.proposed_p if which == TARGET else p.draft_q
        if column is None:
            continue
        a = r.accepted_proposal_tokens
        for i in range(min(judged_count(r), len(column))):
            v = column[i]
            if v is not None:
                out.append((i, float(v), i < a))
    return out


def has_probabilities(receipts: Iterable[WindowReceipt], which: str = TARGET) -> bool:
    """True when some receipt carries the figure (``which`` as in ``judged_tokens``)."""
    for r in receipts:
        p = r.probabilities
        if p is not None and (which == TARGET or p.draft_q is not None):
            return True
    return False


def acceptance_by_probability(receipts: Iterable[WindowReceipt], edges: Sequence[float] = DEFAULT_EDGES,
                              which: str = TARGET) -> list[ProbabilityBin]:
    """Judged proposal tokens binned by probability, with accepted / judged per bin.

    ``edges``: increasing bin edges (probability, 0..1), len(edges) - 1 bins [edges[k], edges[k+1]),
    the last one closed; a probability outside the edges is not counted. ``which``: ``"target"``
    (the target's p of the proposed token) or ``"draft"`` (the draft's q). Returns one
    ``ProbabilityBin`` per bin, empty ones included. Raises ``ValueError`` for fewer than two edges
    or edges that do not increase."""
    e = [float(x) for x in edges]
    if len(e) < 2 or any(b <= a for a, b in zip(e, e[1:])):
        raise ValueError(f"edges must be at least two increasing values, observed {list(edges)!r}")
    n = len(e) - 1
    judged, accepted, total = [0] * n, [0] * n, [0.0] * n
    for _pos, p, ok in judged_tokens(receipts, which):
        if p < e[0] or p > e[-1]:
            continue
        k = n - 1 if p == e[-1] else next(k for k in range(n) if p < e[k + 1])
        judged[k] += 1
        accepted[k] += ok
        total[k] += p
    return [ProbabilityBin(e[k], e[k + 1], judged[k], accepted[k], total[k] / judged[k] if judged[k] else None)
            for k in range(n)]


def probability_by_position(receipts: Iterable[WindowReceipt]) -> list[PositionFigures]:
    """Per proposal position 1..longest proposal (over receipts with figures): windows that
    offered it, judged and accepted tokens at it, and the mean target p of the judged proposed
    tokens (0..1). Receipts without probability figures are skipped entirely."""
    with_figures = [r for r in receipts if r.probabilities is not None]
    longest = max((r.proposal_token_count for r in with_figures), default=0)
    offered, judged, accepted, total = ([0] * longest for _ in range(4))
    for r in with_figures:
        for i in range(r.proposal_token_count):
            offered[i] += 1
    for i, p, ok in judged_tokens(with_figures, TARGET):
        judged[i] += 1
        accepted[i] += ok
        total[i] += p
    return [PositionFigures(i + 1, offered[i], judged[i], accepted[i], total[i] / judged[i] if judged[i] else None)
            for i in range(longest)]
