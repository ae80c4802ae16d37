"""What the window does when the engine worker reports on a run: its state changed, its model or its
proposal source could not be made, it started, Step token holds before a commit, an error, its end.

``RunEvents`` handles those signals of the ``EngineWorker`` (``stateChanged``, ``modelFailed``,
``sourceFailed``, ``runStarted``, ``aboutToCommit``, ``errorOccurred``, ``runFinished``). It is owned by
``MainWindow`` and holds what it drives: the ``RunControl``, the ``ModelLine``, the side panel, the
banner, the progress bar, the token view and the Windows tab, the settings (the autosave's path and
whether it finished cleanly), the shown session (``ShownSession``) and the user's feedback
(``Feedback``); what the window emits on its own signals comes as callables.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from PySide6.QtCore import QObject, QSettings

from inspector.gui.look.banner_colours import BANNER_ERROR
from inspector.gui.ports.handles import Feedback, ShownSession
from inspector.gui.shell.banner import Banner, repair_text
from inspector.gui.shell.model_line import ModelLine
from inspector.gui.shell.run_control import RunControl
from inspector.session.run_records import REFUSED, SPECULATION_REFUSED, RunEnd, RunError
from inspector.session.run_states import ERROR, IDLE
from inspector.sources.registry import declaration_or_none


class RunEvents(QObject):
    """The window's handlers of the worker's reports on a run (a ``QObject``, a child of ``parent``, so
    the worker's signals reach them on the GUI thread).

    ``remember_error(message)`` keeps ``message`` as the window's last error (an error shown in the banner,
    not in a dialog); ``error_shown(message)``, ``source_refused(message)`` and ``run_finished(reason,
    end)`` emit the window's signals of those names. ``error_info``: the last ``RunError`` shown in the
    banner, ``finish_info``: the last run's ``RunEnd`` (None before either)."""

    def __init__(self, worker, run: RunControl, model_line: ModelLine, *, panel, banner: Banner, progress,
                 token_view, window_detail, settings: QSettings, shown: ShownSession, feedback: Feedback,
                 remember_error: Callable[[str], None], error_shown: Callable[[str], None],
                 source_refused: Callable[[str], None], run_finished: Callable[[str, RunEnd | None], None],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.run, self.model_line, self.panel, self.banner, self.progress = run, model_line, panel, banner, progress
        self.token_view, self.window_detail, self.settings = token_view, window_detail, settings
        self.shown, self.feedback, self.remember_error = shown, feedback, remember_error
        self.error_shown, self.source_refused, self.run_finished = error_shown, source_refused, run_finished
        self.error_info: RunError | None = None
        self.finish_info: RunEnd | None = None
        worker.modelFailed.connect(self._model_failed)
        worker.runStarted.connect(self._run_started)
        worker.stateChanged.connect(self._worker_state)
        worker.aboutToCommit.connect(self._about_to_commit)
        worker.errorOccurred.connect(self._error)
        worker.sourceFailed.connect(self._source_failed)
        worker.runFinished.connect(self._run_finished)

    def _worker_state(self, state: str, detail: str) -> None:
        self.shown.drain()  # the banner counts what the run did up to this state (a pause: its last step)
        self.run.worker_state(state, detail)

    def _model_failed(self, message: str, path: str = "") -> None:
        self.run.restore_before_run()  # a run that could not load its model keeps the session shown before
        self.model_line.failed(message, path)

    def _source_failed(self, name: str, message: str) -> None:
        """The worker could not make the run's source: show why, and the previous session again."""
        self.run.restore_before_run()
        self.run.run_ended()
        self.progress.hide()
        self.run.set_state(IDLE, f"{name} source refused")
        self.banner.say(f"<b>The run did not start:</b> {html.escape(message)}. Change the {html.escape(name)} "
                        "source's options or choose another proposal source, then <b>Run</b>.", BANNER_ERROR)
        declared = declaration_or_none(name)
        loads_model = declared is not None and declared.loads_model  # its model file was refused
        title = "Draft model refused" if "refused" in message and loads_model else \
            f"Cannot use the {name} proposal source"
        self.feedback.error(title, message)
        self.source_refused(message)

    def _run_started(self, info: dict) -> None:
        self.shown.drain()  # the run's header
        self.panel.show_draft_max_used(self.shown.current().settings)
        if info.get("autosave"):
            self.settings.setValue("autosave/path", info["autosave"])
            self.settings.setValue("autosave/clean", False)
            self.settings.sync()
        self.run.run_started()

    def _about_to_commit(self, info: dict) -> None:
        """Step token holds before a commit: the token view names the token and what it is
        (accepted proposal token, correction, bonus token, plain step); the Windows tab shows
        the window being committed (no receipt yet)."""
        self.shown.redraw()  # drains the records first: the held token's text is among them
        self.token_view.show_hold(info)
        self.window_detail.show_in_flight(info)

    def _error(self, err: RunError) -> None:
        """A run's error: a dialog when the run did not start, else the banner with where the
        repair left the KV cache (the run waits for Resume)."""
        self.shown.drain()
        message = err.message
        self.remember_error(message)
        if err.kind == SPECULATION_REFUSED:
            self.feedback.error("Speculative decoding is not supported by this model",
                                message + "\n\nChoose the proposal source “none” to decode plainly.")
            return
        if err.kind == REFUSED:
            self.feedback.error("Run failed", message)
            return
        if err.ended:  # the runtime is gone (a lost RPC server): the run is over, its receipts stay
            self.banner.say(f"<b>Error:</b> {html.escape(message)}<br>The run ended here; its receipts are kept "
                            "(Export receipts). Start the server again, then <b>Run</b>.", BANNER_ERROR)
            self.error_info = err
            self.shown.redraw()
            self.error_shown(message)
            return
        self.banner.say(f"<b>Error:</b> {message}<br>{repair_text(err)}. Press <b>Resume</b> to continue.",
                        BANNER_ERROR)
        self.error_info = err
        self.shown.redraw()
        if self.run.state != ERROR:
            self.run.set_state(ERROR, message)
        self.error_shown(message)

    def _run_finished(self, reason: str, end: RunEnd | None) -> None:
        """The run ended (``end`` None: it never started)."""
        self.run.run_ended()
        self.settings.setValue("autosave/clean", True)
        self.settings.sync()
        self.finish_info = end
        self.shown.redraw()  # drains the run's last records (its end, a comparison with plain decoding)
        session = self.shown.current()
        if reason != "error" and end is not None:
            self.banner.say(*self.run.run_banner.finish(reason, end, session))
        elif self.run.state != ERROR and (end is None or not (session.tokens or end.errors)):  # it never ran
            self.banner.say(f"<b>The run did not start:</b> "
                            f"{html.escape(self.feedback.last_error() or 'see the message')}", BANNER_ERROR)
        self.run.set_state(IDLE, reason)
        self.run_finished(reason, end)
