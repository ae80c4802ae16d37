"""The window model: what the main window shows and does, as state and signals, without a widget.

napari's split is the example: its ``ViewerModel`` holds the layers, dims and camera and the commands on
them, its ``QtViewer`` holds the widgets, each made with its slice of the model and listening to it. Here
``WindowModel`` holds the session the views show, the window's state (``inspector.session.run_states``),
what the window says (the status line, the banner, an error, the progress bar), the engine worker and its
thread, the settings and the folders. The window's helpers (run control, model line, run events, files,
analysis, serve, conversation) get the model and their own widgets; they change the model, and the widgets
follow its signals (the window connects the banner, the status line, the progress bar and the views once).
Tests drive the model and read it; a widget is looked at when the widget is what a test is about.

The model never blocks and never calls llama.cpp: a run or a load goes to the worker through queued signals
(``runRequested``, ``loadRequested``), as before. Every method runs on the GUI thread.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QSettings, Signal

from inspector.gui.model.commands import WindowCommands
from inspector.gui.model.record_feed import RecordFeed
from inspector.gui.model.request_log import RequestLog
from inspector.serve.receipts_dir import default_receipts_dir
from inspector.session.run_states import IDLE
from inspector.session.session_record import SessionRecord

BUSY_PROGRESS = 0
"""``show_progress``'s ``maximum`` for work of unknown length: the bar moves to and fro."""


class WindowModel(QObject):
    """The window's state and what it says (module docstring).

    ``worker``: the ``EngineWorker`` (moved to ``thread``, a ``QThread``); ``settings``: the QSettings the window
    reads and writes; ``data_dir``: the app's data folder (autosaves go in ``data_dir / "autosave"``);
    ``draft_dir``: where "Make draft from target" writes drafts (None: llama's own cache folder)."""

    sessionShown = Signal(object)
    """(``SessionRecord``): shown now in every view (the window resets its views and the side panel)."""
    redrawRequested = Signal(bool)
    """(every view): redraw from the shown session now (False: the token stream and the tab shown)."""
    statusChanged = Signal(str)
    """(plain text) of the status line."""
    bannerChanged = Signal(str, str, str)
    """(html, style, tooltip) of the banner above the tokens (``style``: a ``BANNER_*`` colour)."""
    errorRaised = Signal(str, str, object)
    """(title, message, ``QMessageBox.Icon`` or None for Critical): the window opens a box that does not block."""
    progressChanged = Signal(object, int)
    """(value or None, maximum): the status bar's progress (None: hidden; maximum ``BUSY_PROGRESS``: busy)."""
    stateChanged = Signal(str)
    """The window's state changed (``state``)."""
    runFinished = Signal(str, object)
    """(finish reason, ``RunEnd`` or None when the run never started), after every record of the run was shown."""
    errorShown = Signal(str)
    """(message): a run's error is shown in the banner."""
    sourceRefused = Signal(str)
    """(message): the run's proposal source could not be made; the previous session is shown again."""
    draftMade = Signal(str, str)
    """(path, error): "Make draft from target" finished ("" error on success)."""
    runRequested = Signal(object)
    """(``RunConfig``): queued to the worker's ``start_run``."""
    loadRequested = Signal(str, int, str, object, object)
    """(path, n_ctx, weights, offload, context): queued to the worker's ``load_model``."""
    shutdownRequested = Signal()
    """The window closes: the helpers cancel their jobs, then the worker's ``shutdown`` is queued (the window
    connects it last)."""
    settingsSaveAsked = Signal()
    """Remember the window's settings now (its geometry and the side panel's values)."""
    fileOpened = Signal(str, str)
    """(path, error): opening a receipts file ended ("" error when it is shown)."""
    titleChanged = Signal(str)
    """The window's title (a receipts file opened names it)."""
    exported = Signal(str, str)
    """(path written or "", error or ""): an export of the shown session (receipts, trace) ended."""
    compareReady = Signal(object, str)
    """(``CompareResult`` or None, note or error): a comparison of sources ended."""
    costReady = Signal(object, str)
    """(``CostModel`` or None, note or error): a cost model measurement ended."""
    receiptsCompared = Signal(object, str)
    """(``Comparison`` or None, error): File > Compare with receipts… ended (its dialog is open)."""

    def __init__(self, worker, thread, settings: QSettings, data_dir: Path, draft_dir: Path | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.worker, self.thread, self.settings = worker, thread, settings
        self.data_dir = Path(data_dir)
        self.draft_dir = Path(draft_dir) if draft_dir is not None else None
        self.session = SessionRecord()
        """The ``SessionRecord`` every view shows (``show_session`` changes it)."""
        self.feed = RecordFeed(worker.records)
        """The worker's records on their way to the shown live session (``drain``)."""
        self.state = IDLE
        """The window's state (``inspector.session.run_states``): the window's ``RunControl.set_state`` enters one
        (the controls follow it), then ``stateChanged`` tells."""
        self.state_detail = ""
        """What the state was entered with ("measuring the cost model…" for ``BUSY``)."""
        self.status_text = ""
        self.banner_html, self.banner_style, self.banner_tip = "", "", ""
        self.last_error = ""
        """The message of the last error shown, in a box or the banner ("" when none)."""
        self.model_info: dict | None = None
        """The loaded model's ``describe()`` (path, name, weights, n_ctx, ...), or None before one is loaded."""
        self.requests = RequestLog()
        """The traffic of the server the window runs or ran last (the Requests tab's rows and records)."""
        self.server = None
        """The ``InspectorServer`` the window serves with (Run > Serve), or None."""
        self.serve_address = ""
        """Where it serves (``http://127.0.0.1:PORT``), "" while it is not listening."""
        self.serve_receipts_dir: Path | None = default_receipts_dir()
        """Where the server writes each request's receipts document (None: none written); read when it starts."""
        self.commands: WindowCommands | None = None
        """What the window can be told to do (``WindowCommands``): the window fills it once its helpers exist."""
        self._busy: dict[str, object] = {}
        self.loader: Callable[[], bool] | None = None
        """What ``load_model`` calls: the window sets it once its run control and server exist."""
        self.runRequested.connect(worker.start_run)
        self.loadRequested.connect(worker.load_model)

    @property
    def autosave_dir(self) -> Path:
        """Where runs autosave (``data_dir / "autosave"``)."""
        return self.data_dir / "autosave"

    # -- the session shown ---------------------------------------------------------------------------
    def show_session(self, session: SessionRecord) -> None:
        """Show ``session`` in every view; the records still in the worker's stream go to the one shown before."""
        self.drain()
        self.session = session
        self.sessionShown.emit(session)

    def drain(self) -> None:
        """Apply the records the worker pushed since the last call to the shown live session (one read from a file
        takes none: ``RecordFeed``)."""
        self.feed.feed(self.session)

    def redraw(self) -> None:
        """Apply the new records, then redraw the token stream and the tab shown."""
        self.redrawRequested.emit(False)

    def redraw_all(self) -> None:
        """``redraw``, then every view, hidden tabs too (exports, tests)."""
        self.redrawRequested.emit(True)

    @property
    def serving(self) -> bool:
        """True while a server is starting, serving or stopping (``server`` is set; the state is ``SERVING``
        once it listens)."""
        return self.server is not None

    # -- the window's state ----------------------------------------------------------------------------
    def set_busy(self, name: str, job) -> None:
        """Record that ``name``'s long work is ``job`` (None: done): a draft being made (``"draft"``, its
        ``BackgroundJob``), a receipts file being read (``"opening"``, its path). Run waits for them."""
        if job is None:
            self._busy.pop(name, None)
        else:
            self._busy[name] = job

    def busy(self, name: str) -> bool:
        """True while ``name``'s long work goes (``set_busy``)."""
        return name in self._busy

    def busy_with(self, name: str):
        """What ``name``'s long work is (``set_busy``'s ``job``), or None."""
        return self._busy.get(name)

    # -- what the window says --------------------------------------------------------------------------
    def say(self, text: str) -> None:
        """Set the status line (plain text; a long one is elided, whole in its tooltip)."""
        self.status_text = text
        self.statusChanged.emit(text)

    def set_banner(self, text: str, style: str, tip: str = "") -> None:
        """Show ``text`` (rich text) in the banner above the tokens in ``style`` (a ``BANNER_*`` colour of
        ``inspector.gui.look.banner_colours``), ``tip`` as its tooltip. The banner is never hidden."""
        self.banner_html, self.banner_style, self.banner_tip = text, style, tip
        self.bannerChanged.emit(text, style, tip)

    def show_error(self, title: str, message: str, icon=None) -> None:
        """Show an error in a box that does not block (``icon``: a ``QMessageBox.Icon``; None: Critical, and
        Information for what is no failure); ``message`` becomes ``last_error``."""
        self.last_error = message
        self.errorRaised.emit(title, message, icon)

    def remember_error(self, message: str) -> None:
        """Keep ``message`` as ``last_error`` (an error the banner shows, not a box)."""
        self.last_error = message

    def show_progress(self, value: int | None, maximum: int = 100) -> None:
        """Show the status bar's progress at ``value`` of ``maximum`` (``BUSY_PROGRESS``: busy, no value), or
        hide it (None)."""
        self.progressChanged.emit(value, maximum)

    # -- commands the window carries out -------------------------------------------------------------
    def load_model(self) -> bool:
        """Load the side panel's model on the engine thread (Use this form, a dropped GGUF; while serving, serving
        stops first): the window's ``loader``. Returns whether the load started (False: refused, with a
        message; or no window is attached)."""
        return bool(self.loader()) if self.loader is not None else False

    def save_settings(self) -> None:
        """Ask the window to remember its settings now (``settingsSaveAsked``)."""
        self.settingsSaveAsked.emit()

    def set_title(self, title: str) -> None:
        """Ask the window to show ``title`` (``titleChanged``)."""
        self.titleChanged.emit(title)
