"""The open sessions of one llama.cpp context: each one's sampler chain, and what its rows' predictions need.

A session is a KV-cache sequence (``seq_id``). ``SessionTable`` keeps, per open session, its
llama.cpp sampler chain (built here from ``SamplingSettings``: top-k, top-p, min-p, temperature,
dist, as llama.cpp's chain; greedy: ``llama_sampler_init_greedy``), whether it is greedy (the
runtime then takes each row's argmax in numpy), and for a session with penalties its tokens by
position, so each row can be penalized with the tokens before it (``inspector.engine.penalties``).
The chain has no penalties stage: they are applied to the logits in place before the chain reads
them, which is what llama.cpp's penalties stage at the head of the chain does.
"""

from __future__ import annotations

from typing import Sequence

import llama_cpp
import numpy as np

from inspector.engine.errors import EngineError
from inspector.engine.penalties import penalize_rows
from inspector.engine.settings import SamplingSettings
from inspector.llama.grammar import SessionConstraint


def make_chain(s: SamplingSettings):
    """A llama.cpp sampler chain for ``s`` (without penalties, module docstring); the caller frees it
    with ``llama_sampler_free``."""
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    if s.greedy:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
        return chain
    if s.top_k > 0:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_k(s.top_k))
    if 0.0 < s.top_p < 1.0:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_top_p(s.top_p, 1))
    if 0.0 < s.min_p < 1.0:
        llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_min_p(s.min_p, 1))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_temp(s.temperature))
    llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_dist(s.seed & 0xFFFFFFFF))
    return chain


class SessionTable:
    """Open sessions by id (0 .. ``n_seq_max`` - 1) of the context whose memory is ``mem`` (each session
    is the KV sequence of its id). Not thread-safe: the runtime's callers hold the scheduler lock."""

    def __init__(self, n_seq_max: int, mem=None) -> None:
        self.n_seq_max = n_seq_max
        self.mem = mem
        self._chains: dict[int, object] = {}
        self._greedy: set[int] = set()
        self._penalized: dict[int, SamplingSettings] = {}
        self._sequences: dict[int, list[int]] = {}
        self.constraints: dict[int, SessionConstraint] = {}
        """Sessions with a grammar or a logit bias (``inspector.llama.grammar``)."""

    def free_id(self) -> int | None:
        """The lowest session id not in use, or None when all ``n_seq_max`` are."""
        return next((sid for sid in range(self.n_seq_max) if sid not in self._chains), None)

    def open(self, sid: int, sampling: SamplingSettings) -> None:
        """Make ``sid`` an open session with a new chain for ``sampling`` (an empty token record)."""
        self._chains[sid] = make_chain(sampling)
        if sampling.greedy:
            self._greedy.add(sid)
        if sampling.penalized:
            self._penalized[sid] = sampling
            self._sequences[sid] = []

    def open_free(self, sampling: SamplingSettings) -> int:
        """Open the lowest free id with an emptied KV sequence and a chain for ``sampling``; return it.
        Raises ``EngineError`` when all ``n_seq_max`` are in use."""
        sid = self.free_id()
        if sid is None:
            raise EngineError(f"no free session: all {self.n_seq_max} KV sequences are in use")
        llama_cpp.llama_memory_seq_rm(self.mem, sid, -1, -1)
        self.open(sid, sampling)
        return sid

    def reopen_keeping(self, sid: int, sampling: SamplingSettings, kept: int, tokens: Sequence[int]) -> None:
        """Keep positions ``0 .. kept - 1`` of ``sid``'s sequence (``tokens[:kept]``), remove the rest and
        give it a new chain for ``sampling``; opens ``sid`` (from an empty sequence) when it is not open.
        Raises ``EngineError`` for an id out of range or a partial removal llama.cpp cannot do."""
        if not 0 <= sid < self.n_seq_max:
            raise EngineError(f"session {sid} is out of range 0..{self.n_seq_max - 1}")
        if not self.is_open(sid):
            kept = 0
            llama_cpp.llama_memory_seq_rm(self.mem, sid, -1, -1)
        elif not llama_cpp.llama_memory_seq_rm(self.mem, sid, kept, -1):
            raise EngineError(f"session {sid}: llama.cpp cannot remove positions >= {kept} of this cache")
        self.reopen(sid, sampling, list(tokens[:kept]))

    def reopen(self, sid: int, sampling: SamplingSettings, kept: Sequence[int]) -> None:
        """Give the open session ``sid`` a new chain for ``sampling``, its KV cache holding ``kept`` (the
        tokens at positions 0..; a served slot's prompt cache between requests)."""
        self.drop(sid)
        self.open(sid, sampling)
        self.filled(sid, kept, 0)

    def drop(self, sid: int) -> None:
        """Forget ``sid`` and free its chain (nothing for an id not open)."""
        chain = self._chains.pop(sid, None)
        self._greedy.discard(sid)
        constraint = self.constraints.pop(sid, None)
        if constraint is not None:
            constraint.close()
        self._penalized.pop(sid, None)
        self._sequences.pop(sid, None)
        if chain is not None:
            llama_cpp.llama_sampler_free(chain)

    def ids(self) -> list[int]:
        """The ids in use."""
        return list(self._chains)

    def is_open(self, sid: int) -> bool:
        """Whether session ``sid`` is open (has a sampler chain)."""
        return sid in self._chains

    def grammar_rejection(self, sid: int) -> int | None:
        """The proposal index the grammar forbade at session ``sid``'s last verification stop, or None (no
        grammar, or it forbade nothing)."""
        c = self.constraints.get(sid)
        return None if c is None else c.last_rejection

    def is_greedy(self, sid: int) -> bool:
        return sid in self._greedy

    def has_penalties(self, sid: int) -> bool:
        return sid in self._penalized

    def chain(self, sid: int):
        """``sid``'s llama.cpp sampler chain (a ``KeyError`` for an id not open)."""
        return self._chains[sid]

    def filled(self, sid: int, tokens: Sequence[int], position: int) -> None:
        """Record that ``tokens`` now hold positions ``position ..`` of ``sid`` (later ones are gone),
        for a session with penalties; nothing otherwise."""
        sequence = self._sequences.get(sid)
        if sequence is not None:
            del sequence[position:]
            sequence.extend([-1] * (position - len(sequence)))  # a gap stays unknown (-1), never penalized
            sequence.extend(tokens)

    def constrain(self, sid: int, constraint: "SessionConstraint | None", known: Sequence[int] = ()) -> None:
        """Give the open session ``sid`` ``constraint`` (None: none); ``known``: the tokens its KV cache holds at
        positions 0.. now (its token record starts from them). Frees a previous constraint."""
        old = self.constraints.pop(sid, None)
        if old is not None:
            old.close()
        if constraint is not None:
            self.constraints[sid] = constraint
            if sid not in self._sequences:
                self._sequences[sid] = list(known)
        elif sid not in self._penalized:
            self._sequences.pop(sid, None)

    def sequence(self, sid: int) -> list[int]:
        """``sid``'s tokens by position (a session with penalties or constraints; -1 for an unknown one)."""
        return self._sequences[sid]

    def trimmed(self, sid: int, position: int) -> None:
        """Record that positions >= ``position`` of ``sid`` were removed."""
        sequence = self._sequences.get(sid)
        if sequence is not None:
            del sequence[position:]

    def penalize(self, sid: int, rows: np.ndarray, position: int) -> bool:
        """Apply ``sid``'s penalties in place to ``rows`` (shape (n, n_vocab), float32), the rows of
        positions ``position ..``; returns False (rows untouched) for a session without penalties."""
        sampling = self._penalized.get(sid)
        if sampling is None:
            return False
        penalize_rows(rows, self._sequences[sid], position, sampling)
        return True
