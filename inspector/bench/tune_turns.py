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
from typing import Mapping, Sequence

from inspector.bench.tune import Recording, ReplayedWindow, TuneRow, recording_from_document, replay
from inspector.llama.cost_model import CostModel
from inspector.receipts.document import is_conversation
from inspector.sources.registry import SourceContext, close_source, make_source


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
                 costs: CostModel, runtime=None) -> TurnsReplay:
    """Replay ``source_name`` with ``options`` and ``draft_max`` over ``recordings`` (the turns, in order)
    with one memory across them; predicted decode time: verification at ``costs`` (ms per batch of k
    rows), plain steps at c(1), plus the source's measured proposal time. Speedup is over plain
    decoding of every turn's output at c(1). Raises ``ValueError`` for options the source refuses."""
    memory: dict = {}
    row_costs = tuple(costs.row_ms)
    all_windows, plains, proposal_ms = [], [], 0.0
    for rec in recordings:
        source = make_source(source_name, SourceContext(runtime, row_costs=row_costs, memory=memory), dict(options))
        try:
            windows, plain, ms = replay(source, rec, draft_max)
        finally:
            close_source(source)
        all_windows.append(tuple(windows))
        plains.append(plain)
        proposal_ms += ms
    flat = [w for ws in all_windows for w in ws]
    verify_ms = sum(costs.cost(len(w.proposal) + 1) for w in flat)
    decode_ms = verify_ms + sum(plains) * costs.cost(1) + proposal_ms
    n = sum(len(rec.output) for rec in recordings)
    plain_ms = sum(len(rec.output) - 1 for rec in recordings) * costs.cost(1)
    row = TuneRow(source_name, dict(options), draft_max, len(flat), sum(len(w.proposal) for w in flat),
                  sum(w.accepted for w in flat), sum(plains), proposal_ms, decode_ms,
                  n / decode_ms * 1000 if decode_ms > 0 else 0.0, plain_ms / decode_ms if decode_ms > 0 else 0.0)
    return TurnsReplay(row, tuple(all_windows), tuple(plains))
