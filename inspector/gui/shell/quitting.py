"""Closing the window while something works (issue 54 item 1): ask, cancel, wait without blocking, quit.

A close (Ctrl+Q, the title bar's button) while a run, a job on the engine thread (measuring the cost
model, comparing, tuning, auditing, the synthetic table), serving, a llama-server build or a draft being
made goes asks first (``QuitControl.box``: "Stop and quit" or "Keep working"). Stopping cancels every one
of them through their own cancel events, asks the engine worker to shut down after the job in flight (a
queued slot: it runs when the job has returned, then ends its thread), and ignores the close; a timer
then polls what is still running, says it in the status bar ("stopping: waiting for …") and closes the
window when nothing is. The GUI thread never waits for the engine, except when the window is destroyed
without a close (``stop_now``: a test's teardown), where a ``QThread`` still running would abort the
process (``QThread: Destroyed while thread … is still running``).
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import Callable

from PySide6.QtCore import QObject, QThread, QTimer, Signal
from PySide6.QtWidgets import QMessageBox

from inspector.gui.model.window_model import WindowModel
from inspector.gui.ports.handles import MenuHost
from inspector.session.run_states import BUSY, RUN_STATES, SERVING

POLL_MS = 50
"""How often a stopping window looks at what is still running."""
QUICK_WAIT_MS = 1000
"""How long a close with nothing going waits for the idle engine thread to end (its shutdown slot runs at
once) before it stops waiting and polls instead."""
DESTROY_WAIT_MS = 120_000
"""How long ``stop_now`` (the window destroyed without a close) waits for the threads."""


def quit_note(jobs: int) -> str:
    """The quit question's second line for ``jobs`` things that would stop (1 or more)."""
    if jobs == 1:
        return "It is cancelled at its next step; the window closes as soon as it has stopped, usually within a second."
    return ("Each is cancelled at its next step; the window closes as soon as every one has stopped, usually within "
            "a second.")


@dataclass(frozen=True)
class Workers:
    """What may still work when the window closes, each read through its public members: the engine
    ``thread`` (a ``QThread``), ``model`` (the ``WindowModel``: ``state``, ``state_detail``), ``serve``
    (``ServeActions``: ``serving``), ``tune`` (``TuneActions``: ``grid_running``, ``thread_running``),
    ``build`` (a callable giving the ``ServerBuildActions`` or None), ``files`` (``FileActions``: ``jobs``)
    and ``sources`` (``SourceActions``: ``job``)."""

    thread: QThread
    model: object
    serve: object
    tune: object
    build: Callable[[], object]
    files: object
    sources: object

    def interrupted(self) -> list[str]:
        """What a close would stop (asked about first), in words; empty when nothing."""
        out = []
        state = self.model.state
        if state in RUN_STATES:
            out.append("the run (it stops where it is; its receipts stay autosaved)")
        elif state == BUSY:
            out.append((self.model.state_detail or "a job on the engine thread").rstrip("…. ") + " (its results so far are "
                       "not kept)")
        elif state == SERVING:
            out.append("serving requests")
        build = self.build()
        if build is not None and build.building:
            out.append("building llama-server")
        if self.tune.grid_running():
            out.append("predicting the Tune grid")
        if self.sources.job is not None and self.sources.job.running():
            out.append("making a draft model (it cannot be cancelled: quitting waits for it)")
        return out

    def still_running(self) -> list[str]:
        """What has not ended yet, in words; empty when the window may close."""
        out = []
        if not self.thread.isFinished():
            out.append((self.model.state_detail or "the engine thread").rstrip("…. ") if self.model.state == BUSY
                       else "the engine thread")
        if self.serve.serving:
            out.append("serving")
        build = self.build()
        if build is not None and build.thread_running():
            out.append("the llama-server build")
        if self.tune.thread_running():
            out.append("the Tune grid")
        if any(j.running() for j in self.files.jobs):
            out.append("writing a file")
        if self.sources.job is not None and self.sources.job.running():
            out.append("making a draft model")
        return out

    def wait(self, timeout_ms: int) -> None:
        """Wait (blocking) for the engine thread, the Tune and build threads, the files being written and a
        draft being made, up to ``timeout_ms`` each."""
        self.thread.wait(timeout_ms)
        self.tune.wait(timeout_ms)
        build = self.build()
        if build is not None:
            build.wait(timeout_ms)
        for job in (*self.files.jobs, *([self.sources.job] if self.sources.job is not None else [])):
            job.wait(timeout_ms / 1000)


class QuitControl(QObject):
    """The window's close, deferred while anything works (see the module docstring).

    ``workers`` (``Workers``) say what works; ``stop(now)`` cancels everything and ends the threads (with
    ``now``, stopping the server waits for it); ``close()`` closes the window again once all ended.
    ``box``: the question while it is open; ``stopping``: a stop began; ``done``: the window may close;
    ``stopped_after_s``: how long the stop took. ``stopped`` is emitted when everything ended."""

    stopped = Signal()

    def __init__(self, model: WindowModel, host: MenuHost, workers: Workers, *, stop: Callable[[bool], None],
                 close: Callable[[], object]) -> None:
        super().__init__(host.parent)
        self.parent_widget, self.model, self.workers = host.parent, model, workers
        self._stop, self._close = stop, close
        self.box: QMessageBox | None = None
        self.stopping = False
        self.done = False
        self.stopped_after_s: float | None = None
        self._t0 = 0.0
        self.timer = QTimer(self)
        self.timer.setInterval(POLL_MS)
        self.timer.timeout.connect(self._poll)

    def close_requested(self) -> bool:
        """The window is asked to close: True when it may close now; else it asks or goes on stopping (the
        close is ignored, the window closes by itself when everything ended)."""
        if self.done:
            return True
        if self.stopping:
            self._say()
            return False
        if self.box is not None:
            self.box.raise_()
            return False
        jobs = self.workers.interrupted()
        if jobs:
            self._ask(jobs)
            return False
        self.begin()
        self.workers.thread.wait(QUICK_WAIT_MS)  # idle: its shutdown slot runs at once
        if self.workers.still_running():
            return False  # the timer polls on
        self.timer.stop()
        self._finish()
        return True

    def _ask(self, jobs: list[str]) -> None:
        box = QMessageBox(QMessageBox.Icon.Question, "Quit spec-inspector?",
                          "Quitting now stops " + "; ".join(jobs) + ".", QMessageBox.StandardButton.NoButton,
                          self.parent_widget)
        box.setInformativeText(quit_note(len(jobs)))
        self.quit_button = box.addButton("Stop and quit", QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Keep working", QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(self.quit_button)
        box.finished.connect(lambda _r: self._answered(box))
        self.box = box
        box.open()

    def _answered(self, box: QMessageBox) -> None:
        self.box = None
        if box.clickedButton() is self.quit_button:
            self.begin()

    def begin(self) -> None:
        """Stop everything and close when it has ended (no question; nothing waits here)."""
        if self.stopping:
            return
        self.stopping = True
        self._t0 = perf_counter()
        self._stop(False)
        self._say()
        self.timer.start()

    def stop_now(self) -> None:
        """Stop everything and wait for it here (blocking), without a question: for a window destroyed
        without closing, since destroying a running ``QThread`` aborts the process, and for the tests'
        teardown (the next test must not share the runtime with this window's jobs). A close after it
        closes at once."""
        if self.done:
            return
        if self.box is not None:
            self.box.done(0)
        if not self.stopping:
            self.stopping = True
            self._t0 = perf_counter()
            self._stop(True)
        self.workers.wait(DESTROY_WAIT_MS)
        self.timer.stop()
        if not self.workers.still_running():
            self._finish()

    def _say(self) -> None:
        left = self.workers.still_running()
        if left:
            self.model.say(f"stopping… waiting for {', '.join(left)} to end, then quitting "
                                 f"({perf_counter() - self._t0:.1f} s)")

    def _poll(self) -> None:
        if self.workers.still_running():
            self._say()
            return
        self.timer.stop()
        self._finish()
        self._close()

    def _finish(self) -> None:
        self.done = True
        self.stopped_after_s = perf_counter() - self._t0
        self.stopped.emit()
