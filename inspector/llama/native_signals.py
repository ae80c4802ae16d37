"""Signals that arrive while llama.cpp calls back into Python (its log lines, the load progress).

A Python signal handler runs in the main thread at the next Python instruction, and while a model
loads that instruction is inside one of llama.cpp's ctypes callbacks: a handler that raises there
(Ctrl-C's ``KeyboardInterrupt``, the command line's ``Interrupted``) raises inside the callback,
where ctypes prints "Exception ignored on calling ctypes callback function", drops the exception
and llama.cpp goes on (issue 37, 10: the run went on to its end with exit status 0).

``signals_deferred()`` wraps such a call: inside it, a signal whose handler is a Python function
is only noted (``Deferred.signum``); the load's progress callback asks ``stop_requested()`` and
returns False (llama.cpp's way to cancel a load); when the block ends, the noted signal is raised
again, so its own handler runs outside any callback and raises as it would have.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s)

_noted: list[int] = []
"""The signals noted inside a ``signals_deferred`` block, in order (the first is raised again)."""


class Deferred:
    """What ``signals_deferred`` yields: ``signum``, the first signal noted so far (None: none)."""

    @property
    def signum(self) -> int | None:
        return _noted[0] if _noted else None


def stop_requested() -> bool:
    """True when a signal was noted inside ``signals_deferred``: llama.cpp's work should stop."""
    return bool(_noted)


def _note(signum, _frame) -> None:
    _noted.append(int(signum))


@contextmanager
def signals_deferred():
    """Note SIGINT, SIGTERM and SIGHUP inside the block instead of running their Python handlers
    (in the main thread; other threads never run signal handlers), then raise the first one noted
    again when the block ends: its handler runs then, outside llama.cpp's callbacks. A handler that
    is not a Python function (ignored, the default) is left as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield Deferred()
        return
    old = {}
    for s in SIGNALS:
        handler = signal.getsignal(s)
        if callable(handler) and handler is not _note:
            old[s] = handler
            signal.signal(s, _note)
    try:
        yield Deferred()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if old and _noted:
            signum = _noted[0]
            _noted.clear()
            signal.raise_signal(signum)  # its own handler, now outside the callbacks
