"""What other sources would have done over a recorded conversation, without the model (issue 29).

``inspector.bench.tune`` replays one request. A conversation's turns are requests whose prompts hold
the earlier answers, and sources with memory (``suffix``, ``ngram-map-k``, ``ngram-mod``,
``ngram-cache``) remember across them: here every turn of a greedy conversation receipts document
(``spec-inspector run --turns ... --receipts F``) is replayed in order with one source memory
(``SourceContext.memory``), each turn's source made, replayed (``tune.replay``) and closed as the run
service does. Time is predicted from c(k) as ``tune.predict`` does; the sources are given c(k) as their
``SourceContext.row_costs`` (what a real run hands them from the stored cost model).

Under greedy sampling a turn's output does not depend on the proposals, so the replay equals a real
run whose every turn's output equals the recorded one (a near-tie that batch arithmetic flips makes a
real run's later turns differ).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from inspector.bench.tune import (Recording, ReplayedWindow, TuneRow, costs_from_times, recording_from_document,
                                  replay)
from inspector.engine.records import decoded_rows_of
from inspector.llama.cost_model import CostModel
from inspector.receipts.document import is_conversation
from inspector.sources.registry import PLAIN, SourceContext, close_source, make_source


@dataclass(frozen=True)
class TurnsReplay:
    """One configuration replayed over every turn: ``row`` the summed prediction (as ``tune.TuneRow``),
    ``windows`` each turn's replayed windows, ``plain_steps`` each turn's plain steps."""

    row: TuneRow
    windows: tuple[tuple[ReplayedWindow, ...], ...]
    plain_steps: tuple[int, ...]


def recordings_of(doc: Mapping) -> list[Recording]:
    """One ``Recording`` per turn of a conversation receipts document, or the one of a request's. Raises
    ``tune.NotReplayable`` for a turn that cannot be replayed (sampled, cut by a stop string, no output)."""
    if is_conversation(doc):
        return [recording_from_document(turn) for turn in doc["turns"]]
    return [recording_from_document(doc)]


def replay_turns(source_name: str, options: Mapping, draft_max: int, recordings: Sequence[Recording],
                 costs: CostModel, runtime=None,
                 make: Callable[[Recording, dict], object] | None = None) -> TurnsReplay:
    """Replay ``source_name`` with ``options`` and ``draft_max`` over ``recordings`` (the turns, in order)
    with one memory across them; predicted decode time: verification at ``costs`` (ms per batch of k
    rows), plain steps at c(1), plus the source's measured proposal time. Speedup is over plain
    decoding of every turn's output at c(1). ``make(recording, memory)``: instead of the registry's
    source, the one to replay over that turn (e.g. ``inspector.bench.oracle.CopyOracle``). Raises
    ``ValueError`` for options the source refuses."""
    memory: dict = {}
    row_costs = tuple(costs.row_ms)
    all_windows, plains, proposal_ms = [], [], 0.0
    for rec in recordings:
        source = make(rec, memory) if make is not None else make_source(
            source_name, SourceContext(runtime, row_costs=row_costs, memory=memory), dict(options))
        try:
            windows, plain, ms = replay(source, rec, draft_max)
        finally:
            close_source(source)
        all_windows.append(tuple(windows))
        plains.append(plain)
        proposal_ms += ms
    flat = [w for ws in all_windows for w in ws]
    verify_ms = sum(costs.cost(w.decoded_rows) for w in flat)
    decode_ms = verify_ms + sum(plains) * costs.cost(1) + proposal_ms
    n = sum(len(rec.output) for rec in recordings)
    plain_ms = sum(len(rec.output) - 1 for rec in recordings) * costs.cost(1)
    row = TuneRow(source_name, dict(options), draft_max, len(flat), sum(len(w.proposal) for w in flat),
                  sum(w.accepted for w in flat), sum(plains), proposal_ms, decode_ms,
                  n / decode_ms * 1000 if decode_ms > 0 else 0.0, plain_ms / decode_ms if decode_ms > 0 else 0.0)
    return TurnsReplay(row, tuple(all_windows), tuple(plains))


def conversation_costs(doc: Mapping) -> CostModel | None:
    """c(k) from every turn's own times (``tune.costs_from_times`` over all turns' plain steps and windows),
    or None without a plain step in any turn."""
    turns = doc["turns"] if is_conversation(doc) else [doc]
    steps = [op["hold_us"] for t in turns for op in t.get("lock_operations", []) if op.get("kind") == "step"]
    windows = [(decoded_rows_of(w), w["verification_elapsed_us"]) for t in turns for w in t.get("windows", [])]
    return costs_from_times(steps, windows)


def tune_turns(recordings: Sequence[Recording], costs: CostModel, configs: Sequence[tuple[str, dict, int]],
               progress: Callable[[int, int], None] | None = None) -> list[TuneRow]:
    """``replay_turns`` of every configuration (``tune.grid``) over the turns, best predicted speedup first
    (configurations whose options the source refuses are skipped), as ``tune.tune`` does for one request.
    ``progress(done, total)`` after each."""
    rows = []
    for i, (s, opts, dm) in enumerate(configs):
        if s != PLAIN:
            try:
                rows.append(replay_turns(s, opts, dm, recordings, costs).row)
            except ValueError:
                pass
        if progress is not None:
            progress(i + 1, len(configs))
    return sorted(rows, key=lambda r: -r.speedup)
