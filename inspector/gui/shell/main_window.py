"""The inspector's main window: wiring between the control panel, the engine
worker (on its own ``QThread``) and the views.

The worker appends a run's immutable records to its ``RecordStream``; a
``QTimer`` at ``REDRAW_HZ`` applies them to the shown ``SessionRecord``
(``inspector.session.record``) and redraws the views from it. The GUI thread never calls
llama.cpp and never waits for the worker (except when the window closes).
"""

from __future__ import annotations

import html

import importlib

from pathlib import Path

from PySide6.QtCore import QByteArray, QSettings, Qt, QThread, QTimer, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMessageBox

from inspector.engine.faults import Fault, FaultPlan
from inspector.engine.stats import decode_tokens_per_s
from inspector.gui.shell import none_refcount
from inspector.gui.engine_thread import worker as W
from inspector.gui.shell.analysis_actions import AnalysisActions
from inspector.gui.shell.help_menu import HelpActions
from inspector.gui.tokens.conversation_bar import ConversationActions
from inspector.gui.files.actions import FileActions
from inspector.gui.panel.source_actions import SourceActions
from inspector.gui.shell.model_events import ModelEvents
from inspector.gui.shell.run_control import (
    ACTIVE_STATES,
    BANNER_DONE,
    BANNER_ERROR,
    BANNER_PAD,
    RunControl,
)
from inspector.gui.files.session_store import app_data_dir
from inspector.session.record import SessionRecord
from inspector.session.records import REFUSED, SPECULATION_REFUSED, RunEnd, RunError
from inspector.gui.shell.layout import build_ui
from inspector.gui.look.wording import count_noun

REDRAW_HZ = 15
"""Redraws a second: each takes a core from llama.cpp's decode threads (25 Hz: 8-10% of a core, 15 Hz: 5-7%)."""


class MainWindow(ModelEvents, RunControl, QMainWindow):
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
        self.setWindowTitle("spec-inspector — speculative decoding on llama.cpp")
        self.setAcceptDrops(True)
        self.settings = settings if settings is not None else QSettings("spec-inspector", "spec-inspector")
        self.data_dir = Path(data_dir) if data_dir is not None else app_data_dir()
        self.state = W.IDLE
        self.session = SessionRecord()
        self.last_error = ""
        self.model_info: dict | None = runtime.describe() if runtime is not None else None
        self._closing = False
        self.draft_dir = Path(draft_dir) if draft_dir is not None else None
        self._hint_on_load = False  # show "Model loaded. …" when the load in flight ends (not a run's load)
        self._before_run = None  # (session, faults) shown before the last start_run: restored if its source fails
        self._run_status: str | None = None  # "source ngram · up to 128 tokens" while a live run goes
        self.armed_faults = FaultPlan()
        """Faults pressed while no run goes: the next run starts with them (first opportunity)."""

        # Import the chat-template formatter (jinja2) now: importing it on the worker
        # during the first run holds the GIL long enough to stall the event loop.
        importlib.import_module("llama_cpp.llama_chat_format")

        # Worker thread
        self.worker = W.EngineWorker(runtime, owns_runtime=False)
        self.thread = QThread(self)
        self.thread.setObjectName("spec-inspector-engine")
        self.worker.moveToThread(self.thread)
        self.requestRun.connect(self.worker.start_run)
        self.requestLoad.connect(self.worker.load_model)
        self.requestShutdown.connect(self.worker.shutdown)
        w = self.worker
        w.modelProgress.connect(self._model_progress)
        w.modelLoaded.connect(self._model_loaded)
        w.modelFailed.connect(self._model_failed)
        w.runStarted.connect(self._run_started)
        w.stateChanged.connect(self._worker_state)
        # The run's records arrive in ``worker.records``; ``drain_records`` applies them on this
        # thread (every redraw tick, and first thing in each lifecycle handler below).
        w.aboutToCommit.connect(self._about_to_commit)
        w.errorOccurred.connect(self._error)
        w.sourceFailed.connect(self._source_failed)
        w.runFinished.connect(self._run_finished)
        self.thread.start()

        self._build_ui()
        self.files = FileActions(self)
        self.turns = ConversationActions(self, self.conversation_bar)
        self.sources = SourceActions(self)
        self._build_menus()
        self.analysis = AnalysisActions(self)
        self.help = HelpActions(self)
        self._wire_controls()
        self._restore_settings()
        if model_path:
            self.panel.add_recent_model(str(Path(model_path).resolve()))
        self.set_session(SessionRecord())
        if self.model_info is not None:
            self._hint_on_load = True
            self._model_loaded(self.model_info)
        self.timer = QTimer(self)
        self.timer.setInterval(1000 // REDRAW_HZ)
        self.timer.timeout.connect(self.redraw)
        self.timer.start()
        self.set_state(W.IDLE)
        if runtime is None and load_at_start:
            self.load_selected_model()
        if offer_recovery:
            QTimer.singleShot(0, self.files.offer_recovery)

    # -- layout ---------------------------------------------------------------------
    def _build_ui(self) -> None:
        build_ui(self)

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

    def _build_menus(self) -> None:
        f = self.menuBar().addMenu("&File")
        self.act_new = self.add_action(f, "New live session", self.new_live_session, ["Ctrl+N"],
                                       "leave the opened receipts and enable the run controls again")
        self.act_open_model = self.add_action(f, "Open GGUF model…", self.files.open_model_dialog)
        self.act_open = self.add_action(f, "Open receipts…", self.files.open_receipts_dialog, ["Ctrl+O"])
        self.act_export = self.add_action(f, "Export receipts…", self.files.export_receipts_dialog, ["Ctrl+E"])
        self.act_png = self.add_action(f, "Export plots as PNG…", self.files.export_plots_dialog, ["Ctrl+Shift+E"])
        self.act_trace = self.add_action(
            f, "Export Perfetto trace…", self.files.export_trace_dialog, ["Ctrl+Shift+T"],
            "a Chrome trace of the session: open it in https://ui.perfetto.dev")
        self.act_recover = self.add_action(f, "Open last autosave", self.files.open_last_autosave)
        f.addSeparator()
        self.add_action(f, "Quit", self.close, ["Ctrl+Q"])
        r = self.menuBar().addMenu("&Run")
        self.act_run = self.add_action(r, "Run / continue", self.run_clicked, ["Ctrl+R"])
        self.act_pause = self.add_action(r, "Pause", self.pause_clicked, ["Space", "Ctrl+P"])
        self.act_step_window = self.add_action(r, "Step window", self.step_window_clicked, ["F10", "Ctrl+W"])
        self.act_step_token = self.add_action(r, "Step token", self.step_token_clicked, ["F11", "Ctrl+T"])
        self.act_stop = self.add_action(r, "Stop", self.stop_clicked, ["Esc"])
        self.act_resume = self.add_action(r, "Resume after error", self.resume_clicked, ["Ctrl+Shift+R"])
        tb = self.addToolBar("Run")
        tb.setObjectName("run-toolbar")
        tb.setMovable(False)
        for a, label in ((self.act_run, "▶ Run"), (self.act_pause, "Pause"), (self.act_step_window, "Step window"),
                         (self.act_step_token, "Step token"), (self.act_stop, "■ Stop"), (self.act_resume, "Resume")):
            a.setIconText(label)
            tb.addAction(a)
        tb.addSeparator()
        tb.addAction(self.act_open)
        tb.addAction(self.act_export)

    def _wire_controls(self) -> None:
        p = self.panel
        p.run.clicked.connect(self.run_clicked)
        p.pause.clicked.connect(self.pause_clicked)
        p.step_window.clicked.connect(self.step_window_clicked)
        p.step_token.clicked.connect(self.step_token_clicked)
        p.stop.clicked.connect(self.stop_clicked)
        p.resume.clicked.connect(self.resume_clicked)
        p.open_model.clicked.connect(self.files.open_model_dialog)
        p.model_combo.activated.connect(lambda _i: self.load_selected_model())
        p.weights.activated.connect(lambda _i: self.load_selected_model())  # converts (once) and loads now
        for source, name, button in p.option_buttons():  # Open… of every path option (draft model, receipts, ...)
            button.clicked.connect(lambda _=False, s=source, n=name: self.sources.open_option_file(s, n))
        p.make_draft.clicked.connect(self.sources.make_draft_clicked)
        p.fault_cancel.clicked.connect(lambda: self.inject(Fault("cancel")))
        p.fault_callback.clicked.connect(lambda: self.inject(Fault("callback_error", token=p.fault_token.value())))
        p.fault_trim.clicked.connect(lambda: self.inject(Fault("trim_failure")))
        p.fault_drift.clicked.connect(lambda: self.inject(Fault("position_drift")))
        p.background.valueChanged.connect(lambda n: self.worker.set_background(n))  # direct: the worker may be busy
        for cb in p.break_boxes.values():
            cb.toggled.connect(lambda _=None: self.worker.set_break_on(p.break_on()))

    # -- sessions ---------------------------------------------------------------------
    def set_session(self, session: SessionRecord) -> None:
        """Show ``session`` in every view (records still in the worker's stream go to the one shown before)."""
        self.drain_records()
        self.session = session
        if session.origin == "live":
            self.panel.show_live()
        else:  # the file's settings, read only (``set_state`` disables the inputs)
            self.panel.show_saved(session.settings, session.prompt_text, session.model_name, session.model_weights,
                                  session.header.model.get("llama_cpp") if session.header is not None else None)
        for v in (self.token_view, self.window_detail, self.timeline, self.lock_plots, self.stats, self.event_log):
            v.set_session(session)
        if session.origin == "live" and self.model_info is not None:
            self._show_model(self.model_info)

    def redraw(self) -> None:
        """Apply the new records, then redraw what changed (called by the timer at ``REDRAW_HZ``)."""
        none_refcount.top_up()
        self.drain_records()
        self.token_view.refresh()
        self.window_detail.refresh()
        current = self.tabs.currentWidget()
        for v in (self.transcript, self.timeline, self.lock_plots, self.stats, self.event_log, self.cost_view):
            if v is current or not self.isVisible():
                v.refresh()
        s = self.session
        # Texts are set only when they change: a label whose text changes asks its
        # parents to lay out again, which repaints much of the window.
        counts = (f"{count_noun(len(s.tokens), 'token')} · {count_noun(len(s.receipts), 'window')} · "
                  f"{count_noun(s.plain_steps, 'plain step')} · {count_noun(len(s.discards), 'discard')} · "
                  "canonical position "
                  f"{s.canonical_position if s.canonical_position is not None else '—'}")
        if counts != self.status_counts.text():
            self.status_counts.setText(counts)
            tps = decode_tokens_per_s(len(s.tokens), s.decode_elapsed_us)  # not the whole summary at 15 Hz
            self.status_speed.setText(f"{tps:.1f} tokens/s" if tps is not None else "")
        running = self.state in ACTIVE_STATES
        pending = self.worker.faults.pending() if running else self.armed_faults.pending()
        text = (("pending: " if running else "armed for the next run: ") +
                ", ".join(f.kind + (f"@token {f.token}" if f.kind == "callback_error" else "")
                          for f in pending)) if pending else ""
        if text != self.panel.pending_faults.text():
            self.panel.pending_faults.setText(text)

    def refresh_all(self) -> None:
        """Redraw every view now (tests and export)."""
        self.redraw()
        for v in (self.transcript, self.timeline, self.lock_plots, self.stats, self.event_log, self.cost_view):
            v.refresh()

    def show_window(self, w: int) -> None:
        """Show window ``w`` (1-based) in the Windows tab."""
        self.tabs.setCurrentWidget(self.window_detail)
        self.window_detail.select_window(w)

    # -- worker signals -----------------------------------------------------------------------
    def drain_records(self) -> None:
        """Apply the records the worker appended since the last call to the shown live session
        (a session read from a file takes none; they belong to no shown run)."""
        items = self.worker.records.drain()
        if items and self.session.origin == "live":
            self.session.extend(items)

    def _restore_before_run(self) -> None:
        """Show the session (and faults) shown before the last ``start_run`` again, if that run never
        started (its model or source could not be made)."""
        if self._before_run is not None:
            session, faults = self._before_run
            self.worker.faults = faults
            self.set_session(session)
            self.refresh_all()
        self._before_run = None

    def _source_failed(self, name: str, message: str) -> None:
        """The worker could not make the run's source: show why, and the previous session again."""
        self._restore_before_run()
        self._run_status = None
        self.load_progress.hide()
        self.set_state(W.IDLE, f"{name} source refused")
        self.set_banner(f"<b>The run did not start:</b> {html.escape(message)}. Change the {html.escape(name)} "
                        "source's options or choose another proposal source, then <b>Run</b>.", BANNER_ERROR)
        title = "Draft model refused" if "refused" in message and name == "draft" else \
            f"Cannot use the {name} proposal source"
        self.show_error(title, message)
        self.sourceRefused.emit(message)

    def _run_started(self, info: dict) -> None:
        self._before_run = None
        self.drain_records()  # the run's header
        self.panel.show_draft_max_used(self.session.settings)
        if info.get("autosave"):
            self.settings.setValue("autosave/path", info["autosave"])
            self.settings.setValue("autosave/clean", False)
            self.settings.sync()
        self.set_state(W.PAUSED if self.state == W.PAUSED else self.state if self.state != W.LOADING else W.RUNNING)

    def _about_to_commit(self, info: dict) -> None:
        """Step token holds before a commit: the token view names the token and what it is
        (accepted proposal token, correction, bonus token, plain step); the Windows tab shows
        the window being committed (no receipt yet)."""
        self.redraw()  # drains the records first: the held token's text is among them
        self.token_view.show_hold(info)
        self.window_detail.show_in_flight(info)

    def _error(self, err: RunError) -> None:
        """A run's error: a dialog when the run did not start, else the banner with where the
        repair left the KV cache (the run waits for Resume)."""
        self.drain_records()
        message = err.message
        self.last_error = message
        if err.kind == SPECULATION_REFUSED:
            self.show_error("Speculative decoding is not supported by this model",
                            message + "\n\nChoose the proposal source “none” to decode plainly.")
            return
        if err.kind == REFUSED:
            self.show_error("Run failed", message)
            return
        if err.ended:  # the runtime is gone (a lost RPC server): the run is over, its receipts stay
            self.set_banner(f"<b>Error:</b> {html.escape(message)}<br>The run ended here; its receipts are kept "
                            "(Export receipts). Start the server again, then <b>Run</b>.", BANNER_ERROR)
            self.error_info = err
            self.redraw()
            self.errorShown.emit(message)
            return
        if err.retired:
            repaired = "the session was retired (the repair failed); Resume opens a new session prefilled with the canonical stream"
        elif err.repaired:
            repaired = f"repaired: KV length {err.kv_length} = canonical position {err.canonical_position}"
        elif err.kv_length is None:
            repaired = f"KV length unknown (it could not be read), canonical position {err.canonical_position}"
        else:
            repaired = f"KV length {err.kv_length} ≠ canonical position {err.canonical_position}"
        self.set_banner(f"<b>Error:</b> {message}<br>{repaired}. Press <b>Resume</b> to continue.", BANNER_ERROR)
        self.error_info = err
        self.redraw()
        if self.state != W.ERROR:
            self.set_state(W.ERROR, message)
        self.errorShown.emit(message)

    def _run_finished(self, reason: str, end: RunEnd | None) -> None:
        """The run ended (``end`` None: it never started)."""
        self._run_status = None
        self.settings.setValue("autosave/clean", True)
        self.settings.sync()
        self.finish_info = end
        self.redraw()  # drains the run's last records (its end, a comparison with plain decoding)
        if reason != "error" and end is not None:
            self.set_banner(f"Finished: <b>{reason}</b> · {count_noun(len(self.session.tokens), 'token')} · "
                            f"KV length {end.kv_length} (canonical position {end.canonical_position})", BANNER_DONE)
        elif self.state != W.ERROR and (end is None or not (self.session.tokens or end.errors)):  # it never ran
            self.set_banner(f"<b>The run did not start:</b> {html.escape(self.last_error or 'see the message')}",
                            BANNER_ERROR)
        self.set_state(W.IDLE, reason)
        self.runFinished.emit(reason, end)

    def set_banner(self, text: str, style: str) -> None:
        """Show ``text`` in the banner above the tokens (``style``: one of the ``BANNER_*`` colors).
        The banner is never hidden, so its space stays and the view below does not jump."""
        self.banner.setText(text)
        self.banner.setStyleSheet(f"{style};padding:{BANNER_PAD}px")
        self.banner.show()

    # -- dialogs ---------------------------------------------------------------------------
    def show_error(self, title: str, message: str, icon=QMessageBox.Icon.Critical) -> None:
        """Show an error (``icon``: Information for what is no failure) without blocking (a window-modal
        box); kept in ``last_error``."""
        self.last_error = message
        box = QMessageBox(icon, title, message, QMessageBox.StandardButton.Ok, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.error_box = box

    # -- drag and drop ---------------------------------------------------------------------
    def dragEnterEvent(self, ev) -> None:
        if any(u.toLocalFile().lower().endswith((".gguf", ".json", ".jsonl")) for u in ev.mimeData().urls()):
            ev.acceptProposedAction()

    def dropEvent(self, ev) -> None:
        for u in ev.mimeData().urls():
            path = u.toLocalFile()
            if path.lower().endswith(".gguf"):
                self.files.use_model(path)
            elif path.lower().endswith((".json", ".jsonl")):
                self.files.open_receipts(path)
            break

    # -- settings and closing ----------------------------------------------------------------
    def _restore_settings(self) -> None:
        s = self.settings
        geo = s.value("window/geometry")
        if isinstance(geo, QByteArray) and not geo.isEmpty():
            self.restoreGeometry(geo)
        for key, split in (("window/main_split", self.main_split), ("window/right_split", self.right_split),
                           ("window/detail_split", self.window_detail.splitter)):
            v = s.value(key)
            if isinstance(v, QByteArray) and not v.isEmpty():
                split.restoreState(v)
                if split is self.right_split:  # the user's split from last time, not the first start's
                    self.stream_split.stop()
        values = {}
        s.beginGroup("controls")
        for k in s.childKeys():
            values[k] = s.value(k)
        s.endGroup()
        if not values.get("prompt"):
            values.setdefault("prompt", "")
        self.panel.apply_values(values)
        if not self.panel.prompt.toPlainText():
            try:
                self.panel.choose_example("copy-with-corrections")
            except KeyError:
                pass

    def save_settings(self) -> None:
        s = self.settings
        s.setValue("window/geometry", self.saveGeometry())
        s.setValue("window/main_split", self.main_split.saveState())
        s.setValue("window/right_split", self.right_split.saveState())
        s.setValue("window/detail_split", self.window_detail.splitter.saveState())
        s.beginGroup("controls")
        for k, v in self.panel.values().items():
            s.setValue(k, v)
        s.endGroup()
        s.sync()

    def shutdown(self, timeout_ms: int = 30000) -> None:
        """Stop the run and background sessions, then end the worker thread (blocks; used at close)."""
        if self._closing:
            return
        self._closing = True
        self.timer.stop()
        self.worker.request_stop(closing=True)
        self.requestShutdown.emit()
        self.thread.quit()
        self.thread.wait(timeout_ms)
        self.files.wait()
        if self.sources.job is not None:
            self.sources.job.wait(60)

    def closeEvent(self, ev) -> None:
        self.save_settings()
        self.shutdown()
        super().closeEvent(ev)
