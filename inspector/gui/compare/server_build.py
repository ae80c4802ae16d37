"""Building llama-server from the Compare window (issue 36): the build the tests and
``compare --llama-server`` use (``inspector.bench.server_build.build_llama_server``, 7-15 minutes on 2
cores) on a thread of its own, never the GUI thread nor the engine thread (runs and comparisons go on
meanwhile), with its progress in the window and Cancel.

``ServerBuildWorker`` (no widgets) calls the build function on its thread; ``ServerBuildActions``
(GUI thread) owns that thread, starts and cancels the build for the window's ``ServerChoice`` and
tells it how the build goes. Cancel sets the build's cancel event: the step's processes (pip, cmake,
make and its compilers) are killed as one process group and the build's temporary folder removed,
so a later build starts over.
"""

from __future__ import annotations

import logging
import re
import threading

from PySide6.QtCore import QObject, QThread, Signal, Slot

from inspector.bench.server_build import ServerBuildCancelled, ServerBuildError, build_llama_server

log = logging.getLogger(__name__)

PERCENT = re.compile(r"(\d+)%$")
"""The build step's "building llama-server: 37%" lines: the bar's value."""


class ServerBuildWorker(QObject):
    """Runs a build function (``build(progress, cancel)`` -> the binary's path, as
    ``build_llama_server``) on its thread. ``progress(text)``: each line the build says;
    ``ended(path, error, cancelled)``: the binary's path, or "" with the one-line error, or cancelled.
    ``cancel`` (a ``threading.Event``, set from any thread) stops the build."""

    progress = Signal(str)
    ended = Signal(str, str, bool)

    def __init__(self) -> None:
        super().__init__()
        self.cancel = threading.Event()

    @Slot(object)
    def run(self, build) -> None:
        try:
            path = build(self.progress.emit, self.cancel)
        except ServerBuildCancelled:
            self.ended.emit("", "", True)
        except ServerBuildError as exc:
            self.ended.emit("", str(exc), self.cancel.is_set())
        except Exception as exc:  # the window must hear of any failure
            log.exception("llama-server build failed")
            self.ended.emit("", f"{type(exc).__name__}: {exc}", self.cancel.is_set())
        else:
            self.ended.emit(str(path), "", False)


class ServerBuildActions(QObject):
    """Build llama-server for ``choice`` (the Compare window's ``ServerChoice``): its Build and Cancel
    build buttons, its progress. ``build`` is the build function (``build_llama_server``; tests give
    another). ``built(path, error, cancelled)`` when a build ended (tests, status)."""

    requestBuild = Signal(object)
    built = Signal(str, str, bool)

    def __init__(self, choice, build=build_llama_server, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.choice = choice
        self.build = build
        self.building = False
        self._thread: QThread | None = None
        self._worker: ServerBuildWorker | None = None
        choice.build.clicked.connect(self.start)
        choice.cancel_build.clicked.connect(self.cancel)

    def start(self) -> bool:
        """Start the build on the build thread (made on first use); False while one goes."""
        if self.building:
            return False
        if self._thread is None:
            self._thread = QThread(self)
            self._thread.setObjectName("spec-inspector-llama-server-build")
            self._worker = ServerBuildWorker()
            self._worker.moveToThread(self._thread)
            self.requestBuild.connect(self._worker.run)
            self._worker.progress.connect(self._progress)
            self._worker.ended.connect(self._ended)
            self._thread.start()
        self._worker.cancel.clear()
        self.building = True
        self.choice.set_building("starting the build …")
        self.requestBuild.emit(self.build)
        return True

    def cancel(self) -> None:
        """Stop the build (its processes are killed, its files removed); ``built`` says when it ended."""
        if self._worker is not None and self.building:
            self._worker.cancel.set()
            self.choice.set_building("cancelling: stopping the build's processes …")

    def shutdown(self) -> None:
        """Cancel a build and ask the build thread to end (the main window closes; it does not wait here:
        ``thread_running`` says when it has ended)."""
        if self._worker is not None:
            self._worker.cancel.set()
        if self._thread is not None:
            self._thread.quit()

    def thread_running(self) -> bool:
        """The build thread has not ended (it ends after ``shutdown``, once the build's processes are killed)."""
        return self._thread is not None and not self._thread.isFinished()

    def wait(self, timeout_ms: int) -> None:
        """Wait (blocking) for the build thread to end, up to ``timeout_ms``."""
        if self._thread is not None:
            self._thread.wait(timeout_ms)

    def _progress(self, text: str) -> None:
        if self.building and not self._worker.cancel.is_set():
            found = PERCENT.search(text)
            self.choice.set_building(text, int(found.group(1)) if found else None)

    def _ended(self, path: str, error: str, cancelled: bool) -> None:
        self.building = False
        self.choice.set_build_ended(path, error, cancelled)
        self.built.emit(path, error, cancelled)
