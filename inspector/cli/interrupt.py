"""Interrupts of the command line (issue 25): SIGINT, SIGTERM and SIGHUP (a closed terminal) end a
command with one line and exit status 128 + the signal's number; an interrupted ``run`` first
writes the receipts of every complete window it has, marked ``ended_as: interrupted``.
"""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

from inspector.receipts import ReceiptsFileError, write_document
from inspector.session.document import record_document

INTERRUPT_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s)


class Interrupted(BaseException):
    """A signal asked the command to stop. A ``BaseException`` (as ``KeyboardInterrupt``), so the
    ``except Exception`` of error handling and resumption never swallows it."""

    def __init__(self, signum: int) -> None:
        self.signum = int(signum)
        super().__init__(self.name)

    @property
    def name(self) -> str:
        """The signal's name, e.g. ``SIGINT``."""
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    @property
    def status(self) -> int:
        """The exit status a shell gives a process the signal ended: 128 + its number (130, 143)."""
        return 128 + self.signum


def _raise(signum, _frame):
    raise Interrupted(signum)


def install_interrupt_handlers() -> None:
    """Make SIGINT, SIGTERM and SIGHUP raise ``Interrupted`` in the main thread (call once, from the
    main thread, before the command's work starts)."""
    for s in INTERRUPT_SIGNALS:
        try:
            signal.signal(s, _raise)
        except (ValueError, OSError):  # not the main thread, or a platform without it
            pass


@contextmanager
def signals_held():
    """Ignore the interrupt signals inside the block (a second Ctrl-C while the receipts of an
    interrupted run are written would lose them), then raise ``Interrupted`` handlers again."""
    old = {}
    for s in INTERRUPT_SIGNALS:
        try:
            old[s] = signal.signal(s, signal.SIG_IGN)
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def interrupted_line(exc: Interrupted, windows: int, written: str, autosave: str = "") -> str:
    """The one line an interrupted run ends with: the signal, the complete windows kept, where the
    receipts went (``written``: a path, or "" when no ``--receipts`` was given) and the autosave."""
    kept = f"receipts of {windows} complete window(s), marked unfinished (ended_as interrupted): {written}" \
        if written else "no --receipts OUT.json was given, so no receipts document was written"
    tail = f"; autosave: {autosave}" if autosave else ""
    return f"spec-inspector: interrupted ({exc.name}): {kept}{tail}"


def end_interrupted(run, exc: Interrupted) -> None:
    """End ``run`` (a ``SessionRun``) after an interrupt: its record gets ``ended_as: interrupted``,
    the autosave is closed without its end line (it reads as unfinished). Never raises: the
    runtime may be mid-operation, and what it holds is kept either way."""
    try:
        run.end("interrupted", clean=False)
    except Exception as err:  # e.g. the session cannot be dropped mid-decode: the records are kept
        print(f"spec-inspector: note: ending the interrupted run: {err}", file=sys.stderr)


def keep_interrupted_run(args, run, record, printer, exc: Interrupted) -> int:
    """After ``exc`` interrupted ``spec-inspector run``: end the run (``end_interrupted``; a run that
    had already ended keeps its own ending), write ``record``'s receipts to ``--receipts`` when given,
    and say in one line what was kept and where. Returns the exit status, ``exc.status``."""
    with signals_held():
        try:
            printer.newline()
        except OSError:
            pass
        if run.ended is None:
            end_interrupted(run, exc)
        if record.ended_as is None:
            record.ended_as = "interrupted"
        autosave = str(run.autosave.writer.path) if run.autosave is not None else ""
        written = ""
        if args.receipts:
            try:
                written = str(write_document(record_document(record), args.receipts))
            except (OSError, ReceiptsFileError, ValueError) as err:
                print(f"spec-inspector: interrupted ({exc.name}); cannot write receipts {args.receipts}: {err}"
                      + (f"; autosave: {autosave}" if autosave else ""), file=sys.stderr)
                return exc.status
        print(interrupted_line(exc, len(record.receipts), written, autosave), file=sys.stderr)
    return exc.status
