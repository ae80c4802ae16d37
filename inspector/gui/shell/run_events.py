"""What the window does when the engine worker reports on a run: its state changed, its model or its
proposal source could not be made, it started, Step token holds before a commit, an error, its end.

``RunEvents`` handles those signals of the ``EngineWorker`` (``stateChanged``, ``modelFailed``,
``sourceFailed``, ``runStarted``, ``aboutToCommit``, ``errorOccurred``, ``runFinished``). It gets the window's
model (``WindowModel``: the session shown, what the window says, the settings that keep the autosave's path and
whether it finished cleanly, the signals it emits: ``errorShown``, ``sourceRefused``, ``runFinished``) and
what it drives: the ``RunControl``, the ``ModelLine``, the side panel, the token view and the Windows tab.
"""

from __future__ import annotations

import html
from PySide6.QtCore import QObject

from inspector.gui.look.banner_colours import BANNER_ERROR
from inspector.gui.model.window_model import WindowModel
from inspector.gui.shell.banner import repair_text
from inspector.gui.shell.model_line import ModelLine
from inspector.gui.shell.run_control import RunControl
from inspector.session.run_records import REFUSED, SPECULATION_REFUSED, RunEnd, RunError
from inspector.session.run_states import ERROR, IDLE
from inspector.sources.registry import declaration_or_none


class RunEvents(QObject):
    """The window's handlers of the worker's reports on a run (a ``QObject``, a child of ``parent``, so
    the worker's signals reach them on the GUI thread).

    ``error_info``: the last ``RunError`` shown in the banner, ``finish_info``: the last run's ``RunEnd`` (None
    before either)."""

    def __init__(self, model: WindowModel, run: RunControl, model_line: ModelLine, panel, token_view,
                 window_detail, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model, self.run, self.model_line, self.panel = model, run, model_line, panel
        self.token_view, self.window_detail, self.settings = token_view, window_detail, model.settings
        worker = model.worker
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
        self.model.drain()  # the banner counts what the run did up to this state (a pause: its last step)
        self.run.worker_state(state, detail)

    def _model_failed(self, message: str, path: str = "") -> None:
        self.run.restore_before_run()  # a run that could not load its model keeps the session shown before
        self.model_line.failed(message, path)

    def _source_failed(self, name: str, message: str) -> None:
        """The worker could not make the run's source: show why, and the previous session again."""
        self.run.restore_before_run()
        self.run.run_ended()
        self.model.show_progress(None)
        self.run.set_state(IDLE, f"{name} source refused")
        self.model.set_banner(f"<b>The run did not start:</b> {html.escape(message)}. Change the {html.escape(name)} "
                        "source's options or choose another proposal source, then <b>Run</b>.", BANNER_ERROR)
        declared = declaration_or_none(name)
        loads_model = declared is not None and declared.loads_model  # its model file was refused
        title = "Draft model refused" if "refused" in message and loads_model else \
            f"Cannot use the {name} proposal source"
        self.model.show_error(title, message)
        self.model.sourceRefused.emit(message)

    def _run_started(self, info: dict) -> None:
        self.model.drain()  # the run's header
        self.panel.show_draft_max_used(self.model.session.settings)
        if info.get("autosave"):
            self.settings.setValue("autosave/path", info["autosave"])
            self.settings.setValue("autosave/clean", False)
            self.settings.sync()
        self.run.run_started()

    def _about_to_commit(self, info: dict) -> None:
        """Step token holds before a commit: the token view names the token and what it is
        (accepted proposal token, correction, bonus token, plain step); the Windows tab shows
        the window being committed (no receipt yet)."""
        self.model.redraw()  # drains the records first: the held token's text is among them
        self.token_view.show_hold(info)
        self.window_detail.show_in_flight(info)

    def _error(self, err: RunError) -> None:
        """A run's error: a dialog when the run did not start, else the banner with where the
        repair left the KV cache (the run waits for Resume)."""
        self.model.drain()
        message = err.message
        self.model.remember_error(message)
        if err.kind == SPECULATION_REFUSED:
            self.model.show_error("Speculative decoding is not supported by this model",
                                message + "\n\nChoose the proposal source “none” to decode plainly.")
            return
        if err.kind == REFUSED:
            self.model.show_error("Run failed", message)
            return
        if err.ended:  # the runtime is gone (a lost RPC server): the run is over, its receipts stay
            self.model.set_banner(f"<b>Error:</b> {html.escape(message)}<br>The run ended here; its receipts are kept "
                            "(Export receipts). Start the server again, then <b>Run</b>.", BANNER_ERROR)
            self.error_info = err
            self.model.redraw()
            self.model.errorShown.emit(message)
            return
        self.model.set_banner(f"<b>Error:</b> {message}<br>{repair_text(err)}. Press <b>Resume</b> to continue.",
                        BANNER_ERROR)
        self.error_info = err
        self.model.redraw()
        if self.model.state != ERROR:
            self.run.set_state(ERROR, message)
        self.model.errorShown.emit(message)

    def _run_finished(self, reason: str, end: RunEnd | None) -> None:
        """The run ended (``end`` None: it never started)."""
        self.run.run_ended()
        self.settings.setValue("autosave/clean", True)
        self.settings.sync()
        self.finish_info = end
        self.model.redraw()  # drains the run's last records (its end, a comparison with plain decoding)
        session = self.model.session
        if reason != "error" and end is not None:
            self.model.set_banner(*self.run.run_banner.finish(reason, end, session))
        elif self.model.state != ERROR and (end is None or not (session.tokens or end.errors)):  # it never ran
            self.model.set_banner(f"<b>The run did not start:</b> "
                            f"{html.escape(self.model.last_error or 'see the message')}", BANNER_ERROR)
        self.run.set_state(IDLE, reason)
        self.model.runFinished.emit(reason, end)
