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

``BatchDecoder`` is what the runtime uses: where the C extension ``inspector.llama.decode_worker`` is built
(pip install builds it; ``decode_worker.c``) the one thread is a native one that never enters Python, and a
decode is handed over with two pthread signals while the caller waits without the GIL: ~115 us a decode
through ``DecodeThread`` (its Python locks and two GIL handovers on a busy 2-core machine), ~45 us through the
worker (issue 53). Without the extension, ``DecodeThread`` does it.

The thread is the process's, not a context's: a draft model's context decodes on the same OS thread as its
target's (``shared_worker``, ``shared_thread``), as llama-server's loop decodes both. With a thread per context
the two contexts' OpenMP teams throttled each other (above): the draft source ran at 0.63-0.74x llama-server's
speed in ``bench --llama-server`` (40 against 62 tokens/s on copy-with-corrections), its other rows at ~1.0x.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Callable, TypeVar

import llama_cpp

from inspector.llama.native import library_function_address

try:
    from inspector.llama.decode_worker import DecodeWorker
except ImportError:  # pragma: no cover - built without a C compiler (pyproject's optional extension)
    DecodeWorker = None

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


_SHARED: dict[str, object] = {}


def shared_worker():
    """The process's one native ``DecodeWorker`` (made on first use, again after a ``close``): every context's
    decodes on one OS thread (module docstring). Raises ``RuntimeError`` when the extension is not built."""
    if DecodeWorker is None:
        raise RuntimeError("the native decode worker is not built (inspector/llama/decode_worker.c)")
    w = _SHARED.get("worker")
    if w is None or w.closed:
        w = _SHARED["worker"] = DecodeWorker(library_function_address("llama_decode"),
                                             library_function_address("llama_synchronize"))
    return w


def shared_thread() -> DecodeThread:
    """The process's one ``DecodeThread`` (without the native worker): every context's decodes on it."""
    t = _SHARED.get("thread")
    if t is None:
        t = _SHARED["thread"] = DecodeThread()
    return t


def _address(pointer) -> int:
    """A ctypes pointer or function as an int address (0 for NULL)."""
    return ctypes.cast(pointer, ctypes.c_void_p).value or 0


class BatchDecoder:
    """``llama_decode`` then ``llama_synchronize`` of context ``ctx`` (a ``llama_context`` pointer) on the process's
    one decode thread, whichever thread asks (module docstring): the native ``shared_worker`` where built (``native``
    None or True), else the ``shared_thread``. ``decode(batch)`` returns ``llama_decode``'s status; ``close()``
    ends this decoder (the shared thread goes on for the other contexts)."""

    def __init__(self, ctx, native: bool | None = None) -> None:
        self._ctx = ctx
        self.native = DecodeWorker is not None if native is None else native
        self._worker = None
        self._thread: DecodeThread | None = None
        self.closed = False
        if self.native:
            self._worker = shared_worker()
            self._ctx_address = _address(ctx)
        else:
            self._thread = shared_thread()

    def decode(self, batch) -> int:
        """Decode ``batch`` (a ``llama_cpp.llama_batch`` filled for this context) on the decode thread, waited
        for (on RPC or a GPU ``llama_decode`` returns before the work is done: LLAMA_CPP_NOTES). Raises
        ``RuntimeError`` after ``close``."""
        if self.closed:
            raise RuntimeError("this context's decoder is closed")
        if self._worker is not None:
            return self._worker.decode(self._ctx_address, ctypes.addressof(batch))
        return self._thread.call(lambda: self._decode_here(batch))

    def _decode_here(self, batch) -> int:
        rc = llama_cpp.llama_decode(self._ctx, batch)
        llama_cpp.llama_synchronize(self._ctx)
        return rc

    def close(self) -> None:
        """Take no more decodes of this context (idempotent); the shared thread goes on."""
        self.closed = True
