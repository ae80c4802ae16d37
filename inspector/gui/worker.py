"""The engine thread: a worker ``QObject`` living on a ``QThread``.

The worker loads the model (with progress), tokenizes the prompt, runs the
``Generation`` step by step and forwards the engine's immutable records
(``EngineEvent``, ``WindowReceipt``, ``Discard``, ``LockOperation``) through
signals. It never touches a widget. The GUI controls it through the
thread-safe ``request_*`` methods (a condition variable), because the worker's
own event loop is busy while a run goes: Pause takes effect between windows,
Step token blocks in ``GenerationObserver.before_commit`` until released.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from inspector.engine import FaultPlan, Generation, GenerationObserver, GenerationSettings, RuntimeScheduler
from inspector.engine.errors import EngineError, SpeculationUnsupported
from inspector.engine.proposal import Proposal
from inspector.engine.receipt import Discard, EngineEvent, WindowReceipt
from inspector.engine.settings import DEFAULT_N_CTX
from inspector.gui.contention import Contention
from inspector.gui.session_store import open_autosave
from inspector.gui.control_rules import BUSY, ERROR, IDLE, LOADING, PAUSED, RUNNING, TOKEN_HOLD  # noqa: F401
from inspector.gui.stepping import SteppingControl
from inspector.session.step_control import BREAK_KINDS, MAX_AUTO_RESUMES, StepControl  # noqa: F401

# Worker states (``stateChanged``): IDLE, LOADING, RUNNING, PAUSED, TOKEN_HOLD; ERROR and BUSY are
# the window's own (see ``inspector.gui.control_rules``).
log = logging.getLogger(__name__)


@dataclass
class RunConfig:
    """What one run needs. Token counts in tokens; ``n_ctx`` in positions."""

    model_path: str
    prompt_text: str
    settings: GenerationSettings
    source: str = "ngram"
    """A name of ``inspector.sources.registry.available_sources()``, or ``none`` (plain decoding)."""
    source_options: dict = field(default_factory=dict)
    """Keyword options for the source's factory (``ngram``: n_max, n_min; ``scripted``: script;
    ``draft``: draft_model, draft_max, draft_min, p_min; ``replay``: replay; others: none)."""
    raw: bool = False
    break_on: frozenset = frozenset({"error"})
    start_paused: bool = False
    first_action: str = ""
    """``window`` or ``token``: with ``start_paused``, run one window / commit one token first."""
    autosave_dir: Path | None = None
    n_ctx: int = DEFAULT_N_CTX
    """Context size (positions); a loaded model with another size is loaded again."""
    n_threads: int | None = None
    """CPU threads for decoding (llama.cpp ``-t``); None = all cores."""
    faults: FaultPlan = field(default_factory=FaultPlan)
    """The run's fault plan; the GUI adds ``Fault`` objects to it from its thread."""
    baseline: bool = False
    """After the run finishes or is stopped, decode the same prompt plainly and emit ``baselineReady``."""


class _Observer(GenerationObserver):
    def __init__(self, worker: "EngineWorker") -> None:
        self.w = worker

    def on_event(self, event: EngineEvent) -> None:
        self.w._on_event(event)

    def on_proposal(self, window: int, proposal: Proposal) -> None:
        self.w._on_proposal(window, proposal)

    def on_receipt(self, receipt: WindowReceipt) -> None:
        self.w._on_receipt(receipt)

    def on_discard(self, discard: Discard) -> None:
        self.w._on_discard(discard)

    def before_commit(self, window, row, token, position) -> None:
        self.w._before_commit(window, row, token, position)


class EngineWorker(SteppingControl, QObject):
    """Owns the runtime, the scheduler, the current ``Generation`` and the background sessions.

    Slots ``load_model`` and ``start_run`` run on the worker thread (call them
    through queued signals). ``request_*`` methods are called from the GUI
    thread. ``faults`` is the current run's ``FaultPlan`` (thread safe).
    """

    modelProgress = Signal(float)
    modelLoaded = Signal(object)
    modelFailed = Signal(str, str)
    """(message, path): ``path`` could not be loaded; the runtime loaded before (if any) is kept."""
    runStarted = Signal(object)
    stateChanged = Signal(str, str)
    texts = Signal(object)
    proposal = Signal(object)
    event = Signal(object)
    receipt = Signal(object)
    discard = Signal(object)
    lockOperation = Signal(object)
    progress = Signal(object)
    aboutToCommit = Signal(object)
    errorOccurred = Signal(str, object)
    sourceFailed = Signal(str, str)
    """(source name, message): the run's proposal source could not be made (the run did not start)."""
    runFinished = Signal(str, object)
    baselineReady = Signal(object, str)
    """(``BaselineResult`` or None, error): the plain-decoding comparison of the run that just ended
    (emitted before ``runFinished``)."""

    def __init__(self, runtime=None, owns_runtime: bool = False) -> None:
        super().__init__()
        self.runtime = None
        self.scheduler: RuntimeScheduler | None = None
        self.contention: Contention | None = None
        self.owns_runtime = owns_runtime
        self.generation: Generation | None = None
        self.config: RunConfig | None = None
        self.faults = FaultPlan()
        self.templated_text: str | None = None
        self.source = None
        """The last run's proposal source (a draft source owns a second runtime: closed when replaced)."""
        self.source_settings: dict = {}
        self._baseline_cancel = threading.Event()
        self.step = StepControl(announce=self.stateChanged.emit, hold=self._on_hold)
        """Pause / step window / step token / stop / break-on of the current run (``request_*`` delegate)."""
        self._background = 0
        self.run_background_max = 0
        """Most background sessions that ran during the current (or last) run: exported with its receipts."""
        self._running = False
        self._closing = False
        self._sent_texts: set[int] = set()
        self._autosave = None
        """The run's ``AutosaveWriter`` (``inspector.receipts.autosave``), or None."""
        if runtime is not None:
            self._set_runtime(runtime, owns=owns_runtime)

    # -- runtime -----------------------------------------------------------------
    def _set_runtime(self, runtime, owns: bool) -> None:
        self.runtime = runtime
        self.owns_runtime = owns
        self.scheduler = RuntimeScheduler(runtime)
        self.scheduler.add_listener(self.lockOperation.emit)
        self.contention = Contention(self.scheduler)
        self.contention.set_count(self._background)
        self._sent_texts = set()

    def _close_source(self) -> None:
        """Close the last run's source (worker thread): ``close()``, then a draft's own runtime."""
        source, self.source = self.source, None
        if source is None:
            return
        try:
            close = getattr(source, "close", None)
            if close is not None:
                close()
        except Exception:
            log.exception("closing proposal source %s failed", getattr(source, "name", source))
        draft = getattr(source, "draft", None)
        if draft is not None and hasattr(draft, "close"):
            try:
                draft.close()
            except Exception:
                log.exception("closing the draft runtime failed")

    @property
    def running(self) -> bool:
        return self._running

    @Slot(str, int)
    def load_model(self, path: str, n_ctx: int = DEFAULT_N_CTX) -> bool:
        """Load a GGUF model (worker thread); emits progress, then loaded or failed."""
        from inspector.llama.model_file import ModelFileError
        from inspector.llama.runtime import LlamaRuntime

        if self.runtime is not None and str(self.runtime.model_path) == str(path) and self.runtime.n_ctx == n_ctx:
            self.modelLoaded.emit(self.runtime.describe())
            self.stateChanged.emit(IDLE, "")  # the window waits in LOADING for this
            return True
        self.stateChanged.emit(LOADING, f"loading {Path(path).name}")
        try:
            rt = LlamaRuntime(path, n_ctx=n_ctx, n_batch=512, n_seq_max=4, progress=self.modelProgress.emit)
        except (ModelFileError, EngineError, ValueError, OSError) as exc:
            # The model loaded before (if any) stays loaded and usable.
            self.modelFailed.emit(str(exc), path)
            self.stateChanged.emit(IDLE, "")
            return False
        self._drop_runtime()
        self._set_runtime(rt, owns=True)
        self.modelLoaded.emit(rt.describe())
        self.stateChanged.emit(IDLE, "")
        return True

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
        """Stop background sessions, drop sessions, close an owned runtime (worker thread)."""
        if self.contention is not None:
            self.contention.stop_all()
        self._close_source()
        if self.runtime is not None and self.owns_runtime:
            self.runtime.close()
            self.runtime = None

    def set_background(self, n: int) -> None:
        """Run ``n`` background sessions (0..3) through the same scheduler."""
        self._background = n
        if self._running:  # between runs the last run's figure stays (its receipts may still be exported)
            self.run_background_max = max(self.run_background_max, n)
        if self.contention is not None:
            self.contention.set_count(n)

    # -- observer callbacks (worker thread, or background for lock ops) -------------------
    def _send_texts(self, ids) -> None:
        rt = self.runtime
        new = {t: rt.token_text(t) for t in ids if t not in self._sent_texts and 0 <= t < rt.n_vocab}
        if new:
            self._sent_texts.update(new)
            self.texts.emit(new)

    def _on_event(self, ev: EngineEvent) -> None:
        if ev.token is not None:
            self._send_texts((ev.token,))
        self.event.emit(ev)

    def _on_proposal(self, window: int, p: Proposal) -> None:
        self._send_texts(p.token_ids)
        self.proposal.emit((window, tuple(p.token_ids)))

    def _on_receipt(self, r: WindowReceipt) -> None:
        self._send_texts(r.verification_row_predictions)
        self.receipt.emit(r)

    def _on_discard(self, d: Discard) -> None:
        if d.partial is not None:  # a failed window's rows show their predictions' texts
            self._send_texts(d.partial.verification_row_predictions)
            self._send_texts(d.proposal_token_ids)
        self.discard.emit(d)

    # -- the run (worker thread) ---------------------------------------------------------
    @Slot(object)
    def start_run(self, config: RunConfig) -> None:
        """Load the model if needed, make the source, prefill, then step until finished or stopped.

        When the source cannot be made (an incompatible draft, a bad file),
        ``sourceFailed`` is emitted and the previous run's records stay as they were."""
        if self._running or self._closing:
            return
        if self.runtime is None or str(self.runtime.model_path) != str(config.model_path) \
                or self.runtime.n_ctx != config.n_ctx:
            if not self.load_model(str(config.model_path), config.n_ctx):
                self.runFinished.emit("error", {})
                return
        rt = self.runtime
        threads = config.n_threads or os.cpu_count() or 1
        if rt.n_threads != threads:
            self.scheduler.execute("stats", -1, lambda r: r.set_threads(threads))
        # Token texts are sent once per run: every run fills a new SessionData on the GUI side.
        self._sent_texts = set()
        try:
            templated_text = None if config.raw else rt.chat_prompt(config.prompt_text)
            tokens = rt.prompt_tokens(config.prompt_text, raw=config.raw)
            if not tokens:
                raise EngineError("the prompt is empty after tokenization")
        except (EngineError, ValueError) as exc:
            self.errorOccurred.emit(str(exc), {})
            self.runFinished.emit("error", {})
            return
        # Before the source is made: a Stop while a draft loads is kept.
        self.step.begin_run(start_paused=config.start_paused, first_action=config.first_action,
                            break_on=config.break_on)
        self._close_source()
        if config.source == "draft":
            name = Path(str(config.source_options.get("draft_model", ""))).name
            self.stateChanged.emit(RUNNING, f"loading the draft model {name} and checking it against the target…")
        try:
            source = self.make_source(config)
        except Exception as exc:  # third-party factories may raise anything: a dialog, never a crash
            self.sourceFailed.emit(config.source, str(exc) or type(exc).__name__)
            return
        self.source = source
        self.config = config
        self.templated_text = templated_text
        self.faults = config.faults
        try:
            self.source_settings = source.settings() if source is not None and hasattr(source, "settings") else {}
        except Exception:
            self.source_settings = {}
        sid = self._open_session(config.settings)
        if sid is None:
            self.errorOccurred.emit("no free KV sequence for the run: lower the background sessions", {})
            self.runFinished.emit("error", {})
            return
        self._autosave = None
        if config.autosave_dir is not None:
            try:
                self._autosave = open_autosave(Path(config.autosave_dir), {
                    "prompt": config.prompt_text, "model": Path(str(rt.model_path)).name,
                    "source": source.name if source else "none", "session_id": sid,
                    "settings": {**config.settings.to_json(), "raw": config.raw,
                                 "source": {"name": source.name if source else "none",
                                            "settings": self.source_settings}},
                    "prompt_tokens": len(tokens), "n_ctx": rt.n_ctx, "background_sessions": self._background,
                })
            except OSError:
                self._autosave = None
        observer = _Observer(self)
        if self._autosave is not None:  # one flushed line per receipt, discard and plain step
            from inspector.receipts.autosave import AutosaveRecorder

            observer = AutosaveRecorder(self._autosave, rt, observer)
        gen = Generation(self.scheduler, source, tokens, config.settings, session_id=sid,
                         faults=self.faults, observer=observer)
        if self._autosave is not None:
            observer.generation = gen  # the prefill record carries the prompt's figures
        self.generation = gen
        self.run_background_max = self._background
        self._running = True
        self.runStarted.emit({"session_id": sid, "prompt_tokens": len(tokens),
                              "autosave": str(self._autosave.path) if self._autosave else "",
                              "templated": self.templated_text})
        reason = self._loop(gen)
        info = self._kv_info(gen)
        if not gen.session_retired and gen.session_id is not None:
            s = gen.session_id
            self.scheduler.execute("drop", s, lambda r: r.drop_session(s))
        self._running = False
        if self._autosave is not None:
            self._autosave.close({"finish_reason": reason, "decode_elapsed_us": gen.decode_elapsed_us})
            self._autosave = None
        self.progress.emit(self._progress(gen))
        if config.baseline and reason != "error" and gen.generated_count > 0 and not self._closing:
            self._baseline(gen)
        self.stateChanged.emit(IDLE, reason)
        self.runFinished.emit(reason, info)

    def _baseline(self, gen: Generation) -> None:
        """Plain-decode the run's prompt (``inspector.engine.baseline.run_baseline``) and emit the
        result. A stopped run is compared over the tokens it generated (stopping is no divergence).
        Stop cancels the comparison: ``baselineReady(None, "")``."""
        from inspector.engine.baseline import run_baseline
        from inspector.engine.errors import RequestCancelled

        self._baseline_cancel.clear()
        self.stateChanged.emit(RUNNING, "comparing with plain decoding…")
        try:
            result = run_baseline(self.scheduler, gen, cancel=self._baseline_cancel,
                                  max_new_tokens=None if gen.finished else max(1, gen.generated_count))
        except RequestCancelled:
            self.baselineReady.emit(None, "")
            return
        except Exception as exc:  # a failed comparison never loses the run
            log.exception("baseline failed")
            self.baselineReady.emit(None, str(exc) or type(exc).__name__)
            return
        d = result.divergence
        if d is not None:
            self._send_texts(t for t in (d.plain_token, d.speculative_token, d.top_token, d.second_token) if t >= 0)
        self.baselineReady.emit(result, "")

    def make_source(self, config: RunConfig):
        """The run's proposal source (worker thread: a draft model is loaded here), or None for ``none``.

        Raises what the factory raises: ``IncompatibleDraft`` (names the failed check),
        ``ModelFileError`` (names the file), ``ReceiptsFileError``, ``ValueError``, ..."""
        from inspector.bench.cost_cache import stored_row_costs
        from inspector.sources.registry import SourceContext, available_sources

        if config.source == "none":
            return None
        factories = available_sources()
        if config.source not in factories:
            raise ValueError(f"unknown proposal source {config.source!r}: expected one of "
                             f"{', '.join([*factories, 'none'])}")
        return factories[config.source](SourceContext(self.runtime, config.settings, row_costs=stored_row_costs(self.runtime)), **config.source_options)

    def _open_session(self, settings: GenerationSettings) -> int | None:
        sampling = settings.sampling
        for _ in range(60):  # a stopping background session may still hold its sequence
            try:
                return self.scheduler.execute("open", -1, lambda r: r.open_session(sampling)).value
            except EngineError:
                time.sleep(0.05)
        return None

    def _kv_info(self, gen: Generation) -> dict:
        try:
            kv = gen.kv_length()
        except Exception:
            kv = None
        return {"kv_length": kv, "canonical_position": gen.canonical_position, "retired": gen.session_retired}

    def _progress(self, gen: Generation) -> dict:
        return {"decode_elapsed_us": gen.decode_elapsed_us, "prefill_elapsed_us": gen.prefill_elapsed_us,
                "generated": gen.generated_count, "canonical_position": gen.canonical_position}

    def _loop(self, gen: Generation) -> str:
        try:
            gen.start()
        except SpeculationUnsupported as exc:  # the model's cache cannot drop rejected rows
            self.errorOccurred.emit(str(exc), {"refused": "speculation"})
            return "error"
        except Exception as exc:
            self.errorOccurred.emit(str(exc), {})
            return "error"
        # Pauses, steps, break-on and resumes after errors: ``StepControl.run``.
        return self.step.run(gen, progress=lambda: self.progress.emit(self._progress(gen)),
                             error=lambda message: self.errorOccurred.emit(message, self._kv_info(gen)))
