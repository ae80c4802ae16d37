"""What speculation buys, measured on the engine thread (no widgets).

``AnalysisWorker``: a ``QObject`` that lives on the engine worker's thread
next to ``EngineWorker`` and measures the cost model (verify time per batch
of k verification rows) and runs comparisons of proposal configurations.
Slots run on that thread, one at a time with runs (its event loop is
shared), and results leave through signals as immutable objects.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from PySide6.QtCore import QObject, Signal, Slot

from inspector.bench.compare import run_compare
from inspector.bench.server_build import SERVER_BUILD_MINUTES, find_llama_server
from inspector.bench.server_compare import compare_with_llama_server
from inspector.engine import RuntimeScheduler
from inspector.engine.errors import RequestCancelled
from inspector.engine.settings import GenerationSettings
from inspector.llama.cost_cache import placement, store_cost_model
from inspector.llama.cost_model import measure_cost_model, measurement_positions
from inspector.llama.cost_progress import CostMeasureCancelled
from inspector.llama.model_file import weight_types_of
from inspector.llama.quantize import weight_form
from inspector.llama.runtime import LlamaRuntime
from inspector.gui.engine_thread.engine_job import EngineJob

log = logging.getLogger(__name__)

COST_K_MAX = 16
"""Largest verify batch measured by the cost model (verification rows)."""
COST_REPEATS = 3
"""Timed decodes per batch size (the median is kept; one warm-up before)."""


@dataclass(frozen=True)
class CostRequest:
    """Measure the cost model on the loaded model with this prompt (text as typed)."""

    prompt_text: str
    raw: bool = False
    k_max: int = COST_K_MAX
    repeats: int = COST_REPEATS


@dataclass(frozen=True)
class CostMeasured:
    """A measured ``CostModel`` and where: model file, CPU threads, prompt length (tokens), and the
    model's weight types (``ModelInfo.weight_types``: (GGML type, bytes), largest first)."""

    model: object
    model_path: str
    n_threads: int
    prompt_tokens: int
    weight_types: tuple = ()
    layers: str = ""
    """Where the layers ran ("30/30 layers on RPC0[...]"); "" or "all layers on the CPU" locally."""
    partial: str = ""
    """"" for a whole measurement; else it was cancelled and this says what the curve holds ("k = 1..7 of
    16, 1 of 3 repeats"): shown and used, never stored."""


LAYOUT_TYPES = ("Q8_0", "Q4_0")
"""Weight types "Try weight types" measures besides the loaded model's own."""


@dataclass(frozen=True)
class LayoutsRequest:
    """Measure c(k) of the loaded model in each weight type of ``types`` (converted with llama.cpp's
    quantizer, cached), after this prompt."""

    prompt_text: str
    raw: bool = False
    types: tuple = LAYOUT_TYPES
    k_max: int = COST_K_MAX
    repeats: int = COST_REPEATS


@dataclass(frozen=True)
class CompareRequest:
    """Run ``configs`` (``CompareConfig``) on this prompt with ``settings``; ``cost_model``
    (a ``CostModel`` or None) gives each row its expected speedup."""

    prompt_text: str
    raw: bool
    configs: tuple
    settings: GenerationSettings
    cost_model: object = None
    turns: tuple | None = None
    """The user messages of a conversation to run instead of the prompt (``run_compare(turns=...)``):
    each configuration answers every turn with its own history; the prompt fields are then unused."""
    llama_server: str | None = None
    """Also run each configuration through llama-server (``inspector.bench.server_compare``): a
    binary's path or a running server's URL; "" the one built from our llama.cpp; None not at all."""
    prompt_tokens: tuple | None = None
    """The prompt as token ids, used instead of ``prompt_text`` (the Tune window's Verify runs the
    recorded run's own prompt tokens)."""
    repeats: int = 1
    """Runs per configuration, in rounds (``run_compare``): tokens/s and speedups are medians."""


class AnalysisWorker(QObject):
    """Cost-model measurement and configuration comparison on the engine thread.

    ``engine`` is the window's ``EngineWorker`` (same thread): its runtime and
    scheduler are used, never while a run goes (the GUI refuses, and the shared
    event loop runs one slot at a time). ``job.request_cancel`` (any thread) cancels a
    comparison (the configuration in flight stops; finished rows are kept).
    """

    costMeasured = Signal(object)
    """``CostMeasured`` (``partial`` when cancelled after some batch sizes were timed)."""
    costProgress = Signal(object)
    """``inspector.llama.cost_progress.CostProgress``: after each prefill chunk and each batch size."""
    layoutsMeasured = Signal(object)
    """List of (weight type, ``CostMeasured``): the loaded model's own layout first."""
    layoutProgress = Signal(str)
    """What "Try weight types" does now (converting, measuring)."""
    compareProgress = Signal(int, int, str)
    """(configurations done, total, label of the one starting)."""
    compareTurnProgress = Signal(int, int, int, int, str)
    """(turn starting (1-based), turns, configurations done, total, label): a conversation's progress."""
    compareRows = Signal(object)
    """(``CompareResult`` of the rows finished so far): a configuration ended (the window shows its row)."""
    compareDone = Signal(object, str)
    """(``inspector.bench.compare.CompareResult``, note): the note says when it was cancelled."""
    failed = Signal(str, str)
    """(what: ``cost``, ``layouts`` or ``compare``, message; "" when cancelled before anything was measured)."""

    def __init__(self, engine) -> None:
        super().__init__()
        self.engine = engine
        self.job = EngineJob(engine)
        """Its cancellation (``job.request_cancel``: the configuration in flight stops, finished rows are
        kept) and the refusal rule."""

    def _ready(self, what: str) -> bool:
        refusal = self.job.refusal()
        if refusal is not None:
            self.failed.emit(what, refusal)
        return refusal is None

    @Slot(object)
    def measure_cost(self, req: CostRequest) -> None:
        """Measure c(k), k = 1..``req.k_max`` (``measure_cost_model``, under the runtime lock), with its
        progress on ``costProgress``; ``job.request_cancel`` stops it before the next prefill chunk or
        decode: the curve timed so far arrives as a ``partial`` ``CostMeasured`` (``failed("cost", "")`` when
        nothing was timed)."""
        if not self._ready("cost"):
            return
        rt = self.engine.runtime
        partial = ""
        try:
            tokens = self.job.prompt_tokens(req.prompt_text, req.raw)
            tokens = tokens[: max(1, rt.n_ctx - measurement_positions(req.k_max) - 1)]
            try:
                cm = measure_cost_model(self.engine.scheduler, tokens, k_max=req.k_max, repeats=req.repeats,
                                        progress=self.costProgress.emit, cancel=self.job.cancel)
            except CostMeasureCancelled as exc:
                if exc.partial is None:
                    self.failed.emit("cost", "")
                    return
                cm, partial = exc.partial, exc.note
            if not partial:  # runs read it: adaptive length, auto draft max
                store_cost_model(rt.model_path, rt.n_threads, cm, placement(rt), len(tokens))
        except Exception as exc:
            log.exception("cost model failed")
            self.failed.emit("cost", str(exc) or type(exc).__name__)
            return
        self.costMeasured.emit(CostMeasured(cm, str(rt.model_path), int(getattr(rt, "n_threads", 0) or 0), len(tokens),
                                            tuple(getattr(getattr(rt, "info", None), "weight_types", ())),
                                            str(getattr(rt, "layers", "")), partial))

    @Slot(object)
    def measure_layouts(self, req: LayoutsRequest) -> None:
        """c(k) of the loaded model and of its other weight layouts (``inspector.llama.quantize.weight_form``):
        each converted file is loaded on its own (one KV sequence, the same threads), measured, and closed."""
        if not self._ready("layouts"):
            return
        rt = self.engine.runtime
        own = rt.info.main_weight_type
        results = []
        try:
            tokens = self.job.prompt_tokens(req.prompt_text, req.raw)[: max(1, rt.n_ctx - measurement_positions(req.k_max) - 1)][:64]
            for t in (own, *[t for t in req.types if t != own]):
                self.layoutProgress.emit(f"{t}: converting (llama.cpp quantize, cached) …")
                path, converted = weight_form(rt.model_path, t)
                self.layoutProgress.emit(f"{t}: measuring c(k) for k = 1..{req.k_max} …")
                other = None if not converted else LlamaRuntime(path, n_ctx=max(256, len(tokens) + measurement_positions(req.k_max) + 8),
                                                                 n_seq_max=1, n_threads=rt.n_threads)
                try:
                    target = other or rt
                    sched = RuntimeScheduler(other) if other is not None else self.engine.scheduler
                    cm = measure_cost_model(sched, tokens, k_max=req.k_max, repeats=req.repeats, cancel=self.job.cancel)
                    store_cost_model(path, target.n_threads, cm, placement(target))
                finally:
                    if other is not None:
                        other.close()
                results.append((t, CostMeasured(cm, str(path), int(target.n_threads or 0), len(tokens),
                                                weight_types_of(path))))
        except RequestCancelled:
            self.failed.emit("layouts", "")
            return
        except Exception as exc:
            log.exception("weight layouts failed")
            self.failed.emit("layouts", str(exc) or type(exc).__name__)
            return
        self.layoutsMeasured.emit(results)

    @Slot(object)
    def run_compare(self, req: CompareRequest) -> None:
        """Run every configuration one after the other (``inspector.bench.compare.run_compare``), on the
        prompt or, with ``req.turns``, over the conversation (each row sums its turns); the result keeps
        each row's run (``CompareResult.runs``). A cancellation keeps the rows that finished."""
        if not self._ready("compare"):
            return
        try:
            turns = list(req.turns) if req.turns else None
            # A conversation's first turn through the chat template stands for "the prompt" (its token count).
            if turns:
                tokens = self.job.prompt_tokens(turns[0], False)
            elif req.prompt_tokens:
                tokens = list(req.prompt_tokens)
            else:
                tokens = self.job.prompt_tokens(req.prompt_text, req.raw)
            result = run_compare(self.engine.scheduler, tokens, list(req.configs), req.settings,
                                 cost_model=req.cost_model, progress=self.compareProgress.emit, cancel=self.job.cancel,
                                 turns=turns, turn_progress=self.compareTurnProgress.emit, keep_runs=True,
                                 row_done=self.compareRows.emit, repeats=req.repeats)
        except RequestCancelled as exc:
            partial = getattr(exc, "partial", None)
            done = len(partial.rows) if partial is not None else 0
            self.compareDone.emit(partial, f"cancelled after {done} configuration{'s' if done != 1 else ''}")
            return
        except Exception as exc:
            log.exception("compare failed")
            self.failed.emit("compare", str(exc) or type(exc).__name__)
            return
        note = ""
        if req.llama_server is not None and req.turns:
            note = "llama-server is compared on a prompt, not a conversation: run on the main window's prompt"
        elif req.llama_server is not None:
            try:
                result, note = self._through_llama_server(req.llama_server, result, tokens, req.settings)
            except Exception as exc:  # our rows stay shown; the comparison with llama-server says what failed
                log.exception("llama-server comparison failed")
                note = f"llama-server comparison failed: {type(exc).__name__}: {exc}"
        self.compareDone.emit(result, note)

    def _through_llama_server(self, target: str, result, tokens, settings):
        """(``result`` with llama-server's rows, a note for the status line); the rows say what failed.
        No binary given and none built: the note says where to build it (nothing is built here: a
        build takes minutes and would hold the engine thread; the Compare window builds it on a thread
        of its own, ``inspector.gui.compare.server_build``)."""
        if not target:
            found = find_llama_server()
            if found is None:
                return result, (f"no llama-server to compare with: press Build llama-server under “also through "
                                f"llama-server” ({SERVER_BUILD_MINUTES} minutes, once), or give a llama-server "
                                f"binary's path or a running server's URL")
            target = str(found)
        rt = self.engine.runtime
        total = len(result.rows)
        try:
            rows = compare_with_llama_server(
                target, result, model=rt.model_path, prompt_tokens=tokens, n_predict=settings.max_new_tokens,
                threads=rt.n_threads, n_ctx=rt.n_ctx, scheduler=self.engine.scheduler, cancel=self.job.cancel,
                progress=lambda i, n, label: self.compareProgress.emit(i, total, f"llama-server: {label}"))
        except RequestCancelled:
            return result, "llama-server comparison cancelled"
        failed = [r for r in rows if r.error]
        return replace(result, llama_server=rows), (f"llama-server failed: {failed[0].error}" if failed else "")

