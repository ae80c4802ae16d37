"""What the By position tab draws (issue 39, long contexts), Qt-free: each window's and each plain
step's figures against the KV position at which it ran, and one line saying where the run's windows
stopped paying.

The x of a window is its ``base_position``: the KV length before its verify batch (its rows sit at
base .. base + rows - 1 and attend to every position before them). The x of a plain step is the KV
length before it (its ``step`` event's position, the length after, minus one). Per window: the share of
its proposal accepted (accepted / proposed), the verify cost per row (``verification_elapsed_us`` /
``verification_rows``) and its profit against plain decoding (``inspector.engine.profit``: committed ×
c(1) − time spent, c(1) from the run's plain steps, else the cost model's). Per plain step: the time it
held the runtime, which is c(1) at that position (its ``step`` lock operation: the plain steps of the
main session, in order, are its ``step`` events in order).

Where the windows stopped paying is ``inspector.bench.context_costs.stops_paying``'s rule (the one bench
--context-lengths applies to whole runs at several context lengths), applied to the run's windows in
``MAX_GROUPS`` groups by position: each group's speedup is its windows' committed tokens × c(1) over the
time they spent, its reason acceptance (fewer tokens per window than the first group's) or cost (as many,
but the time grew: c(1) of the plain steps in each group when there are some).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Sequence

from inspector.bench.context_costs import SourceAtLength, stops_paying
from inspector.engine.profit import STEP_OPERATION, plain_step_us, window_profit_us
from inspector.engine.records import STEP
from inspector.llama.cost_model import CostModel

MAX_GROUPS = 4
"""Most groups of windows (by position) the stopping line compares."""
MIN_GROUP_WINDOWS = 3
"""Fewest windows in a group (fewer windows: fewer groups, one at least)."""
RUN_LABEL = "this run"


@dataclass(frozen=True)
class PositionFigures:
    """A run's figures by KV position (tokens); times in milliseconds."""

    window_x: tuple[int, ...] = ()
    """Each window's ``base_position``, in the run's order."""
    acceptance: tuple[float, ...] = ()
    """Each window's accepted / proposed proposal tokens (0..1)."""
    verify_row_ms: tuple[float, ...] = ()
    """Each window's verification time over its rows (ms per row)."""
    profit_ms: tuple[float, ...] = ()
    """Each window's profit against plain decoding (ms; empty when no c(1) is known)."""
    step_x: tuple[int, ...] = ()
    """The KV length before each plain step."""
    step_ms: tuple[float, ...] = ()
    """Each plain step's time holding the runtime (ms): c(1) at that position."""
    c1_us: float | None = None
    """The c(1) the profits use (µs), None when neither the run nor a cost model gives one."""
    c1_from: str = ""
    verdict: str = ""
    """One line: where the windows stopped paying and why (``stopping_line``)."""


def plain_steps_by_position(events: Sequence, lock_operations: Sequence,
                            session_id: int | None) -> list[tuple[int, float]]:
    """``(KV length before the step, ms holding the runtime)`` of each plain step of session
    ``session_id``: its ``step`` events (``EngineEvent``, position = the length after) paired in order with
    its ``step`` lock operations (``LockOperation``); as many as both have."""
    positions = [e.position - 1 for e in events
                 if e.kind == STEP and e.position is not None and (session_id is None or e.session_id == session_id)]
    holds = [op.hold_us / 1000 for op in lock_operations
             if op.kind == STEP_OPERATION and (session_id is None or op.session_id == session_id)]
    return list(zip(positions, holds))


def window_groups(receipts: Sequence, c1_us: float, steps: Sequence[tuple[int, float]] = ()) -> \
        tuple[list[SourceAtLength], dict[int, CostModel]]:
    """The windows (``WindowReceipt``) in up to ``MAX_GROUPS`` groups of consecutive base positions, as
    ``stops_paying`` reads them: ``(rows, costs)``, a row per group (its ``length`` the group's first
    ``base_position``; speedup = committed × ``c1_us`` / time spent) and, for each group with plain steps
    among its positions (``steps``: ``plain_steps_by_position``), their median time as a one-row
    ``CostModel``."""
    ordered = sorted(receipts, key=lambda r: (r.base_position, r.window_index))
    n = len(ordered)
    count = max(1, min(MAX_GROUPS, n // MIN_GROUP_WINDOWS))
    cuts = [round(i * n / count) for i in range(count + 1)]
    groups = [ordered[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]
    rows, costs = [], {}
    for i, group in enumerate(groups):
        start = group[0].base_position
        end = groups[i + 1][0].base_position if i + 1 < len(groups) else None
        spent = sum(r.proposal_elapsed_us + r.verification_elapsed_us + r.repair_elapsed_us for r in group)
        gained = sum(r.canonical_prediction_count for r in group) * c1_us
        accepted = sum(r.accepted_proposal_tokens for r in group)
        proposed = sum(r.proposal_token_count for r in group)
        rows.append(SourceAtLength(start, RUN_LABEL, gained / spent if spent > 0 else None,
                                   accepted / proposed if proposed else None, 1 + accepted / len(group), len(group)))
        mine = [ms for x, ms in steps if x >= start and (end is None or x < end)]
        if mine:
            costs[start] = CostModel((float(median(mine)),))
    return rows, costs


def stopping_line(receipts: Sequence, c1_us: float | None, c1_from: str,
                  steps: Sequence[tuple[int, float]] = ()) -> str:
    """One line: the positions the windows ran at and where they stopped paying, and why
    (``stops_paying`` over ``window_groups``), e.g. "Windows at KV positions 6726–6790 (3 groups, c(1)
    14.0 ms from plain steps of this run): stops paying at 6760 (0.80x): acceptance: ..."."""
    if not receipts:
        return "No window yet: the plots fill as windows run."
    lo = min(r.base_position for r in receipts)
    hi = max(r.base_position for r in receipts)
    where = f"KV position {lo}" if lo == hi else f"KV positions {lo}–{hi}"
    if c1_us is None:
        return f"Windows at {where}: whether they paid needs c(1): no plain step yet and no cost model."
    rows, costs = window_groups(receipts, c1_us, steps)
    groups = f"{len(rows)} group{'s' if len(rows) != 1 else ''} of windows"
    return (f"Windows at {where} ({groups}, c(1) {c1_us / 1000:.1f} ms from {c1_from}): "
            f"{stops_paying(rows, costs)[RUN_LABEL]}")


def position_figures(receipts: Sequence, events: Sequence, lock_operations: Sequence, session_id: int | None,
                     cost_model_c1_us: float | None = None) -> PositionFigures:
    """The ``PositionFigures`` of a run: its ``receipts`` (``WindowReceipt``), ``events`` and
    ``lock_operations`` of its main session ``session_id``; c(1) from the run's plain steps (median,
    ``plain_step_us``), else ``cost_model_c1_us`` (µs)."""
    steps = plain_steps_by_position(events, lock_operations, session_id)
    own = plain_step_us(lock_operations, session_id)
    c1_us, c1_from = (own, "plain steps of this run") if own is not None else \
        (cost_model_c1_us, "the cost model") if cost_model_c1_us is not None else (None, "")
    return PositionFigures(
        window_x=tuple(r.base_position for r in receipts),
        acceptance=tuple(r.accepted_proposal_tokens / r.proposal_token_count if r.proposal_token_count else 0.0
                         for r in receipts),
        verify_row_ms=tuple(r.verification_elapsed_us / max(1, r.decoded_rows) / 1000 for r in receipts),
        profit_ms=() if c1_us is None else tuple(window_profit_us(r, c1_us) / 1000 for r in receipts),
        step_x=tuple(x for x, _ in steps), step_ms=tuple(ms for _, ms in steps),
        c1_us=c1_us, c1_from=c1_from, verdict=stopping_line(receipts, c1_us, c1_from, steps))
