"""Test scenarios that hold whatever the bundled model says (no tests here).

Greedy text differs between CPUs (llama.cpp's kernels differ, and a near-tie
flips), so a test must not assume the model's words: that it copies the
prompt (n-gram windows that accept), that it ends its turn at a given point
(or at all), that an n-gram proposal is rejected. The pieces here build each
situation from the run's own tokens instead:

- ``plain_reference``: the target's own plain greedy continuation, with the
  runner-up token of every step (a near-tie can only flip between the two).
- ``Follower``: a proposal source that proposes that continuation (so the
  window fully accepts) or puts a token into it that the target surely
  rejects (neither its prediction nor the runner-up), following a plan.
- ``wrong_token``: such a token.
- Runtime proxies that change the target's sampling in a scripted way:
  ``NoEndOfTurn`` (end-of-generation tokens banned, as an ``ignore_eos``
  logit bias: the run always reaches its length limit) and ``EndsTurnBy``
  (the model's end-of-turn token is the prediction at a given stream
  position, unless the model ended earlier by itself).
- ``assert_same_greedy_output``: two greedy streams of one prompt are equal, or the
  first difference is a near-tie that batch arithmetic may flip (the SPEC's
  allowance), reported with its margin.

Targets of faults (window N, token M) are picked from the receipts of an
uninterrupted run of the same configuration: a run is deterministic on one
machine, so the faulted run verifies the same windows up to the fault.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from inspector.engine.proposal import Proposal


# -- the model's own tokens -----------------------------------------------------

def end_of_turn(runtime) -> int:
    """The token the chat template ends a turn with (the first end-of-generation
    token of a templated prompt: ``<|im_end|>`` for the bundled model)."""
    return next(t for t in runtime.prompt_tokens("x") if runtime.is_eog(t))


def eog_ids(runtime) -> list[int]:
    """Every end-of-generation token id of the vocabulary (cached on the runtime object)."""
    cached = getattr(runtime, "_test_eog_ids", None)
    if cached is None:
        cached = [t for t in range(runtime.n_vocab) if runtime.is_eog(t)]
        try:
            runtime._test_eog_ids = cached
        except AttributeError:  # pragma: no cover
            pass
    return cached


def wrong_token(runtime, prediction: int, runner_up: int) -> int:
    """A token the target surely rejects where it predicts ``prediction`` with
    ``runner_up`` second: neither of them (a near-tie may swap the two, nothing
    else), and not an end-of-generation token."""
    n = runtime.n_vocab
    t = (prediction + 1) % n
    while t in (prediction, runner_up) or runtime.is_eog(t):
        t = (t + 1) % n
    return t


def plain_reference(scheduler, tokens: Sequence[int], max_new: int) -> tuple[list[int], list[int]]:
    """The target's plain greedy continuation of ``tokens`` (the first token from the prefill's
    last row, then one row per decode, as plain decoding does) and the runner-up of every step:
    (predictions, runner-ups). Stops after an end-of-generation token, ``max_new`` tokens or a
    full context. One scheduler operation on a temporary session."""
    tokens = list(tokens)

    def op(rt):
        sid = rt.open_session(None)
        try:
            out: list[int] = []
            second: list[int] = []
            cur, pos = None, len(tokens) - 1  # pos: where the row that predicts the next token sits
            while len(out) < max_new and pos < rt.n_ctx:
                if cur is None:
                    pred = int(rt.prefill_predict(sid, tokens, 0))
                else:
                    pred = int(rt.decode_rows(sid, (cur,), pos)[0])
                row = np.array(rt.row_logits(-1), dtype=np.float32)
                row[pred] = -np.inf
                out.append(pred)
                second.append(int(np.argmax(row)))
                if rt.is_eog(pred):
                    break
                cur, pos = pred, pos + 1
            return out, second
        finally:
            rt.drop_session(sid)

    return scheduler.execute("reference", -1, op).value


# -- a proposal source that follows the target -------------------------------------

ACCEPT = None
"""Plan entry helper: ``(k, ACCEPT)`` proposes k tokens of the target's own continuation."""


class Follower:
    """Proposes the target's own plain greedy continuation, following ``plan``.

    ``plan``: entries used in turn, one per query (then from the start again):
    ``(k, None)`` proposes the next k tokens of the continuation (the window
    fully accepts, unless a near-tie flips under batch arithmetic); ``(k, j)``
    the same with index j replaced by ``wrong_token`` (a first mismatch at j
    for sure, with rows after it that are branch-conditioned); ``None``: no
    proposal (a plain step).
    ``tail``: tokens proposed after the continuation's end-of-generation token
    when a proposal reaches it (tokens that must never leak).
    The continuation is computed with ``plain_reference`` on ``scheduler`` (a
    temporary session; ``horizon`` tokens at a time): for ``prompt`` (the
    request's prompt tokens) when the source is made, so the first queries
    answer at once (a query has a deadline), and again whenever the stream
    leaves it, so a flipped near-tie only moves the plan along.
    Deterministic: two runs of one configuration verify the same windows.
    """

    name = "follow"

    def __init__(self, scheduler, plan=((4, None),), tail: Sequence[int] = (), horizon: int = 80,
                 prompt: Sequence[int] | None = None) -> None:
        self.scheduler = scheduler
        self.runtime = scheduler.runtime
        self.plan = list(plan)
        self.tail = tuple(tail)
        self.horizon = horizon
        self.queries = 0
        self.references = 0
        self._base: list[int] | None = None
        self._ref: list[int] = []
        self._second: list[int] = []
        self.reported: list = []
        self.discarded: list[tuple[bytes, str]] = []
        if prompt is not None:
            self.continuation(prompt)

    def settings(self) -> dict:
        return {"plan": [list(p) if p is not None else None for p in self.plan], "tail": list(self.tail)}

    def continuation(self, tokens: Sequence[int]) -> tuple[list[int], list[int]]:
        """The target's continuation after ``tokens`` and its runner-ups."""
        tokens = list(tokens)
        base = self._base
        if base is not None and len(tokens) >= len(base) and tokens[: len(base)] == base:
            done = tokens[len(base):]
            if len(done) < len(self._ref) and self._ref[: len(done)] == done:
                return self._ref[len(done):], self._second[len(done):]
            if self._ref and len(done) == len(self._ref) and self.runtime.is_eog(self._ref[-1]):
                return [], []  # the stream ended with the continuation's end of turn
        self._ref, self._second = plain_reference(self.scheduler, tokens, self.horizon)
        self._base = tokens
        self.references += 1
        return list(self._ref), list(self._second)

    def propose(self, request) -> Proposal | None:
        entry = self.plan[self.queries % len(self.plan)]
        self.queries += 1
        if entry is None:
            return None
        k, wrong_at = entry
        ref, second = self.continuation(request.tokens)
        if not ref:
            return None
        ids = list(ref[:k])
        if len(ids) == len(ref) and self.runtime.is_eog(ref[-1]):
            ids.extend(self.tail)
        if wrong_at is not None and wrong_at < len(ids) and wrong_at < len(ref):
            ids[wrong_at] = wrong_token(self.runtime, ref[wrong_at], second[wrong_at])
        ids = ids[: request.max_proposal_tokens]
        if not ids:
            return None
        return Proposal(b"follow:%d" % self.queries, tuple(ids))

    def report(self, receipt) -> None:
        self.reported.append(receipt)

    def discard(self, decision_id: bytes, reason: str) -> None:
        self.discarded.append((decision_id, reason))


ALTERNATE = ((4, None), (4, 1))
"""A plan with both dispositions: a full accept of 4 tokens, then a first mismatch at index 1."""


def spoil_first_proposal(source, scheduler, prompt_tokens: Sequence[int]) -> None:
    """Make ``source``'s proposal at the first query (right after the prompt and the first
    generated token, which the prefill's last row predicts: llama.cpp's schedule) start with
    a token the target surely rejects: window 1 is a first mismatch whatever the model
    says (e.g. a draft model that would agree with the target). The rest of the proposal
    and of the source are untouched; a source that proposes nothing there is left alone."""
    import dataclasses

    pred, second = plain_reference(scheduler, prompt_tokens, 2)
    wrong = wrong_token(scheduler.runtime, pred[1], second[1]) if len(pred) == 2 else None
    inner = source.propose
    first = [True]

    def propose(request):
        nonlocal wrong
        p = inner(request)
        at_first = len(request.tokens) == len(prompt_tokens) + 1  # the prompt and the prefill's token
        if first[0] and at_first and p is not None:
            first[0] = False
            if list(request.tokens[-1:]) != pred[:1] or wrong is None:  # the first token was another
                nxt, runner_up = plain_reference(scheduler, request.tokens, 1)
                wrong = wrong_token(scheduler.runtime, nxt[0], runner_up[0])
            source.spoiled_token = wrong
            return dataclasses.replace(p, token_ids=(wrong,) + tuple(p.token_ids[1:]))
        first[0] = first[0] and at_first
        return p

    source.propose = propose
    source.spoiled_token = wrong


# -- the target's sampling, scripted ----------------------------------------------------

class RuntimeProxy:
    """The real runtime, with ``adjust(predictions, position)`` applied to every
    ``decode_rows`` result (row i predicts stream position ``position + i + 1``) and to
    ``prefill_predict``'s (the first generated token: its one row, the prefill's last, predicts
    stream position ``position + len(tokens)``; ``last_row``: its logits are row -1)."""

    def __init__(self, runtime) -> None:
        self._rt = runtime

    def __getattr__(self, name):
        return getattr(self._rt, name)

    def decode_rows(self, sid, tokens, position, abort=None):
        preds = list(self._rt.decode_rows(sid, tokens, position, abort))
        return self.adjust(preds, position)

    def decode_tree(self, sid, tokens, parents, position, abort=None):
        preds = list(self._rt.decode_tree(sid, tokens, parents, position, abort))
        return self.adjust_tree(preds, parents, position)

    def adjust_tree(self, preds: list[int], parents, position: int) -> list[int]:
        """``adjust`` for a tree's rows (``decode_tree``); row i sits at ``position`` + its depth. By
        default ``adjust`` itself, which must then not depend on the rows' positions."""
        return self.adjust(preds, position)

    def prefill_predict(self, sid, tokens, position):
        pred = int(self._rt.prefill_predict(sid, tokens, position))
        return self.adjust([pred], position + len(tokens) - 1, last_row=True)[0]

    def adjust(self, preds: list[int], position: int, last_row: bool = False) -> list[int]:  # pragma: no cover
        return preds


class NoEndOfTurn(RuntimeProxy):
    """The target with every end-of-generation token banned (greedy sampling with an
    ``ignore_eos`` logit bias): where the model would end its turn it says its best
    other token, so a run always goes on to its length limit (or a full context)."""

    def adjust(self, preds, position, last_row=False):
        for i, p in enumerate(preds):
            if self._rt.is_eog(p):
                row = np.array(self._rt.row_logits(-1 if last_row else i), dtype=np.float32)
                row[eog_ids(self._rt)] = -np.inf
                preds[i] = int(np.argmax(row))
        return preds


class EndsTurnBy(RuntimeProxy):
    """The target whose prediction for stream position ``position`` is the model's
    end-of-turn token: its answer ends there at the latest (earlier if the model
    ends it by itself). Plain and speculative runs of one prompt see the same target."""

    def __init__(self, runtime, position: int) -> None:
        super().__init__(runtime)
        self.position = position
        self.end_of_turn = end_of_turn(runtime)

    def adjust(self, preds, position, last_row=False):
        i = self.position - position - 1
        if 0 <= i < len(preds):
            preds[i] = self.end_of_turn
        return preds

    def adjust_tree(self, preds, parents, position):
        from inspector.engine.tree import depths

        for i, d in enumerate(depths(parents)):
            if position + d + 1 == self.position:
                preds[i] = self.end_of_turn
        return preds


# -- comparing greedy streams ------------------------------------------------------------

def assert_same_greedy_output(scheduler, prompt_tokens: Sequence[int], expected: Sequence[int],
                              observed: Sequence[int]) -> None:
    """Assert that two greedy streams of ``prompt_tokens`` are equal, or first differ at a near-tie
    (top-2 margin below 1 logit: batch arithmetic may flip it, the SPEC's allowance; printed)."""
    from inspector.engine.baseline import find_divergence

    d = find_divergence(scheduler, prompt_tokens, list(expected), list(observed))
    if d is not None:
        print("near-tie divergence:", d.describe())
        assert d.margin < 1.0, f"the outputs differ where the target was sure: {d.describe()}"


def first_window(receipts, *, disposition: str | None = None, at_least: int = 1, from_window: int = 1) -> int:
    """The index of the first receipt from ``from_window`` on that committed at least
    ``at_least`` tokens (and has ``disposition``, if given)."""
    for r in receipts:
        if r.window_index >= from_window and r.canonical_prediction_count >= at_least and \
                (disposition is None or r.disposition == disposition):
            return r.window_index
    raise AssertionError(f"no window from {from_window} committed {at_least} tokens"
                         + (f" as {disposition}" if disposition else "") + ": "
                         + str([(r.window_index, r.disposition, r.canonical_prediction_count) for r in receipts]))


def run_resuming_after_each_error(g, max_errors: int = 1) -> list:
    """Run ``g`` to its end, resuming after each ``EngineError``; return the errors. After each
    one, checks what SPEC promises of a failed window: its events read verify, commit..., repair,
    error (a discard aside), and the KV length is the canonical position (None when a failed
    repair retired the session). At most ``max_errors`` errors."""
    from inspector.engine.errors import EngineError, RepairFailed

    errors = []
    while not g.finished:
        try:
            g.run()
        except EngineError as exc:
            errors.append(exc)
            window = g.events[-2].window if g.events[-1].kind == "discard" else g.events[-1].window
            seq = [e.kind for e in g.events if e.window == window and e.kind != "discard"]
            assert seq[0] == "verify" and seq[-2:] == ["repair", "error"], seq
            assert set(seq[1:-2]) <= {"commit"}
            if isinstance(exc, RepairFailed):
                assert g.session_retired and g.kv_length() is None
            else:
                assert g.kv_length() == g.canonical_position
            g.resume()
        assert len(errors) <= max_errors
    return errors
