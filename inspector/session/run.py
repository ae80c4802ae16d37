"""The run service: one generation from a request to its last record (no Qt).

``SessionRun`` builds what a run needs (prompt tokens, proposal source, KV
session, fault plan, autosave, ``Generation`` with its observers), pushes the
run's records to a ``push`` callable (``SessionRecord.apply`` in the CLI,
``RecordStream.push`` in the window's worker), and ends the run (session
dropped, autosave closed, ``RunEnd``) and its comparison with plain decoding.
``spec-inspector run`` and the window's worker both drive it; only the loop
differs (the CLI runs to the end, the worker steps under ``StepControl``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator

from inspector.engine import FaultPlan, Generation, GenerationObserver, GenerationSettings, SessionPlace
from inspector.engine.baseline import run_baseline
from inspector.engine.errors import EngineError, RequestCancelled
from inspector.llama.cost_cache import load_cost_model, placement, stored_context_lengths, stored_row_costs
from inspector.llama.cost_model import auto_draft_max
from inspector.receipts.autosave import AutosaveRecorder
from inspector.session.contention import CpuClock, cpu_clock, others_cpu_share
from inspector.session.conversation import chat_prompt
from inspector.session.run_records import BaselineDone, Progress, RecordingObserver, RunEnd, RunHeader
from inspector.sources.registry import (PLAIN, SourceContext, check_source_name, close_source, make_source,
                                        source_settings, warm_text)


@dataclass
class RunRequest:
    """What one run asks for. Token counts in tokens.

    ``source``: a name of ``inspector.sources.registry`` (or ``none``: plain decoding) with
    ``source_options`` for its factory (checked by the source's declared options).
    ``faults``: the fault plan (thread safe: the window adds faults while the run goes).
    ``baseline``: after the run, decode the same prompt plainly and compare.
    """

    prompt_text: str
    settings: GenerationSettings
    source: str = "ngram"
    source_options: dict = field(default_factory=dict)
    raw: bool = False
    faults: FaultPlan = field(default_factory=FaultPlan)
    baseline: bool = False
    prompt_token_ids: tuple | None = None
    """Tokens to run instead of tokenizing ``prompt_text`` (compare and bench tokenize once)."""
    draft_max_auto: bool = False
    """Replace ``settings.draft_max`` by the draft max the stored cost model of this model file and
    thread count implies (``inspector.llama.cost_model.auto_draft_max``), when the source is made;
    ignored for plain decoding (``PLAIN``: nothing is proposed). The one place this rule lives."""
    system_prompt: str = ""
    """The chat template's system message before ``prompt_text`` (llama.cpp's ``--system-prompt``); ""
    for none; kept in the receipts' settings. Not with ``raw`` (refused); with ``chat_messages`` it is
    only recorded (the conversation's history carries the system message)."""
    chat_messages: tuple | None = None
    """A conversation's turn: the chat so far plus this turn's user message (``{"role", "content"}``
    dicts), rendered through the model's chat template into the prompt (``prompt_text`` is then the
    turn's user message). None: ``prompt_text`` alone (or ``prompt_token_ids``)."""
    conversation: dict | None = None
    """The turn's ``conversation`` block for the receipts (``inspector.session.conversation``), or None."""
    source_memory: dict = field(default_factory=dict, compare=False, repr=False)
    """What sources remember across requests (``SourceContext.memory``): pass the same dict to every
    request of one session (a conversation's turns, a window session's runs)."""
    kv_reuse: int = 0
    """Prompt tokens the session given to ``SessionRun.open`` already holds at positions 0.. (a served
    slot's prompt cache, llama-server's ``cache_prompt``; ``Generation.kv_reuse``). 0: prefill it all."""


class RunRefused(Exception):
    """The run could not start; nothing was recorded. ``what``: ``prompt`` (it cannot be tokenized),
    ``empty_prompt``, ``source`` (the factory refused) or ``session`` (no free KV sequence)."""

    def __init__(self, what: str, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.what = what
        self.cause = cause
        """The exception that refused it (a source factory's ``IncompatibleDraft``, ...), or None."""


def fault_labels(plan: FaultPlan) -> list[str]:
    """``KIND@WINDOW:TOKEN`` of each fault of ``plan`` that fired (window/token empty when not given)."""
    return [f"{f.kind}@{w or ''}:{f.token or ''}" for f, w in plan.fired]


class SessionRun:
    """One run on ``scheduler``'s runtime: ``prepare``, ``start``, ``step`` (or ``run_to_end``), ``end``.

    ``push(record)``: receives every record of the run, in order: on the run's thread, and
    the lock operations of every thread using the scheduler (background sessions) from
    ``open`` to ``end`` on theirs (the window's ``RecordStream`` is thread safe). ``observer``: an
    extra ``GenerationObserver`` (the CLI's text printer). ``before_commit(window, row,
    token, position)``: called before each committed token (Step token holds there).
    ``open_autosave(header: dict) -> AutosaveWriter``: where the autosave goes (None: no
    autosave); an ``OSError`` there leaves the run without one and ``autosave_error`` set.
    ``background_sessions()``: how many other sessions run through the same lock now.
    """

    def __init__(self, scheduler, request: RunRequest, push: Callable, *,
                 observer: GenerationObserver | None = None, before_commit: Callable | None = None,
                 open_autosave: Callable | None = None, background_sessions: Callable[[], int] = lambda: 0,
                 make_source: Callable | None = None) -> None:
        self.scheduler = scheduler
        self.runtime = scheduler.runtime
        self.request = request
        self.push = push
        self._observer = observer
        self._before_commit = before_commit
        self._open_autosave = open_autosave
        self._background = background_sessions
        self._make_source = make_source
        self.generation: Generation | None = None
        self.source = None
        self.source_settings: dict = {}
        self.source_warm = ""
        """What the source remembered before this request (``registry.warm_text``), "" when cold."""
        self.templated_text: str | None = None
        self.prompt_tokens: list[int] = []
        self.autosave = None
        """The run's ``AutosaveRecorder`` (``inspector.receipts.autosave``), or None."""
        self.autosave_error = ""
        self.baseline_error = ""
        self._fired = 0  # faults fired when the last Progress named them
        self.recording: RecordingObserver | None = None
        self.ended: RunEnd | None = None
        self._clock: CpuClock | None = None
        self.draft_max_from = ""
        """Why the run uses its draft max when it was ``auto`` (``DraftMaxChoice.why``), else ""."""

    # -- before the run -------------------------------------------------------
    def tokenize(self) -> list[int]:
        """The prompt's tokens (through the chat template unless raw). Raises ``RunRefused("prompt")``."""
        rt, req = self.runtime, self.request
        if req.prompt_token_ids is not None:
            tokens = list(req.prompt_token_ids)
        elif req.chat_messages is not None:
            try:
                self.templated_text, tokens = chat_prompt(rt, req.chat_messages)
            except (EngineError, ValueError) as exc:
                raise RunRefused("prompt", str(exc), exc) from None
        else:
            try:
                self.templated_text = None if req.raw else rt.chat_prompt(req.prompt_text, req.system_prompt)
                tokens = rt.prompt_tokens(req.prompt_text, raw=req.raw, system_prompt=req.system_prompt)
            except (EngineError, ValueError) as exc:
                raise RunRefused("prompt", str(exc), exc) from None
        if not tokens:
            raise RunRefused("empty_prompt", "the prompt is empty after tokenization")
        self.prompt_tokens = list(tokens)
        return self.prompt_tokens

    def make_source(self):
        """Make the request's proposal source (a draft model loads here). Raises ``RunRefused("source")``
        with the factory's message (an incompatible draft names the failed check)."""
        if self.request.draft_max_auto and self.request.source != PLAIN:
            self._resolve_draft_max()
        req = self.request
        try:
            if self._make_source is not None:
                source = self._make_source(req)
            else:
                check_source_name(req.source)  # before the cost table is looked up
                row_costs = None
                if req.source != PLAIN:
                    row_costs = stored_row_costs(self.runtime, self.window_context())
                prompt = tuple(self.prompt_tokens) if self.prompt_tokens else None
                ctx = SourceContext(self.runtime, req.settings, row_costs=row_costs, memory=req.source_memory,
                                    prompt_tokens=prompt, scheduler=self.scheduler)
                source = make_source(req.source, ctx, dict(req.source_options))
        except Exception as exc:  # third-party factories may raise anything: a message, never a crash
            raise RunRefused("source", str(exc) or type(exc).__name__, exc) from None
        self.source = source
        try:
            self.source_settings = source_settings(source)
            self.source_warm = warm_text(source)
        except Exception:  # a third-party source's settings() failing costs the receipts its options only
            self.source_settings = {}
        return source

    def window_context(self) -> int:
        """KV positions this run's windows see on average (positions): the prompt and half the output at most;
        the stored cost model is read at this length (``load_cost_model``'s ``context``)."""
        return len(self.prompt_tokens) + self.request.settings.max_new_tokens // 2

    def _resolve_draft_max(self) -> None:
        """``auto`` draft max: the stored cost model's choice (``auto_draft_max``) at this run's context
        (``window_context``), written into the request."""
        rt = self.runtime
        path = getattr(rt, "model_path", None)
        context = self.window_context()
        choice = auto_draft_max(load_cost_model(path, rt.n_threads, placement(rt), context) if path else None)
        self.request = replace(self.request, draft_max_auto=False,
                               settings=replace(self.request.settings, draft_max=choice.value))
        lengths = stored_context_lengths(path, rt.n_threads, placement(rt)) if path else []
        at = f"; c(k) at {context} KV positions, from the curves stored at {', '.join(map(str, lengths))}" \
            if len(lengths) > 1 else ""
        self.draft_max_from = f"auto: {choice.why}{at}"

    def settings_json(self) -> dict:
        """The settings as applied, in the receipts document's ``settings`` form (``draft_max_from``
        when the draft max was chosen from the cost model)."""
        name = self.source.name if self.source is not None else PLAIN
        extra = {"draft_max_from": self.draft_max_from} if self.draft_max_from else {}
        if self.request.system_prompt:
            extra["system_prompt"] = self.request.system_prompt
        source = {"name": name, "settings": self.source_settings}
        if self.source_warm:
            source["warm"] = self.source_warm
        return {**self.request.settings.to_json(), **extra, "raw": self.request.raw, "source": source}

    def open(self, session_id: int | None = None) -> Generation:
        """Open a KV session (retrying while a stopping background session frees one), the autosave,
        and the ``Generation``; push the ``RunHeader``. Call after ``tokenize`` and ``make_source``.
        Raises ``RunRefused("session")`` when no KV sequence is free."""
        rt, req = self.runtime, self.request
        sid = session_id if session_id is not None else self._open_session()
        settings = self.settings_json()
        recording = RecordingObserver(self.push, rt.token_text, rt.n_vocab, self._observer, self._before_commit)
        self.recording = recording
        observer: GenerationObserver = recording
        if self._open_autosave is not None:
            described = rt.describe()
            header = {"prompt": req.prompt_text, "model": Path(str(rt.model_path)).name,
                      "model_weights": described.get("weights", ""),
                      "model_stored_weights": described.get("converted_from_weights") or described.get("weights", ""),
                      "source": settings["source"]["name"], "session_id": sid, "settings": settings,
                      "prompt_tokens": len(self.prompt_tokens), "n_ctx": rt.n_ctx,
                      "background_sessions": self._background()}
            try:
                self.autosave = observer = AutosaveRecorder(self._open_autosave(header), rt, recording)
            except OSError as exc:
                self.autosave_error = exc.strerror or str(exc)
        gen = Generation(self.scheduler, self.source, self.prompt_tokens, req.settings,
                         place=SessionPlace(session_id=sid, kv_reuse=req.kv_reuse), faults=req.faults,
                         observer=observer)
        if self.autosave is not None:
            self.autosave.generation = gen  # the prefill record carries the prompt's figures
        self.generation = gen
        self._clock = cpu_clock()  # other processes' CPU share over the run, read again at its end
        self.scheduler.add_listener(self.push)  # lock operations of every thread, background sessions too
        self.push(RunHeader(sid, req.prompt_text, self.templated_text, tuple(self.prompt_tokens), rt.describe(),
                            settings, gen.started_us, str(self.autosave.writer.path) if self.autosave else "",
                            self._background(), req.conversation))
        return gen

    def _open_session(self) -> int:
        sampling = self.request.settings.sampling
        for _ in range(60):  # a stopping background session may still hold its sequence
            try:
                return self.scheduler.execute("open", -1, lambda r: r.open_session(sampling)).value
            except EngineError:
                time.sleep(0.05)
        raise RunRefused("session", "no free KV sequence for the run: lower the background sessions")

    def prepare(self) -> Generation:
        """``tokenize``, ``make_source``, ``open``: the run ready to start. Raises ``RunRefused``."""
        self.tokenize()
        self.make_source()
        return self.open()

    # -- the run ----------------------------------------------------------------
    def progress(self, kv_length: int | None = None) -> None:
        """Push the decode counters (after a step; ``kv_length`` when it was read)."""
        g = self.generation
        fired = ()
        if len(self.request.faults.fired) != self._fired:  # a fault fired since the last progress
            self._fired = len(self.request.faults.fired)
            fired = tuple(fault_labels(self.request.faults))
        self.push(Progress(g.decode_elapsed_us, g.prefill_elapsed_us, g.generated_count,
                           g.canonical_position, kv_length, fired))

    def start(self) -> None:
        """Prefill the prompt (raises ``PromptTooLong``, ``SpeculationUnsupported``, engine errors)."""
        self.generation.start()
        self.progress()

    def step(self) -> None:
        """One decode step (a window or a plain step); raises its error after repair."""
        try:
            self.generation.step()
        finally:
            self.progress()

    def steps(self) -> Iterator[Generation]:
        """The drive loop of every run (``run``, ``serve``, compare, the benchmarks): each iteration runs one
        ``step`` and yields the generation, until it finishes; the loop's body is the per-step hook (send the
        new tokens, check a cancellation, time the step). Call after ``start``. A step's error (raised after
        repair) ends the iterator: after ``generation.resume()`` take a new one to go on."""
        gen = self.generation
        while not gen.finished:
            self.step()
            yield gen

    def kv_info(self) -> dict:
        """``kv_length`` (read from the runtime; None when retired or unreadable), ``canonical_position``
        and ``retired`` of the run's session."""
        g = self.generation
        try:
            kv = g.kv_length()
        except Exception:
            kv = None
        return {"kv_length": kv, "canonical_position": g.canonical_position, "retired": g.session_retired}

    def end(self, reason: str, background_sessions: int = 0, *, clean: bool = True,
            keep_session: bool = False) -> RunEnd:
        """End the run: read the KV length, drop the session (unless ``keep_session``: a served slot
        keeps its KV for the next request's prompt cache), close the autosave (with its ``end``
        line when ``clean``: the CLI leaves it out for a run that failed, so the file reads as
        unfinished), push and return ``RunEnd``. Idempotent; the listener and the autosave are
        released even when dropping the session fails."""
        if self.ended is not None:
            return self.ended
        g = self.generation
        info = self.kv_info()
        if self.recording is not None:  # the last plain steps' top-5 texts, whatever ended the run
            self.recording.flush_texts()
        try:
            if not keep_session and not g.session_retired and g.session_id is not None:
                s = g.session_id
                self.scheduler.execute("drop", s, lambda r: r.drop_session(s))
        except EngineError:  # the runtime is gone (a lost RPC server): nothing is left to drop
            pass
        finally:
            self.scheduler.remove_listener(self.push)
            if self.autosave is not None:
                self.autosave.close({"finish_reason": g.finish_reason or reason,
                                     "decode_elapsed_us": g.decode_elapsed_us} if clean else None)
                if self.autosave.writer.error:
                    self.autosave_error = self.autosave.writer.error
        self.ended = RunEnd(reason, g.text.text, tuple(g.errors), info["kv_length"], g.canonical_position,
                            g.session_retired, tuple(fault_labels(self.request.faults)),
                            max(background_sessions, self._background()),
                            g.decode_elapsed_us, g.prefill_elapsed_us, g.text.incomplete_bytes,
                            others_cpu_share(self._clock, cpu_clock()) if self._clock is not None else None)
        self.push(self.ended)
        return self.ended

    def compare_with_plain(self, cancel=None, on_texts=None):
        """Decode the prompt plainly with the same sampling (``inspector.engine.baseline.run_baseline``)
        and push ``BaselineDone``. A stopped run is compared over the tokens it generated (stopping is
        no divergence). Returns the ``BaselineResult``, or None when cancelled or failed (the error in
        ``baseline_error``, "" when cancelled)."""
        g = self.generation
        try:
            result = run_baseline(self.scheduler, g, cancel=cancel,
                                  max_new_tokens=None if g.finished else max(1, g.generated_count))
        except RequestCancelled:
            self.baseline_error = ""
            self.push(BaselineDone(None, ""))
            return None
        except Exception as exc:  # a failed comparison never loses the run
            self.baseline_error = str(exc) or type(exc).__name__
            self.push(BaselineDone(None, self.baseline_error))
            return None
        d = result.divergence
        if d is not None and self.recording is not None:
            self.recording.texts(t for t in (d.plain_token, d.speculative_token, d.top_token, d.second_token)
                                 if t >= 0)
        self.push(BaselineDone(result))
        return result

    def close_source(self) -> None:
        """Close the run's proposal source (and a draft's own runtime)."""
        source, self.source = self.source, None
        close_source(source)
