"""Asking the proposal source (SPEC step 1) and validating its answer (step 2), for one decode step.

``query_source`` calls the source's ``propose`` with the step's ``ProposalRequest``, applies the
fault plan's proposal faults, times the source and validates what it returned. It records
nothing: the ``Generation`` turns its ``Answer`` into an error event or a discard.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from time import perf_counter, perf_counter_ns

from inspector.engine import faults as F
from inspector.engine.faults import FaultPlan
from inspector.engine.no_proposal import DISCARDED, NOT_SAID, SOURCE_ERROR, NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest, ProposalSource, validate_proposal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """What the source answered for one step.

    ``proposal``: a valid proposal, else None; ``elapsed_us``: the source's time (µs; 0 when it
    raised); ``why``: why there is no proposal (``inspector.engine.no_proposal``), "" with one;
    ``invalid``: the proposal that failed validation (to be discarded with ``why``'s reason) and
    ``reason``, its validation reason; ``error``: the source's exception message when it raised."""

    proposal: Proposal | None
    elapsed_us: int
    why: str
    invalid: Proposal | None = None
    reason: str = ""
    error: str | None = None


def query_source(source: ProposalSource, request: ProposalRequest, faults: FaultPlan, window_index: int,
                 current: int, n_vocab: int, max_branches: int = 1, chains_only: bool = False) -> Answer:
    """Ask ``source`` for a proposal for ``request`` (its ``max_proposal_tokens`` is the cap, its ``deadline_s`` a
    ``perf_counter`` time) and validate it. ``window_index``: the window it would open (proposal faults
    aim at it); ``current``: the current token; ``n_vocab``: the vocabulary size; ``max_branches``: the
    most branches a tree may have (the runtime's ``tree_branches``); ``chains_only``: a tree becomes its first
    branch (``Proposal.first_branch``: penalties read each row's own history, which a tree's rows do not
    share). Never raises for the
    source's failures: they are logged and answered as ``SOURCE_ERROR``."""
    t = perf_counter_ns()
    try:
        proposal = source.propose(request)
    except Exception as exc:
        log.exception("proposal source %s failed in propose()", source.name)
        return Answer(None, 0, f"{SOURCE_ERROR}: {type(exc).__name__}", error=f"proposal source failed: {exc}")
    why = NOT_SAID
    if isinstance(proposal, NoProposal):
        proposal, why = None, proposal.text()
    if faults:
        proposal = F.inject_proposal_fault(faults, proposal, window_index, request.max_proposal_tokens,
                                           request.deadline_s, current, n_vocab)
    answered = perf_counter()
    elapsed_us = (perf_counter_ns() - t) // 1000
    if proposal is None:
        return Answer(None, elapsed_us, why)
    reason = validate_proposal(proposal, request.max_proposal_tokens, n_vocab, answered, request.deadline_s,
                               max_branches)
    if reason is not None:
        return Answer(None, elapsed_us, f"{DISCARDED}: {reason}", invalid=proposal, reason=reason)
    if chains_only:
        proposal = proposal.first_branch()
    return Answer(proposal, elapsed_us, "")
