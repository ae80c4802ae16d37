"""c(k) at several context lengths (issue 39, long contexts).

Every decoded row attends to every position in the KV cache, so a verify batch of k rows costs more
at 6,000 cached positions than after a short prompt: a cost model measured at one length mispredicts
another. ``cost_by_context`` measures c(k), k = 1..k_max, after a prompt of each length (the given
tokens repeated to that length), with ``measure_cost_model`` (interleaved rounds, medians);
``format_cost_by_context`` prints them side by side with what each length asks of a window: the
accepted tokens a window of the best size needs to match plain decoding (``CostModel.break_even``).

``sources_by_context`` then runs the task itself after a filler of other text that brings the KV
cache to each length (the filler, then the task's prompt: what a long agent conversation looks like
to the cache), plain decoding and each source, and ``format_sources_by_context`` says per source
and length the speedup over plain, its acceptance and mean accepted length, and where it stops
paying: the first length whose speedup is under 1.00x, and why: its windows accept fewer tokens
than the shortest length's did (acceptance), or as many but c(k) grew (cost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from inspector.bench.compare import run_compare
from inspector.bench.compare_result import CompareConfig
from inspector.engine.settings import GenerationSettings
from inspector.llama.cost_model import CostModel, measure_cost_model, measurement_positions

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
    room = measurement_positions(k_max)
    for length in lengths:
        if length < 1 or length + room > n_ctx:
            raise ValueError(f"a context of {length} positions and {room} rows after it needs -c of at least "
                             f"{length + room}; the context holds {n_ctx}")
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


@dataclass(frozen=True)
class SourceAtLength:
    """One source's run at one context length (positions in the KV cache before the task's prompt's end)."""

    length: int
    label: str
    speedup: float | None
    """Decode tokens/s over the plain run's at the same length (None: no window or the run failed)."""
    acceptance_rate: float | None
    mean_accepted_length: float | None
    windows: int
    error: str | None = None


def long_prompt(filler: Sequence[int], task: Sequence[int], length: int) -> list[int]:
    """``filler`` repeated (and cut) in front of ``task`` so the prompt is ``length`` tokens; ``task`` alone
    when it is that long already. Raises ``ValueError`` for an empty ``filler`` that would be needed."""
    need = length - len(task)
    return list(task) if need <= 0 else context_prompt(filler, need) + list(task)


def sources_by_context(scheduler, filler: Sequence[int], task: Sequence[int], lengths: Sequence[int],
                       configs: Sequence[CompareConfig], settings: GenerationSettings,
                       progress: Callable[[int], None] | None = None) -> list[SourceAtLength]:
    """Run plain decoding and each of ``configs`` on ``long_prompt(filler, task, length)`` for each of
    ``lengths`` (``run_compare``: same settings, greedy by default) and return every source's row.
    Raises ``ValueError`` when a length and ``settings.max_new_tokens`` do not fit the context."""
    n_ctx = scheduler.runtime.n_ctx
    for length in lengths:
        if max(length, len(task)) + settings.max_new_tokens + 1 > n_ctx:
            raise ValueError(f"a prompt of {max(length, len(task))} tokens and {settings.max_new_tokens} generated "
                             f"need -c of at least {max(length, len(task)) + settings.max_new_tokens + 1}; "
                             f"the context holds {n_ctx}")
    plain = CompareConfig("plain", "none", 0)
    rows = []
    for length in lengths:
        if progress is not None:
            progress(length)
        result = run_compare(scheduler, long_prompt(filler, task, length), [plain, *configs], settings)
        for r in result.rows[1:]:
            m = r.summary
            rows.append(SourceAtLength(length, r.config.label, r.speedup_vs_plain, m.acceptance_rate,
                                       m.mean_accepted_length, m.windows, r.error))
    return rows


def stops_paying(rows: Sequence[SourceAtLength], costs: dict[int, CostModel] | None = None) -> dict[str, str]:
    """Per source label: where it stops paying, in words ("pays at every length measured", or the length
    from which every longer one is under 1.00x, and why: fewer accepted tokens per window than at the
    shortest length (acceptance), else c(k) grown (cost: the ratio of c(1) there to the shortest length's,
    from ``costs`` when given)). A length under 1.00x followed by one that pays again is a dip, said as
    "below break-even at L (...), pays again at M", not as where it stops."""
    out = {}
    for label in dict.fromkeys(r.label for r in rows):
        mine = sorted((r for r in rows if r.label == label), key=lambda r: r.length)
        first = mine[0]
        losing = [r.speedup is None or r.speedup < 1.0 for r in mine]
        if not any(losing):
            out[label] = "pays at every length measured"
            continue
        onset = next((i for i in range(len(mine)) if all(losing[i:])), None)
        dip = losing.index(True)
        loss = mine[dip if onset is None else onset]
        again = "" if onset is not None else \
            f", pays again at {next(r.length for r, l in zip(mine[dip:], losing[dip:]) if not l)}"
        if loss.speedup is None:
            out[label] = f"no speedup at {loss.length} ({loss.error or 'no window'}){again}"
            continue
        shorter = (loss.mean_accepted_length or 1.0) < 0.9 * (first.mean_accepted_length or 1.0)
        if loss is first or shorter:
            why = (f"acceptance: {loss.mean_accepted_length or 1.0:.2f} tokens per window against "
                   f"{first.mean_accepted_length or 1.0:.2f} at {first.length}") if loss is not first else \
                f"{loss.mean_accepted_length or 1.0:.2f} tokens per window do not pay for the rows here"
        else:
            grown = ""
            if costs and loss.length in costs and first.length in costs:
                grown = f" (c(1) {costs[loss.length].cost(1) / costs[first.length].cost(1):.2f}x the {first.length}'s)"
            why = f"cost: as many tokens per window as at {first.length}, but verification costs more{grown}"
        where = "stops paying at" if onset is not None else "below break-even at"
        out[label] = f"{where} {loss.length} ({loss.speedup:.2f}x): {why}{again}"
    return out


def format_sources_by_context(rows: Sequence[SourceAtLength], costs: dict[int, CostModel] | None = None) -> str:
    """The table of ``sources_by_context`` (a row per source and length) and a line per source from
    ``stops_paying``."""
    lines = [f"{'context':>8} {'source':<24} {'speedup':>8} {'accept':>7} {'tokens/window':>13} {'windows':>7}"]
    for r in sorted(rows, key=lambda r: (r.label, r.length)):
        sp = f"{r.speedup:.2f}x" if r.speedup is not None else "n/a"
        acc = f"{r.acceptance_rate:.0%}" if r.acceptance_rate is not None else "n/a"
        mal = f"{r.mean_accepted_length:.2f}" if r.mean_accepted_length is not None else "n/a"
        lines.append(f"{r.length:>8} {r.label[:24]:<24} {sp:>8} {acc:>7} {mal:>13} {r.windows:>7}"
                     + (f"  error: {r.error}" if r.error else ""))
    lines += [f"{label}: {text}" for label, text in stops_paying(rows, costs).items()]
    return "\n".join(lines)

