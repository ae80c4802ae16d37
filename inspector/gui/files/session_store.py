"""Files of a session: autosave (JSON Lines), crash recovery, receipts export.

Autosave: while a run goes, the worker appends one JSON line per receipt,
discard and plain step to ``<app data>/autosave/run-<time>.jsonl`` and
flushes it (``inspector.receipts.autosave``: the same writer and format as
``spec-inspector run --autosave``; opened by ``inspector.receipts.autosave_folder``), so a crash
loses at most the window in flight. The main window records the file in QSettings and marks it clean
when the run ends; an unclean file is offered for opening on the next start.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, QStandardPaths, Signal


def app_data_dir() -> Path:
    """The per-user application data folder: ``spec-inspector`` in the generic data location
    (``~/.local/share/spec-inspector`` on Linux, ``~/Library/Application Support/spec-inspector`` on
    macOS, ``%LOCALAPPDATA%/spec-inspector`` on Windows); the window's autosaves go in its ``autosave``
    folder. (AppDataLocation would add the organization name: ``spec-inspector/spec-inspector``.)"""
    loc = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.GenericDataLocation)
    return Path(loc) / "spec-inspector" if loc else Path.home() / ".spec-inspector"


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
