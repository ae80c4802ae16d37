"""How far a cost-model measurement is, and how long it has left (no Qt, no llama.cpp).

``measure_cost_rounds`` (``inspector.llama.cost_model``) reports a ``CostProgress`` after each prefill chunk
and each batch size it times, and stops with ``CostMeasureCancelled`` (carrying the curve measured so far,
``partial_cost_model``) when its cancel event is set. ``MeasureClock`` estimates the time left from what the
measurement has timed so far: the prompt's prefill first (its chunks cost more the further into the
context they go, since every row attends to every cached position), then the rounds of batches of
k = 1..k_max rows, whose cost grows with the context too. At 6,700 prompt tokens on the bundled model and
2 cores the prefill took 62 s and each round 6.3 s; after a 129-token prompt 0.6 s and 1.1 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Sequence

from inspector.engine.errors import RequestCancelled

PREFILL = "prefill"
ROUNDS = "rounds"
PLAN = "plan"
"""``CostProgress.stage``: before anything ran (what it will cost), the prompt's prefill, the rounds."""

ROW_COST_VS_PREFILL = 3.0
"""A verify row costs about this many times a prefill row at the same context (small batches use the
cores less well: 2.3x after 129 tokens, 4.3x after 6,700 on the bundled model). Used only until the
first batch is timed."""


@dataclass(frozen=True)
class CostProgress:
    """Where a measurement is: ``stage`` (``PLAN``, ``PREFILL``, ``ROUNDS``), the prompt's tokens and how
    many are prefilled, the round (0: the untimed warm-up round, then 1..``repeats``) and the last batch
    size timed in it (``k``, 0: none yet), the seconds spent and left (None: not known yet), the share
    done (0..1) and ``estimate_s``, the whole measurement's first estimate (what it costs at this
    context length; None until one chunk of the prefill or one batch was timed)."""

    stage: str
    prompt_tokens: int
    prefilled: int
    round: int
    repeats: int
    warm_up: bool
    k: int
    k_max: int
    elapsed_s: float
    left_s: float | None
    fraction: float
    estimate_s: float | None = None

    @property
    def decodes(self) -> int:
        """Decodes after the prefill: every round has ``ONE_ROW_DECODES`` one-row decodes and k_max - 1 batches."""
        return (self.repeats + int(self.warm_up)) * (ONE_ROW_DECODES + self.k_max - 1)


ONE_ROW_DECODES = 16
"""One-row decodes each round makes for c(1) (``PLAIN_LEAD_STEPS`` + ``PLAIN_TIMED_STEPS`` of ``cost_model``)."""


class CostMeasureCancelled(RequestCancelled):
    """The measurement was cancelled: ``partial`` is the ``CostModel`` of what was timed so far
    (``partial_rows``; None when nothing was) and ``note`` says what it holds (``partial_text``)."""

    def __init__(self, partial, note: str) -> None:
        super().__init__("cost model measurement cancelled")
        self.partial = partial
        self.note = note


def partial_rows(timed: Sequence[Sequence[float]]) -> tuple[float, ...]:
    """c(k) of the batch sizes timed so far: per k, the median over the timed rounds that reached it (the
    last one may be incomplete: rounds go k = 1, 2, ... in order, so they cover 1..n). Empty when nothing
    was timed: the warm-up round's times are never a curve (its first decodes pay for first touches: on a
    busy machine it read c(6) = 3.6 s, and draft max auto chose from it)."""
    rounds = [list(r) for r in timed if r]
    if not rounds:
        return ()
    n = max(len(r) for r in rounds)
    return tuple(median(r[k] for r in rounds if len(r) > k) for k in range(n))


def partial_text(rows: int, k_max: int, rounds: int, repeats: int) -> str:
    """What a partial curve holds, in words ("k = 1..7 of 16, 1 of 3 repeats")."""
    return f"k = 1..{rows} of {k_max}, {rounds} of {repeats} repeats"


class MeasureClock:
    """Estimates the seconds a measurement has left from what it timed so far.

    ``prompt_tokens`` are prefilled in chunks of ``chunk`` tokens (``prefill_done`` after each, with its
    seconds), then ``rounds`` rounds of batch sizes 1..``k_max`` (``step_done(round, k, seconds)``: a
    round's k = 1 step is its ``ONE_ROW_DECODES`` one-row decodes). A chunk's cost per token is taken as
    linear in its position (fitted on the first and the last chunk timed); a batch size not yet timed in
    any round as the previous round's time, or in the first round as linear in k from the sizes timed
    (c(k) = k c(1) before any wider batch, an upper bound)."""

    def __init__(self, prompt_tokens: int, chunk: int, k_max: int, rounds: int) -> None:
        self.prompt_tokens = max(0, prompt_tokens)
        self.chunk = max(1, chunk)
        self.k_max = k_max
        self.rounds = rounds
        self.chunks: list[tuple[int, int, float]] = []
        """(start position, tokens, seconds) of each prefill chunk timed."""
        self.steps: list[list[float]] = []
        """Seconds of each batch size's step, per round (k = 1 first)."""

    def prefill_done(self, position: int, tokens: int, seconds: float) -> None:
        """A prefill chunk of ``tokens`` from ``position`` took ``seconds``."""
        self.chunks.append((position, tokens, seconds))

    def step_done(self, rnd: int, k: int, seconds: float) -> None:
        """Batch size ``k`` of round ``rnd`` (0-based, the warm-up round counted) took ``seconds``."""
        while len(self.steps) <= rnd:
            self.steps.append([])
        self.steps[rnd].append(seconds)

    def _per_token(self, position: float) -> float | None:
        if not self.chunks:
            return None
        (p0, n0, t0), (p1, n1, t1) = self.chunks[0], self.chunks[-1]
        r0, r1 = t0 / max(1, n0), t1 / max(1, n1)
        slope = max(0.0, (r1 - r0) / (p1 - p0)) if p1 > p0 else 0.0
        return r1 + slope * (position - p1)

    def prefill_left(self) -> float | None:
        """Seconds the prefill has left (None before its first chunk)."""
        done = sum(n for _p, n, _t in self.chunks)
        left = 0.0
        position = done
        while position < self.prompt_tokens:
            n = min(self.chunk, self.prompt_tokens - position)
            rate = self._per_token(position)
            if rate is None:
                return None
            left += rate * n
            position += n
        return left

    def _step_estimates(self) -> list[float] | None:
        """Seconds of each batch size's step in a round, from what was timed (None: nothing to go by)."""
        full = [r for r in self.steps if len(r) == self.k_max]
        if full:
            return list(full[-1])
        first = self.steps[0] if self.steps else []
        if not first:
            rate = self._per_token(self.prompt_tokens)
            if rate is None:
                return None
            row = rate * ROW_COST_VS_PREFILL
            return [row * ONE_ROW_DECODES] + [row * k for k in range(2, self.k_max + 1)]
        c1 = first[0] / ONE_ROW_DECODES
        known = first[1:]
        if not known:
            per_row, base = c1, 0.0
        elif len(known) == 1:
            per_row, base = known[0] / 2, 0.0
        else:
            per_row = max(0.0, (known[-1] - known[0]) / (len(known) - 1))
            base = known[0] - 2 * per_row
        return [first[0]] + [first[k - 1] if k - 1 < len(first) else base + per_row * k
                             for k in range(2, self.k_max + 1)]

    def left_s(self) -> float | None:
        """Seconds the whole measurement has left (None: not known yet)."""
        prefill = self.prefill_left()
        steps = self._step_estimates()
        if prefill is None or steps is None:
            return None
        current = len(self.steps) - 1 if self.steps else 0
        done_in_current = len(self.steps[current]) if self.steps else 0
        if done_in_current == self.k_max:
            current, done_in_current = current + 1, 0
        rounds_after = max(0, self.rounds - current - 1)
        this_round = sum(steps[done_in_current:]) if current < self.rounds else 0.0
        return prefill + this_round + rounds_after * sum(steps)

    def spent_s(self) -> float:
        """Seconds timed so far (prefill chunks and steps)."""
        return sum(t for _p, _n, t in self.chunks) + sum(sum(r) for r in self.steps)


def duration_text(seconds: float | None) -> str:
    """"about 1 min 25 s", "about 40 s", "a few seconds"; "" when not known."""
    if seconds is None:
        return ""
    s = max(0, int(round(seconds)))
    if s < 5:
        return "a few seconds"
    if s < 60:
        return f"about {s} s"
    minutes, rest = divmod(5 * round(s / 5), 60)
    return f"about {minutes} min" + (f" {rest} s" if rest else "")


def progress_text(p: CostProgress) -> str:
    """One line for the status bar and the Cost model tab: where the measurement is and the time left."""
    if p.stage == PLAN:
        where = f"after {p.prompt_tokens:,} prompt tokens: prefill, then "
        rounds = (f"a warm-up round and {p.repeats} timed rounds" if p.warm_up else f"{p.repeats} rounds")
        return f"{where}{rounds} of k = 1..{p.k_max} rows ({p.decodes} decodes)"
    if p.stage == PREFILL:
        where = f"prefill {p.prefilled:,}/{p.prompt_tokens:,} prompt tokens"
    elif p.round == 0 and p.warm_up:
        where = f"warm-up round, k = {p.k} of {p.k_max}"
    else:
        where = f"round {p.round} of {p.repeats}, k = {p.k} of {p.k_max}"
    left = duration_text(p.left_s)
    return where + (f" · {left} left" if left else "")


def estimate_text(p: CostProgress) -> str:
    """What the whole measurement costs at this context length, once estimated ("" before)."""
    if p.estimate_s is None:
        return ""
    return (f"{duration_text(p.estimate_s)} in all at this context length ({p.prompt_tokens:,} prompt tokens; "
            "c(k) and the prefill grow with the context)")
