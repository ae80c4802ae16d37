"""Backend sampling (llama.cpp's ``-bs``): each session's figures sampler in llama.cpp's graph, and reading
what it left (issue 56).

``GraphFigures(ctx, k)`` gives a session (a KV sequence) of context ``ctx`` its own sampler chain holding one
``inspector.llama.figure_sampler`` sampler (``attach``), set with ``llama_set_sampler`` as llama-server sets a
slot's chain when its request samples on the backend (tools/server/server-context.cpp, llama.cpp 0c1e570).
From then on llama.cpp computes, for every output row of that sequence, the row's argmax and the figures' sums
inside the graph and copies only those to the host, not the row's logits (``needs_raw_logits``,
src/llama-context.cpp): ``predictions`` reads the argmax (``llama_get_sampled_token_ith``), ``rows`` the sums
(``llama_get_sampled_candidates_ith`` / ``_logits_ith``; ``inspector.engine.sampled_rows``). ``propose`` tells
the sampler each row's proposed token before the decode (its rank and probability are computed in the graph
too). ``figures`` turns a decode's rows into ``WindowProbabilities`` in C (``figure_sampler.figures``: the same
expressions as ``inspector.engine.sampled_rows.sampled_figures``, the pure reference it is tested against, without
Python's cost per row right after a decode). ``detach`` gives the sequence back to the host path (the chain is freed; llama.cpp aborts when a chain it
initialised is set again, so every ``attach`` makes a new one).

Only greedy sessions without a grammar, logit bias or penalties sample on the backend: their prediction is the
argmax, as llama-server's backend chain for them (``greedy``) picks. ``unavailable()`` says why the sampler
cannot run here ("" when it can).
"""

from __future__ import annotations

import ctypes
import os

import llama_cpp

from inspector.engine.errors import EngineError
from inspector.engine.probabilities import SOFTMAX, WindowProbabilities
from inspector.engine.sampled_rows import SampledRow, row_from_outputs

try:
    from inspector.llama import figure_sampler
except ImportError:  # pragma: no cover - built without a C compiler (pyproject's optional extension)
    figure_sampler = None

MAX_K = 64
"""Most candidates the sampler keeps per row (its ``MAX_K``): ``run -bs`` takes at most this many top tokens."""
_bound: list[str] = []


def unavailable() -> str:
    """Why the figures sampler cannot run in this install ("" when it can): the extension did not build, or
    llama.cpp's libraries lack a function it calls. Binds it on the first call."""
    if figure_sampler is None:
        return "the figures sampler (inspector/llama/figure_sampler.c) was not built with this install"
    if not _bound:
        lib = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
        try:
            figure_sampler.bind(os.path.join(lib, "libggml-base.so"), os.path.join(lib, "libllama.so"))
            _bound.append("")
        except RuntimeError as exc:
            _bound.append(str(exc))
    return _bound[0]


class GraphFigures:
    """The figures samplers of context ``ctx``'s sessions, each keeping ``k`` candidates a row (2..``MAX_K``).
    Raises ``EngineError`` when the sampler cannot run here (``unavailable``) or ``k`` is out of range."""

    def __init__(self, ctx, k: int) -> None:
        why = unavailable()
        if why:
            raise EngineError(f"backend sampling (-bs) is not available: {why}")
        if not 2 <= k <= MAX_K:
            raise EngineError(f"backend sampling keeps 2..{MAX_K} top tokens a row, observed {k}")
        self.ctx, self.k = ctx, k
        self._ctx_address = ctypes.cast(ctx, ctypes.c_void_p).value
        self.base = 0
        """Where the last decode's rows of the session start (the runtime sets it): row r is llama.cpp's index
        ``base + r``: the batch position of the session's first output row (the batched schedule's step), or minus
        its output rows when the decode was the session's alone (llama.cpp's negative indices count output rows
        from the last; its others are batch positions)."""
        self._chains: dict[int, tuple[object, int]] = {}

    def attach(self, sid: int) -> None:
        """Sample session ``sid``'s rows in the graph from its next decode (a new chain; idempotent). Raises
        ``EngineError`` when llama.cpp refuses the chain."""
        if sid in self._chains:
            return
        sampler = figure_sampler.new(self.k)
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        llama_cpp.llama_sampler_chain_add(chain, ctypes.cast(sampler, llama_cpp.llama_sampler_p_ctypes))
        if not llama_cpp.llama_set_sampler(self.ctx, sid, chain):
            llama_cpp.llama_set_sampler(self.ctx, sid, None)
            llama_cpp.llama_sampler_free(chain)
            raise EngineError("llama.cpp could not run the figures sampler on this model's output device")
        self._chains[sid] = (chain, sampler)

    def place(self, sid: int, wanted: bool, sessions) -> None:
        """Sample session ``sid`` in the graph when ``wanted`` and its sampling allows (greedy, no penalties, no
        grammar or logit bias: ``sessions``, an ``inspector.llama.sessions.SessionTable``), else on the host. A
        session that stays in the graph keeps its chain (setting one makes llama.cpp reserve its graph again at
        the next decode)."""
        if wanted and sessions.is_greedy(sid) and not sessions.has_penalties(sid) and sid not in sessions.constraints:
            self.attach(sid)
        else:
            self.detach(sid)

    def detach(self, sid: int) -> None:
        """Give session ``sid`` back to the host path and free its chain (nothing when it had none)."""
        entry = self._chains.pop(sid, None)
        if entry is not None:
            llama_cpp.llama_set_sampler(self.ctx, sid, None)
            llama_cpp.llama_sampler_free(entry[0])

    def on(self, sid: int) -> bool:
        """True when session ``sid``'s rows are sampled in the graph."""
        return sid in self._chains

    def propose(self, sid: int, proposed) -> None:
        """Each output row's proposed token for session ``sid``'s next decode (row i judges ``proposed[i]``;
        rows past the end have none)."""
        figure_sampler.set_proposed(self._chains[sid][1], proposed)

    def predictions(self, n: int) -> list[int]:
        """The argmax of each of the last decode's first ``n`` output rows, computed in the graph. Raises
        ``EngineError`` for a row the graph did not sample."""
        get, base = llama_cpp.llama_get_sampled_token_ith, self.base
        out = [get(self.ctx, base + i) for i in range(n)]
        if any(t < 0 for t in out):
            raise EngineError("llama.cpp sampled no token for a row of the last decode (backend sampling)")
        return out

    def figures(self, rows, proposed, predictions, top: int) -> WindowProbabilities:
        """The softmax figures of the last decode's output rows ``rows`` (0 = its first, in order; arguments as
        ``sampled_figures``), computed in C from what the graph left. Raises ``EngineError`` for a row without
        them, more top tokens than the sampler keeps, or a prediction outside the candidates."""
        try:
            cols = figure_sampler.figures(self._ctx_address, self.base, rows, proposed, predictions, top)
        except RuntimeError as exc:
            raise EngineError(str(exc)) from None
        p_prop, r_prop, p_pred, tokens, top_p, entropy, margin, ranks = cols
        return WindowProbabilities(SOFTMAX, p_prop, r_prop, p_pred, tokens, top_p, entropy, margin, None, ranks)

    def rows(self, rows) -> list[SampledRow]:
        """The figures' sums of the last decode's output rows ``rows`` (0 = its first output row, in order)."""
        ctx, out = self.ctx, []
        for i in (self.base + r for r in rows):
            cand = llama_cpp.llama_get_sampled_candidates_ith(ctx, i)
            vals = llama_cpp.llama_get_sampled_logits_ith(ctx, i)
            if not cand or not vals:
                raise EngineError(f"llama.cpp kept no figures for row {i} of the last decode (backend sampling)")
            n_cand = llama_cpp.llama_get_sampled_candidates_count_ith(ctx, i)
            out.append(row_from_outputs(cand[:n_cand], vals[:llama_cpp.llama_get_sampled_logits_count_ith(ctx, i)]))
        return out

    def close(self) -> None:
        """Detach every session (before the context is freed)."""
        for sid in list(self._chains):
            self.detach(sid)
