"""Aborting the decode in flight: llama.cpp's abort callback over one flag byte, per context.

``AbortSwitch`` sets the context's abort callback (``native.abort_callback``: libc's ``strlen`` over
``[flag, 0]``, so a decode never enters Python to ask). A decode runs between ``begin(sid,
abort)`` and ``end()``: while it runs, ``request(sid)`` from any thread sets the byte when that session owns
the decode, and the byte is cleared when the decode ends, so an abort requested as one decode
ends never aborts the next. ``read_flag(flag)`` makes llama.cpp read another process's byte
instead (``inspector.llama.remote``: the parent writes it in shared memory).
"""

from __future__ import annotations

import ctypes
import threading

import llama_cpp

from inspector.llama.native import abort_callback


class AbortSwitch:
    """The abort flag of llama.cpp context ``ctx`` (a ``llama_context`` pointer) and who owns it."""

    def __init__(self, ctx) -> None:
        self._ctx = ctx
        self._own_flag, self._callback = abort_callback()
        self._flag = self._own_flag
        self._owner: int | None = None
        self._lock = threading.Lock()
        """Guards ``_owner`` with the flag byte: an abort requested as a decode ends must not leave the
        flag set for the next decode (of any session)."""
        llama_cpp.llama_set_abort_callback(ctx, self._callback, ctypes.cast(self._flag, ctypes.c_void_p))

    def request(self, sid: int) -> None:
        """Abort the decode in flight if session ``sid`` owns it (any thread); else nothing. The caller sets its
        cancellation event first: a decode that starts later checks that event (``begin``), so none is lost."""
        with self._lock:
            if self._owner == sid:
                self._flag[0] = b"\x01"

    def begin(self, sid: int, abort: threading.Event | None) -> None:
        """One decode begins. With ``abort`` (the request's cancellation event), session ``sid`` owns it:
        ``request(sid)`` aborts it, and an event already set aborts it at once. Pair with ``end`` in a
        ``finally`` (a plain call pair: a ``contextmanager`` generator cost ~20 us per decode step)."""
        if abort is not None:
            with self._lock:
                self._owner = sid
                if abort.is_set():
                    self._flag[0] = b"\x01"

    def end(self) -> None:
        """The decode ended, however it ended: no owner, the flag cleared."""
        with self._lock:
            self._owner = None
            self._flag[0] = b"\x00"

    def read_flag(self, flag) -> None:
        """Make llama.cpp read ``flag`` (a writable 2-byte ctypes buffer, e.g. over shared memory another
        process sets) instead of this switch's own byte; None goes back to the own byte and keeps no view
        of the other (``SharedMemory.close`` refuses while one exists). Call between decodes."""
        self._flag = self._own_flag if flag is None else flag
        llama_cpp.llama_set_abort_callback(self._ctx, self._callback, ctypes.c_void_p(ctypes.addressof(self._flag)))
