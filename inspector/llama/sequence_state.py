"""One KV sequence's state as bytes, and back: what llama-server's prompt cache keeps in host memory.

llama.cpp 0c1e570 ``tools/server/server-context.cpp`` (``server_slot::prompt_save`` / ``prompt_load``)
copies a slot's sequence out with ``llama_state_seq_get_size_ext`` / ``llama_state_seq_get_data_ext`` and
back into any sequence with ``llama_state_seq_set_data_ext`` (flags 0: the whole sequence, host memory);
``inspector.serve.prompt_cache`` keeps the bytes. Restoring replaces what the destination sequence held.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from inspector.engine.errors import EngineError

WHOLE_SEQUENCE = 0
"""``LLAMA_STATE_SEQ_FLAGS_NONE``: every cell of the sequence, copied through host memory."""


class SequenceState:
    """Saves and restores the KV sequences of the llama.cpp context ``ctx``. Not thread-safe: the runtime's
    callers hold the scheduler lock."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx

    def save(self, sid: int) -> np.ndarray:
        """Sequence ``sid``'s KV state: a uint8 array of llama.cpp's bytes (an empty sequence's header
        only, as llama.cpp writes it), written in place: no zeroing before and no copy after, each a pass
        over megabytes while holding the interpreter lock (serve's other slots wait for it). Raises
        ``EngineError`` when llama.cpp writes fewer bytes than it sized."""
        size = int(llama_cpp.llama_state_seq_get_size_ext(self.ctx, sid, WHOLE_SEQUENCE))
        buf = np.empty(size, dtype=np.uint8)
        written = int(llama_cpp.llama_state_seq_get_data_ext(self.ctx, _pointer(buf), size, sid, WHOLE_SEQUENCE))
        if written != size:
            raise EngineError(f"llama.cpp saved {written} of {size} bytes of KV sequence {sid}")
        return buf

    def restore(self, sid: int, data) -> None:
        """Put ``data`` (``save``'s array of any sequence of this context, or the same bytes) into sequence
        ``sid``, replacing what it held. Raises ``EngineError`` when llama.cpp does not read it whole (no room
        in the KV cache, another model's state): the sequence is then emptied."""
        buf = np.frombuffer(data, dtype=np.uint8)  # a view: save's array or bytes, never copied
        read = int(llama_cpp.llama_state_seq_set_data_ext(self.ctx, _pointer(buf), len(buf), sid, WHOLE_SEQUENCE))
        if read != len(buf):
            llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self.ctx), sid, -1, -1)
            raise EngineError(f"llama.cpp could not restore {len(buf)} bytes into KV sequence {sid} "
                              f"(read {read}): no room in the KV cache, or not this context's state")


def _pointer(buf: np.ndarray):
    """``buf``'s memory as the ``uint8_t *`` llama.cpp's state calls take (no copy)."""
    return buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
