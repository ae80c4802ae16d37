"""What other settings would have done, without running them (issue 28 part 3, the what-if tuner).

Under greedy sampling the target's continuation of a request is its output, whatever proposes: a
model-free source's windows over a recorded run can be replayed exactly without the model. At each
decode step the source is asked as the engine asks it (``inspector.engine.proposal.max_proposal_tokens``
for the cap, ``begin`` after the prefill, ``report`` after each window), and the window is classified
with the engine's own rule (``inspector.engine.classify.classify_window``) against the recorded output
as the row predictions. Time is predicted from the verify cost c(k) (a ``CostModel``, or the recording's
own verification and plain-step times, ``costs_from_document``) plus the source's proposal time,
measured here while it answers.

A token tree (``inspector.engine.tree``) is replayed by its walk: every row's prediction is the recorded
output's token at the row's depth, so the walk keeps the branch the real window keeps; it is priced at
c(every row). A replayed window equals the real run's window token for token whenever the real run's
output equals the recorded one (tested on the bundled model, chains and trees). A draft model is not model-free: it is not replayed.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from itertools import product
from statistics import median
from types import SimpleNamespace
from typing import Callable, Iterable, Mapping, Sequence

from inspector.bench.compare import run_compare
from inspector.bench.compare_result import CompareConfig
from inspector.engine.classify import classify_window
from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import ProposalRequest, max_proposal_tokens
from inspector.engine.records import decoded_rows_of
from inspector.engine.settings import PENALTY_FIELDS, GenerationSettings, sampling_settings
from inspector.engine.tree import depths, walk_tree
from inspector.llama.cost_cache import stored_row_costs
from inspector.llama.cost_model import CostModel
from inspector.receipts.document import load_document
from inspector.session.session_record import SessionRecord
from inspector.sources.registry import PLAIN, SourceContext, make_source, self_contained_sources

MODEL_FREE = self_contained_sources()
"""The sources the tuner replays: every built-in one that needs nothing but the target's tokens (its
declaration ``self_contained``: ngram, the llama.cpp n-gram sources, suffix)."""
DRAFT_MAX_GRID = (2, 4, 6, 8, 12, 16, 24, 32)
"""Draft max values tried for each configuration by default (tokens)."""
OPTION_GRID: Mapping[str, Mapping[str, Sequence]] = {
    "ngram": {"n_max": (3, 4, 6), "n_min": (1, 2), "branches": (1, 2)},
    "ngram-simple": {"size_n": (2, 3, 4, 6, 12), "size_m": (16, 48)},
    "ngram-map-k": {"size_n": (2, 3, 4, 6, 12), "size_m": (16, 48)},
    "ngram-map-k4v": {"size_n": (2, 3, 4, 6, 12), "size_m": (16, 48)},
    "ngram-mod": {"n_match": (4, 8, 16, 24), "n_min": (1, 4, 16, 48)},
    "ngram-cache": {"branches": (1, 3)},
    "suffix": {"max_spec_factor": (1.0, 2.0, 4.0), "min_token_prob": (0.05, 0.1, 0.3)},
}
"""The options grid per source by default (llama.cpp's and vLLM's defaults among the values; ``branches``
> 1: token trees, replayed by their walk, each priced at its every row)."""


class NotReplayable(ValueError):
    """The recording cannot be replayed (sampled at temperature > 0, no output, a stop string cut it):
    the message says why."""


@dataclass(frozen=True)
class Recording:
    """What a replay needs from a recorded greedy run: ``prompt`` and ``output`` token ids, the limits
    it ran with (``max_new_tokens``, ``n_batch``, ``n_ctx``: tokens and positions), and ``is_eog``."""

    prompt: tuple[int, ...]
    output: tuple[int, ...]
    max_new_tokens: int
    n_batch: int
    n_ctx: int
    is_eog: Callable[[int], bool] = field(default=lambda _t: False, compare=False)
    penalized: bool = False
    """The run had penalties (repeat, frequency, presence): the engine then verifies a tree as its first
    branch (``inspector.engine.source_query``), and so does the replay."""


@dataclass(frozen=True)
class ReplayedWindow:
    """One replayed window: its decode step, proposal (a tree's: the branch it keeps), accepted proposal
    tokens, committed tokens and rows decoded (a tree's every node, the root's row included)."""

    decode_step: int
    proposal: tuple[int, ...]
    accepted: int
    committed: int
    rows: int = 0

    @property
    def decoded_rows(self) -> int:
        """Rows the window's batch decoded (``rows``, or the chain's proposal + 1 when not given)."""
        return self.rows or len(self.proposal) + 1


@dataclass(frozen=True)
class TuneRow:
    """One configuration's prediction: ``windows``, ``proposed``/``accepted`` tokens, ``plain_steps``,
    predicted decode time (``decode_ms``: verification rows at c(k), plain steps at c(1), plus the
    source's measured proposal time ``proposal_ms``), ``tokens_per_s`` and ``speedup`` over plain
    decoding of the same output at c(1)."""

    source: str
    options: dict
    draft_max: int
    windows: int
    proposed: int
    accepted: int
    plain_steps: int
    proposal_ms: float
    decode_ms: float
    tokens_per_s: float
    speedup: float

    @property
    def label(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.source}:draft_max={self.draft_max}" + (f",{opts}" if opts else "")

    @property
    def mean_accepted_length(self) -> float | None:
        return None if not self.windows else 1 + self.accepted / self.windows


def recording_from_values(prompt: Sequence[int], output: Sequence[int], settings: Mapping, model: Mapping,
                          finish_reason: str | None, is_eog: Callable[[int], bool] | None = None) -> Recording:
    """A ``Recording`` from a run's plain values: prompt and output token ids, its settings (the receipts
    document's ``settings`` form), its model block (``n_batch``, ``n_ctx``) and finish reason. The
    end-of-generation test defaults to "the output's last token, when the run finished by eog". Raises
    ``NotReplayable`` for a sampled run, a run without output or one a stop string ended."""
    if ((settings or {}).get("sampling") or {}).get("temperature", 0) > 0:
        raise NotReplayable("the run sampled at temperature > 0: its output depends on the proposals, so "
                            "other settings cannot be replayed over it (record a greedy run)")
    output = tuple(output)
    if not output:
        raise NotReplayable("the run generated no token")
    if finish_reason == "stop":
        raise NotReplayable("a stop string ended the run: its text decides where, which a replay does not see "
                            "(record without --stop)")
    if is_eog is None:
        last = output[-1] if finish_reason == "eog" else None
        is_eog = (lambda t: t == last) if last is not None else (lambda _t: False)
    model = model or {}
    penalties = {k: v for k, v in ((settings or {}).get("sampling") or {}).items() if k in PENALTY_FIELDS}
    return Recording(tuple(prompt), output, int(settings["max_new_tokens"]), int(model.get("n_batch") or 512),
                     int(model.get("n_ctx") or 2048), is_eog, sampling_settings(**penalties)[0].penalized)


def recording_from_document(doc: Mapping, is_eog: Callable[[int], bool] | None = None) -> Recording:
    """A ``Recording`` from a receipts document (``spec-inspector run --receipts``): see
    ``recording_from_values``."""
    return recording_from_values(doc["prompt"]["token_ids"], doc["output"]["token_ids"], doc["settings"],
                                 doc.get("model") or {}, doc["output"].get("finish_reason"), is_eog)


def recording_from_record(record: SessionRecord, is_eog: Callable[[int], bool] | None = None) -> Recording:
    """A ``Recording`` from a ``SessionRecord``: a live run (its header's prompt token ids and model) or one
    read from a receipts document (the document, read again when the record kept only its path); see
    ``recording_from_values``. Raises ``NotReplayable`` for no run, an autosave (it keeps no prompt token
    ids) and what ``recording_from_values`` refuses."""
    if record.header is not None:
        prompt, model = record.header.prompt_token_ids, record.header.model
    elif record.origin == "document":
        doc = record.document if record.document is not None else load_document(record.document_path)
        prompt, model = doc["prompt"]["token_ids"], doc.get("model") or {}
    elif record.origin == "autosave":
        raise NotReplayable("an autosave keeps no prompt token ids: open the run's receipts document")
    else:
        raise NotReplayable("no run yet: run a prompt (greedy) first, or open a receipts file")
    return recording_from_values(prompt, record.generated_token_ids, record.settings or {}, model,
                                 record.finish_reason, is_eog)


def costs_from_times(step_hold_us: Iterable[float], windows: Iterable[tuple[int, float]]) -> CostModel | None:
    """c(k) from a recording's own times: ``step_hold_us``, its plain steps' lock hold (µs), and
    ``windows``, (verification rows, verification time in µs) of each window. The median time by rows,
    the median plain step for c(1); rows not seen are interpolated linearly (beyond the largest seen,
    ``CostModel.cost`` extends the slope). None without a plain step."""
    steps = list(step_hold_us)
    if not steps:
        return None
    by_rows: dict[int, list[float]] = {1: [s / 1000 for s in steps]}
    for rows, elapsed_us in windows:
        by_rows.setdefault(int(rows), []).append(elapsed_us / 1000)
    known = sorted((k, median(v)) for k, v in by_rows.items())
    top = known[-1][0]
    row_ms = []
    for k in range(1, top + 1):
        lo = max((p for p in known if p[0] <= k), key=lambda p: p[0])
        hi = min((p for p in known if p[0] >= k), key=lambda p: p[0])
        row_ms.append(lo[1] if hi[0] == lo[0] else lo[1] + (hi[1] - lo[1]) * (k - lo[0]) / (hi[0] - lo[0]))
    return CostModel(tuple(row_ms))


def measured_points(step_hold_us: Iterable[float], windows: Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
    """(rows, median ms) of every verification size a recording measured, c(1) from its plain steps."""
    by_rows: dict[int, list[float]] = {}
    steps = list(step_hold_us)
    if steps:
        by_rows[1] = [s / 1000 for s in steps]
    for rows, elapsed_us in windows:
        by_rows.setdefault(int(rows), []).append(elapsed_us / 1000)
    return sorted((k, median(v)) for k, v in by_rows.items())


def fitted_costs(stored: CostModel, points: Sequence[tuple[int, float]]) -> CostModel:
    """``stored``'s shape (c(k) measured for k = 1..16 by ``bench`` or the Cost model tab) at the level of
    the recording's own ``points`` (``measured_points``): every c(k) times the median of measured /
    stored over the measured sizes. A recording measures few sizes (its draft max and its plain steps),
    and on weights with a multi-row kernel c(k) is not linear between them (c(2) already near c(8)):
    interpolating would under-price short windows."""
    ratios = [ms / stored.cost(k) for k, ms in points if stored.cost(k) > 0]
    scale = median(ratios) if ratios else 1.0
    return CostModel(tuple(c * scale for c in stored.row_ms))


def costs_from_document(doc: Mapping) -> CostModel | None:
    """c(k) from a receipts document's own times (``costs_from_times``: its ``step`` lock operations'
    hold and its windows' verification rows and time)."""
    return costs_from_times([op["hold_us"] for op in doc.get("lock_operations", []) if op.get("kind") == "step"],
                            [(decoded_rows_of(w), w["verification_elapsed_us"]) for w in doc.get("windows", [])])


def _record_times(record: SessionRecord) -> tuple[list[float], list[tuple[int, float]]]:
    main = record.main_session_id
    return ([op.hold_us for op in record.lock_ops if op.kind == "step" and (main is None or op.session_id == main)],
            [(r.decoded_rows, r.verification_elapsed_us) for r in record.receipts])


def costs_from_record(record: SessionRecord) -> CostModel | None:
    """c(k) from a ``SessionRecord``'s own times (``costs_from_times``): its main session's ``step`` lock
    operations (background sessions' left out) and its receipts."""
    return costs_from_times(*_record_times(record))


def points_from_record(record: SessionRecord) -> list[tuple[int, float]]:
    """``measured_points`` of a ``SessionRecord`` (for ``fitted_costs``)."""
    return measured_points(*_record_times(record))


def cold_replay_note(warm: str | None, turn: int | None) -> str | None:
    """What a reader must know when the recorded run did not start cold (issue 28 part 4): every replay
    starts with a fresh source, so a source that remembered earlier requests (``warm``: the receipts'
    ``settings.source.warm``) or a later turn of a conversation (``turn`` > 1, 1-based) is predicted as if
    it had not. None when the run started cold and is no later turn."""
    if warm:
        return (f"the recorded run's source started warm ({warm}); every replay starts cold, so its figures "
                "compare with a cold run")
    if turn is not None and turn > 1:
        return (f"turn {turn} of a conversation: every replay starts cold, so a source that remembers earlier "
                "requests (suffix, ngram-mod, ngram-map-k, ngram-cache) is predicted without what the earlier "
                "turns taught it; the prompt itself holds the earlier turns for the others")
    return None


def kept_branch(proposal, output: Sequence[int], generated: int) -> tuple[tuple[int, ...], int]:
    """(the chain the window verifies, rows decoded): a chain's tokens and its rows; for a tree
    (``inspector.engine.tree``), the branch the walk keeps when every row's prediction is the recorded
    output's token at its depth (greedy: the target's continuation whatever is proposed), and all its rows.
    Rows past the recorded output predict nothing (-1)."""
    ids = tuple(proposal.token_ids)
    if not proposal.is_tree:
        return ids, len(ids) + 1
    after = [output[generated + d] if generated + d < len(output) else -1 for d in range(max(depths(
        proposal.parents)) + 1)]
    walk = walk_tree(ids, proposal.parents, [after[d] for d in depths(proposal.parents)])
    return tuple(ids[r - 1] for r in walk.branch_rows), len(ids) + 1


def replay(source, rec: Recording, draft_max: int) -> tuple[list[ReplayedWindow], int, float]:
    """Replay ``source`` over ``rec`` with ``draft_max``: (its windows, plain steps, proposal time in ms).
    Asks, caps and classifies as the engine does (module docstring); ``begin`` and ``report`` are called
    as the engine calls them."""
    prompt, output = list(rec.prompt), list(rec.output)
    begin = getattr(source, "begin", None)
    spent_ns = 0
    if begin is not None:
        t = time.perf_counter_ns()
        begin(tuple(prompt))
        spent_ns += time.perf_counter_ns() - t
    tokens = prompt + output[:1]  # the prefill commits the first token
    generated, step, plain = 1, 0, 0
    windows: list[ReplayedWindow] = []
    end = len(output)
    while generated < end:
        base = len(tokens) - 1
        cap = max_proposal_tokens(rec.max_new_tokens - generated, rec.n_batch, draft_max, rec.n_ctx - base)
        proposal = None
        if cap > 0:
            request = ProposalRequest(tokens, len(prompt), step, cap, float("inf"))
            t = time.perf_counter_ns()
            answer = source.propose(request)
            spent_ns += time.perf_counter_ns() - t
            if answer is not None and not isinstance(answer, NoProposal) and 0 < len(answer.token_ids) <= cap:
                proposal = answer.first_branch() if rec.penalized and answer.is_tree else answer
        if proposal is None:
            tokens.append(output[generated])
            generated, step, plain = generated + 1, step + 1, plain + 1
            continue
        ids, decoded = kept_branch(proposal, output, generated)
        rows = output[generated:generated + len(ids) + 1]
        rows += [-1] * (len(ids) + 1 - len(rows))
        d = classify_window(ids, rows, generated, rec.max_new_tokens, rec.is_eog)
        committed = min(d.commit_count, end - generated)
        windows.append(ReplayedWindow(step, ids, d.accepted, committed, decoded))
        receipt = SimpleNamespace(decision_id=proposal.decision_id.hex(), accepted_proposal_tokens=d.accepted,
                                  proposal_token_count=len(ids), verification_rows=len(ids) + 1,
                                  decoded_rows=decoded,
                                  canonical_prediction_count=committed, base_position=base,
                                  committed_tokens=tuple(output[generated:generated + committed]),
                                  disposition="first_mismatch" if d.rejected else "full_accept",
                                  verification_elapsed_us=0)
        t = time.perf_counter_ns()
        source.report(receipt)
        spent_ns += time.perf_counter_ns() - t
        tokens.extend(output[generated:generated + committed])
        generated, step = generated + committed, step + 1
    return windows, plain, spent_ns / 1e6


def predict(source_name: str, options: Mapping, draft_max: int, rec: Recording, costs: CostModel,
            runtime=None) -> TuneRow:
    """Replay one configuration (a fresh source, cold memory) and predict its decode time and speedup.
    The source is given ``costs`` as its ``SourceContext.row_costs`` (a real run gives it the stored cost
    model: the adaptive sources decide on it). Raises what the source's factory raises for bad options
    (``ValueError``)."""
    source = make_source(source_name, SourceContext(runtime, row_costs=tuple(costs.row_ms), memory={}),
                         dict(options))
    windows, plain, proposal_ms = replay(source, rec, draft_max)
    close = getattr(source, "close", None)
    if close is not None:
        close()
    verify_ms = sum(costs.cost(w.decoded_rows) for w in windows)
    decode_ms = verify_ms + plain * costs.cost(1) + proposal_ms
    n = len(rec.output)
    plain_ms = (n - 1) * costs.cost(1)
    return TuneRow(source_name, dict(options), draft_max, len(windows), sum(len(w.proposal) for w in windows),
                   sum(w.accepted for w in windows), plain, proposal_ms, decode_ms,
                   n / decode_ms * 1000 if decode_ms > 0 else 0.0, plain_ms / decode_ms if decode_ms > 0 else 0.0)


def grid(sources: Iterable[str] = MODEL_FREE, draft_maxes: Sequence[int] = DRAFT_MAX_GRID,
         options: Mapping[str, Mapping[str, Sequence]] = OPTION_GRID) -> list[tuple[str, dict, int]]:
    """Every (source, options, draft max) of the grid, options as the cross product of the source's
    value lists (llama-server pairs where one must not exceed another are left out by the source's own
    check at ``predict``)."""
    out = []
    for s in sources:
        grid_s = options.get(s, {})
        keys = list(grid_s)
        for values in product(*(grid_s[k] for k in keys)):
            for dm in draft_maxes:
                out.append((s, dict(zip(keys, values)), dm))
    return out


def tune(rec: Recording, costs: CostModel, configs: Sequence[tuple[str, dict, int]],
         progress: Callable[[int, int], None] | None = None, cancel: threading.Event | None = None) -> list[TuneRow]:
    """``predict`` every configuration (those whose options the source refuses are skipped), best
    predicted speedup first. ``progress(done, total)`` after each. ``cancel``: when set, the rows
    predicted so far are returned."""
    rows = []
    for i, (s, opts, dm) in enumerate(configs):
        if cancel is not None and cancel.is_set():
            break
        if s == PLAIN:
            continue
        try:
            rows.append(predict(s, opts, dm, rec, costs))
        except ValueError:  # e.g. ngram n_min > n_max, ngram-mod n_min > n_max
            pass
        if progress is not None:
            progress(i + 1, len(configs))
    return sorted(rows, key=lambda r: -r.speedup)


def format_tune(rows: Sequence[TuneRow], limit: int = 15) -> str:
    """The best ``limit`` rows as a table (predicted speedup, tokens/s, windows, acceptance)."""
    lines = [f"{'configuration':58} {'speedup':>7} {'tok/s':>7} {'windows':>7} {'acc/prop':>9} {'len':>5}"]
    for r in rows[:limit]:
        mal = "" if r.mean_accepted_length is None else f"{r.mean_accepted_length:.2f}"
        lines.append(f"{r.label[:58]:58} {r.speedup:>6.2f}x {r.tokens_per_s:>7.1f} {r.windows:>7} "
                     f"{f'{r.accepted}/{r.proposed}':>9} {mal:>5}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Verified:
    """A predicted row run for real: ``measured_tokens_per_s`` (decode tokens/s), ``measured_speedup``
    over the plain run measured beside it, ``same_output`` as the recording, ``same_windows`` as the
    replay (None when the output differed: not comparable), ``error`` when the run failed; ``repeats``:
    the runs the medians are over."""

    row: TuneRow
    measured_tokens_per_s: float | None
    measured_speedup: float | None
    same_output: bool
    same_windows: bool | None
    error: str | None = None
    repeats: int = 1

    @property
    def error_ratio(self) -> float | None:
        """measured / predicted decode tokens/s (1.0: exact), None without a measurement."""
        if not self.measured_tokens_per_s or not self.row.tokens_per_s:
            return None
        return self.measured_tokens_per_s / self.row.tokens_per_s


def verify(scheduler, rec: Recording, rows: Sequence[TuneRow], runtime=None, repeats: int = 1) -> list[Verified]:
    """Run plain decoding and each of ``rows``' configurations for real on ``rec``'s prompt (greedy, its
    limits; ``inspector.bench.compare.run_compare``) ``repeats`` times, and set what was measured (the
    median decode tokens/s over the repeats, and the median of each repeat's speedup over the plain run
    beside it) beside what was predicted, with the replay's windows compared to the first repeat's real
    ones (greedy: every repeat commits the same tokens). ``repeats`` >= 1; raises ``ValueError`` below
    that and ``RequestCancelled`` like ``run_compare``."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1 (observed {repeats})")
    settings = GenerationSettings(max_new_tokens=rec.max_new_tokens)
    configs = [CompareConfig("plain", PLAIN, 0)] + [CompareConfig(r.label, r.source, r.draft_max, dict(r.options))
                                                  for r in rows]
    results = [run_compare(scheduler, rec.prompt, configs, settings, keep_runs=(i == 0)) for i in range(repeats)]
    first = results[0]
    out = []
    for j, (row, real, gen) in enumerate(zip(rows, first.rows[1:], first.runs[1:]), start=1):
        same_output = tuple(real.generated_tokens) == rec.output
        same_windows = None
        if same_output and gen is not None:  # the real run's source had the stored cost model
            ctx = SourceContext(runtime, row_costs=stored_row_costs(scheduler.runtime), memory={})
            source = make_source(row.source, ctx, dict(row.options))
            windows, _plain, _ms = replay(source, rec, row.draft_max)
            same_windows = [(w.decode_step, w.proposal, w.accepted, w.committed) for w in windows] == [
                (r.decode_step, r.proposal_token_ids, r.accepted_proposal_tokens, r.canonical_prediction_count)
                for r in gen.receipts]
        speeds = [res.rows[j].summary.decode_tokens_per_s for res in results]
        plains = [res.rows[0].summary.decode_tokens_per_s for res in results]
        measured = [s for s in speeds if s]
        ratios = [s / p for s, p in zip(speeds, plains) if s and p]
        out.append(Verified(row, median(measured) if measured else None, median(ratios) if ratios else None,
                            same_output, same_windows, real.error, repeats=len(measured)))
    return out


def format_verified(verified: Sequence[Verified]) -> str:
    """Predicted beside measured, one line per configuration."""
    lines = [f"{'configuration':58} {'predicted':>9} {'measured':>9} {'ratio':>6} {'speedup':>8} windows"]
    for v in verified:
        measured = "error" if v.error else ("n/a" if v.measured_tokens_per_s is None else f"{v.measured_tokens_per_s:.1f}")
        ratio = "" if v.error_ratio is None else f"{v.error_ratio:.2f}"
        speed = "" if v.measured_speedup is None else f"{v.measured_speedup:.2f}x"
        windows = ("same as replayed" if v.same_windows else "differ from the replay") if v.same_windows is not None \
            else "n/a: the output differed from the recording"
        lines.append(f"{v.row.label[:58]:58} {v.row.tokens_per_s:>9.1f} {measured:>9} {ratio:>6} {speed:>8} {windows}")
    return "\n".join(lines)

