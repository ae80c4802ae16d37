"""Reading the last decode's logits of a llama.cpp context as numpy arrays, without copies.

``LogitsReader.rows(n)``: every row of a batch whose rows all had their logits flag set, one view of
llama.cpp's buffer (``llama_get_logits``, through the raw function of ``inspector.llama.native`` so no
ctypes conversion runs per call); ``row(i)``: one output row (``llama_get_logits_ith``, negative from the
end); ``top2(i)``: its top token, runner-up and their logit margin. Views are valid until the next decode.

In the batched schedule (``inspector.engine.step_batch``) one decode holds several sessions' rows:
``window`` points the reader at one session's rows (its first output row, that row's batch index, its
rows with logits), so ``rows``, ``row`` and ``batch_index`` read that session's rows as if they were the
whole batch; ``window(0, 0, 0)`` (after a decode of one session) reads the whole batch.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from inspector.engine.errors import EngineError
from inspector.llama.native import raw_logits_function

_get_logits_address = raw_logits_function()
_ON_DEVICE = ("the last decode's logits stayed in llama.cpp's graph (backend sampling, -bs): this needs them on the "
              "host; run without -bs")


class LogitsReader:
    """The logits of context ``ctx`` (``n_vocab`` per row)."""

    def __init__(self, ctx, n_vocab: int) -> None:
        self.ctx = ctx
        self.n_vocab = n_vocab
        self._views: dict[tuple[int, int], np.ndarray] = {}
        self._address = 0
        self.first = 0
        self.batch_first = 0
        self.count = 0
        self.on_device = False
        """True when the last decode's rows were sampled in llama.cpp's graph (backend sampling,
        ``inspector.llama.graph_figures``): llama.cpp copied no logits, so every read here raises."""

    def window(self, first: int, batch_first: int, count: int) -> None:
        """Read output rows ``first .. first + count - 1`` (the first at batch index ``batch_first``) as
        rows 0.. (module docstring); ``count`` 0: the whole last decode."""
        self.first, self.batch_first, self.count = first, batch_first, count

    def batch_index(self, row: int) -> int:
        """The batch index of row ``row`` of the window (negative: from its end), for llama.cpp calls that
        take one (``llama_get_logits_ith``, ``llama_sampler_sample``)."""
        if not self.count:
            return row
        return self.batch_first + (row if row >= 0 else self.count + row)

    def rows(self, n: int) -> np.ndarray:
        """The last decode's logits as a (n, n_vocab) float32 view of llama.cpp's buffer, valid until the next
        decode (copy what you keep); every one of the n rows must have had its logits flag set. Raises
        ``EngineError`` when llama.cpp has none."""
        if self.on_device:
            raise EngineError(_ON_DEVICE)
        if _get_logits_address is None:  # pragma: no cover
            return np.ctypeslib.as_array(llama_cpp.llama_get_logits(self.ctx), shape=(n, self.n_vocab))
        addr = _get_logits_address(self.ctx)
        if not addr:
            raise EngineError("llama.cpp returned no logits for the last decode")
        if addr != self._address:  # llama.cpp moved its output buffer (it grew): views of the old one go
            self._views.clear()
            self._address = addr
        key = (self.first, n)
        view = self._views.get(key)
        if view is None:
            # Kept per row count while the buffer stays put: building a view costs ~25 us right after a
            # decode (cold caches), a dict lookup ~1 us.
            buffer = (ctypes.c_float * (n * self.n_vocab)).from_address(addr + 4 * self.first * self.n_vocab)
            view = self._views[key] = np.frombuffer(buffer, dtype=np.float32).reshape(n, self.n_vocab)
        return view

    def predictions(self, n: int, chain=None) -> list[int]:
        """The prediction of each of the last decode's ``n`` rows (all with logits, in batch order): greedy, the
        argmax of every row at once (the same choice as ``llama_sampler_init_greedy``, lower id on a tie,
        without n C sampler calls); else ``llama_sampler_sample`` with ``chain`` (a session's sampler chain)
        on each row. Raises ``EngineError`` when llama.cpp has no logits."""
        if chain is None:
            return self.rows(n).argmax(axis=1).tolist()
        sample, ctx, at = llama_cpp.llama_sampler_sample, self.ctx, self.batch_index
        return [sample(chain, ctx, at(i)) for i in range(n)]

    def row(self, row: int) -> np.ndarray:
        """Logits of output ``row`` of the last decode (n_vocab float32 values, a view). Raises
        ``EngineError`` when the row has none."""
        if self.on_device:
            raise EngineError(_ON_DEVICE)
        ptr = llama_cpp.llama_get_logits_ith(self.ctx, self.batch_index(row))
        if not ptr:
            raise EngineError(f"no logits for row {row} of the last decode")
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def top2(self, row: int) -> tuple[int, int, float]:
        """(top token, second token, logit margin) of output ``row`` of the last decode."""
        arr = self.row(row)
        i2 = np.argpartition(arr, -2)[-2:]
        a, b = (int(i2[0]), int(i2[1])) if arr[i2[0]] >= arr[i2[1]] else (int(i2[1]), int(i2[0]))
        return a, b, float(arr[a] - arr[b])
