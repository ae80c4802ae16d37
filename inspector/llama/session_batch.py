"""``SessionBatch``: the runtime's one ``llama_batch``, checked and filled with one session's rows.

The checks run before llama.cpp sees the batch: a batch past ``n_batch`` or the context, or a session that
is not open, would make llama.cpp abort the process (LLAMA_CPP_NOTES "Process-killing preconditions").
"""

from __future__ import annotations

from typing import Sequence

from inspector.engine.errors import EngineError


class SessionBatch:
    """``batch`` (a ``llama_cpp.llama_batch`` of ``n_batch`` rows), filled for the sessions of ``sessions``
    (``inspector.llama.sessions.SessionTable``, told which positions each fill covers) in a context of
    ``n_ctx`` positions."""

    def __init__(self, batch, sessions, n_batch: int, n_ctx: int) -> None:
        self.batch = batch
        self.sessions = sessions
        self.n_batch = n_batch
        self.n_ctx = n_ctx

    def check(self, sid: int, n: int, position: int, end: int) -> None:
        """Raise ``EngineError`` unless a batch of ``n`` rows from ``position`` whose last row sits at
        ``end - 1`` fits ``n_batch`` and the context, on an open session."""
        if n > self.n_batch:
            raise EngineError(f"batch of {n} rows exceeds n_batch {self.n_batch}")
        if end > self.n_ctx:
            raise EngineError(f"batch of {n} rows at position {position} exceeds the context: "
                              f"needs {end} positions, n_ctx is {self.n_ctx}")
        if not self.sessions.is_open(sid):
            raise EngineError(f"session {sid} is not open")

    def fill(self, sid: int, tokens: Sequence[int], position: int, all_logits: bool) -> None:
        """Put ``tokens`` at positions ``position ..`` of session ``sid`` into the batch (logits on every row
        with ``all_logits``, else on the last only), after ``check``. Raises as ``check``."""
        n = len(tokens)
        self.check(sid, n, position, position + n)
        self.sessions.filled(sid, tokens, position)
        b = self.batch
        tok, pos, nseq, seq, lg = b.token, b.pos, b.n_seq_id, b.seq_id, b.logits
        last = n - 1
        for i in range(n):
            tok[i] = tokens[i]
            pos[i] = position + i
            nseq[i] = 1
            seq[i][0] = sid
            lg[i] = 1 if all_logits or i == last else 0
        b.n_tokens = n
