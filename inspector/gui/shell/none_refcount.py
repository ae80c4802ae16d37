"""Guard against a PySide6 reference-count bug that kills the process.

With PySide6 6.12 on Python 3.11 every call of a Qt method that returns
``void`` gives back ``None`` without taking a reference, so each such call
lowers ``None``'s reference count by one. ``None`` starts near 5,000
references, so after a few thousand widget updates CPython aborts with
"Fatal Python error: none_dealloc" (``True``/``False`` are drained the same
way through some bool paths: "bool_dealloc"). Python 3.12+ makes ``None`` immortal,
which hides the bug there.

``install()`` probes for the bug once and, only when it is present, adds a
large reserve of references to ``None``, ``True`` and ``False``; ``top_up()`` (called on the redraw
timer) refills the reserve if it ever runs low. Nothing happens on an
interpreter without the bug.
"""

from __future__ import annotations

import ctypes
import sys

RESERVE = 1 << 40
"""References added to ``None`` (about 10^12 leaked decrements before trouble)."""
LOW_WATER = 1 << 38

_active = False


def _probe() -> bool:
    """True when a ``void`` Qt call lowers ``None``'s reference count."""
    from PySide6.QtCore import QObject

    obj = QObject()
    before = sys.getrefcount(None)
    for _ in range(64):
        obj.setObjectName("probe")
    return sys.getrefcount(None) <= before - 32


GUARDED = (None, True, False)
"""Singletons the bug can drain (``True``/``False`` through bool results and overrides)."""


def _add(n: int) -> None:
    # CPython object header: ob_refcnt (Py_ssize_t) is the first field.
    for obj in GUARDED:
        ctypes.c_ssize_t.from_address(id(obj)).value += n


def install() -> bool:
    """Probe for the bug and add the reserve if needed. Returns whether the guard is active."""
    global _active
    if _active:
        return True
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 12):
        return False
    if _probe():
        _add(RESERVE)
        _active = True
    return _active


def top_up() -> None:
    """Refill the reserve when it ran low (cheap; call it periodically)."""
    if _active and min(sys.getrefcount(o) for o in GUARDED) < LOW_WATER:
        _add(RESERVE)
