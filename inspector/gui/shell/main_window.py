"""The inspector's main window: it lays out the widgets and hands each helper the window's model and its own
widgets.

The window's model (``WindowModel``, ``inspector.gui.model.window_model``) holds what the window shows and
says (the session shown, the state, the banner, the status line, errors, the progress bar, the loaded model,
the served requests) and the engine worker on its own ``QThread``; the widgets follow its signals. The worker
appends a run's immutable records to its ``RecordStream``; a ``QTimer`` at ``REDRAW_HZ`` has the model drain
them into the shown ``SessionRecord`` (``inspector.session.session_record``) and the views redraw from it. The
GUI thread never calls llama.cpp and never waits for the worker (a close while it works is deferred:
``quitting``).

The window is composed, not assembled from mixins: ``build_ui`` makes its widgets (a ``WindowUI``),
``build_menus`` its File and Run menus (``RunMenus``), then the helpers, each made with the model: ``run``
(``RunControl``: what each state enables, Run / Pause / Step / Stop / Resume), ``model_line`` (``ModelLine``:
what a model load shows), ``run_events`` (``RunEvents``: what the worker's reports on a run show), and the
helpers of its menus and rows (``files``, ``turns``, ``sources``, ``analysis``, ``synthetic``, ``help``,
``serve``: the Serve switch and the Requests tab). No helper holds the window; dialogs and menu items go
through ``host`` (``MenuHost``).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from PySide6.QtCore import QEvent, QSettings, Qt, QThread, QTimer
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMessageBox

from inspector.engine.stats import decode_tokens_per_s
from inspector.gui.engine_thread.worker import EngineWorker
from inspector.gui.files.actions import FileActions
from inspector.gui.files.file_drop import FileDrop
from inspector.gui.files.receipts_diff import ReceiptsComparison
from inspector.gui.files.session_store import app_data_dir
from inspector.gui.look.banner_colours import BANNER_HINT
from inspector.gui.look.wording import count_noun
from inspector.gui.model.commands import WindowCommands
from inspector.gui.model.window_model import WindowModel
from inspector.gui.panel.source_actions import SourceActions
from inspector.gui.ports.handles import MenuHost
from inspector.gui.serve.serve_actions import ServeActions
from inspector.gui.shell import none_refcount
from inspector.gui.shell.analysis_actions import AnalysisActions
from inspector.gui.shell.synthetic_actions import SyntheticActions
from inspector.gui.shell.help_menu import HelpActions
from inspector.gui.shell.layout import build_ui
from inspector.gui.shell.menus import build_menus
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


def window_model(runtime, settings: QSettings | None, data_dir: Path | None, draft_dir: Path | None,
                 window: QMainWindow) -> WindowModel:
    """The model of ``window`` (``MainWindow``'s arguments: ``runtime`` or None, the QSettings or None for the
    user's, the data folder or None for the app's), its engine worker moved to the engine thread (not started),
    its ``loader`` the window's ``load_selected_model``."""
    # Import the chat-template formatter (jinja2) now: importing it on the worker
    # during the first run holds the GIL long enough to stall the event loop.
    importlib.import_module("llama_cpp.llama_chat_format")
    worker = EngineWorker(runtime, owns_runtime=False)
    thread = QThread(window)
    thread.setObjectName("spec-inspector-engine")
    worker.moveToThread(thread)
    model = WindowModel(worker, thread, settings if settings is not None else QSettings(
        "spec-inspector", "spec-inspector"), app_data_dir() if data_dir is None else data_dir, draft_dir, window)
    model.model_info = runtime.describe() if runtime is not None else None
    model.loader = window.load_selected_model
    return model


def redraw_timer(window: QMainWindow) -> QTimer:
    """The window's redraw timer at ``REDRAW_HZ`` (not started: the views and helpers connect to it first)."""
    timer = QTimer(window)
    timer.setInterval(1000 // REDRAW_HZ)
    return timer


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

    ``model``: the window's ``WindowModel``, what tests drive and read. Also public (one level deep):
    ``session``, ``state``, ``model_info``, ``last_error``, ``settings``, ``worker`` and ``thread`` (the
    model's), ``set_session``, ``redraw``, ``refresh_all``, ``load_selected_model``, ``error_box`` (the last
    error box opened); ``run`` (``RunControl``: the run's commands), ``menus``, the helpers; the widgets
    ``build_ui`` makes (``panel``, ``banner``, ``status_state``, ``load_progress``, the views: ``ui`` holds them
    all); the model's signals under their old names (``runFinished``, ``errorShown``, ``sourceRefused``,
    ``draftMade``, ``stateChanged``, ``requestRun``, ``requestLoad``, ``requestShutdown``).
    """

    def __init__(self, runtime=None, *, settings: QSettings | None = None, data_dir: Path | None = None,
                 offer_recovery: bool = False, model_path: str | None = None,
                 draft_dir: Path | None = None, load_at_start: bool = False) -> None:
        none_refcount.install()
        super().__init__()
        self.model = model = window_model(runtime, settings, data_dir, draft_dir, self)
        self.timer = redraw_timer(self)
        self.ui = ui = build_ui(self, model)
        self._name_widgets(ui)
        self.host = MenuHost(parent=self, add_menu=self.menuBar().addMenu, add_action=self.add_action,
                             every_tick=self.every_tick)
        self.menus = build_menus(self, self.host)
        self.model_line = ModelLine(model, ui.panel, parent=self)
        self.run = RunControl(model, ui.panel, self.model_line, ui.token_view, ui.banner, self.menus.run_actions(),
                              parent=self)
        self.turns = ConversationActions(model, ui.conversation_bar, ui.panel, self.run, parent=self)
        self.files = FileActions(model, self.turns, self.host, ui.panel, self.run, plots=(
            ("timeline", ui.timeline), ("lock-timing", ui.lock_plots), ("statistics", ui.stats)))
        self.comparison = ReceiptsComparison(model, self.files.shown_document, self, self.files.receipts_dir)
        self.sources = SourceActions(model, ui.panel, self.run, parent=self)
        self.analysis = AnalysisActions(model, ui.panel, self.host, self.run, ui.tabs, ui.cost_view, ui.stats,
                                        ui.timeline)
        self.synthetic = SyntheticActions(model, ui.synthetic_view, ui.panel, self.run, ui.tabs, self.analysis)
        self.help = HelpActions(self.host)
        self.serve = ServeActions(model, ui.requests, self.menus.act_serve, ui.panel, self.run, self.host,
                                  self.turns, slot_views=(ui.lock_plots,))
        self.quitting = QuitControl(model, self.host, Workers(
            self.thread, model, self.serve, self.analysis.tune, lambda: self.analysis.server_build, self.files,
            self.sources), stop=self._stop_all, close=self.close)
        """Ctrl+Q or the close button while something works: ask, cancel, wait without blocking, quit."""
        self.run_events = RunEvents(model, self.run, self.model_line, ui.panel, ui.token_view, ui.window_detail,
                                    parent=self)
        """The worker's reports on a run (its state, a hold, an error, its end) and what the window shows of them."""
        self._connect(model, ui)
        self._start(model_path, runtime is None and load_at_start, offer_recovery)

    def _name_widgets(self, ui) -> None:
        """The widgets by name, on the window itself (``WindowUI`` says what each is)."""
        self.panel, self.banner, self.token_view, self.conversation_bar = ui.panel, ui.banner, ui.token_view, \
            ui.conversation_bar
        self.tabs, self.window_detail, self.transcript, self.timeline = ui.tabs, ui.window_detail, ui.transcript, \
            ui.timeline
        self.lock_plots, self.stats, self.event_log, self.cost_view = ui.lock_plots, ui.stats, ui.event_log, \
            ui.cost_view
        self.request_log, self.requests, self.synthetic_view = ui.request_log, ui.requests, ui.synthetic_view
        self.status_state, self.status_counts, self.status_speed = ui.status_state, ui.status_counts, ui.status_speed
        self.load_progress = ui.load_progress

    def _connect(self, model: WindowModel, ui) -> None:
        """The widgets follow the model; the helpers' signals that cross to another helper or view."""
        model.sessionShown.connect(self._session_shown)
        model.redrawRequested.connect(lambda every: self.refresh_all() if every else self.redraw())
        model.statusChanged.connect(ui.status_state.setText)
        model.bannerChanged.connect(ui.banner.say)
        model.errorRaised.connect(self._open_error)
        model.progressChanged.connect(ui.load_progress.show_progress)
        model.settingsSaveAsked.connect(self.save_settings)
        model.titleChanged.connect(self.setWindowTitle)
        w = model.worker
        w.shutdownDone.connect(self.thread.quit, Qt.ConnectionType.DirectConnection)  # after the job in flight
        w.modelProgress.connect(self.model_line.progress_changed)
        w.modelLoaded.connect(self.model_line.loaded)  # the run's reports: ``RunEvents`` connects them
        model.shutdownRequested.connect(w.shutdown)  # after the helpers' cancels (direct) of the jobs in flight
        ui.transcript.source = self.turns.transcript_source
        ui.transcript.turnChosen.connect(self.turns.show_turn)
        ui.token_view.windowClicked.connect(self.show_window)
        ui.token_view.auditRequested.connect(self.analysis.audit.audit)  # "Audit this difference…" on its line
        self.sources.draftMade.connect(model.draftMade)
        self.serve.export.replayReady.connect(lambda path: self.analysis.show_compare().choose_conversation(path))
        self.file_drop = FileDrop(self.files.use_model, self.files.open_receipts, parent=self)
        self.setAcceptDrops(True)
        self.installEventFilter(self.file_drop)  # a GGUF or a receipts document dropped on the window
        model.commands = self._commands()
        self.menus.connect(model.commands)
        self.files.exported.connect(model.exported)
        self.analysis.compareReady.connect(model.compareReady)
        self.analysis.costReady.connect(model.costReady)
        wire_panel(ui.panel, self.run, files=self.files, sources=self.sources, worker=w,
                   load_model=self.load_selected_model)

    def _commands(self) -> WindowCommands:
        """The window's commands: its helpers' own methods (``WindowCommands``)."""
        files, run, analysis = self.files, self.run, self.analysis
        return WindowCommands(
            new_live_session=self.new_live_session, open_model=files.open_model_dialog,
            open_receipts=files.open_receipts_dialog, export_receipts=files.export_receipts_dialog,
            compare_receipts=self.comparison.compare_dialog, compare_receipts_file=self.comparison.compare_with,
            export_plots=files.export_plots_dialog, export_trace=files.export_trace_dialog,
            open_last_autosave=files.open_last_autosave, quit=self.close, run=run.run_clicked,
            pause=run.pause_clicked, step_window=run.step_window_clicked, step_token=run.step_token_clicked,
            stop=run.stop_clicked, resume=run.resume_clicked, serve=self.serve.toggle, start_run=run.start_run,
            open_receipts_file=files.open_receipts, export_receipts_file=files.export_receipts,
            export_trace_file=files.export_trace, export_plots_to=files.export_plots,
            compare=analysis.show_compare, run_compare=analysis.run_compare, measure_cost=analysis.measure,
            copy_server_flags=analysis.copy_server_flags, show_readme=self.help.show_readme,
            show_shortcuts=self.help.show_shortcuts, show_about=self.help.show_about)

    def _start(self, model_path: str | None, load: bool, offer_recovery: bool) -> None:
        """Start the engine thread, restore the settings, show an empty live session; load the model (``load``)
        and offer the last autosave (``offer_recovery``)."""
        self.setWindowTitle(TITLE)
        self.thread.start()
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
        if load:
            self.load_selected_model()
        if offer_recovery:
            QTimer.singleShot(0, self.files.offer_recovery)

    # -- the model's signals and state under the window's names ----------------------------------
    runFinished = property(lambda self: self.model.runFinished, doc="The model's ``runFinished``.")
    errorShown = property(lambda self: self.model.errorShown, doc="The model's ``errorShown``.")
    sourceRefused = property(lambda self: self.model.sourceRefused, doc="The model's ``sourceRefused``.")
    draftMade = property(lambda self: self.model.draftMade, doc="The model's ``draftMade``.")
    stateChanged = property(lambda self: self.model.stateChanged, doc="The model's ``stateChanged``.")
    requestRun = property(lambda self: self.model.runRequested, doc="The model's ``runRequested``.")
    requestLoad = property(lambda self: self.model.loadRequested, doc="The model's ``loadRequested``.")
    requestShutdown = property(lambda self: self.model.shutdownRequested, doc="The model's ``shutdownRequested``.")
    worker = property(lambda self: self.model.worker, doc="The engine worker (the model's).")
    thread = property(lambda self: self.model.thread, doc="The engine thread (the model's).")
    settings = property(lambda self: self.model.settings, doc="The QSettings (the model's).")
    session = property(lambda self: self.model.session, doc="The ``SessionRecord`` shown (the model's).")
    last_error = property(lambda self: self.model.last_error, doc="The last error shown (the model's).")
    data_dir = property(lambda self: self.model.data_dir, doc="The app's data folder (the model's).")

    # -- what the window shows of the run and the model ------------------------------------
    @property
    def state(self) -> str:
        """The window's state (``inspector.session.run_states``; the model's)."""
        return self.model.state

    @property
    def model_info(self) -> dict | None:
        """The loaded model's ``describe()``, or None (the model's)."""
        return self.model.model_info

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
        self.model.set_banner("Live session: pick an example prompt and press <b>Run</b> (Ctrl+R).", BANNER_HINT)
        self.setWindowTitle(TITLE)
        self.run.set_state(IDLE)

    # -- layout ---------------------------------------------------------------------
    def add_action(self, menu, text, slot, shortcuts=(), tip="") -> QAction:
        """A menu action with window-wide shortcuts (helpers add their menus' actions here too)."""
        a = QAction(text, self)
        if shortcuts:
            a.setShortcuts([QKeySequence(s) for s in shortcuts])
        a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if slot is not None:  # None: the window's own menus, connected once the helpers exist (``RunMenus``)
            a.triggered.connect(slot)
        if tip:
            a.setStatusTip(tip)
        menu.addAction(a)
        self.addAction(a)
        return a

    # -- sessions ---------------------------------------------------------------------
    def set_session(self, session: SessionRecord) -> None:
        """Show ``session`` in every view (records still in the worker's stream go to the one shown before):
        the model's ``show_session``."""
        self.model.show_session(session)

    def _session_shown(self, session: SessionRecord) -> None:
        """The model shows ``session``: the side panel and every view follow."""
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
        self.model.drain()
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

    # -- errors (the model's, in a box here) ----------------------------------------------------------
    def _open_error(self, title: str, message: str, icon) -> None:
        box = QMessageBox(QMessageBox.Icon.Critical if icon is None else icon, title, message,
                          QMessageBox.StandardButton.Ok, self)
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
            self.model.shutdownRequested.emit()
        else:  # the server uses the runtime the engine's shutdown closes: that waits for it
            self.serve.stop(then=self.model.shutdownRequested.emit)

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
