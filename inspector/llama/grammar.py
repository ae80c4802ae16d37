"""A session's constraints in the runtime: logit bias and llama.cpp's grammar sampler (``Constraints``).

Where each rule comes from (llama.cpp 0c1e570, ``common/sampling.cpp``):

- the logit bias is the first stage of the sampler chain (``llama_sampler_init_logit_bias``), so it is
  added to the logits before the penalties (which this project applies in place, ``SessionTable.penalize``)
  and before every other stage; it is added here in place too, so the probability figures and the
  ``rejection`` rule read the biased logits, as llama.cpp's chain does;
- the grammar (``llama_sampler_init_grammar``) sits outside the chain: ``common_sampler_sample`` samples
  the chain, checks the token against the grammar alone and, when refused, samples again with the grammar
  applied first (``grammar_first`` false, as llama-server calls it). For greedy rows the result is the
  argmax over the tokens the grammar allows, which is what ``pick`` computes in numpy;
- ``common_sampler_sample_and_accept_n``: verification row i is sampled with the grammar in the state after
  the committed tokens and the proposal's first i tokens; the grammar accepts each sampled token; it stops at
  the first mismatch (and after an end-of-generation token). Rows after the stop are predicted without the
  grammar (nothing commits them; they are recorded as the receipt's row predictions).

The grammar's state follows the session's committed tokens exactly: ``GrammarState`` keeps a sampler in the
state after the tokens it accepted (``accepted``) and, before each prediction, brings it to the session's
generated tokens up to the predicting row (the KV record ``SessionTable.sequence``): tokens added are accepted
one by one; when the record no longer starts with ``accepted`` (a trim removed accepted tokens, a repair, a
cancellation) the sampler is reset and the record replayed. Each row is sampled on a clone
(``llama_sampler_clone``), so a verification never moves the committed state.

llama.cpp aborts the process when its grammar accepts a token it does not allow (``llama_grammar_accept_impl``
throws through the C API); every token is checked against the grammar (``allows``) before it is accepted.
"""

from __future__ import annotations

import ctypes
import math
from typing import Sequence

import llama_cpp
import numpy as np

from inspector.engine.constraints import Constraints
from inspector.engine.errors import EngineError
from inspector.llama.reasoning_gate import ReasoningGate

TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
"""``llama_token_data`` (id, logit, p) as a numpy record, so a row can be handed to a sampler without copies."""


class GrammarRefused(ValueError):
    """llama.cpp could not parse the grammar (``llama_sampler_init_grammar`` returned NULL: a syntax error,
    an undefined rule, left recursion, no ``root`` rule)."""


class TokenArray:
    """A ``llama_token_data_array`` over a numpy buffer of ``size`` records (``TOKEN_DATA``)."""

    def __init__(self, size: int) -> None:
        self.buf = np.zeros(size, TOKEN_DATA)
        self.buf["id"] = np.arange(size, dtype=np.int32)
        self.size = size
        self.c = llama_cpp.llama_token_data_array(
            data=self.buf.ctypes.data_as(llama_cpp.llama_token_data_p), size=size, selected=-1, sorted=False)

    def load(self, logits: np.ndarray) -> None:
        """Fill with one row of logits (ids 0..size-1, in order) and undo a previous sampler's reordering."""
        self.buf["id"] = np.arange(self.size, dtype=np.int32)
        self.buf["logit"] = logits
        self.buf["p"] = 0.0
        self.c.size, self.c.selected, self.c.sorted = self.size, -1, False

    def pointer(self):
        return ctypes.byref(self.c)


class GrammarState:
    """llama.cpp's grammar sampler for ``text`` (rule ``root``) over ``vocab`` (``n_vocab`` tokens); lazy, woken
    by the first of ``triggers`` (regular expressions) the generated text matches, when there are any.
    Raises ``GrammarRefused`` for a grammar llama.cpp does not parse."""

    def __init__(self, vocab, text: str, n_vocab: int, triggers: Sequence[str] = (), gate: Sequence = ()) -> None:
        self.gate = ReasoningGate(*gate) if gate else None
        """A lazy grammar's reasoning-block gate (``inspector.llama.reasoning_gate``), or None."""
        if triggers:
            patterns = (ctypes.c_char_p * len(triggers))(*(t.encode("utf-8") for t in triggers))
            self.sampler = llama_cpp.llama_sampler_init_grammar_lazy_patterns(
                vocab, text.encode("utf-8"), b"root", patterns, len(triggers), None, 0)
        else:
            self.sampler = llama_cpp.llama_sampler_init_grammar(vocab, text.encode("utf-8"), b"root")
        if not self.sampler:
            raise GrammarRefused("llama.cpp could not parse the grammar (GBNF; see its log line for the place)")
        self.accepted: list[int] = []
        """The generated tokens ``sampler`` has accepted, in order."""
        self._single = TokenArray(1)
        self._row = TokenArray(n_vocab)

    def close(self) -> None:
        if self.sampler:
            llama_cpp.llama_sampler_free(self.sampler)
            self.sampler = None

    def allows(self, sampler, token: int) -> bool:
        """Whether ``sampler``'s grammar allows ``token`` next (llama.cpp's single-token check of
        ``common_sampler_sample``: the token alone through ``llama_sampler_apply``)."""
        one = self._single
        one.buf[0] = (token, 1.0, 0.0)
        one.c.size, one.c.selected, one.c.sorted = 1, -1, False
        llama_cpp.llama_sampler_apply(sampler, one.pointer())
        return bool(one.buf[0]["logit"] != -math.inf)

    def accept(self, sampler, token: int) -> None:
        """``sampler`` accepts ``token``; ``EngineError`` (never an abort) when its grammar forbids it."""
        if token < 0 or not self.allows(sampler, token):  # -1: a position the session's record does not know
            raise EngineError(f"the grammar does not allow token {token} here")
        llama_cpp.llama_sampler_accept(sampler, token)

    def sync(self, generated: Sequence[int]) -> None:
        """Bring ``sampler`` to the state after ``generated`` (the committed generated tokens, in order)."""
        done = self.accepted
        k = len(done)
        if k > len(generated) or list(generated[:k]) != done:
            llama_cpp.llama_sampler_reset(self.sampler)
            if self.gate is not None:
                self.gate.reset()
            done.clear()
            k = 0
        for token in generated[k:]:
            self.feed(self.sampler, self.gate, token)
            done.append(token)

    def feed(self, sampler, gate, token: int) -> None:
        """``sampler`` takes one generated token behind ``gate`` (None: none): not while a reasoning block is
        open; the end marker's tokens when it closes (``common_sampler_accept``)."""
        if gate is None:
            self.accept(sampler, token)
            return
        applies = not gate.open
        if gate.advance(token) and not applies:
            for t in gate.end:  # the replay; a grammar that would refuse it is left as it is (llama.cpp throws)
                if self.allows(sampler, t):
                    llama_cpp.llama_sampler_accept(sampler, t)
        if applies:
            self.accept(sampler, token)

    def applies(self, gate) -> bool:
        """Whether the grammar constrains the next token (``grammar_should_apply``: not inside a block)."""
        return gate is None or not gate.open

    def masked(self, sampler, logits: np.ndarray) -> TokenArray:
        """``logits`` (one row) as a token array with ``sampler``'s grammar applied (refused tokens at -inf)."""
        row = self._row
        row.load(logits)
        llama_cpp.llama_sampler_apply(sampler, row.pointer())
        return row


class SessionConstraint:
    """One session's ``Constraints`` in the runtime. ``start``: the position of the first generated token
    (the grammar matches tokens from there on). Raises ``GrammarRefused``, ``ValueError`` for a bias token
    outside the vocabulary."""

    def __init__(self, constraints: Constraints, start: int, vocab, n_vocab: int) -> None:
        self.constraints = constraints
        self.start = start
        self.bias_ids = self.bias_values = None
        if constraints.logit_bias:
            summed: dict[int, float] = {}
            for token, bias in constraints.logit_bias:
                if token >= n_vocab:
                    raise ValueError(f"logit_bias token {token} is outside the vocabulary (0..{n_vocab - 1})")
                summed[token] = summed.get(token, 0.0) + bias  # llama.cpp adds every entry
            self.bias_ids = np.fromiter(summed, np.int64, len(summed))
            self.bias_values = np.fromiter(summed.values(), np.float32, len(summed))
        self.grammar = GrammarState(vocab, constraints.grammar, n_vocab, constraints.triggers,
                                    constraints.gate) if constraints.grammar else None
        self.last_rejection: int | None = None
        """The proposal index (0-based) the grammar forbade at the last verification's stop, or None."""

    def close(self) -> None:
        if self.grammar is not None:
            self.grammar.close()

    def bias(self, logits: np.ndarray) -> None:
        """Add the bias in place to ``logits`` (rows, n_vocab)."""
        if self.bias_ids is not None:
            logits[:, self.bias_ids] += self.bias_values

    def rows(self, rt, sid: int, tokens: Sequence[int] | None, position: int, n: int) -> list[int] | None:
        """After a decode of ``n`` rows with logits from ``position`` (``tokens``; None: a prefill's last row):
        bias, then the session's penalties, in place; then the grammar's predictions (``predict``), or None
        when there is no grammar (the runtime's own predictions then read the biased logits)."""
        self.bias(rt.last_logits(n))
        if rt.sessions.has_penalties(sid):
            rt.penalize_last_rows(sid, n, position)
        if self.grammar is None:
            return None
        return self.predict(rt, sid, tokens, position, n, range(n) if tokens is not None else (-1,))

    def logits_only(self, rt, sid: int, n: int, position: int) -> None:
        """For the ``rejection`` rule (its logits, no predictions): bias, then penalties, in place. Raises
        ``EngineError`` under a grammar (llama.cpp samples grammar rows one by one; the engine never asks)."""
        if self.grammar is not None:
            raise EngineError("the rejection rule takes no grammar (llama.cpp samples grammar rows one by one)")
        self.bias(rt.last_logits(n))
        if rt.sessions.has_penalties(sid):
            rt.penalize_last_rows(sid, n, position)

    def predict(self, rt, sid: int, tokens: Sequence[int] | None, position: int, n: int,
                row_index: Sequence[int]) -> list[int]:
        """Predictions of the last decode's ``n`` rows (logits biased and penalized already), row i at position
        ``position + i`` holding ``tokens[i]`` (``tokens`` None: one row, the prefill's last). ``row_index``:
        each row's index for ``llama_sampler_sample`` (``[-1]`` after a prefill). See the module docstring."""
        self.last_rejection = None
        g = self.grammar
        sequence = rt.sessions.sequence(sid)
        g.sync(sequence[self.start:position + 1] if position + 1 > self.start else ())
        logits = rt.last_logits(n)
        greedy = rt.sessions.is_greedy(sid)
        chain = None if greedy else rt.sessions.chain(sid)
        work = llama_cpp.llama_sampler_clone(g.sampler)
        gate = g.gate.copy() if g.gate is not None else None
        out: list[int] = []
        try:
            for i in range(n):
                if greedy:
                    token = int(logits[i].argmax())
                    if g.applies(gate) and not g.allows(work, token):
                        token = int(g.masked(work, logits[i]).buf["logit"].argmax())
                else:
                    token = int(llama_cpp.llama_sampler_sample(chain, rt.ctx, rt.logits.batch_index(row_index[i])))
                    if g.applies(gate) and not g.allows(work, token):  # resampled with the grammar first
                        arr = g.masked(work, logits[i])
                        llama_cpp.llama_sampler_apply(chain, arr.pointer())
                        token = int(arr.buf[arr.c.selected]["id"])
                out.append(token)
                if i + 1 == n:
                    break
                proposed = tokens[i + 1]
                if token != proposed or rt.is_eog(token):
                    if token != proposed and g.applies(gate) and not g.allows(work, proposed):
                        self.last_rejection = i
                    break
                g.feed(work, gate, token)
        finally:
            llama_cpp.llama_sampler_free(work)
        if len(out) < n:  # rows past the stop: nothing commits them; predicted without the grammar
            rest = logits[len(out):].argmax(axis=1).tolist() if greedy else [
                llama_cpp.llama_sampler_sample(chain, rt.ctx, rt.logits.batch_index(row_index[i]))
                for i in range(len(out), n)]
            out.extend(int(t) for t in rest)
        return out


def constrain_session(rt, sid: int, constraints: Constraints | None, start: int, known: Sequence[int]) -> None:
    """``LlamaRuntime.constrain``: give session ``sid`` ``constraints`` (None or empty: none), its generated
    tokens starting at position ``start``, its KV cache holding ``known`` at positions 0... Raises
    ``EngineError`` for a session not open, ``GrammarRefused`` / ``ValueError`` as ``SessionConstraint``."""
    if not rt.sessions.is_open(sid):
        raise EngineError(f"session {sid} is not open")
    c = None if constraints is None or constraints.empty else SessionConstraint(constraints, start, rt.vocab, rt.n_vocab)
    rt.sessions.constrain(sid, c, known)


def check_grammar(rt, text: str) -> bool:
    """Whether llama.cpp parses ``text`` as a grammar with a ``root`` rule on ``rt``'s vocabulary (a module-level
    function, so a ``RemoteRuntime`` runs it in its child with ``apply``)."""
    sampler = llama_cpp.llama_sampler_init_grammar(rt.vocab, text.encode("utf-8"), b"root")
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True
