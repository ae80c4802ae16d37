"""Would a better draft pay here? Speedup of the synthetic source over plain decoding (issue 39 item 3).

For mean acceptance lengths tau = 1..8 (tokens committed per window) and draft costs of 0, 0.25 and
0.5 c(1) per proposed token, a real run of the ``synthetic`` source (``inspector.sources.synthetic``,
``mean_accepted`` = tau, draft max ``DRAFT_MAX``) on one prompt is timed against plain decoding of the
same prompt, beside what the cost model c(k) predicts for the same rate and cost (``predicted_speedup``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from statistics import median
from typing import Callable, Sequence

from inspector.bench.context_costs import context_prompt
from inspector.engine import Generation, GenerationSettings, RuntimeScheduler
from inspector.engine.errors import RequestCancelled
from inspector.engine.stats import decode_tokens_per_s
from inspector.llama.cost_model import CostModel, cost_model_of, measure_cost_rounds, measurement_positions
from inspector.llama.cost_progress import CostMeasureCancelled
from inspector.sources.registry import SourceContext, make_source
from inspector.sources.synthetic import constant_rate

MEAN_LENGTHS = (1, 2, 3, 4, 5, 6, 7, 8)
"""Mean acceptance lengths measured (tokens committed per window)."""
COST_FRACTIONS = (0.0, 0.25, 0.5)
"""Draft costs measured, per proposed token, as fractions of c(1)."""
DRAFT_MAX = 8
"""Proposal tokens at most per window: tau = 8 needs a conditional rate of 0.97 at this length."""


def predicted_speedup(cm: CostModel, rate: float, draft_max: int, cost_fraction: float) -> float:
    """Speedup over plain decoding the cost model predicts for a constant conditional ``rate`` (0..1),
    proposals of at most ``draft_max`` tokens ending at their first wrong token, and a draft cost of
    ``cost_fraction`` x c(1) per proposed token: E[committed] x c(1) / E[c(1 + L) + cost_fraction x c(1) x L],
    L the proposal's length (L = j < draft_max with probability rate^(j-1) (1 - rate), draft_max with
    rate^(draft_max-1)); E[committed] = 1 + rate + ... + rate^draft_max (tokens)."""
    c1 = cm.row_ms[0]
    committed = sum(rate ** i for i in range(draft_max + 1))
    cost = 0.0
    for j in range(1, draft_max + 1):
        p = rate ** (j - 1) * ((1 - rate) if j < draft_max else 1.0)
        cost += p * (cm.cost(1 + j) + cost_fraction * c1 * j)
    return committed * c1 / cost


@dataclass(frozen=True, slots=True)
class RunShape:
    """What a cost-model prediction needs of a finished run: its windows as (verification rows, committed
    tokens), its plain steps (the first token's prefill excluded) and its proposed tokens."""

    windows: tuple[tuple[int, int], ...]
    plain_steps: int
    proposed: int

    @classmethod
    def of(cls, generation: Generation) -> "RunShape":
        windows = tuple((1 + r.proposal_token_count, len(r.committed_tokens)) for r in generation.receipts)
        return cls(windows, generation.decode_step - len(windows),
                   sum(r.proposal_token_count for r in generation.receipts))


def run_prediction(cm: CostModel, shape: RunShape, cost_fraction: float) -> float | None:
    """Speedup the cost model predicts for this run's own windows (``CostModel.expected_speedup``: their
    rows and committed tokens, and the plain steps, the first token's prefill excluded) with the draft
    cost of its proposed tokens (``cost_fraction`` x c(1) each): the run's length and its end, where
    proposals are cut, are in it; the nominal rate's prediction has neither."""
    c1 = cm.row_ms[0]
    tokens = sum(c for _, c in shape.windows) + shape.plain_steps
    cost = sum(cm.cost(rows) for rows, _ in shape.windows) + shape.plain_steps * c1
    cost += cost_fraction * c1 * shape.proposed
    return tokens * c1 / cost if tokens and cost > 0 else None


def decode_speed(generation: Generation) -> float:
    """Decode tokens/s of a finished run (prefill excluded)."""
    return decode_tokens_per_s(generation.generated_count, generation.decode_elapsed_us) or 0.0


def synthetic_table(runtime, prompt_tokens: Sequence[int], max_new_tokens: int = 64, k_max: int = DRAFT_MAX + 1,
                    repeats: int = 3, mean_lengths: Sequence[float] = MEAN_LENGTHS,
                    cost_fractions: Sequence[float] = COST_FRACTIONS,
                    progress: Callable[[str], None] = lambda m: None, scheduler: RuntimeScheduler | None = None,
                    cancel: threading.Event | None = None, row_done: Callable[[dict], None] = lambda r: None) -> dict:
    """Measure the table on ``runtime`` (one KV sequence is enough), every cell the way the machine is at
    the time: c(k) for k = 1..``k_max`` rows (``measure_cost_rounds``: ``repeats`` rounds first, then one
    before each cell; the cost model is the median of all of them) after as many positions as the runs'
    mean context (the prompt and half of ``max_new_tokens``: verification attends to every cached
    position); per (tau, cost fraction) cell ``repeats`` synthetic runs (seeds 0..repeats-1) of
    ``max_new_tokens`` tokens, each right after a plain run of the same prompt: the cell's speedup is
    the median synthetic tokens/s over the plain runs near it in time (``local_plain_speed``), so a
    machine that runs faster or slower over the minutes of the table moves both. (Measured on this 2-core machine: the speed of
    the same decode drifted by 10-15% within minutes; with one plain measurement at the start, whole
    examples came out 10-17% off their predictions.) Returns ``{"c_ms": [...], "plain_tokens_per_s"
    (median of every plain run), "rows": [{"mean_length", "rate", "cost_fraction", "draft_cost_ms",
    "measured_mean_length", "tokens_per_s", "plain_tokens_per_s", "speedup", "predicted_speedup" (the
    nominal rate's), "predicted_for_run" (the runs' own windows)}, ...]}``; every prediction is of the
    final cost model. ``scheduler``: the runtime's (a new one by default); ``row_done(result so far)``
    after each row (predictions of the cost model so far); ``cancel`` set (any thread) stops the run in
    flight and raises ``RequestCancelled`` whose ``partial`` is the result of the rows done (None before
    the first row)."""
    scheduler = scheduler or RuntimeScheduler(runtime)
    prompt = tuple(prompt_tokens)
    result: dict | None = None

    def stop_if_cancelled() -> None:
        if cancel is not None and cancel.is_set():
            exc = RequestCancelled()
            exc.partial = result
            raise exc

    def measured(rounds_of):
        """``rounds_of()``, a cost measurement that stops between batches when cancelled (then with the rows done)."""
        try:
            return rounds_of()
        except CostMeasureCancelled:
            stop_if_cancelled()
            raise

    context = len(prompt) + max_new_tokens // 2
    cost_prompt = context_prompt(prompt, max(1, min(context, runtime.n_ctx - measurement_positions(k_max))))
    progress(f"measuring the cost model (k = 1..{k_max}, {repeats} repeats, after {len(cost_prompt)} positions) ...")
    rounds = measured(lambda: measure_cost_rounds(scheduler, cost_prompt, k_max=k_max, repeats=repeats, cancel=cancel))
    settings = GenerationSettings(max_new_tokens=max_new_tokens, draft_max=DRAFT_MAX, probabilities=False)
    memory: dict = {}

    def timed(source) -> Generation:
        stop_if_cancelled()
        g = Generation(scheduler, source, list(prompt), settings)
        if cancel is not None:
            g.cancel_event = cancel
        try:
            g.run()
        except RequestCancelled:
            stop_if_cancelled()  # with the rows done so far
            raise
        finally:
            g.close()
        return g

    rows: list = []
    shapes: list[list[RunShape]] = []  # per row, its runs
    plains: list[list[float]] = []  # per row, the tokens/s of the plain runs beside its runs

    def summary() -> dict:
        cm = cost_model_of(rounds)
        for i, (row, runs) in enumerate(zip(rows, shapes)):
            plain = local_plain_speed(plains, i)
            row["plain_tokens_per_s"] = plain
            row["speedup"] = row["tokens_per_s"] / plain if plain else None
            f = row["cost_fraction"]
            predicted = [p for p in (run_prediction(cm, shape, f) for shape in runs) if p is not None]
            row["draft_cost_ms"] = f * cm.row_ms[0]
            row["predicted_speedup"] = predicted_speedup(cm, row["rate"], DRAFT_MAX, f)
            row["predicted_for_run"] = median(predicted) if predicted else None
        every = [v for runs in plains for v in runs]
        return {"c_ms": list(cm.row_ms), "plain_tokens_per_s": median(every) if every else None,
                "draft_max": DRAFT_MAX, "max_new_tokens": max_new_tokens, "repeats": repeats,
                "rows": [dict(r) for r in rows]}

    for tau in mean_lengths:
        rate = constant_rate(tau, DRAFT_MAX)
        for f in cost_fractions:
            stop_if_cancelled()
            rounds += measured(lambda: measure_cost_rounds(scheduler, cost_prompt, k_max=k_max, repeats=1,
                                                           warm_up=False, cancel=cancel))
            cost_ms = f * cost_model_of(rounds).row_ms[0]
            progress(f"synthetic mean length {tau:g}, draft cost {f:g} c(1) = {cost_ms:.2f} ms ...")
            speeds, beside, lengths, runs = [], [], [], []
            for seed in range(repeats):
                beside.append(decode_speed(timed(None)))
                ctx = SourceContext(runtime, settings, prompt_tokens=prompt, scheduler=scheduler, memory=memory)
                source = make_source("synthetic", ctx, {"mean_accepted": tau, "seed": seed, "draft_cost_ms": cost_ms})
                g = timed(source)
                speeds.append(decode_speed(g))
                runs.append(RunShape.of(g))
                if g.receipts:
                    lengths.append(1 + sum(r.accepted_proposal_tokens for r in g.receipts) / len(g.receipts))
            rows.append({"mean_length": tau, "rate": rate, "cost_fraction": f,
                         "measured_mean_length": median(lengths) if lengths else None,
                         "tokens_per_s": median(speeds)})
            shapes.append(runs)
            plains.append(beside)
            result = summary()
            row_done(result)
    return result if result is not None else summary()


def local_plain_speed(plains: Sequence[Sequence[float]], i: int) -> float | None:
    """Plain decoding's tokens/s for row ``i`` of ``synthetic_table``: the median of the plain runs beside
    its own runs and those of the rows just before and after it (``plains[i]``: the tokens/s of the plain
    runs alternated with row i's runs). One plain run of 64 tokens varies by 5-10% on this machine and its
    speed drifts over minutes: three rows' runs are a steadier baseline than one row's and still near
    in time. None when there is none."""
    near = [v for runs in plains[max(0, i - 1):i + 2] for v in runs]
    return median(near) if near else None


def format_synthetic_table(result: dict) -> str:
    """The table: one line per mean length, measured speedup / predicted per draft cost, and where
    speculation stops paying (below 1.00x)."""
    fractions = sorted({r["cost_fraction"] for r in result["rows"]})
    c1 = result["c_ms"][0]
    lines = [f"synthetic acceptance, draft max {result['draft_max']}, {result['max_new_tokens']} tokens, median of "
             f"{result['repeats']}: speedup over plain decoding ({result['plain_tokens_per_s']:.1f} tok/s); "
             f"c(1) = {c1:.2f} ms",
             "each cell: measured, the cost model's prediction for the runs' own windows, and for the nominal rate",
             "tau = tokens committed per window (1 + accepted/window); draft cost per proposed token",
             f"{'tau':>4} {'rate':>5} {'tau run':>7} " + " ".join(f"{f'{f:g} c(1)':>21}" for f in fractions)]
    by = {(r["mean_length"], r["cost_fraction"]): r for r in result["rows"]}
    for tau in sorted({r["mean_length"] for r in result["rows"]}):
        first = by[(tau, fractions[0])]
        run_tau = first["measured_mean_length"]
        cells = []
        for f in fractions:
            r = by[(tau, f)]
            mark = "*" if r["speedup"] is not None and r["speedup"] < 1 else " "
            run = r["predicted_for_run"]
            cells.append(f"{r['speedup'] or 0:5.2f}x {run or 0:5.2f}x {r['predicted_speedup']:5.2f}x{mark}")
        lines.append(f"{tau:>4g} {first['rate']:>5.2f} {run_tau if run_tau is None else f'{run_tau:.2f}':>7} "
                     + " ".join(f"{c:>21}" for c in cells))
    lines.append("* below break-even: slower than plain decoding")
    ratios = measured_over_predicted(result["rows"])
    if ratios:
        within = sum(1 for q in ratios if abs(q - 1) <= PREDICTION_TOLERANCE + 1e-9)  # 0.72 / 0.80 is within
        lines.append(f"measured / predicted for the runs' windows: {min(ratios):.2f}..{max(ratios):.2f} (median "
                     f"{median(ratios):.2f}); {within} of {len(ratios)} cells within "
                     f"{PREDICTION_TOLERANCE:.0%} of the prediction")
    return "\n".join(lines)


PREDICTION_TOLERANCE = 0.10
"""How far a measured speedup may lie from the cost model's prediction for the same windows (issue 39's
bar: within 10 %)."""


def measured_over_predicted(rows) -> list[float]:
    """Each row's measured speedup over the prediction for the runs' own windows (both present), in the
    rows' order: 1.0 is a prediction met exactly, below 1 the runs were slower than c(k) predicts."""
    return [r["speedup"] / r["predicted_for_run"] for r in rows if r.get("speedup") and r.get("predicted_for_run")]


def format_examples_summary(results: dict) -> str:
    """One line per example (``{name: synthetic_table result}``) and one for all: measured / predicted for
    the runs' windows, min..max (median), and how many cells lie within ``PREDICTION_TOLERANCE``."""
    lines = ["measured / predicted for the runs' windows, per example:"]
    every: list[float] = []
    for name, result in results.items():
        ratios = measured_over_predicted(result["rows"])
        every += ratios
        lines.append(f"  {name:<24} {_ratio_summary(ratios)}")
    lines.append(f"  {'all examples':<24} {_ratio_summary(every)}")
    return "\n".join(lines)


def _ratio_summary(ratios: Sequence[float]) -> str:
    if not ratios:
        return "no cell measured"
    within = sum(1 for q in ratios if abs(q - 1) <= PREDICTION_TOLERANCE + 1e-9)
    return (f"{min(ratios):.2f}..{max(ratios):.2f} (median {median(ratios):.2f}); {within} of {len(ratios)} cells "
            f"within {PREDICTION_TOLERANCE:.0%}")
