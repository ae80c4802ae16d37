"""Ctrl-C while the command line is still starting (issue 37, 10).

The ``spec-inspector`` command spends its first ~0.4 s importing numpy and llama.cpp before its own
interrupt handlers (``inspector.cli.interrupt``) are installed; Python's default handler raised
``KeyboardInterrupt`` there, a traceback through the imports. ``quiet_start()`` runs first, from
``inspector/__init__``, and only when this process is the command line (``spec-inspector`` or
``python -m inspector``): SIGINT, SIGTERM and SIGHUP (where still at their defaults) then end the
process with one line and 128 + the signal's number, as an interrupt later does. The command's own
handlers replace these; ``default_signals()`` gives the window Python's defaults back.
"""

from __future__ import annotations

import os
import signal
import sys

_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s)


def _defaults() -> dict:
    return {s: signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL for s in _SIGNALS}


def _interrupted_at_start(signum, _frame):
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    sys.stderr.write(f"spec-inspector: error: interrupted ({name}); nothing was written\n")
    raise SystemExit(128 + signum)  # not an exception with a traceback; nothing has run yet


def is_command_line() -> bool:
    """True when this process is the ``spec-inspector`` command: its script, or ``python -m inspector``
    (``sys.argv[0]`` is "-m" while Python imports the package to find ``__main__``)."""
    argv0 = sys.argv[0] if sys.argv else ""
    return argv0 == "-m" or os.path.basename(argv0) == "spec-inspector"


def quiet_start() -> None:
    """In the command line's process: SIGINT, SIGTERM and SIGHUP left at their defaults end it with
    one line and 128 + the signal's number until the command installs its own handlers."""
    if not is_command_line():
        return
    for s, default in _defaults().items():
        try:
            if signal.getsignal(s) == default:
                signal.signal(s, _interrupted_at_start)
        except (ValueError, OSError):  # not the main thread
            pass


def default_signals() -> None:
    """Python's own handlers again where ``quiet_start`` set its own (the window handles Ctrl-C as
    Python does)."""
    for s, default in _defaults().items():
        try:
            if signal.getsignal(s) is _interrupted_at_start:
                signal.signal(s, default)
        except (ValueError, OSError):
            pass
