"""Standard output that cannot cost a command its files (issue 37).

A command's printed text is a view; its files (receipts, autosave, ``--json``) are the work. So a
standard output that fails, a reader that left (``| head``: EPIPE), a full disk (``> /dev/full``:
ENOSPC) or a closed one (``>&-``), never stops the command: ``guard_stdout`` puts a ``GuardedOutput``
in ``sys.stdout``, which keeps the first failure, points file descriptor 1 at ``/dev/null`` (so no
later write, and no flush at exit, fails again) and lets the command go on to write its files.
``stdout_status`` then decides the end: a reader that left is what pipes do, said nothing and the
exit status is the command's own (``spec-inspector view r.json | head`` exits 0, as before); any
other failure is one line on stderr after the files are written, and exit status 1 when the command
had succeeded (as ``ls > /dev/full`` fails). A closed standard output has file descriptor 1 taken by
``/dev/null`` at once, so no file the command opens later can take its place and receive its text.
"""

from __future__ import annotations

import errno
import os
import sys


class GuardedOutput:
    """``sys.stdout`` for a command: writes go to ``stream``; the first ``OSError`` is kept in
    ``failure`` and silences the rest (file descriptor ``fd`` then goes to ``/dev/null``)."""

    def __init__(self, stream, failure: OSError | None = None) -> None:
        self.stream = stream
        self.failure = failure
        self.previous = None
        """The ``sys.stdout`` this one replaced (``guard_stdout``)."""

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as exc:
            self._failed(exc)
            return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as exc:
            self._failed(exc)

    def __getattr__(self, name):  # encoding, isatty, fileno, buffer, ...: the stream's
        return getattr(self.stream, name)

    def _failed(self, exc: OSError) -> None:
        if self.failure is None:
            self.failure = exc
        try:
            fd = self.stream.fileno()
        except (OSError, ValueError, AttributeError):  # not a file descriptor (a test's capture)
            return
        _to_devnull(fd)
        try:
            self.stream.flush()  # what the failed write left in the buffer goes to /dev/null now
        except (OSError, ValueError):
            pass


def _to_devnull(fd: int) -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def guard_stdout() -> GuardedOutput:
    """Put a ``GuardedOutput`` in ``sys.stdout`` (restore the old one with ``restore_stdout``). A standard
    output closed when the process started (Python's ``sys.stdout`` is None) counts as failed (EBADF)
    from the start, and file descriptor 1 is held by ``/dev/null`` when nothing holds it."""
    stream = sys.stdout
    failure = None
    if stream is None:
        if not _fd_open(1):
            _to_devnull(1)
        stream = open(os.devnull, "w", encoding="utf-8")
        failure = OSError(errno.EBADF, "it is closed")
    guarded = GuardedOutput(stream, failure)
    guarded.previous = sys.stdout
    sys.stdout = guarded
    return guarded


def restore_stdout(guarded: GuardedOutput) -> None:
    """Flush ``guarded`` and put back the ``sys.stdout`` it replaced."""
    guarded.flush()
    if sys.stdout is guarded:
        sys.stdout = guarded.previous


def stdout_status(guarded: GuardedOutput, status: int) -> int:
    """The exit status of a command that returned ``status`` with ``guarded`` as its standard output:
    ``status`` when printing never failed or its reader left (EPIPE); else one line on stderr saying
    what was lost, and 1 when ``status`` was 0."""
    guarded.flush()
    exc = guarded.failure
    if exc is None or exc.errno == errno.EPIPE:
        return status
    reason = exc.strerror or str(exc)
    print(f"spec-inspector: error: cannot write to standard output ({reason}): the printed text is incomplete; "
          "the command's files are written as usual", file=sys.stderr)
    return status or 1
