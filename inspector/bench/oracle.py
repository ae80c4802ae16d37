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
proposes P tokens of which A are accepted costs c(P + 1) and commits A + 1 <= L + 1; the plan prices a
window of A accepted at the least c(k) over k >= A + 1 rows (on a measured c(k) that dips, it pads its
proposal with rejected tokens to get there), so no source verifies the same output in less time
(proposal time aside). Replayed by ``tune.replay`` and priced by ``tune_turns.replay_turns`` like every
source, it is a bound for comparing sources on the same c(k), not a source a run can use (``CopyOracle``
is not in the registry).
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


def oracle_plan(longest: Sequence[int], cost, caps: Sequence[int] | None = None) -> list[tuple[int, int]]:
    """The window at each generated count g = 0..n-1 that finishes the n tokens in the least verify time:
    ``(L, rows)``, L accepted proposal tokens (``longest[g]`` at most: the copied run allowed there) in a
    batch of ``rows`` (L + 1, or more where a longer batch is cheaper on a measured c(k) that dips: the
    rows past L + 1 are proposal tokens that are rejected, so the window still commits L + 1), ``caps[g]``
    proposal tokens at most (default ``longest[g]``). ``cost(k)``: ms for k rows (``cost(1)``: a plain
    step, ``(0, 1)``); the window moves g to ``min(n, g + L + 1)``. Ties go to the shorter."""
    n = len(longest)
    caps = longest if caps is None else caps
    time_from = [0.0] * (n + 1)
    plan = [(0, 1)] * n
    for g in range(n - 1, -1, -1):
        top = max(caps[g], longest[g]) + 1
        cheapest = [0.0] * (top + 2)  # cheapest[k]: least cost(j) over k <= j <= top, and its j
        where = [0] * (top + 2)
        cheapest[top + 1] = float("inf")
        for k in range(top, 0, -1):
            c = cost(k)
            cheapest[k], where[k] = (c, k) if c < cheapest[k + 1] else (cheapest[k + 1], where[k + 1])
        best, best_ms = (0, where[1]), cheapest[1] + time_from[g + 1]
        for length in range(1, longest[g] + 1):
            ms = cheapest[length + 1] + time_from[min(n, g + length + 1)]
            if ms < best_ms:
                best, best_ms = (length, where[length + 1]), ms
        plan[g], time_from[g] = best, best_ms
    return plan


class CopyOracle:
    """The copy oracle over one recorded request ``rec`` (a ``tune.Recording``) at ``draft_max`` (module
    docstring); ``cost(k)``: verify cost of k rows in ms (``CostModel.cost``). Its plan is made at once."""

    def __init__(self, rec, cost, draft_max: int) -> None:
        prompt, output = list(rec.prompt), list(rec.output)
        stream = "".join(map(chr, prompt + output))
        longest, caps = [], []
        for g in range(len(output)):  # g tokens generated: the context is the prompt and those
            base = len(prompt) + g - 1
            cap = max_proposal_tokens(rec.max_new_tokens - g, rec.n_batch, draft_max, rec.n_ctx - base)
            context = stream[:len(prompt) + g]
            run = stream[len(prompt) + g:len(prompt) + g + cap]
            longest.append(copied_run_length(context, context[-1], run) if g and run else 0)
            caps.append(cap if g else 0)
        self.output = tuple(output)
        self.plan = oracle_plan(longest, cost, caps)

    def propose(self, request: ProposalRequest) -> Proposal | None:
        """The planned window here: the true continuation's planned prefix, then as many rejected tokens as
        the plan's rows ask (where c(k) dips); None for a plain step."""
        g = len(request.tokens) - request.prompt_token_count
        length, rows = self.plan[g] if g < len(self.plan) else (0, 1)
        rows = min(rows, request.max_proposal_tokens + 1)
        if rows <= 1:
            return None
        true = self.output[g:g + length]
        wrong = self.output[g + length] + 1 if g + length < len(self.output) else 0  # not the target's token
        return Proposal(b"oracle:%d" % g, true + (wrong,) * (rows - 1 - len(true)))

    def report(self, _receipt) -> None:
        """The oracle learns nothing from a window."""
