"""c(k) at several context lengths (issue 39, long contexts).

Every decoded row attends to every position in the KV cache, so a verify batch of k rows costs more
at 6,000 cached positions than after a short prompt: a cost model measured at one length mispredicts
another. ``cost_by_context`` measures c(k), k = 1..k_max, after a prompt of each length (the given
tokens repeated to that length), with ``measure_cost_model`` (interleaved rounds, medians);
``format_cost_by_context`` prints them side by side with what each length asks of a window: the
accepted tokens a window of the best size needs to match plain decoding (``CostModel.break_even``).
"""

from __future__ import annotations

from typing import Callable, Sequence

from inspector.llama.cost_model import CostModel, measure_cost_model

SHOWN_ROWS = (1, 2, 4, 8, 16)
"""The batch sizes (rows) the table shows, those measured."""


def context_prompt(tokens: Sequence[int], length: int) -> list[int]:
    """``tokens`` repeated (and cut) to exactly ``length`` tokens. Raises ``ValueError`` when ``tokens`` is
    empty or ``length`` < 1."""
    if not tokens or length < 1:
        raise ValueError(f"need at least one token and a length >= 1, observed {len(tokens)} tokens, length {length}")
    return (list(tokens) * (length // len(tokens) + 1))[:length]


def cost_by_context(scheduler, tokens: Sequence[int], lengths: Sequence[int], k_max: int = 16, repeats: int = 3,
                    progress: Callable[[int], None] | None = None) -> list[tuple[int, CostModel]]:
    """``(length, c(k) measured after a prompt of that many tokens)`` for each of ``lengths`` (positions),
    in the order given; ``progress(length)`` before each. Raises ``ValueError`` (one line) when a length
    and ``k_max`` rows do not fit the runtime's context (``-c``)."""
    n_ctx = scheduler.runtime.n_ctx
    for length in lengths:
        if length < 1 or length + k_max > n_ctx:
            raise ValueError(f"a context of {length} positions and {k_max} verify rows needs -c of at least "
                             f"{length + k_max}; the context holds {n_ctx}")
    out = []
    for length in lengths:
        if progress is not None:
            progress(length)
        out.append((length, measure_cost_model(scheduler, context_prompt(tokens, length), k_max=k_max,
                                               repeats=repeats)))
    return out


def format_cost_by_context(rows: Sequence[tuple[int, CostModel]]) -> str:
    """The table of ``cost_by_context``: per context length, c(k) in ms for ``SHOWN_ROWS`` (those measured),
    c(1) against the shortest length's, the ceiling (best speedup, every proposal accepted), its rows,
    and the accepted tokens a window of that size needs to match plain decoding."""
    if not rows:
        return "no context length measured"
    k_max = len(rows[0][1].row_ms)
    shown = [k for k in SHOWN_ROWS if k <= k_max]
    base = rows[0][1].cost(1)
    head = f"{'context':>8} " + " ".join(f"{f'c({k}) ms':>9}" for k in shown) + \
        f" {'c(1) vs first':>13} {'ceiling':>8} {'rows':>5} {'break-even':>10}"
    lines = [head]
    for length, cm in rows:
        lines.append(f"{length:>8} " + " ".join(f"{cm.cost(k):>9.1f}" for k in shown) +
                     f" {cm.cost(1) / base:>12.2f}x {cm.ceiling:>7.2f}x {cm.best_rows:>5} "
                     f"{cm.break_even(cm.best_rows):>10.1f}")
    lines.append("c(k): median ms to decode k rows at that many cached positions; ceiling: the best speedup "
                 "over plain decoding if every proposal were accepted; break-even: accepted proposal tokens a "
                 "window of that many rows needs to match plain decoding (fewer accepted: it loses time)")
    return "\n".join(lines)
