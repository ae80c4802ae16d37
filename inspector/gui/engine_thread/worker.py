"""The engine thread: a worker ``QObject`` living on a ``QThread``.

The worker loads the model (with progress) and drives one run at a time through
the run service (``inspector.session.run.SessionRun``), stepping under
``inspector.session.step_control.StepControl``. The run's immutable records
(``inspector.session.run_records``) go into one ``RecordStream`` the window drains
on its redraw tick; signals carry only the lifecycle (model loaded, run started,
state, hold, error, finished). It never touches a widget. The GUI controls it through the
thread-safe ``request_*`` methods (a condition variable), because the worker's
own event loop is busy while a run goes: Pause takes effect between windows,
Step token blocks in ``GenerationObserver.before_commit`` until released.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from inspector.engine import FaultPlan, Generation, RuntimeScheduler
from inspector.engine.errors import EngineError, NoChatTemplate, RequestCancelled, SpeculationUnsupported
from inspector.engine.llama_settings import DEFAULT_N_CTX
from inspector.gui.engine_thread.contention import Contention
from inspector.gui.engine_thread.stepping import TokenHold
from inspector.gui.look.wording import NO_TEMPLATE
from inspector.llama.context_settings import context_from_values, effective_context, loaded_context
from inspector.llama.devices import Offload, RpcUnavailable
from inspector.llama.model_file import ModelFileError
from inspector.llama.quantize import open_target
from inspector.receipts.autosave_folder import open_autosave
from inspector.serve.slots import WINDOW_SLOTS
from inspector.session.run_records import REFUSED, SPECULATION_REFUSED, STEP_FAILED, RecordStream, RunError
from inspector.session.run import RunRefused, RunRequest, SessionRun
from inspector.session.run_states import IDLE, LOADING, RUNNING
from inspector.session.step_control import StepControl
from inspector.sources.registry import close_source, describe_source

# Worker states (``stateChanged``): IDLE, LOADING, RUNNING, PAUSED, TOKEN_HOLD; ERROR and BUSY are
# the window's own (see ``inspector.session.run_states``).
log = logging.getLogger(__name__)


@dataclass
class ModelLoad:
    """The model a run needs and how it is loaded (``n_ctx`` in positions); a loaded model with other
    values is loaded again (``EngineWorker.is_loaded``)."""

    path: str
    n_ctx: int = DEFAULT_N_CTX
    n_threads: int | None = None
    """CPU threads for decoding (llama.cpp ``-t``); None = all cores (set on the loaded model, no reload)."""
    target_weights: str = ""
    """Run the model in this weight type ("" = as stored; ``inspector.llama.quantize.open_target``)."""
    offload: object = None
    """llama.cpp's offload settings (``inspector.llama.devices.Offload``; None = its defaults)."""
    context: dict | None = None
    """llama.cpp's context settings (``-b``, ``-ub``, ``-fa``, ``-ctk``, ``-ctv`` by their declared names,
    ``inspector.engine.llama_settings.CONTEXT``: ``ContextControls.values``). None: any."""


@dataclass
class Stepping:
    """How the window steps a run (``StepControl.begin_run``)."""

    break_on: frozenset = frozenset({"error"})
    start_paused: bool = False
    first_action: str = ""
    """``window`` or ``token``: with ``start_paused``, run one window / commit one token first."""
    begun: bool = False
    """The window already reset the stepping for this run (``StepControl.begin_run``) before asking for
    it, so a Stop pressed while the worker picks the run up is kept."""


@dataclass
class RunConfig:
    """What one run of the window needs: the headless run's request (``RunRequest``: prompt, settings,
    source, faults, baseline, draft max auto, conversation turn), the model and how it loads, the
    stepping, and the folder of its autosave (None: none)."""

    request: RunRequest
    model: ModelLoad
    stepping: Stepping = field(default_factory=Stepping)
    autosave_dir: Path | None = None


def _loading_note(config: RunRequest) -> str:
    """What the status says while a model-loading source (declared capability ``loads_model``) is made,
    naming its model files; "" for other sources, or one whose declaration cannot be read (the run
    then reports why)."""
    try:
        d = describe_source(config.source)
    except Exception:
        return ""
    if "loads_model" not in d.capabilities:
        return ""
    paths = [Path(str(config.source_options[o.name])).name for o in d.options or ()
             if o.kind == "path" and config.source_options.get(o.name)]
    what = f"the {config.source} source's model" + (f" {', '.join(paths)}" if paths else "")
    return f"loading {what} and checking it against the target…"


class EngineWorker(QObject):
    """Owns the runtime, the scheduler, the current ``Generation`` and the background sessions.

    Slots ``load_model`` and ``start_run`` run on the worker thread (call them
    through queued signals). ``request_*`` methods are called from the GUI
    thread: they go to ``step`` (``StepControl``, thread safe). ``faults`` is the
    current run's ``FaultPlan`` (thread safe).
    """

    modelProgress = Signal(float)
    modelLoaded = Signal(object)
    modelFailed = Signal(str, str)
    """(message, path): ``path`` could not be loaded; the runtime loaded before (if any) is kept."""
    runStarted = Signal(object)
    stateChanged = Signal(str, str)
    aboutToCommit = Signal(object)
    errorOccurred = Signal(object)
    """(``inspector.session.run_records.RunError``): what failed, and where the repair left the KV cache."""
    sourceFailed = Signal(str, str)
    """(source name, message): the run's proposal source could not be made (the run did not start)."""
    runFinished = Signal(str, object)
    """(reason, ``RunEnd`` or None when the run never started): the run ended; its records are in ``records``."""
    shutdownDone = Signal()
    """``shutdown`` ran (on this thread, after the job in flight returned): the window ends the thread."""
    baselineReady = Signal(object, str)
    """(``BaselineResult`` or None, error; "" when cancelled): the plain-decoding comparison of the run
    that just ended (emitted before ``runFinished``, after its ``BaselineDone`` record)."""

    def __init__(self, runtime=None, owns_runtime: bool = False) -> None:
        super().__init__()
        self.runtime = None
        self.scheduler: RuntimeScheduler | None = None
        self.contention: Contention | None = None
        self.owns_runtime = owns_runtime
        self.generation: Generation | None = None
        self.config: RunConfig | None = None
        self.faults = FaultPlan()
        self.source = None
        """The last run's proposal source (a draft source owns a second runtime: closed when replaced)."""
        self._baseline_cancel = threading.Event()
        self.hold = TokenHold(send_texts=self._send_texts, show=self.aboutToCommit.emit,
                              generation=lambda: self.generation)
        """What Step token shows when the run holds before a commit (``aboutToCommit``)."""
        self.step = StepControl(announce=self.stateChanged.emit, hold=self.hold.on_hold)
        """Pause / step window / step token / stop / break-on of the current run (``request_*`` delegate)."""
        self._background = 0
        self.run_background_max = 0
        """Most background sessions that ran during the current (or last) run: exported with its receipts."""
        self._running = False
        self._closing = False
        self.records = RecordStream()
        """Every record of the current run, in order (``inspector.session.run_records``): the window drains
        it on its redraw tick and before it handles a lifecycle signal."""
        self.run = None
        """The current (or last) run's ``SessionRun``."""
        if runtime is not None:
            self._set_runtime(runtime, owns=owns_runtime)

    # -- runtime -----------------------------------------------------------------
    def _set_runtime(self, runtime, owns: bool) -> None:
        self.runtime = runtime
        self.source_memory: dict = {}
        """What sources remember across this model's runs (``SourceContext.memory``: ngram-mod's pool,
        the suffix tree's earlier outputs); a new model starts empty."""
        self.owns_runtime = owns
        self.loaded_context = loaded_context(runtime.describe().get("llama_cpp")) if hasattr(runtime, "describe") \
            else None
        """The loaded runtime's context settings (``loaded_context``; None: not known)."""
        self.scheduler = RuntimeScheduler(runtime)
        self.contention = Contention(self.scheduler)
        self.contention.set_count(self._background)

    def _close_source(self) -> None:
        """Close the last run's source (worker thread; ``inspector.sources.registry.close_source``)."""
        source, self.source = self.source, None
        close_source(source)

    @property
    def running(self) -> bool:
        """A run is going (started and not finished; paused and held runs included)."""
        return self._running

    # -- stepping (GUI thread; ``StepControl`` is thread safe) -----------------------------
    def request_pause(self) -> None:
        """Pause at the next window boundary."""
        self.step.request_pause()

    def request_continue(self) -> None:
        """Leave pause / token-step mode and run on."""
        self.step.request_continue()

    def request_step_window(self) -> None:
        """Run exactly one decode step (a window or a plain step), then pause."""
        self.step.request_step_window()

    def request_step_token(self) -> None:
        """Step token: commit the held token and hold before the next one (or hold before the next)."""
        self.step.request_step_token()

    def request_resume(self) -> None:
        """After an error: ``generation.resume()`` then continue (runs on the worker thread)."""
        self.step.request_resume()

    def request_stop(self, closing: bool = False) -> None:
        """End the run: cancel the step in flight; the run finishes as ``stopped``.

        ``closing``: also refuse runs that were requested but not started yet.
        """
        def cancel() -> None:  # under the stepping lock, once the stop is set
            self._closing = self._closing or closing
            self._baseline_cancel.set()  # a comparison with plain decoding in flight stops too
            g = self.generation
            if g is not None and self._running:
                g.cancel()

        self.step.request_stop(then=cancel)

    def set_break_on(self, kinds) -> None:
        """Pause after a window that ends with one of ``kinds`` (``BREAK_KINDS`` entries)."""
        self.step.set_break_on(kinds)

    @Slot(str, int, str, object, object)
    def load_model(self, path: str, n_ctx: int = DEFAULT_N_CTX, weights: str = "", offload=None,
                   context: dict | None = None, then: str = "") -> bool:
        """Load a GGUF model (worker thread), in ``weights`` form when given (converted with llama.cpp's
        quantize first, cached: ``open_target``), with ``offload`` (``Offload``: with RPC servers the
        model runs in a child process) and ``context`` (llama.cpp's ``-b``, ``-ub``, ``-fa``, ``-ctk``,
        ``-ctv`` by their declared names, ``ContextControls.values``; None: ``DEFAULT_CONTEXT``); emits progress,
        then loaded or failed (a context llama.cpp refuses fails with its reason). ``then``: a run starts
        right after (its note): the window goes from LOADING to RUNNING with it, never through IDLE
        (Run would be enabled for the moment between)."""
        offload = offload if offload is not None else Offload()
        done = (RUNNING, then) if then else (IDLE, "")  # the window waits in LOADING for this
        if self.is_loaded(path, n_ctx, weights, offload, context):
            self.modelLoaded.emit(self.runtime.describe())
            self.stateChanged.emit(*done)
            return True
        what = "reloading" if self.runtime is not None else "loading"
        why = " (other context settings, context size or weights than the loaded model)" if self.runtime else ""
        self.stateChanged.emit(LOADING, f"{what} {Path(path).name}{why}")

        def converting(t: str) -> None:
            self.stateChanged.emit(LOADING, f"converting {Path(path).name} to {t} (llama.cpp quantize, once) …")

        try:
            n_batch, settings = context_from_values(context)  # the logical batch and a ContextSettings
            rt = open_target(path, weights, on_convert=converting, n_ctx=n_ctx,
                             n_seq_max=max(1, min(WINDOW_SLOTS, n_batch, n_ctx)),
                             progress=self.modelProgress.emit, offload=offload, n_batch=n_batch, **settings.values())
        except (ModelFileError, EngineError, ValueError, OSError, RpcUnavailable) as exc:
            # The model loaded before (if any) stays loaded and usable, unless it is gone (a lost RPC server).
            if self.runtime is not None and not getattr(self.runtime, "alive", True):
                self._drop_runtime()
            self.modelFailed.emit(str(exc), path)
            self.stateChanged.emit(IDLE, "")
            return False
        self._drop_runtime()
        self._set_runtime(rt, owns=True)
        self.modelLoaded.emit(rt.describe())
        self.stateChanged.emit(*done)
        return True

    def is_loaded(self, path: str, n_ctx: int, weights: str = "", offload=None,
                  context: dict | None = None) -> bool:
        """The loaded runtime is ``path`` in ``weights`` form ("" = the file as stored) with ``n_ctx``,
        ``offload`` (None: llama.cpp's defaults) and ``context`` (llama.cpp's context settings as
        llama.cpp applies them to ``n_ctx``: ``effective_context``; None: any), and still answers (a
        lost RPC server ends its child)."""
        rt = self.runtime
        if rt is None or rt.n_ctx != n_ctx or not getattr(rt, "alive", True):
            return False
        if getattr(rt, "offload", Offload()) != (offload if offload is not None else Offload()):
            return False
        if context is not None and self.loaded_context is not None \
                and effective_context(context, n_ctx) != effective_context(self.loaded_context, n_ctx):
            return False
        original = getattr(rt, "converted_from", None)
        if not weights:
            return original is None and str(rt.model_path) == str(path)
        source = str(original or rt.model_path)
        return source in (str(path), str(Path(path).resolve())) and rt.info.main_weight_type == weights

    def _drop_runtime(self) -> None:
        if self.contention is not None:
            self.contention.stop_all()
        self._close_source()  # a draft was checked against this target
        if self.runtime is not None and self.owns_runtime:
            self.runtime.close()
        self.runtime = None
        self.scheduler = None
        self.contention = None

    @Slot()
    def shutdown(self) -> None:
        """Stop background sessions, drop sessions, close an owned runtime (worker thread), then
        ``shutdownDone``."""
        if self.contention is not None:
            self.contention.stop_all()
        self._close_source()
        if self.runtime is not None and self.owns_runtime:
            self.runtime.close()
            self.runtime = None
        self.shutdownDone.emit()

    def set_background(self, n: int) -> None:
        """Run ``n`` background sessions (0..3) through the same scheduler."""
        self._background = n
        if self._running:  # between runs the last run's figure stays (its receipts may still be exported)
            self.run_background_max = max(self.run_background_max, n)
        if self.contention is not None:
            self.contention.set_count(n)

    # -- records (worker thread, or any thread for lock operations) -----------------------
    def _send_texts(self, ids) -> None:
        """Push the texts of ``ids`` the window has not been sent yet (before a hold shows them)."""
        run = self.run
        if run is not None and run.recording is not None:
            run.recording.texts(ids)

    # -- the run (worker thread) ---------------------------------------------------------
    @Slot(object)
    def start_run(self, config: RunConfig) -> None:
        """Load the model if needed, make the source, prefill, then step until finished or stopped
        (``inspector.session.run.SessionRun``; its records go to ``records``).

        When the source cannot be made (an incompatible draft, a bad file),
        ``sourceFailed`` is emitted and the previous run's records stay as they were."""
        if self._running or self._closing:
            return
        m, request = config.model, config.request
        loaded = (str(m.path), m.n_ctx, m.target_weights, m.offload, m.context)
        if not self.is_loaded(*loaded):
            if not self.load_model(*loaded, then="model loaded; starting the run …"):
                self.runFinished.emit("error", None)
                return
        rt = self.runtime
        threads = m.n_threads or os.cpu_count() or 1
        if rt.n_threads != threads:
            self.scheduler.execute("stats", -1, lambda r: r.set_threads(threads))
        folder = Path(config.autosave_dir) if config.autosave_dir is not None else None
        run = SessionRun(self.scheduler, replace(request, source_options=dict(request.source_options),
                                                 source_memory=self.source_memory),
                         self.records.push, before_commit=self.step.before_commit,
                         open_autosave=(lambda header: open_autosave(folder, header)) if folder else None,
                         background_sessions=lambda: self._background)
        try:
            run.tokenize()
        except RunRefused as exc:  # a model without a chat template: the window's raw box, not --raw
            no_template = isinstance(exc.cause, NoChatTemplate) or "has no chat template" in str(exc)
            self.errorOccurred.emit(RunError(NO_TEMPLATE if no_template else str(exc), REFUSED))
            self.runFinished.emit("error", None)
            return
        st = config.stepping
        if not st.begun:  # before the source is made: a Stop while a draft loads is kept
            self.step.begin_run(start_paused=st.start_paused, first_action=st.first_action, break_on=st.break_on)
        self._close_source()
        note = _loading_note(request)
        if note:
            self.stateChanged.emit(RUNNING, note)
        try:
            run.make_source()
        except RunRefused as exc:
            self.sourceFailed.emit(request.source, str(exc))
            return
        self.source = run.source
        self.config = config
        self.faults = request.faults
        try:
            gen = run.open()
        except RunRefused as exc:
            self.errorOccurred.emit(RunError(str(exc), REFUSED))
            self.runFinished.emit("error", None)
            return
        self.run = run
        self.generation = gen
        self.run_background_max = self._background
        self._running = True
        self.runStarted.emit({"session_id": gen.session_id, "prompt_tokens": len(run.prompt_tokens),
                              "autosave": str(run.autosave.writer.path) if run.autosave else "",
                              "templated": run.templated_text})
        reason = self._loop(gen)
        self._running = False
        end = run.end(reason, self.run_background_max)
        if request.baseline and reason != "error" and gen.generated_count > 0 and not self._closing:
            self._baseline_cancel.clear()
            self.stateChanged.emit(RUNNING, "comparing with plain decoding…")
            result = run.compare_with_plain(self._baseline_cancel)
            self.baselineReady.emit(result, run.baseline_error)
        self._close_source()  # now: a source's files (ngram-cache's -lcd, suffix's memory) are written at its end
        self.stateChanged.emit(IDLE, reason)
        self.runFinished.emit(reason, end)

    def _report(self, err: RunError) -> None:
        """An error of the running run: into its records (errors, KV length after the repair), then
        to the window."""
        self.records.push(err)
        self.errorOccurred.emit(err)

    def _loop(self, gen: Generation) -> str:
        if self.step.stopping:  # Stop pressed before the run began (loading, tokenizing, making the source):
            return "stopped"  # it ends at once, before start() would prefill and commit the first token
        try:
            gen.start()  # the prefill and its first token (a Stop while it is held cancels it)
        except RequestCancelled:
            return "stopped"
        except SpeculationUnsupported as exc:  # the model's cache cannot drop rejected rows
            self._report(RunError(str(exc), SPECULATION_REFUSED))
            return "error"
        except Exception as exc:
            self._report(RunError(str(exc), REFUSED))
            return "error"
        # Pauses, steps, break-on and resumes after errors: ``StepControl.run``.
        return self.step.run(gen, progress=self.run.progress,
                             error=lambda message, ended=False: self._report(
                                 RunError(message, STEP_FAILED, **self.run.kv_info(), ended=ended)))
