"""Files of a session: autosave (JSON Lines), crash recovery, receipts export.

Autosave: while a run goes, the worker appends one JSON line per receipt,
discard and plain step to ``<app data>/autosave/run-<time>.jsonl`` and
flushes it, so a crash loses at most the window in flight. The main window
records the file in QSettings and marks it clean when the run ends; an
unclean file is offered for opening on the next start.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, QStandardPaths, Signal

AUTOSAVE_KEEP = 20
"""Autosave files kept in the folder (older ones are deleted)."""


def app_data_dir() -> Path:
    """The per-user application data folder (QStandardPaths.AppDataLocation)."""
    loc = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.AppDataLocation)
    return Path(loc or Path.home() / ".spec-inspector")


class AutoSaveWriter:
    """Appends one flushed JSON line per record to a new file in ``folder``.

    Used on the worker thread only. Write errors disable the writer (the run
    goes on) and are kept in ``error``.
    """

    def __init__(self, folder: Path, header: dict) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self._prune(folder)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.path = folder / f"run-{stamp}-{int(time.time() * 1000) % 1000:03d}.jsonl"
        self.error: str | None = None
        self._fh = open(self.path, "w", encoding="utf-8")
        self.write({"kind": "header", **header})

    @staticmethod
    def _prune(folder: Path) -> None:
        files = sorted(folder.glob("run-*.jsonl"))
        for old in files[: max(0, len(files) - AUTOSAVE_KEEP + 1)]:
            try:
                old.unlink()
            except OSError:
                pass

    def write(self, record: dict) -> None:
        if self._fh is None:
            return
        try:
            self._fh.write(json.dumps(record, ensure_ascii=False) + "\n")
            self._fh.flush()
        except (OSError, ValueError) as exc:
            self.error = str(exc)
            self.close()

    def close(self, end: dict | None = None) -> None:
        """Write the ``end`` line (a clean finish) when given, then close."""
        if self._fh is None:
            return
        if end is not None:
            try:
                self._fh.write(json.dumps({"kind": "end", **end}) + "\n")
            except (OSError, ValueError):
                pass
        try:
            self._fh.close()
        finally:
            self._fh = None


def autosave_is_clean(path: str | Path) -> bool:
    """True when the file's last line is the ``end`` record."""
    try:
        lines = Path(path).read_text("utf-8").strip().splitlines()
    except OSError:
        return True
    if not lines:
        return True
    try:
        return json.loads(lines[-1]).get("kind") == "end"
    except json.JSONDecodeError:
        return False


class BackgroundJob(QObject):
    """Runs ``fn()`` on a Python thread and emits ``done(result, error)`` on completion.

    Used for work the GUI thread must not wait for (building and writing a
    receipts document: token texts and the model's SHA-256).
    """

    done = Signal(object, str)

    def __init__(self, fn: Callable[[], object], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._fn = fn
        self._thread = threading.Thread(target=self._run, name="spec-inspector-job", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wait(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            result = self._fn()
        except Exception as exc:  # reported to the GUI as a dialog
            self.done.emit(None, str(exc) or type(exc).__name__)
            return
        self.done.emit(result, "")
