"""How many tokens to propose: the length that buys the most tokens per unit of
verification cost, learned from the source's own receipts.

A window that verifies k rows costs the target c(k); on a CPU c(k) grows
almost linearly: c(k) = c(1) * (1 + r * (k - 1)) with r about 0.5 for the
bundled model here (LLAMA_CPP_NOTES "Measured here"; ``spec-inspector
bench`` measures it). If each proposal token is accepted with probability p
given the ones before it were, a proposal of m tokens commits on average
E(m) = 1 + p + ... + p^m tokens (accepted ones, then the correction or the
bonus token). A plain step commits 1 token for c(1). So proposing m tokens
pays off when E(m) / (1 + r * m) > 1, and the best m maximizes that ratio.

p is estimated per match-length bucket (how many tokens of the current
context match the earlier occurrence) from the receipts reported back; r is
fitted to the receipts' verification times once windows of several sizes
were seen, or fixed by the caller.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

BUCKET_EDGES = (2, 4, 8, 16, 32)
"""Match-length buckets (tokens): [1,2), [2,4), [4,8), [8,16), [16,32), [32, inf)."""

PRIOR_P = (0.35, 0.5, 0.65, 0.75, 0.85, 0.9)
"""Prior acceptance probability per bucket, before any receipt."""

PRIOR_WEIGHT = 4.0
"""The prior counts as this many observed tokens (accepted + mismatched)."""

DEFAULT_ROW_COST_RATIO = 0.5
"""r before it is fitted: the bundled model on 2 CPU cores (issue 5 measurements)."""


def row_costs_option(source: str, key: str, value):
    """The ``row_costs`` option of the cost-aware sources (``ngram``, ``suffix``), checked: None (not
    given: the context's stored cost model, ``SourceContext.row_costs``), ``"linear"`` (also ``""``: no
    table, the linear model fitted from the receipts) or the milliseconds per batch of 1, 2, ... rows
    (a list, or ``"a,b,c"``; each finite and > 0). Raises ``ValueError`` naming the source, the option
    and the observed value (a ``descriptors.Converter``)."""
    if value is None:
        return None
    if isinstance(value, str) and value in ("", "linear"):
        return "linear"
    items = value.split(",") if isinstance(value, str) else value
    try:
        costs = [float(v) for v in items]
    except (TypeError, ValueError):
        costs = []
    if not costs or not all(0 < c < float("inf") for c in costs):
        raise ValueError(f"source {source} option {key} must be linear or positive milliseconds per batch of "
                         f"1, 2, ... rows (\"a,b,c\"), observed {value!r}")
    return costs

def bucket_of(match_length: int) -> int:
    """Index of the bucket holding ``match_length`` (tokens, >= 0)."""
    for i, edge in enumerate(BUCKET_EDGES):
        if match_length < edge:
            return i
    return len(BUCKET_EDGES)


def expected_committed(p: float, m: int) -> float:
    """E(m) = 1 + p + ... + p^m: tokens a window of m proposal tokens commits on
    average when each is accepted with probability p after its predecessors."""
    if p >= 1.0:
        return m + 1.0
    return (1.0 - p ** (m + 1)) / (1.0 - p)


def best_cut(reach, relative_cost, min_gain: float = 1.0) -> tuple[int, float]:
    """The proposal length m in 1..len(reach) that commits the most tokens per unit of cost, and that
    rate: (1 + reach[0] + ... + reach[m - 1]) / relative_cost(m + 1), the expected committed tokens
    (accepted ones, then the correction or the bonus token) over the window's cost in plain steps.
    ``reach[i]``: the probability that proposal tokens 1..i + 1 are all accepted; ``relative_cost(k)``:
    c(k) / c(1) for a window of k rows. (0, ``min_gain``) when no m beats a plain step (rate 1) by more
    than ``min_gain``."""
    best_m, best = 0, min_gain
    committed = 1.0
    for m, r in enumerate(reach, 1):
        committed += r
        v = committed / relative_cost(m + 1)
        if v > best:
            best_m, best = m, v
    return best_m, best


def best_length(p: float, r: float, cap: int, min_gain: float = 1.0, costs=None) -> int:
    """The m in 1..cap maximizing E(m) / cost(m + 1 rows), or 0 when no m beats a
    plain step by more than ``min_gain`` (tokens per unit cost, plain = 1): ``best_cut``
    with each token accepted with probability ``p`` after its predecessors.

    ``costs``: measured relative costs, ``costs[k-1]`` = c(k) / c(1) for k rows
    (a ``CostModel``'s ``row_ms`` divided by its first entry); rows beyond the
    table and the default use the linear model 1 + r * (k - 1).
    """
    return best_cut([p ** m for m in range(1, cap + 1)], lambda rows: relative_cost(rows, r, costs), min_gain)[0]


def relative_cost(rows: int, r: float, costs=None) -> float:
    """c(rows) / c(1): ``costs[rows - 1]`` when the table covers ``rows``, else 1 + ``r`` * (rows - 1)."""
    return costs[rows - 1] if costs is not None and rows <= len(costs) else 1.0 + r * (rows - 1)


def robust_costs(row_ms) -> list[float]:
    """A measured c(k) table (ms, k = 1..) with measurement noise removed: c(1)
    as measured, and for k >= 2 a Theil-Sen line (median of pairwise slopes)
    through the k >= 2 points, so one disturbed median (another process on a
    shared machine) cannot make a batch size look free or prohibitive. The
    kink between one row (matrix-vector kernels) and two rows stays."""
    c = [float(v) for v in row_ms]
    pts = list(enumerate(c[1:], start=2))
    if len(pts) < 3:
        return c
    slopes = sorted((y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(pts) for x2, y2 in pts[i + 1:])
    slope = max(0.0, slopes[len(slopes) // 2])
    intercepts = sorted(y - slope * x for x, y in pts)
    b = intercepts[len(intercepts) // 2]
    return [c[0]] + [max(c[0], b + slope * k) for k in range(2, len(c) + 1)]


FORGET_PER_QUERY = 0.99
"""Observed counts fade toward the prior by this factor per query (half-life
about 70 queries), so a bucket that stopped proposing after some mismatches
is tried again later: without a proposal there is no receipt to learn from."""

@dataclass
class _Counts:
    """Prior pseudo-counts and faded observed counts (accepted tokens, mismatches)."""

    prior_accepted: float
    prior_mismatched: float
    accepted: float = 0.0
    mismatched: float = 0.0
    last_query: int = 0

    def p(self, now: int) -> float:
        f = FORGET_PER_QUERY ** max(0, now - self.last_query)
        a = self.prior_accepted + f * self.accepted
        return a / (a + self.prior_mismatched + f * self.mismatched)

    def add(self, accepted: float, mismatched: float, now: int) -> None:
        f = FORGET_PER_QUERY ** max(0, now - self.last_query)
        self.accepted = f * self.accepted + accepted
        self.mismatched = f * self.mismatched + mismatched
        self.last_query = now


class CostAwareLength:
    """Per-bucket acceptance estimates and the row cost ratio r -> proposal length.

    ``row_cost_ratio``: r fixed by the caller (None: fitted from receipts,
    starting at ``DEFAULT_ROW_COST_RATIO``). ``row_costs``: a measured cost
    model, milliseconds per batch of k = 1.. rows (``CostModel.row_ms``);
    when given it is used for the batch sizes it covers instead of the linear
    model (c(2) is often far above 1 + r: one row uses a matrix-vector kernel).
    ``min_gain``: propose only when the expected tokens per unit cost beat a
    plain step's by this factor.
    """

    def __init__(self, row_cost_ratio: float | None = None, min_gain: float = 1.02,
                 row_costs=None) -> None:
        if row_cost_ratio is not None and row_cost_ratio < 0:
            raise ValueError(f"row_cost_ratio must be >= 0, observed {row_cost_ratio}")
        if row_costs is not None:
            row_costs = [float(c) for c in row_costs]
            if not row_costs or any(c <= 0 for c in row_costs):
                raise ValueError(f"row_costs must be positive milliseconds per batch size, observed {row_costs}")
            row_costs = robust_costs(row_costs)
            row_costs = [c / row_costs[0] for c in row_costs]
        self.row_costs = row_costs
        self.fixed_ratio = row_cost_ratio
        self.min_gain = min_gain
        self.counts = [_Counts(PRIOR_WEIGHT * p, PRIOR_WEIGHT * (1 - p)) for p in PRIOR_P]
        self._queries = 0
        self._timings: deque[tuple[int, float]] = deque(maxlen=64)
        self._ratio = DEFAULT_ROW_COST_RATIO if row_cost_ratio is None else row_cost_ratio

    @property
    def row_cost_ratio(self) -> float:
        """r: the cost of one more verification row, as a fraction of a one-row decode."""
        return self._ratio

    def length(self, match_length: int, cap: int) -> int:
        """Tokens to propose (0..cap) after a match of ``match_length`` tokens (one ``query``)."""
        self.query()
        if cap <= 0:
            return 0
        return best_length(self.acceptance(match_length), self._ratio, cap, self.min_gain, self.row_costs)

    def query(self) -> None:
        """Count one question asked of the policy: observed counts fade toward the prior per query."""
        self._queries += 1

    def acceptance(self, match_length: int) -> float:
        """p: the estimated probability that a proposal token after a match of ``match_length`` tokens is
        accepted given the ones before it were (its bucket's prior and its receipts, faded by the queries
        since they came)."""
        return self.counts[bucket_of(match_length)].p(self._queries)

    def relative_cost(self, rows: int) -> float:
        """c(rows) / c(1): the measured table (noise removed, ``robust_costs``) where it covers ``rows``,
        else the linear model with the current row cost ratio."""
        return relative_cost(rows, self._ratio, self.row_costs)

    def observe_receipt(self, match_length: int, receipt, growing: bool = False) -> None:
        """``observe`` with a ``WindowReceipt``'s figures: proposal and accepted token counts, whether it
        ended at a ``first_mismatch``, its verification rows and time (microseconds)."""
        self.observe(match_length, receipt.proposal_token_count, receipt.accepted_proposal_tokens,
                     receipt.disposition == "first_mismatch", getattr(receipt, "decoded_rows", receipt.verification_rows),
                     receipt.verification_elapsed_us, growing=growing)

    def observe(self, match_length: int, proposed: int, accepted: int, mismatched: bool,
                rows: int, verification_us: float, growing: bool = False) -> None:
        """Learn from one receipt: ``accepted`` of ``proposed`` tokens, ``mismatched``
        when a proposal token was rejected (not when generation merely stopped),
        and the window's verification time for ``rows`` rows (microseconds).
        ``growing``: proposal token i (from 0) followed a match of ``match_length`` + i
        tokens (the match grows with each accepted token): each token is counted in its
        own bucket, else all in the bucket of ``match_length``."""
        if growing:
            for i in range(accepted):
                self.counts[bucket_of(match_length + i)].add(1.0, 0.0, self._queries)
            if mismatched:
                self.counts[bucket_of(match_length + accepted)].add(0.0, 1.0, self._queries)
        else:
            self.counts[bucket_of(match_length)].add(accepted, 1.0 if mismatched else 0.0, self._queries)
        if self.fixed_ratio is None and verification_us > 0:
            self._timings.append((rows, float(verification_us)))
            self._refit()

    def _refit(self) -> None:
        pts = self._timings
        if len(pts) < 8:
            return
        xs = [x for x, _ in pts]
        if max(xs) - min(xs) < 3:
            return
        n = len(pts)
        mx = sum(xs) / n
        my = sum(y for _, y in pts) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
        one_row = my + slope * (1 - mx)  # fitted c(1)
        if one_row <= 0:
            return
        self._ratio = min(1.5, max(0.02, slope / one_row))
