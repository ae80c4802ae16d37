"""Where speculation pays, predicted from the cost model: the synthetic-acceptance map (issue 39 item 3).

The speedup over plain decoding of a draft whose proposals are right at a constant conditional rate
(mean acceptance length tau = tokens committed per window) and cost ``f`` x c(1) per proposed token,
as ``inspector.bench.synthetic_table.predicted_speedup`` defines it, over a grid of tau and f
(``predicted_grid``); the break-even line where that speedup is 1 (``break_even_cost``: for each tau the
draft cost at which the draft stops paying); where a real run landed on the map (``landing``: its own
mean acceptance length and its measured proposal time per token over c(1)); and the short table the
tuner prints (``format_predicted_table``). No Qt: the window's heatmap and ``tune`` both read it.

With E[committed] (tokens), E[c(1 + L)] (ms) and E[L] (proposed tokens) of one window
(``window_terms``), the speedup is E[committed] c(1) / (E[c(1 + L)] + f c(1) E[L]): it falls with f, so
the break-even draft cost at a given tau is f*(tau) = (E[committed] c(1) - E[c(1 + L)]) / (c(1) E[L]) and
the draft pays below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from inspector.bench.synthetic_table import COST_FRACTIONS, DRAFT_MAX, MEAN_LENGTHS
from inspector.llama.cost_model import CostModel
from inspector.sources.synthetic import constant_rate

TAU_MIN, TAU_MAX = 1.0, float(DRAFT_MAX)
"""The map's mean acceptance lengths (tokens committed per window): 1 (nothing accepted) to 8."""
COST_MAX = 0.5
"""The map's largest draft cost per proposed token, as a fraction of c(1)."""


def window_terms(cm: CostModel, rate: float, draft_max: int = DRAFT_MAX) -> tuple[float, float, float]:
    """(E[committed] tokens, E[c(1 + L)] ms, E[L] tokens) of one window whose proposal of at most
    ``draft_max`` tokens is right at the constant conditional ``rate`` (0..1) and ends at its first wrong
    token: L = j < ``draft_max`` with probability rate^(j-1) (1 - rate), ``draft_max`` with rate^(draft_max-1)."""
    committed = sum(rate ** i for i in range(draft_max + 1))
    rows_ms = proposed = 0.0
    for j in range(1, draft_max + 1):
        p = rate ** (j - 1) * ((1 - rate) if j < draft_max else 1.0)
        rows_ms += p * cm.cost(1 + j)
        proposed += p * j
    return committed, rows_ms, proposed


def grid_values(low: float, high: float, count: int) -> list[float]:
    """``count`` (>= 2) evenly spaced values from ``low`` to ``high``, both included."""
    return [low + (high - low) * i / (count - 1) for i in range(count)]


def predicted_grid(cm: CostModel, taus: Sequence[float], fractions: Sequence[float],
                   draft_max: int = DRAFT_MAX) -> list[list[float]]:
    """The predicted speedup (x plain decoding) for every draft cost in ``fractions`` (rows: fractions of
    c(1) per proposed token) and mean acceptance length in ``taus`` (columns: tokens committed per
    window), at the constant rate giving each tau (``constant_rate``); equal to ``predicted_speedup``."""
    c1 = cm.row_ms[0]
    terms = [window_terms(cm, constant_rate(t, draft_max), draft_max) for t in taus]
    return [[committed * c1 / (rows_ms + f * c1 * proposed) for committed, rows_ms, proposed in terms]
            for f in fractions]


def break_even_cost(cm: CostModel, tau: float, draft_max: int = DRAFT_MAX) -> float:
    """The draft cost per proposed token (fraction of c(1)) at which a draft of mean acceptance length
    ``tau`` (tokens per window) is exactly as fast as plain decoding: it pays below, not above. Negative
    when even a free draft does not pay at this tau."""
    c1 = cm.row_ms[0]
    committed, rows_ms, proposed = window_terms(cm, constant_rate(tau, draft_max), draft_max)
    return (committed * c1 - rows_ms) / (c1 * proposed)


def break_even_line(cm: CostModel, taus: Sequence[float], draft_max: int = DRAFT_MAX) -> list[tuple[float, float]]:
    """The break-even line (speedup = 1) as (tau, draft cost fraction) points, one per tau of ``taus``
    (``break_even_cost``); points outside 0..``COST_MAX`` are kept (a plot clips them)."""
    return [(t, break_even_cost(cm, t, draft_max)) for t in taus]


def break_even_tau(cm: CostModel, fraction: float, draft_max: int = DRAFT_MAX, steps: int = 141) -> float | None:
    """The smallest mean acceptance length (tokens per window, ``TAU_MIN``..``TAU_MAX``) from which a draft
    costing ``fraction`` x c(1) per proposed token is at least as fast as plain decoding (to 1e-6, by a
    scan of ``steps`` values, then bisection); None when it never is up to ``TAU_MAX``."""
    taus = grid_values(TAU_MIN, TAU_MAX, steps)
    pays = [break_even_cost(cm, t, draft_max) >= fraction for t in taus]
    if pays[0]:
        return TAU_MIN
    first = next((i for i, p in enumerate(pays) if p), None)
    if first is None:
        return None
    lo, hi = taus[first - 1], taus[first]
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if break_even_cost(cm, mid, draft_max) >= fraction else (mid, hi)
    return hi


@dataclass(frozen=True)
class Landing:
    """Where a real run lands on the map: ``mean_length`` (1 + accepted / windows: tokens committed per
    window), ``cost_fraction`` (its measured proposal time per proposed token over c(1)), ``draft_ms``
    (that time, ms per proposed token), ``windows`` (verified windows counted) and its ``label``."""

    label: str
    mean_length: float
    cost_fraction: float
    draft_ms: float
    windows: int


def landing(label: str, receipts: Iterable, c1_ms: float) -> Landing | None:
    """Where the run of these ``receipts`` (``WindowReceipt``s) lands, with c(1) = ``c1_ms`` ms: its mean
    acceptance length over its windows and its source's proposal time (``proposal_elapsed_us``) per
    proposed token as a fraction of c(1) (an n-gram's is about 0, a draft model's its own decode). None
    without windows or proposed tokens (a plain run). Plain steps are not in it: the map is of windows."""
    windows = accepted = proposed = 0
    spent_us = 0
    for r in receipts:
        windows += 1
        accepted += r.accepted_proposal_tokens
        proposed += r.proposal_token_count
        spent_us += r.proposal_elapsed_us
    if not windows or not proposed or c1_ms <= 0:
        return None
    draft_ms = spent_us / 1000.0 / proposed
    return Landing(label, 1.0 + accepted / windows, draft_ms / c1_ms, draft_ms, windows)


def format_predicted_table(cm: CostModel, draft_max: int = DRAFT_MAX, mean_lengths: Sequence[float] = MEAN_LENGTHS,
                           cost_fractions: Sequence[float] = COST_FRACTIONS) -> str:
    """The predicted synthetic table in a few lines: one line per draft cost with the speedup at each mean
    acceptance length (``*`` below break-even) and the tau from which a draft of that cost pays."""
    rows = predicted_grid(cm, mean_lengths, cost_fractions, draft_max)
    lines = [f"synthetic acceptance, predicted by the cost model (c(1) {cm.row_ms[0]:.1f} ms, draft max {draft_max}): "
             "speedup over plain decoding, tau = tokens committed per window",
             f"{'draft cost':>12} " + " ".join(f"{f'tau {t:g}':>7}" for t in mean_lengths) + "  pays from"]
    for f, row in zip(cost_fractions, rows):
        tau = break_even_tau(cm, f, draft_max)
        cells = " ".join(f"{f'{s:.2f}x' + ('*' if s < 1 else ' '):>7}" for s in row)
        lines.append(f"{f'{f:g} c(1)':>12} {cells}  " + (f"tau {tau:.2f}" if tau is not None else f"never (tau <= {TAU_MAX:g})"))
    lines.append("* below break-even (slower than plain decoding); measure it for real: bench --synthetic")
    return "\n".join(lines)
