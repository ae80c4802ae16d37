"""The window executor: SPEC steps 3-8 for one proposal on one session.

``execute_window`` verifies a proposal, classifies it, runs the commit loop,
repairs the KV cache and builds the receipt. Any error of steps 6-7 (a
cancellation, a failing token callback) is raised only after repair ran, so
the observable order is verify -> commits -> repair -> error.

The runtime it drives (through ``RuntimeScheduler``) needs: ``kv_length(s)``,
``decode_rows(s, tokens, position, abort)`` (one batch, a prediction per row;
``decode_logits`` with the same arguments for the ``rejection`` rule),
``row_probabilities(n, proposed, predictions, sampling)`` (the last batch's first n rows'
figures, ``inspector.engine.probabilities``; only when ``WindowContext.probabilities``, and only for the
judged rows, ``judged_rows``),
``trim(s, position) -> bool``, ``retire_checkpoint(s, start, count)``,
``drop_session(s)`` and ``is_eog(token)``; for tree proposals (``inspector.engine.tree``) also
``decode_tree(s, tokens, parents, position, abort)`` and ``keep_branch(s, branch, position)``.

A tree window verifies every node in one batch, walks the tree with the rows' predictions, keeps the
branch through the last accepted node in the session (the rest of the tree leaves the KV cache in the
same lock acquisition) and from there on is the chain window of that branch: its receipt's fields
describe the branch, and ``tree`` holds the whole tree.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from time import perf_counter_ns
from typing import Callable, Sequence

import numpy as np

from inspector.engine import faults as F
from inspector.engine.classify import STOPPED, classify_window, window_disposition
from inspector.engine.errors import (
    DecodeAborted,
    NothingCommitted,
    PositionMismatch,
    RepairFailed,
    RequestCancelled,
)
from inspector.engine.faults import FaultPlan
from inspector.engine.probabilities import summarise_rows
from inspector.engine.proposal import Proposal
from inspector.engine.records import REPAIR, VERIFY, PartialWindow, TreeReceipt, WindowReceipt
from inspector.engine.sampling import GREEDY, REJECTION, SAMPLE_MATCH, rejection_predictions
from inspector.engine.scheduler import RuntimeScheduler
from inspector.engine.settings import SamplingSettings
from inspector.engine.tree import walk_tree

CommitCallback = Callable[[int, int, int], bool]
"""``(token, row, base_position) -> stop``: commits the prediction of verification
row ``row`` (its stream position is base_position + row + 1); True asks to stop; may raise."""


def judged_rows(proposal: Sequence[int], predictions: Sequence[int]) -> int:
    """How many verification rows judged a proposal token that could be committed: every row through the
    first whose prediction differs from the proposal token it judged (that row gives the correction), all
    of them (bonus row included) when none differs. The rows after a mismatch judged tokens that follow a
    rejected one (``inspector.engine.probability_stats``: never judged); their probability figures are not
    computed (a rejected 17-row window cost 17 rows of figures, ~3 ms, for 1-3 rows that mattered)."""
    for i, (token, predicted) in enumerate(zip(proposal, predictions)):
        if token != predicted:
            return i + 1
    return len(predictions)


@dataclass(slots=True)
class WindowTrace:
    """What a window did so far; the caller reads it when the window raises."""

    base_position: int = 0
    position_after_verification: int | None = None
    predictions: tuple[int, ...] = ()
    tree: TreeReceipt | None = None
    """A tree window's whole tree, once verified (what Step token draws before the receipt exists)."""
    committed: list[int] = field(default_factory=list)
    session_retired: bool = False
    repaired: bool = False
    grammar_rejected_row: int | None = None
    """The proposal index (0-based) the grammar forbade where verification stopped, or None."""

    @property
    def branch(self) -> tuple[int, ...] | None:
        """A tree window's kept branch (its tokens), once verified: ``predictions`` are its rows'."""
        tree = self.tree
        return None if tree is None else tuple(tree.node_token_ids[r - 1] for r in tree.branch_rows)

    def as_recorded(self, proposal: Proposal) -> Proposal:
        """``proposal`` as a failed window's discard records it: a tree verified before the error as the
        branch it kept (the rows ``partial`` describes)."""
        return proposal if self.branch is None else replace(proposal, token_ids=self.branch, parents=None)

    def partial(self, window_index: int, base: int) -> PartialWindow:
        """What is known of window ``window_index`` (based at KV position ``base``) after it raised."""
        return PartialWindow(window_index, base, self.position_after_verification, base + len(self.committed),
                             tuple(self.committed), self.predictions, self.session_retired)


@dataclass(slots=True)
class WindowContext:
    """Per-request things every window needs.

    ``emit(kind, window, token, row, position, detail)`` records an event.
    ``before_commit(window, row, token, position)`` runs before each commit
    token (the GUI's step-token pause); it may block.
    """

    scheduler: RuntimeScheduler
    session_id: int
    request_id: int
    cancel: threading.Event
    faults: FaultPlan
    emit: Callable[..., None]
    before_commit: Callable[[int, int, int, int], None] | None = None
    sampling: SamplingSettings | None = None
    verification: str = SAMPLE_MATCH
    rng: np.random.Generator | None = None
    """Random numbers of the ``rejection`` rule (seeded from the sampling seed)."""
    probabilities: bool = True
    """Summarise each judged verification row's probabilities (``inspector.engine.probabilities``, ``judged_rows``)."""
    grammar: bool = False
    """The session samples under a grammar (``inspector.engine.constraints``): rows are sampled one by one
    (no ``rejection`` rule) and the runtime says which proposal token the grammar forbade."""
    top_probabilities: int = 5
    """How many most likely tokens each row's figures keep."""

    def rule_for(self, proposal: Proposal) -> str:
        """The verification rule this proposal gets (``inspector.engine.sampling``)."""
        if self.sampling is None or self.sampling.greedy:
            return GREEDY
        if (self.verification == REJECTION and proposal.draft_probabilities is not None and not proposal.is_tree
                and not self.grammar):
            return REJECTION
        return SAMPLE_MATCH


def _us(ns: int) -> int:
    return ns // 1000


def execute_window(
    ctx: WindowContext,
    trace: WindowTrace,
    *,
    window_index: int,
    decode_step: int,
    source_name: str,
    current: int,
    proposal: Proposal,
    base_position: int,
    generated: int,
    max_new_tokens: int,
    on_commit: CommitCallback,
    proposal_elapsed_us: int,
    started_ns: int,
) -> WindowReceipt | None:
    """Verify, classify, commit, repair and record one proposal window.

    Positions are KV lengths (tokens). Returns the receipt, or None when the
    session's KV length is not ``base_position`` at verification (SPEC step 3:
    the caller discards with ``position_mismatch``; nothing was decoded).

    Raises, always after repair: ``RequestCancelled``; whatever ``on_commit``
    raised; ``RepairFailed`` / ``PositionMismatch`` when the KV cache could not
    be made canonical (the session is then dropped: ``trace.session_retired``);
    ``NothingCommitted``; ``DecodeFailed`` from verification.
    """
    sched = ctx.scheduler
    sid = ctx.session_id
    tokens = proposal.token_ids
    rows = (current, *tokens)
    n_rows = len(rows)
    trace.base_position = base_position
    cancel = ctx.cancel
    if cancel.is_set():
        raise RequestCancelled()

    if ctx.faults and ctx.faults.take(F.POSITION_DRIFT, window_index):
        # Someone else decoded into this session: the KV gets one extra token.
        sched.execute(
            "drift", sid, lambda rt: rt.decode_rows(sid, (current,), rt.kv_length(sid), None)
        )

    # SPEC steps 3-4: position check and verification, one lock acquisition.
    t_verify = perf_counter_ns()

    rule = ctx.rule_for(proposal)

    is_tree = proposal.is_tree

    def verify_tree(rt):
        # One batch of every node; then only the kept branch stays in the session (same lock hold).
        row_predictions = rt.decode_tree(sid, rows, proposal.parents, base_position, cancel)
        walk = walk_tree(tokens, proposal.parents, row_predictions)
        rt.keep_branch(sid, walk.branch, base_position)
        branch = (0, *walk.branch_rows)
        predictions = [row_predictions[r] for r in branch]
        probs = None
        if ctx.probabilities:
            probs = rt.row_probabilities(len(rows), [tokens[r - 1] for r in walk.branch_rows], predictions,
                                         ctx.sampling, rows=branch, top=ctx.top_probabilities)
        tree = TreeReceipt(tokens, tuple(proposal.parents), tuple(row_predictions), walk.branch_rows)
        return predictions, rt.kv_length(sid), probs, tree

    def verify(rt):
        if rt.kv_length(sid) != base_position:
            return None
        if is_tree:
            return verify_tree(rt)
        probs = None
        if rule == REJECTION:
            logits = rt.decode_logits(sid, rows, base_position, cancel)
            predictions = rejection_predictions(logits, tokens, proposal.draft_probabilities, ctx.sampling, ctx.rng)
            if ctx.probabilities:
                judged = judged_rows(tokens, predictions)
                probs = summarise_rows(logits[:judged], tokens[:judged], predictions[:judged], ctx.sampling,
                                       top=ctx.top_probabilities)
        else:
            predictions = rt.decode_rows(sid, rows, base_position, cancel)
            if ctx.probabilities:  # from the same batch's logits, still under the lock
                judged = judged_rows(tokens, predictions)
                probs = rt.row_probabilities(judged, tokens[:judged], predictions[:judged], ctx.sampling,
                                             top=ctx.top_probabilities)  # the batch's first rows
            if ctx.grammar:
                trace.grammar_rejected_row = rt.grammar_rejection(sid)
        return predictions, rt.kv_length(sid), probs, None

    try:
        timed = sched.execute("verify", sid, verify)
    except DecodeAborted:
        repair_to(ctx, trace, base_position, window_index, "after aborted verification")
        raise RequestCancelled() from None
    if timed.value is None:
        return None
    predictions, after, probabilities, tree = timed.value
    if tree is not None:  # from here on, the chain window of the kept branch
        trace.tree = tree
        tokens = trace.branch
        n_rows = 1 + len(tokens)
    elif probabilities is not None and proposal.draft_token_probabilities is not None:
        probabilities = probabilities.with_draft_q(proposal.draft_token_probabilities)
    trace.predictions = tuple(predictions)
    trace.position_after_verification = after
    lock_wait, lock_hold, acquires = timed.wait_us, timed.hold_us, 1
    expected_after = base_position + n_rows
    if after != expected_after:
        # State unknown: no repair is attempted (SPEC step 4).
        raise PositionMismatch("verification", after, expected_after)
    ctx.emit(VERIFY, window_index, None, None, after,
             f"{n_rows} rows" if tree is None else f"{tree.rows} rows, a tree; kept a branch of {n_rows}")

    # SPEC step 5.
    decision = classify_window(tokens, predictions, generated, max_new_tokens, sched.runtime.is_eog)
    verification_us = _us(perf_counter_ns() - t_verify)

    # SPEC step 6: commit loop.
    committed = trace.committed
    reached_stop = False
    error: BaseException | None = None
    faults = ctx.faults
    before = ctx.before_commit
    for row in range(decision.commit_count):
        token = predictions[row]
        if before is not None:
            before(window_index, row, token, base_position + row + 1)
        if faults and faults.take(F.CANCEL, window_index, row + 1):
            cancel.set()
        if cancel.is_set():
            error = RequestCancelled()
            break
        committed.append(token)
        try:
            if on_commit(token, row, base_position):
                reached_stop = True
                break
        except Exception as exc:  # the consumer's error, raised after repair
            error = exc
            break

    # SPEC step 7: repair, always, before any remembered error.
    canonical = base_position + len(committed)
    t_repair = perf_counter_ns()
    if canonical >= after:
        kind = "retire"
        r = sched.execute(kind, sid, lambda rt: rt.retire_checkpoint(sid, base_position, n_rows))
        trace.repaired = True
        ctx.emit(REPAIR, window_index, None, None, canonical, "retire")
    else:
        kind = "trim"
        r = repair_to(ctx, trace, canonical, window_index, "")
    repair_us = _us(perf_counter_ns() - t_repair)
    lock_wait += r.wait_us
    lock_hold += r.hold_us
    acquires += 1
    if error is not None:
        raise error
    if not committed:
        raise NothingCommitted("window committed no target token")

    # SPEC step 8.
    n_committed = len(committed)
    disposition = window_disposition(decision, len(tokens), n_committed, reached_stop)
    return WindowReceipt(
        request_id=ctx.request_id,
        session_id=sid,
        window_index=window_index,
        decode_step=decode_step,
        decision_id=proposal.decision_id.hex(),
        source=source_name,
        disposition=disposition,
        proposal_token_ids=tokens,
        proposal_token_count=len(tokens),
        verification_rows=n_rows,
        accepted_proposal_tokens=min(decision.accepted, n_committed),
        generated_token_count=generated + n_committed,
        canonical_prediction_count=n_committed,
        committed_tokens=tuple(committed),
        verification_row_predictions=tuple(predictions),
        correction_or_boundary_token=None if disposition == STOPPED else committed[-1],
        base_position=base_position,
        position_after_verification=after,
        canonical_position=canonical,
        trimmed_rows=after - canonical,
        proposal_elapsed_us=proposal_elapsed_us,
        verification_elapsed_us=verification_us,
        repair_elapsed_us=repair_us,
        total_elapsed_us=_us(perf_counter_ns() - started_ns),
        runtime_lock_wait_us=lock_wait,
        runtime_lock_hold_us=lock_hold,
        runtime_lock_acquires=acquires,
        repair=kind,
        verification_rule=rule,
        probabilities=probabilities,
        tree=tree,
        grammar_rejected_row=trace.grammar_rejected_row,
    )


def repair_to(ctx: WindowContext, trace: WindowTrace, canonical: int, window: int | None, why: str):
    """Trim the session to ``canonical`` (SPEC step 7); return the lock timing.

    On a failed trim (llama.cpp returned false, or an injected
    ``trim_failure``) or a KV length other than ``canonical`` afterwards, the
    session is dropped and ``RepairFailed`` / ``PositionMismatch`` is raised.
    """
    sid = ctx.session_id
    injected = bool(ctx.faults) and ctx.faults.take(F.TRIM_FAILURE, window) is not None

    def trim(rt):
        ok = False if injected else rt.trim(sid, canonical)
        if not ok:
            rt.drop_session(sid)
            return ("failed", None)
        observed = rt.kv_length(sid)
        if observed != canonical:
            rt.drop_session(sid)
            return ("mismatch", observed)
        return ("ok", observed)

    r = ctx.scheduler.execute("trim", sid, trim)
    status, observed = r.value
    if status != "ok":
        trace.session_retired = True
        ctx.emit(REPAIR, window, None, None, None, "trim failed; session retired")
        if status == "failed":
            cause = "injected trim failure" if injected else "llama_memory_seq_rm returned false"
            raise RepairFailed(
                f"repair failed and the session was retired: trim of session {sid} "
                f"to position {canonical} failed ({cause})"
            )
        raise PositionMismatch("repair", observed, canonical)
    trace.repaired = True
    ctx.emit(REPAIR, window, None, None, canonical, ("trim " + why).strip())
    return r
