"""Every ``llama_decode`` of a context on ONE OS thread, as llama-server's single loop calls it.

Why: llama.cpp's CPU backend (built with OpenMP, as llama-cpp-python builds it) runs a decode on a thread
team that belongs to the calling OS thread. Each thread that ever decodes keeps its own team alive, and
once the teams' threads outnumber the cores, libgomp shortens how long a thread spins at a barrier before
it sleeps (its throttled spin count), so every one of a graph's hundreds of barriers may sleep and wake:
measured here (2 cores, the bundled model, 2 threads), a one-row decode took 17-20 ms from a second thread
against 14-16 ms from the first, and ``serve -np 2`` (each slot's thread decoding in turn) decoded 15-40%
slower than ``-np 1``. llama-server never sees this: one thread decodes for every slot. So here a decode
asked from any thread is handed to the runtime's one decode thread, which waits for it; the thread that
asked waits for the result (``DecodeThread.call``), so the caller's code is unchanged and the lock it
holds still orders the decodes.
"""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

T = TypeVar("T")


class _Call:
    __slots__ = ("fn", "value", "error", "done")

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.value: object = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class DecodeThread:
    """One daemon thread (``name``) that runs the functions ``call`` hands it, one at a time, in order.
    Started on the first call; ``close`` ends it (a later call starts it again)."""

    def __init__(self, name: str = "llama.cpp decode") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._pending: list[_Call] = []
        self._thread: threading.Thread | None = None
        self._closing = False

    @property
    def ident(self) -> int | None:
        """The decode thread's ``threading.get_ident()`` (None: not started)."""
        t = self._thread
        return t.ident if t is not None else None

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the decode thread and return its value (raising what it raised). Called on the
        decode thread itself, runs it at once. A signal's exception (``KeyboardInterrupt``) raised while
        waiting is raised once ``fn`` ended, as it would have been after a ``llama_decode`` on this thread."""
        if threading.get_ident() == self.ident:
            return fn()
        job = _Call(fn)
        with self._ready:
            if self._thread is None or not self._thread.is_alive():
                self._closing = False
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            self._pending.append(job)
            self._ready.notify()
        interrupted: BaseException | None = None
        while True:  # a signal (Ctrl-C) lands here once the decode ended: the caller holds the runtime's lock
            try:
                job.done.wait()
                break
            except BaseException as exc:  # noqa: BLE001 - raised again below
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted
        if job.error is not None:
            raise job.error
        return job.value  # type: ignore[return-value]

    def close(self, timeout_s: float = 5.0) -> None:
        """End the decode thread once the calls handed to it ran (idempotent)."""
        with self._ready:
            thread = self._thread
            self._closing = True
            self._ready.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def _loop(self) -> None:
        while True:
            with self._ready:
                while not self._pending and not self._closing:
                    self._ready.wait()
                if not self._pending:
                    self._thread = None
                    return
                job = self._pending.pop(0)
            try:
                job.value = job.fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                job.error = exc
            job.done.set()
