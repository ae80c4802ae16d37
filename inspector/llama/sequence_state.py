"""One KV sequence's state as bytes, and back: what llama-server's prompt cache keeps in host memory.

llama.cpp 0c1e570 ``tools/server/server-context.cpp`` (``server_slot::prompt_save`` / ``prompt_load``)
copies a slot's sequence out with ``llama_state_seq_get_size_ext`` / ``llama_state_seq_get_data_ext`` and
back into any sequence with ``llama_state_seq_set_data_ext`` (flags 0: the whole sequence, host memory);
``inspector.serve.prompt_cache`` keeps the bytes. Restoring replaces what the destination sequence held.
"""

from __future__ import annotations

import ctypes

import llama_cpp

from inspector.engine.errors import EngineError

WHOLE_SEQUENCE = 0
"""``LLAMA_STATE_SEQ_FLAGS_NONE``: every cell of the sequence, copied through host memory."""


class SequenceState:
    """Saves and restores the KV sequences of the llama.cpp context ``ctx``. Not thread-safe: the runtime's
    callers hold the scheduler lock."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx

    def save(self, sid: int) -> bytes:
        """Sequence ``sid``'s KV state (bytes; ``b""`` for an empty sequence's header only is still returned
        as llama.cpp writes it). Raises ``EngineError`` when llama.cpp writes fewer bytes than it sized."""
        size = int(llama_cpp.llama_state_seq_get_size_ext(self.ctx, sid, WHOLE_SEQUENCE))
        buf = (ctypes.c_uint8 * size)()
        written = int(llama_cpp.llama_state_seq_get_data_ext(self.ctx, buf, size, sid, WHOLE_SEQUENCE))
        if written != size:
            raise EngineError(f"llama.cpp saved {written} of {size} bytes of KV sequence {sid}")
        return bytes(buf)

    def restore(self, sid: int, data: bytes) -> None:
        """Put ``data`` (from ``save`` of any sequence of this context) into sequence ``sid``, replacing what it
        held. Raises ``EngineError`` when llama.cpp does not read it whole (no room in the KV cache, another
        model's state): the sequence is then emptied."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        read = int(llama_cpp.llama_state_seq_set_data_ext(self.ctx, buf, len(data), sid, WHOLE_SEQUENCE))
        if read != len(data):
            llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self.ctx), sid, -1, -1)
            raise EngineError(f"llama.cpp could not restore {len(data)} bytes into KV sequence {sid} "
                              f"(read {read}): no room in the KV cache, or not this context's state")
