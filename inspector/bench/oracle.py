"""The copy oracle: the best any lookup source could do on a recorded greedy run (issue 41, part 3).

Every model-free source we have and llama.cpp has (``ngram``, the ``ngram-*`` family, ``suffix``) proposes
what followed an earlier occurrence of the context's end: a key of at least the current token, then a
continuation copied from the context (or from a memory of earlier requests, which in a conversation the
prompt holds too). The oracle knows the recorded output and, at every decode step, takes the occurrence
whose continuation matches it longest: the longest run of the true output that, after the current
token, occurs earlier in the context. So no such source can propose a longer correct run at that step.

It proposes what pays on the cost model, planned over the whole output: the verify time to finish from
each position is the least over the lengths L the copied run allows (0 = a plain step) of
``c(L + 1) + time from the position L + 1 tokens on`` (dynamic programming from the end; the context at
a position is the committed stream, the same whatever was proposed before). A source's window that
proposes P tokens of which A are accepted costs c(P + 1) >= c(A + 1) and commits A + 1 <= L + 1, so on a
c(k) that grows with k no source verifies the same output in less time (proposal time aside). Replayed
by ``tune.replay`` and priced by ``tune_turns.replay_turns`` like every source, it is a bound for
comparing sources on the same c(k), not a source a run can use (``CopyOracle`` is not in the registry).
"""

from __future__ import annotations

from typing import Sequence

from inspector.engine.proposal import Proposal, ProposalRequest, max_proposal_tokens

ORACLE_LABEL = "copy oracle"
"""How tables name the oracle's row."""


def copied_run_length(context: str, current: str, continuation: str) -> int:
    """How many leading tokens of ``continuation`` follow an occurrence of ``current`` earlier in
    ``context``: the largest L with ``current + continuation[:L]`` in ``context`` (0 when none follows).
    Token streams are strings of ``chr(token id)``, so the test is Python's substring search."""
    lo, hi = 0, len(continuation)
    if current + continuation[:1] not in context:
        return 0
    while lo < hi:  # a prefix of an occurring run occurs: the largest L by bisection
        mid = (lo + hi + 1) // 2
        if current + continuation[:mid] in context:
            lo = mid
        else:
            hi = mid - 1
    return lo


def oracle_plan(longest: Sequence[int], cost) -> list[int]:
    """The proposal length at each generated count g = 0..n-1 (``longest[g]``: the copied run allowed
    there, already capped) that finishes the n tokens in the least verify time: a window of L proposal
    tokens costs ``cost(L + 1)`` ms (``cost(1)``: a plain step) and moves g to ``min(n, g + L + 1)``.
    Ties go to the shorter proposal."""
    n = len(longest)
    time_from = [0.0] * (n + 1)
    plan = [0] * n
    for g in range(n - 1, -1, -1):
        best, best_ms = 0, cost(1) + time_from[g + 1]
        for length in range(1, longest[g] + 1):
            ms = cost(length + 1) + time_from[min(n, g + length + 1)]
            if ms < best_ms:
                best, best_ms = length, ms
        plan[g], time_from[g] = best, best_ms
    return plan


class CopyOracle:
    """The copy oracle over one recorded request ``rec`` (a ``tune.Recording``) at ``draft_max`` (module
    docstring); ``cost(k)``: verify cost of k rows in ms (``CostModel.cost``). Its plan is made at once."""

    def __init__(self, rec, cost, draft_max: int) -> None:
        prompt, output = list(rec.prompt), list(rec.output)
        stream = "".join(map(chr, prompt + output))
        longest = []
        for g in range(len(output)):  # g tokens generated: the context is the prompt and those
            base = len(prompt) + g - 1
            cap = max_proposal_tokens(rec.max_new_tokens - g, rec.n_batch, draft_max, rec.n_ctx - base)
            context = stream[:len(prompt) + g]
            run = stream[len(prompt) + g:len(prompt) + g + cap]
            longest.append(copied_run_length(context, context[-1], run) if g and run else 0)
        self.output = tuple(output)
        self.plan = oracle_plan(longest, cost)

    def propose(self, request: ProposalRequest) -> Proposal | None:
        """The planned prefix of the true continuation here, or None (a plain step)."""
        generated = len(request.tokens) - request.prompt_token_count
        length = min(self.plan[generated], request.max_proposal_tokens) if generated < len(self.plan) else 0
        if length == 0:
            return None
        return Proposal(b"oracle:%d" % generated, self.output[generated:generated + length])

    def report(self, _receipt) -> None:
        """The oracle learns nothing from a window."""
