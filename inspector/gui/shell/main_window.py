"""The inspector's main window: wiring between the control panel, the engine
worker (on its own ``QThread``) and the views.

The worker appends a run's immutable records to its ``RecordStream``; a
``QTimer`` at ``REDRAW_HZ`` has the ``RecordFeed`` apply them to the shown ``SessionRecord``
(``inspector.session.session_record``) and redraws the views from it. The GUI thread never calls
llama.cpp and never waits for the worker (a close while it works is deferred: ``quitting``).

The window is composed, not assembled from mixins: ``build_ui`` makes its widgets (a ``WindowUI``),
``build_menus`` its File and Run menus (``RunMenus``), ``run`` (``RunControl``: the state, what it
enables, Run / Pause / Step / Stop / Resume), ``model_line`` (``ModelLine``: what a model load
shows), ``run_events`` (``RunEvents``: what the worker's reports on a run show), ``feed``
(``RecordFeed``), and the helpers of its menus and rows (``files``, ``turns``,
``sources``, ``analysis``, ``synthetic``, ``help``, ``serve``: the Serve switch and the Requests tab). No helper holds
the window: each gets the widgets it drives and the handles of ``inspector.gui.ports.handles``
(``feedback``, ``shown``, ``host``), made here once.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from PySide6.QtCore import QEvent, QSettings, Qt, QThread, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMessageBox

from inspector.engine.stats import decode_tokens_per_s
from inspector.gui.engine_thread.record_feed import RecordFeed
from inspector.gui.engine_thread.worker import EngineWorker
from inspector.gui.files.actions import FileActions
from inspector.gui.files.file_drop import FileDrop
from inspector.gui.files.session_store import app_data_dir
from inspector.gui.look.banner_colours import BANNER_HINT
from inspector.gui.look.wording import count_noun
from inspector.gui.panel.source_actions import SourceActions
from inspector.gui.ports.handles import Feedback, MenuHost, ShownSession
from inspector.gui.serve.serve_actions import ServeActions
from inspector.gui.shell import none_refcount
from inspector.gui.shell.analysis_actions import AnalysisActions
from inspector.gui.shell.synthetic_actions import SyntheticActions
from inspector.gui.shell.help_menu import HelpActions
from inspector.gui.shell.layout import build_ui
from inspector.gui.shell.menus import MenuCommands, build_menus
from inspector.gui.shell.model_line import ModelLine
from inspector.gui.shell.panel_wiring import wire_panel
from inspector.gui.shell.quitting import QuitControl, Workers
from inspector.gui.shell.run_control import RunControl
from inspector.gui.shell.run_events import RunEvents
from inspector.gui.shell.window_settings import restore_controls, restore_window, save_window
from inspector.gui.tokens.conversation_bar import ConversationActions
from inspector.session.run_records import RunEnd, RunError
from inspector.session.run_states import IDLE
from inspector.session.session_record import SessionRecord

REDRAW_HZ = 15
"""Redraws a second: each takes a core from llama.cpp's decode threads (25 Hz: 8-10% of a core, 15 Hz: 5-7%)."""
TITLE = "spec-inspector — speculative decoding on llama.cpp"


class MainWindow(QMainWindow):
    """The inspector window.

    ``runtime``: an already-loaded ``LlamaRuntime`` to use (tests pass the
    session fixture's; it is not closed here), or None: then with
    ``load_at_start`` (the app's window) the selected model (``model_path``,
    else the remembered one, else the bundled one) loads on the worker thread
    right away, with a progress bar; without it (a window that only views
    receipts), the model loads when Run is pressed. ``settings``: QSettings
    to read and write (default: the user's). ``data_dir``: where autosave
    files go (default: the QStandardPaths app data folder).
    ``offer_recovery``: ask to open the last autosave if that run did not
    finish cleanly. ``draft_dir``: where "Make draft from target" writes
    drafts (default: ``inspector.llama.quantize.cache_dir()``).

    What the tests use (public, one level deep): ``session``, ``set_session``, ``redraw``, ``refresh_all``,
    ``drain_records``, ``set_banner``, ``show_error`` and ``last_error``, ``settings``, ``model_info``,
    ``load_selected_model``, ``state``; ``run`` (``RunControl``: the run's commands and state), ``menus``,
    the helpers; the widgets ``build_ui`` makes (``panel``, ``banner``, ``status_state``,
    ``load_progress``, the views: ``ui`` holds them all); the worker and its thread; the signals below.
    """

    requestRun = Signal(object)
    requestLoad = Signal(str, int, str, object, object)
    requestShutdown = Signal()
    stateChanged = Signal(str)
    runFinished = Signal(str, object)
    """(finish reason, ``RunEnd`` or None when the run never started): emitted on the GUI thread after every record of the run was shown."""
    errorShown = Signal(str)
    sourceRefused = Signal(str)
    """(message): the run's proposal source could not be made; the previous session is shown again."""
    draftMade = Signal(str, str)
    """(path, error): "Make draft from target" finished ("" error on success)."""

    def __init__(self, runtime=None, *, settings: QSettings | None = None, data_dir: Path | None = None,
                 offer_recovery: bool = False, model_path: str | None = None,
                 draft_dir: Path | None = None, load_at_start: bool = False) -> None:
        none_refcount.install()
        super().__init__()
        self.setWindowTitle(TITLE)
        self.setAcceptDrops(True)
        self.settings = settings if settings is not None else QSettings("spec-inspector", "spec-inspector")
        self.data_dir = Path(data_dir) if data_dir is not None else app_data_dir()
        self.session = SessionRecord()
        self.last_error = ""
        self.draft_dir = Path(draft_dir) if draft_dir is not None else None

        # Import the chat-template formatter (jinja2) now: importing it on the worker
        # during the first run holds the GIL long enough to stall the event loop.
        importlib.import_module("llama_cpp.llama_chat_format")

        # Worker thread
        self.worker = EngineWorker(runtime, owns_runtime=False)
        self.thread = QThread(self)
        self.thread.setObjectName("spec-inspector-engine")
        self.worker.moveToThread(self.thread)
        self.feed = RecordFeed(self.worker.records)
        """The run's records arrive in ``worker.records``; ``drain_records`` applies them on this thread
        (every redraw tick, and first thing in each lifecycle handler below)."""

        self.timer = QTimer(self)
        self.timer.setInterval(1000 // REDRAW_HZ)
        self.ui = ui = build_ui(self, self.settings, self._transcript_source)
        # The widgets by name, on the window itself (``WindowUI`` says what each is):
        self.panel, self.banner, self.token_view, self.conversation_bar = ui.panel, ui.banner, ui.token_view, \
            ui.conversation_bar
        self.tabs, self.window_detail, self.transcript, self.timeline = ui.tabs, ui.window_detail, ui.transcript, \
            ui.timeline
        self.lock_plots, self.stats, self.event_log, self.cost_view = ui.lock_plots, ui.stats, ui.event_log, \
            ui.cost_view
        self.request_log, self.requests, self.synthetic_view = ui.request_log, ui.requests, ui.synthetic_view
        self.status_state, self.status_counts, self.status_speed = ui.status_state, ui.status_counts, ui.status_speed
        self.load_progress = ui.load_progress
        # What the helpers get of the window (``inspector.gui.ports.handles``): never the window itself.
        self.feedback = Feedback(status=self.status_state.setText, banner=self.set_banner, error=self.show_error,
                                 last_error=lambda: self.last_error, banner_text=self.banner.text)
        self.shown = ShownSession(current=lambda: self.session, show=self.set_session, redraw=self.redraw,
                                  redraw_all=self.refresh_all, drain=self.drain_records)
        self.host = MenuHost(parent=self, add_menu=self.menuBar().addMenu, add_action=self.add_action,
                             every_tick=self.every_tick)
        self.model_line = ModelLine(self.panel, self.worker, banner=self.banner, status=self.status_state,
                                    progress=self.load_progress, session=lambda: self.session,
                                    show_error=self.show_error,
                                    info=runtime.describe() if runtime is not None else None, parent=self)
        files, run = lambda: self.files, lambda: self.run  # made below: the menus call them when triggered
        self.menus = menus = build_menus(self, self.host, MenuCommands(
            new_live_session=self.new_live_session, open_model=lambda: files().open_model_dialog(),
            open_receipts=lambda: files().open_receipts_dialog(), export_receipts=lambda: files().export_receipts_dialog(),
            export_plots=lambda: files().export_plots_dialog(), export_trace=lambda: files().export_trace_dialog(),
            open_last_autosave=lambda: files().open_last_autosave(), quit=self.close, run=lambda: run().run_clicked(),
            pause=lambda: run().pause_clicked(), step_window=lambda: run().step_window_clicked(),
            step_token=lambda: run().step_token_clicked(), stop=lambda: run().stop_clicked(),
            resume=lambda: run().resume_clicked(), serve=lambda on: self.serve.toggle(on)))
        self.run = RunControl(
            self.panel, self.worker, self.model_line, banner=self.banner, status=self.status_state,
            progress=self.load_progress, token_view=self.token_view,
            actions={"run": menus.act_run, "pause": menus.act_pause, "step_window": menus.act_step_window,
                     "step_token": menus.act_step_token, "stop": menus.act_stop, "resume": menus.act_resume,
                     "open_receipts": menus.act_open},
            session=lambda: self.session, show_session=self.set_session, show_error=self.show_error,
            redraw=self.redraw, redraw_all=self.refresh_all, save_settings=self.save_settings,
            request_run=self.requestRun.emit, request_load=self.requestLoad.emit,
            making_draft=lambda: self.sources.job is not None, opening=lambda: self.files.opening is not None,
            autosave_dir=self.data_dir / "autosave", parent=self)
        self.run.stateChanged.connect(self.stateChanged)
        self.turns = ConversationActions(
            self.conversation_bar, self.panel, run=self.run, shown=self.shown, feedback=self.feedback,
            served=lambda: self.request_log.records.values(), run_finished=self.runFinished,
            source_refused=self.sourceRefused, run_started=self.worker.runStarted, parent=self)
        self.transcript.turnChosen.connect(self.turns.show_turn)
        self.token_view.windowClicked.connect(self.show_window)
        self.files = FileActions(
            self.turns, panel=self.panel, run=self.run, shown=self.shown, feedback=self.feedback, host=self.host,
            settings=self.settings, progress=self.load_progress,
            plots=(("timeline", self.timeline), ("lock-timing", self.lock_plots), ("statistics", self.stats)),
            serving=lambda: self.serve.serving, load_model=self.load_selected_model, set_title=self.setWindowTitle)
        self.file_drop = FileDrop(self.files.use_model, self.files.open_receipts, parent=self)
        self.installEventFilter(self.file_drop)  # a GGUF or a receipts document dropped on the window
        self.sources = SourceActions(self.panel, self.run, status=self.status_state, show_error=self.show_error,
                                     draft_dir=self.draft_dir, parent=self)
        self.sources.draftMade.connect(self.draftMade)
        self.analysis = AnalysisActions(
            self.panel, self.host, self.feedback, run=self.run, shown=self.shown, worker=self.worker,
            thread=self.thread, settings=self.settings, tabs=self.tabs, cost_view=self.cost_view, stats=self.stats,
            timeline=self.timeline, model_info=lambda: self.model_info, load_model=self.load_selected_model,
            session_changed=(self.runFinished, self.files.opened), shutdown=self.requestShutdown,
            progress=self.load_progress)
        self.token_view.auditRequested.connect(self.analysis.audit.audit)  # "Audit this difference…" on its line
        self.synthetic = SyntheticActions(
            self.synthetic_view, self.panel, self.feedback, run=self.run, worker=self.worker, thread=self.thread,
            tabs=self.tabs, cost_changed=self.analysis.costChanged, compare_ready=self.analysis.compareReady,
            cost_model=None if self.analysis.current is None else self.analysis.current.model,
            shutdown=self.requestShutdown)
        self.help = HelpActions(self.host)
        self.serve = ServeActions(self.requests, self.request_log, menus.act_serve, panel=self.panel,
                                  worker=self.worker, run=self.run, shown=self.shown, feedback=self.feedback,
                                  host=self.host, settings=self.settings, turns=self.turns, slot_views=(self.lock_plots,))
        self.serve.export.replayReady.connect(lambda path: self.analysis.show_compare().choose_conversation(path))
        self.quitting = QuitControl(self.host, self.feedback, Workers(
            self.thread, self.run, self.serve, self.analysis.tune, lambda: self.analysis.server_build, self.files,
            self.sources), stop=self._stop_all, close=self.close)
        """Ctrl+Q or the close button while something works: ask, cancel, wait without blocking, quit."""
        self._wire_worker()
        self.run_events = RunEvents(
            self.worker, self.run, self.model_line, panel=self.panel, banner=self.banner, progress=self.load_progress,
            token_view=self.token_view, window_detail=self.window_detail, settings=self.settings, shown=self.shown,
            feedback=self.feedback, remember_error=self.remember_error, error_shown=self.errorShown.emit,
            source_refused=self.sourceRefused.emit, run_finished=self.runFinished.emit, parent=self)
        """The worker's reports on a run (its state, a hold, an error, its end) and what the window shows of them."""
        self.thread.start()
        wire_panel(self.panel, self.run, files=self.files, sources=self.sources, worker=self.worker,
                   load_model=self.load_selected_model)
        self._restore_settings()
        if model_path:
            self.panel.add_recent_model(str(Path(model_path).resolve()))
        self.set_session(SessionRecord())
        if self.model_info is not None:
            self.model_line.expect_load(hint=True)
            self.model_line.loaded(self.model_info)
        self.timer.timeout.connect(self.redraw)  # after the serve tick: a request's records are drained first
        self.timer.start()
        self.run.set_state(IDLE)
        if runtime is None and load_at_start:
            self.load_selected_model()
        if offer_recovery:
            QTimer.singleShot(0, self.files.offer_recovery)

    # -- what the window shows of the run and the model ------------------------------------
    @property
    def state(self) -> str:
        """The window's state (``inspector.session.run_states``)."""
        return self.run.state

    @property
    def model_info(self) -> dict | None:
        """The loaded model's ``describe()``, or None."""
        return self.model_line.info

    @property
    def error_info(self) -> RunError | None:
        """The last run error shown in the banner (``RunEvents.error_info``), or None."""
        return self.run_events.error_info

    @property
    def finish_info(self) -> RunEnd | None:
        """The last run's ``RunEnd`` (``RunEvents.finish_info``), or None."""
        return self.run_events.finish_info

    def load_selected_model(self) -> bool:
        """``RunControl.load_selected_model`` (while serving, serving stops first: ``ServeActions.then_load``)."""
        return self.serve.then_load(self.run.load_selected_model)

    def new_live_session(self) -> None:
        """Leave a viewed receipts file: empty live session, run controls enabled."""
        if self.state != IDLE:
            return
        self.turns.forget()
        self.set_session(SessionRecord())
        self.set_banner("Live session: pick an example prompt and press <b>Run</b> (Ctrl+R).", BANNER_HINT)
        self.setWindowTitle(TITLE)
        self.run.set_state(IDLE)

    # -- layout ---------------------------------------------------------------------
    def _transcript_source(self) -> tuple:
        """The Conversation tab's ``(records, shown, pickable)``: the conversation's turns (the running one
        included), or the shown run alone when it is no turn; a turn is picked only while idle."""
        shown = self.session
        records = self.turns.records()
        if shown not in records:
            records = [shown] if shown.header is not None or shown.document is not None else []
        return records, shown, self.state == IDLE

    def add_action(self, menu, text, slot, shortcuts=(), tip="") -> QAction:
        """A menu action with window-wide shortcuts (helpers add their menus' actions here too)."""
        a = QAction(text, self)
        if shortcuts:
            a.setShortcuts([QKeySequence(s) for s in shortcuts])
        a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        a.triggered.connect(slot)
        if tip:
            a.setStatusTip(tip)
        menu.addAction(a)
        self.addAction(a)
        return a

    def _wire_worker(self) -> None:
        w = self.worker
        self.requestRun.connect(w.start_run)
        self.requestLoad.connect(w.load_model)
        self.requestShutdown.connect(w.shutdown)
        w.shutdownDone.connect(self.thread.quit, Qt.ConnectionType.DirectConnection)  # after the job in flight
        w.modelProgress.connect(self.model_line.progress_changed)
        w.modelLoaded.connect(self.model_line.loaded)  # the run's reports: ``RunEvents`` (made next)

    # -- sessions ---------------------------------------------------------------------
    def set_session(self, session: SessionRecord) -> None:
        """Show ``session`` in every view (records still in the worker's stream go to the one shown before)."""
        self.drain_records()
        self.session = session
        if session.origin == "live":
            self.panel.show_live()
        else:  # the file's settings, read only (``set_state`` disables the inputs)
            self.panel.show_saved(session.settings, session.prompt_text, session.model_name, session.model_weights,
                                  session.header.model.get("llama_cpp") if session.header is not None else None,
                                  stored_weights=session.model_stored_weights)
        for v in self.ui.session_views:
            v.set_session(session)
        if session.origin == "live" and self.model_info is not None:
            self.model_line.show(self.model_info)

    def redraw(self) -> None:
        """Apply the new records, then redraw what changed (called by the timer at ``REDRAW_HZ``)."""
        none_refcount.top_up()
        self.drain_records()
        self.token_view.refresh()
        self.window_detail.refresh()
        current = self.tabs.currentWidget()
        for v in self.ui.tab_views:
            if v is current or not self.isVisible():
                v.refresh()
        s = self.session
        # Texts are set only when they change: a label whose text changes asks its
        # parents to lay out again, which repaints much of the window.
        if 0 < s.prefill_total and s.prefill_done < s.prefill_total and not s.tokens:  # a long prompt goes in
            counts = f"prefill: {s.prefill_done}/{s.prefill_total} prompt tokens"
        else:
            counts = (f"{count_noun(len(s.tokens), 'token')} · {count_noun(len(s.receipts), 'window')} · "
                      f"{count_noun(s.plain_steps, 'plain step')} · {count_noun(len(s.discards), 'discard')} · "
                      "canonical position "
                      f"{s.canonical_position if s.canonical_position is not None else '—'}")
        if counts != self.status_counts.text():
            self.status_counts.setText(counts)
            tps = decode_tokens_per_s(len(s.tokens), s.decode_elapsed_us)  # not the whole summary at 15 Hz
            self.status_speed.setText(f"{tps:.1f} tokens/s" if tps is not None else "")
        text = self.run.pending_faults_text()
        if text != self.panel.pending_faults.text():
            self.panel.pending_faults.setText(text)
            self.panel.pending_faults.setToolTip(text)

    def every_tick(self, slot) -> None:
        """Call ``slot()`` on every redraw tick (``REDRAW_HZ``), beside the window's own views."""
        self.timer.timeout.connect(slot)

    def refresh_all(self) -> None:  # tests and export
        self.redraw()
        for v in self.ui.tab_views:
            v.refresh()

    def show_window(self, w: int) -> None:
        """Show window ``w`` (1-based) in the Windows tab."""
        self.tabs.setCurrentWidget(self.window_detail)
        self.window_detail.select_window(w)

    # -- the worker's records and the banner -------------------------------------------------
    def drain_records(self) -> None:
        """Apply the records the worker appended since the last call to the shown live session
        (a session read from a file takes none; they belong to no shown run)."""
        self.feed.feed(self.session)

    def set_banner(self, text: str, style: str) -> None:
        """Show ``text`` in the banner above the tokens (``style``: one of the ``BANNER_*`` colors).
        The banner is never hidden, so its space stays and the view below does not jump."""
        self.banner.say(text, style)

    # -- dialogs ---------------------------------------------------------------------------
    def remember_error(self, message: str) -> None:
        """Keep ``message`` as ``last_error`` (an error the banner shows, not a dialog)."""
        self.last_error = message

    def show_error(self, title: str, message: str, icon=QMessageBox.Icon.Critical) -> None:
        """Show an error (``icon``: Information for what is no failure) without blocking (a window-modal
        box); kept in ``last_error``."""
        self.last_error = message
        box = QMessageBox(icon, title, message, QMessageBox.StandardButton.Ok, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.error_box = box

    # -- settings and closing ----------------------------------------------------------------
    def _splits(self) -> dict:
        return {"window/main_split": self.ui.main_split, "window/right_split": self.ui.right_split,
                "window/detail_split": self.window_detail.splitter, "window/requests_split": self.requests.split}

    def _restore_settings(self) -> None:
        if "window/right_split" in restore_window(self.settings, self, self._splits()):
            self.ui.stream_split.stop()  # the user's split from last time, not the first start's
        restore_controls(self.settings, self.panel)

    def save_settings(self) -> None:
        """Remember the window's geometry, splitters and the side panel's values (``window_settings``)."""
        save_window(self.settings, self, self._splits(), self.panel)

    def _stop_all(self, now: bool) -> None:
        """Cancel the run and every job, stop serving, then end the worker threads (``QuitControl``); the
        engine's ``shutdown`` runs after the job in flight. ``now``: wait for the server here."""
        self.save_settings()
        self.centralWidget().setEnabled(False)
        self.menuBar().setEnabled(False)
        self.worker.request_stop(closing=True)
        if now:
            self.serve.shutdown()
            self.requestShutdown.emit()
        else:  # the server uses the runtime the engine's shutdown closes: that waits for it
            self.serve.stop(then=self.requestShutdown.emit)

    def event(self, ev) -> bool:
        if ev.type() == QEvent.Type.DeferredDelete and not self.quitting.done:
            self.quitting.stop_now()  # destroyed without a close (a test): a running QThread would abort
        return super().event(ev)

    def closeEvent(self, ev) -> None:
        """Close now when nothing works; else ask, stop and close when stopped (``QuitControl``)."""
        if not self.quitting.close_requested():
            ev.ignore()
            return
        self.timer.stop()
        self.serve.shutdown()
        super().closeEvent(ev)
