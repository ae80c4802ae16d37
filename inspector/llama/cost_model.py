"""Cost model: what a verify batch of k rows costs the target, and what that allows.

On a CPU, verifying k rows is not nearly free (LLAMA_CPP_NOTES: 16 rows cost
about 7 single rows here), so a window pays off only with long accepted runs.
How steep c(k) is depends on the weight type: llama.cpp's CPU backend (ggml-cpu
in the llama.cpp that llama-cpp-python 0.3.36 vendors) multiplies several rows
at once only for types with a multi-row kernel: the repacked layouts of
``ggml/src/ggml-cpu/repack.cpp`` (``ggml_repack_get_optimal_repack_type``: Q4_0,
Q4_K, Q2_K, IQ4_NL on AVX2) and llamafile's tinyBLAS
(``ggml/src/ggml-cpu/llamafile/sgemm.cpp``: Q8_0, Q4_0, Q5_0, IQ4_NL on AVX2).
Other types (Q4_1 among them) run one matrix-vector product per row, so k rows
cost about k single rows. ``verify_cost_diagnosis`` says which case a measured
curve is, in words.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from statistics import median
from time import perf_counter_ns
from typing import Callable, Sequence

from inspector.engine.settings import DEFAULT_DRAFT_MAX
from inspector.llama.cost_progress import (PLAN, PREFILL, ROUNDS, CostMeasureCancelled, CostProgress, MeasureClock,
                                           partial_rows, partial_text)
from inspector.engine.tree import spread_parents


@dataclass(frozen=True, slots=True)
class CostModel:
    """Median time to decode a batch of k rows, k = 1..len(row_ms) (milliseconds).

    ``ceiling``: best possible speedup over plain decoding, every proposal
    accepted: max over k of k * c(1) / c(k) (a window of k rows then commits
    k tokens). ``break_even(k)``: accepted proposal tokens a window of k rows
    needs to match plain decoding: c(k) / c(1) - 1 (it commits accepted + 1).
    """

    row_ms: tuple[float, ...]

    def cost(self, rows: int) -> float:
        if rows <= len(self.row_ms):
            return self.row_ms[rows - 1]
        # Beyond the measured range: extend the mean slope of the upper half of the measured range (one
        # step's slope is noise: c(16) - c(15) measured 0.5 ms where the upper half rises 2.8 ms per row).
        k = len(self.row_ms)
        if k == 1:
            return self.row_ms[0] * rows
        h = k // 2
        slope = max(0.0, (self.row_ms[-1] - self.row_ms[h - 1]) / (k - h))
        return self.row_ms[-1] + slope * (rows - k)

    def speedup(self, rows: int) -> float:
        return rows * self.row_ms[0] / self.cost(rows)

    @property
    def ceiling(self) -> float:
        return max(self.speedup(k) for k in range(1, len(self.row_ms) + 1))

    @property
    def best_rows(self) -> int:
        return max(range(1, len(self.row_ms) + 1), key=self.speedup)

    @property
    def best_draft_max(self) -> int:
        """Proposal tokens of the best window (``best_rows - 1``; 0 when no window beats a
        plain step). A longer proposal only pays less: with every token accepted the speedup
        peaks there, and with some rejected the best length is shorter still."""
        return self.best_rows - 1

    def best_draft_max_at(self, acceptance: float) -> int:
        """Proposal length d (0..len(row_ms) - 1) with the most committed tokens per millisecond when
        each proposal token is accepted with probability ``acceptance`` (0..1) given the ones before
        it: a window commits 1 + a + a^2 + ... + a^d tokens on average and costs c(d + 1). At
        ``acceptance`` 1 this is ``best_draft_max``; lower acceptance gives shorter proposals. 0: no
        proposal beats a plain step."""
        a = min(1.0, max(0.0, float(acceptance)))

        def tokens_per_ms(d: int) -> float:
            return sum(a ** i for i in range(d + 1)) / self.cost(d + 1)

        return max(range(len(self.row_ms)), key=tokens_per_ms)

    def break_even(self, rows: int) -> float:
        return self.cost(rows) / self.row_ms[0] - 1.0

    def expected_speedup(self, windows: Sequence[tuple[int, int]], plain_steps: int) -> float | None:
        """Speedup these costs predict for a run: ``windows`` as (verification rows,
        committed tokens) pairs, plus ``plain_steps`` one-row steps. None if empty."""
        tokens = sum(c for _, c in windows) + plain_steps
        cost = sum(self.cost(r) for r, _ in windows) + plain_steps * self.row_ms[0]
        return None if cost <= 0 or tokens == 0 else tokens * self.row_ms[0] / cost

    def disturbed(self) -> str | None:
        """Why this table cannot be a clean measurement, or None when it looks plausible.

        A batch of k rows never costs less than one row, and neighbouring batch
        sizes cost about the same: a median more than 3x off its neighbours, or a
        one-row decode dearer than the largest batch, means another process took
        the CPU during the measurement.
        """
        c = self.row_ms
        if len(c) >= 2 and c[0] > max(c[1:]):
            return f"c(1) = {c[0]:.1f} ms is more than every larger batch (max {max(c[1:]):.1f} ms)"
        for k in range(1, len(c) - 1):
            lo, hi = min(c[k - 1], c[k + 1]), max(c[k - 1], c[k + 1])
            if c[k] > 3 * hi or c[k] < lo / 3:
                return f"c({k + 1}) = {c[k]:.1f} ms is out of line with c({k}) = {c[k - 1]:.1f} and c({k + 2}) = {c[k + 1]:.1f} ms"
        if len(c) >= 2 and c[-1] > 3 * c[-2]:
            return f"c({len(c)}) = {c[-1]:.1f} ms is out of line with c({len(c) - 1}) = {c[-2]:.1f} ms"
        return None

    def to_json(self) -> dict:
        return {
            "row_ms": list(self.row_ms),
            "ceiling": self.ceiling,
            "best_rows": self.best_rows,
            "break_even_accepted": [self.break_even(k) for k in range(1, len(self.row_ms) + 1)],
        }




def cost_model_at(curves: Sequence[tuple[int, "CostModel"]], context: int) -> "CostModel":
    """The cost model at ``context`` KV positions from curves measured after several context lengths
    (``(positions, cost model)`` pairs, any order): between the two stored lengths around ``context``,
    each c(k) linear in the context (each row's attention reads every cached position once); below the
    shortest length or beyond the longest, that length's curve as measured (never extrapolated: one
    curve's noise would be magnified). Batch sizes up to the fewest any curve has. Raises
    ``ValueError`` without curves."""
    if not curves:
        raise ValueError("no cost model curve to read")
    ordered = sorted(curves, key=lambda c: c[0])
    k = min(len(cm.row_ms) for _, cm in ordered)
    if context <= ordered[0][0]:
        return CostModel(ordered[0][1].row_ms[:k])
    if context >= ordered[-1][0]:
        return CostModel(ordered[-1][1].row_ms[:k])
    for (lo, a), (hi, b) in zip(ordered, ordered[1:]):
        if lo <= context <= hi:
            w = (context - lo) / (hi - lo) if hi > lo else 0.0
            return CostModel(tuple(x + w * (y - x) for x, y in zip(a.row_ms[:k], b.row_ms[:k])))
    raise AssertionError("unreachable: context lies between the shortest and the longest length")


@dataclass(frozen=True, slots=True)
class DraftMaxChoice:
    """The draft max (proposal tokens per window) a run uses when the user asked for
    ``auto``, and ``why`` in one line (shown by ``run`` and the window, kept in receipts
    as ``settings.draft_max_from``)."""

    value: int
    why: str


NOMINAL_ACCEPTANCE = 0.9
"""Per-token acceptance ``auto_draft_max`` assumes: each proposal token accepted with this probability
given the ones before it (copy-heavy text; the n-gram source accepted 57-97% of its tokens on the
bundled tasks). At 1.0 every window would be as long as the ceiling's best window, which on a steep
curve wastes most of a window's rows at the first mismatch."""


def auto_draft_max(cm: "CostModel | None", acceptance: float = NOMINAL_ACCEPTANCE) -> DraftMaxChoice:
    """Draft max from the measured verify-cost curve (issue 13 item 4): the proposal length with the
    most committed tokens per millisecond at ``acceptance`` (``CostModel.best_draft_max_at``), which
    follows the curve: a flat c(k) gives long proposals, a steep one short ones. The adaptive length
    policy then picks each window's length at or below it. Without a curve, or when no proposal
    beats a plain step, ``DEFAULT_DRAFT_MAX``."""
    if cm is None:
        return DraftMaxChoice(DEFAULT_DRAFT_MAX, f"the default {DEFAULT_DRAFT_MAX}: no cost model is stored for "
                                                 "this model file and thread count (measure one in the Cost "
                                                 "model tab, or with bench)")
    best = cm.best_draft_max_at(acceptance)
    if best < 1:
        return DraftMaxChoice(DEFAULT_DRAFT_MAX, f"the default {DEFAULT_DRAFT_MAX}: on the stored cost model no "
                                                 "proposal beats a plain step")
    return DraftMaxChoice(best, f"the most tokens per ms on the stored cost model if {acceptance:.0%} of proposal "
                                f"tokens are accepted ({cm.best_draft_max} if all are; ceiling {cm.ceiling:.2f}x)")


MULTI_ROW_KERNEL_TYPES = frozenset({"Q4_0", "Q4_K", "Q2_K", "IQ4_NL", "Q8_0", "Q5_0"})
"""Weight types with a multi-row CPU kernel on x86 AVX2 (see the module docstring)."""
NO_BATCHING_RATIO = 1.7
"""c(2)/c(1) at or above this: a second row costs nearly a whole extra decode (no multi-row kernel)."""
NO_BATCHING_MARGINAL = 0.7
"""Average extra-row cost (fraction of c(1)) at or above this: rows are not batched either."""
CHEAP_ROWS_RATIO = 1.3
"""c(2)/c(1) below this, with the average extra row below ``CHEAP_ROWS_MARGINAL``: extra rows are cheap."""
CHEAP_ROWS_MARGINAL = 0.25
"""Average extra-row cost (fraction of c(1)) below this: rows are cheap all along the curve."""


def verify_cost_diagnosis(cm: CostModel, weight_types=()) -> str:
    """One paragraph on why the verify cost has the shape it has, from the measured ``cm``
    and the model's ``weight_types`` (``ModelInfo.weight_types``: (GGML type, bytes) pairs,
    largest first). Names the main weight type and its share of the matrix bytes, the
    ratio c(2)/c(1) and the marginal cost of a row, then the reason in words: no multi-row
    kernel (ratio >= ``NO_BATCHING_RATIO`` or an average extra row >= ``NO_BATCHING_MARGINAL``), cheap
    rows (ratio < ``CHEAP_ROWS_RATIO`` and average < ``CHEAP_ROWS_MARGINAL``) or between."""
    c = cm.row_ms
    total = sum(b for _t, b in weight_types) or 1
    main, main_bytes = weight_types[0] if weight_types else ("", 0)
    others = ", ".join(f"{t} {100 * b / total:.0f}%" for t, b in weight_types[1:])
    types = (f"weights: {main} ({100 * main_bytes / total:.0f}% of the matrix bytes"
             + (f"; {others}" if others else "") + ")") if main else "weight types unknown"
    if len(c) < 2:
        return f"{types}; measure at least 2 rows to see how the cost grows"
    ratio = c[1] / c[0]
    marginal = (c[-1] - c[0]) / (len(c) - 1) / c[0]
    figures = (f"{types}; c(2)/c(1) = {ratio:.2f}, each extra row costs {100 * marginal:.0f}% of a one-row "
               f"decode on average up to {len(c)} rows")
    if ratio >= NO_BATCHING_RATIO or marginal >= NO_BATCHING_MARGINAL:
        why = (f"Two rows cost nearly two single rows: llama.cpp's CPU backend has no multi-row kernel for "
               f"{main or 'this weight type'} here, so it multiplies the weights once per row"
               if main not in MULTI_ROW_KERNEL_TYPES else
               "Two rows cost nearly two single rows although this type has a multi-row kernel on AVX2: "
               "the CPU may lack the instructions, or another process took the cores while measuring")
        hint = (" A type with such a kernel (Q8_0, Q4_0) makes extra rows cheaper; speculation then pays "
                "with shorter accepted runs.") if main not in MULTI_ROW_KERNEL_TYPES else ""
        return f"{figures}. {why}.{hint}"
    if ratio < CHEAP_ROWS_RATIO and marginal < CHEAP_ROWS_MARGINAL:
        return (f"{figures}. Extra rows are cheap (a multi-row kernel or a GPU does the rows together): "
                f"long proposals pay, raise draft max.")
    return (f"{figures}. Rows are partly batched: proposals pay off once about {max(1.0, cm.break_even(cm.best_rows)):.1f} "
            f"tokens of a {cm.best_rows}-row window are accepted.")


PLAIN_LEAD_STEPS = 8
"""Untimed one-row decodes before c(1) is timed (``measure_cost_rounds``): after a wide batch a one-row
decode takes about four steps to settle to a plain step's time."""
PLAIN_TIMED_STEPS = 8
"""Consecutive one-row decodes timed for c(1) in each round (their mean): one 6 ms decode is a noisy sample."""


def measurement_positions(k_max: int) -> int:
    """KV positions ``measure_cost_rounds`` needs after its prompt (positions): the widest batch, or the
    one-row steps before and of c(1), whichever is more."""
    return max(k_max, PLAIN_LEAD_STEPS + PLAIN_TIMED_STEPS)


def measure_cost_model(scheduler, prompt_tokens: Sequence[int], k_max: int = 16, repeats: int = 5,
                       progress: Callable[[CostProgress], None] | None = None,
                       cancel: threading.Event | None = None) -> CostModel:
    """Measure c(k) for k = 1..k_max on the loaded model: ``repeats`` rounds of
    ``measure_cost_rounds`` after one warm-up round, the median per k. Interleaving the
    rounds spreads a disturbance (another process) over all batch sizes instead of one.
    ``progress`` and ``cancel`` as ``measure_cost_rounds`` takes them.
    Raises ``ValueError`` when the prompt and the rows do not fit the context."""
    return cost_model_of(measure_cost_rounds(scheduler, prompt_tokens, k_max, repeats, progress=progress,
                                             cancel=cancel))


def cost_model_of(rounds: Sequence[Sequence[float]]) -> CostModel:
    """The cost model of rounds measured by ``measure_cost_rounds`` (any number of calls): the median per k."""
    return CostModel(tuple(median(r[k] for r in rounds) for k in range(len(rounds[0]))))


PREFILL_CHUNK = 256
"""Tokens a measurement prefills at a time: Cancel waits for one chunk at most (at 6,700 positions a chunk
of 512 took 8 s on 2 cores)."""


def after_prompt(scheduler, prompt_tokens: Sequence[int], measure, prefilled: Callable[[int, int, float], None]
                 | None = None, cancel: threading.Event | None = None):
    """``measure(runtime, session, base)`` under the scheduler lock (kind ``cost_model``) on a temporary
    session holding ``prompt_tokens`` but the last (``base`` = their count - 1 positions; the batches
    measured start at ``base`` with the last prompt token), dropped afterwards; its value. The prompt is
    prefilled in chunks of ``PREFILL_CHUNK`` (or the runtime's smaller ``n_batch``): ``prefilled(position,
    tokens, seconds)`` after each,
    and ``cancel`` set stops it between chunks (``CostMeasureCancelled``, nothing measured)."""
    def op(rt):
        sid = rt.open_session(None)
        try:
            base = len(prompt_tokens) - 1
            step = min(PREFILL_CHUNK, int(getattr(rt, "n_batch", 0) or 0) or max(1, base))
            for start in range(0, base, step):
                if cancel is not None and cancel.is_set():
                    raise CostMeasureCancelled(None, "")
                t = perf_counter_ns()
                chunk = list(prompt_tokens[start:min(base, start + step)])
                rt.prefill(sid, chunk, start)
                if prefilled is not None:
                    prefilled(start, len(chunk), (perf_counter_ns() - t) / 1e9)
            return measure(rt, sid, base)
        finally:
            rt.drop_session(sid)

    return scheduler.execute("cost_model", -1, op).value


def measure_cost_rounds(scheduler, prompt_tokens: Sequence[int], k_max: int = 16, repeats: int = 5,
                        warm_up: bool = True, progress: Callable[[CostProgress], None] | None = None,
                        cancel: threading.Event | None = None) -> list[tuple[float, ...]]:
    """``repeats`` rounds, each the time of a batch of every k = 1..k_max rows in turn decoded after
    the prompt (milliseconds; trimmed back each time), after one untimed warm-up round unless
    ``warm_up`` is False (a model already decoding). Runs under the scheduler lock; uses a
    temporary session.

    ``progress(CostProgress)`` is called (on this thread) before the prefill, after each of its chunks and
    after each batch size; ``cancel`` (a ``threading.Event``, set from any thread) stops the measurement
    before its next chunk or decode with ``CostMeasureCancelled``, whose ``partial`` is the curve of the
    batch sizes timed (``partial_rows``; None when none was).

    Each batch size is timed as runs meet it. A verify batch of k >= 2 rows follows a batch of another
    size (a plain step, or a window of another length): timed right after the (k - 1)-row batch. c(1),
    the plain step every speedup is measured against, follows other one-row steps in plain decoding:
    the mean of ``PLAIN_TIMED_STEPS`` consecutive steps after ``PLAIN_LEAD_STEPS`` untimed ones, at
    the positions after the prompt. A one-row decode right after a wide batch is slower, and the next
    ones recover step by step (measured on the bundled model, 2 threads, after a 9-row batch: 7.2,
    6.6, 6.2, 5.9, 5.8, 5.8 ms), so timing c(1) after wider batches put every predicted speedup 25-40%
    above the measured one. Part of the first step's extra time is llama.cpp rebuilding its compute
    graph for the new batch shape (it reuses the previous decode's graph when the shape repeats:
    ``llm_graph_result::can_reuse``, llama.cpp 0c1e570 ``src/llama-graph.cpp``;
    ``LLAMA_GRAPH_REUSE_DISABLE=1`` removes 0.4-0.9 ms of the difference).
    Raises ``ValueError`` when the prompt and the rows do not fit the context."""
    one_row_positions = PLAIN_LEAD_STEPS + PLAIN_TIMED_STEPS
    if len(prompt_tokens) + measurement_positions(k_max) > scheduler.runtime.n_ctx:
        raise ValueError(f"prompt of {len(prompt_tokens)} tokens + {measurement_positions(k_max)} rows "
                         f"exceeds n_ctx")
    rows_src = list(prompt_tokens) * (1 + k_max // max(1, len(prompt_tokens)))
    rt0 = scheduler.runtime
    clock = MeasureClock(len(prompt_tokens) - 1, min(PREFILL_CHUNK, int(getattr(rt0, "n_batch", 0) or 0)
                                                     or len(prompt_tokens)), k_max, repeats + int(warm_up))
    started = perf_counter_ns()
    state = {"stage": PLAN, "prefilled": 0, "round": 0, "k": 0, "estimate": None, "timed": False}
    rounds: list[tuple[float, ...]] = []
    times: list[float] = []

    def report() -> None:
        left = clock.left_s()
        elapsed = (perf_counter_ns() - started) / 1e9
        if left is not None:  # the whole measurement's cost at this context length, as known now
            state["estimate"] = elapsed + left
        fraction = elapsed / (elapsed + left) if left is not None and elapsed + left > 0 else 0.0
        if progress is not None:
            progress(CostProgress(state["stage"], len(prompt_tokens), state["prefilled"], state["round"], repeats,
                                  warm_up, state["k"], k_max, elapsed, left, fraction, state["estimate"]))

    def stop_if_cancelled() -> None:
        if cancel is not None and cancel.is_set():
            timed = [r for r in (*rounds, *([tuple(times)] if state["timed"] else [])) if r]
            rows = partial_rows(timed)
            note = partial_text(len(rows), k_max, len(timed), repeats) if rows else ""
            raise CostMeasureCancelled(CostModel(rows) if rows else None, note)

    def prefilled(position: int, tokens: int, seconds: float) -> None:
        clock.prefill_done(position, tokens, seconds)
        state["stage"], state["prefilled"] = PREFILL, position + tokens
        report()

    def measure(rt, sid: int, base: int) -> list[tuple[float, ...]]:
        nonlocal times
        state["stage"], state["prefilled"] = ROUNDS, len(prompt_tokens)
        for rnd in range(repeats + int(warm_up)):
            times = []
            state["round"] = rnd + int(not warm_up)
            state["timed"] = state["round"] > 0
            for k in range(1, k_max + 1):
                step = perf_counter_ns()
                if k == 1:  # a plain step follows plain steps: the first ones are not timed
                    for position in range(base, base + PLAIN_LEAD_STEPS):
                        stop_if_cancelled()
                        rt.decode_rows(sid, rows_src[:1], position)
                    t = perf_counter_ns()
                    for position in range(base + PLAIN_LEAD_STEPS, base + one_row_positions):
                        stop_if_cancelled()  # an Event's is_set: nanoseconds beside a decode
                        rt.decode_rows(sid, rows_src[:1], position)
                    times.append((perf_counter_ns() - t) / 1e6 / PLAIN_TIMED_STEPS)
                else:
                    stop_if_cancelled()
                    t = perf_counter_ns()
                    rt.decode_rows(sid, rows_src[:k], base)
                    times.append((perf_counter_ns() - t) / 1e6)
                rt.trim(sid, base)
                clock.step_done(rnd, k, (perf_counter_ns() - step) / 1e9)
                state["k"] = k
                report()
            if rnd or not warm_up:
                rounds.append(tuple(times))
        return rounds

    report()
    return after_prompt(scheduler, prompt_tokens, measure, prefilled, cancel)


def measure_tree_costs(scheduler, prompt_tokens: Sequence[int], k_max: int = 9, repeats: int = 5,
                       branches: Sequence[int] = (1, 2, 4)) -> dict[int, tuple[float, ...]]:
    """The time of a verify batch of k = 2..k_max rows shaped as a tree of ``b`` equal branches
    (``inspector.engine.tree.spread_parents``; b = 1: the chain) for each b in ``branches``
    (milliseconds, the median of ``repeats`` rounds after a warm-up round): ``{b: (c(2), ..., c(k_max))}``.
    In each round every shape's batches run in turn, each k right after the k - 1 of the same shape (as
    ``measure_cost_rounds`` times chains); a tree batch is ``decode_tree`` then ``keep_branch`` (the
    work a tree window does under the lock). Same rows, different attention masks: on a CPU the rows'
    matrix products dominate, so trees and chains should cost about the same; this measures it. Runs
    under the scheduler lock on a temporary session. Raises ``ValueError`` when the prompt and the rows
    do not fit the context, or a shape has more branches than the runtime's ``tree_branches``."""
    runtime = scheduler.runtime
    if len(prompt_tokens) + k_max > runtime.n_ctx:
        raise ValueError(f"prompt of {len(prompt_tokens)} tokens + {k_max} rows exceeds n_ctx")
    if max(branches) > getattr(runtime, "tree_branches", 1):
        raise ValueError(f"{max(branches)} branches: this runtime takes {getattr(runtime, 'tree_branches', 1)}")
    rows_src = list(prompt_tokens) * (1 + k_max // max(1, len(prompt_tokens)))

    def measure(rt, sid: int, base: int) -> dict[int, tuple[float, ...]]:
        rounds: dict[int, list[tuple[float, ...]]] = {b: [] for b in branches}
        for rnd in range(repeats + 1):
            for b in branches:
                times = []
                for k in range(2, k_max + 1):
                    parents = spread_parents(k - 1, b)
                    t = perf_counter_ns()
                    if b == 1:
                        rt.decode_rows(sid, rows_src[:k], base)
                    else:
                        rt.decode_tree(sid, rows_src[:k], parents, base)
                        rt.keep_branch(sid, 0, base)
                    times.append((perf_counter_ns() - t) / 1e6)
                    rt.trim(sid, base)
                if rnd:
                    rounds[b].append(tuple(times))
        return {b: tuple(median(r[i] for r in rs) for i in range(k_max - 1)) for b, rs in rounds.items()}

    return after_prompt(scheduler, prompt_tokens, measure)
