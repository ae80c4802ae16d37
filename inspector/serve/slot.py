"""The one slot of ``spec-inspector serve`` (llama-server ``-np 1``): requests run one at a time, in
arrival order, on one engine thread, each a recorded session.

Rules followed from llama.cpp 0c1e570 ``tools/server/server-context.cpp`` (``update_slots``):

- **prompt cache** (``cache_prompt``, default true): the slot's KV holds the last request's prompt and
  every token it decoded (its output but the last token, which was never decoded); the next request
  keeps the longest common prefix of that and its prompt (``get_common_prefix``), at least one prompt
  token is decoded again (``n_past--`` when the whole prompt is cached), and the rest is prefilled in
  batches of ``n_batch`` from there. ``cache_n`` in the reply, ``prompt_reused`` in the receipts.
- **sources' memory** (ngram-mod's pool, ngram-map's keys, ngram-cache's counts, the suffix tree) is
  one ``SourceContext.memory`` for every request, as llama-server's slot keeps its speculative state
  across requests; each llama.cpp source follows what its llama.cpp type keeps (its own module says
  how; ``tests/test_serve_parity.py`` compares both servers' drafts request by request).
- a request whose client went away is cancelled (``Generation.cancel``: the decode in flight aborts or
  the window ends at its next commit, with the repair; its complete windows are kept, ``ended_as``
  ``cancelled``); one still waiting is skipped. A stop (``begin_stop``) cancels the same way, but the
  request's error is ``SERVER_STOPPED`` and its client is told ``STOPPING`` (503), not a client's leave.
- a token or result that cannot be handed to the HTTP side (its event loop closed at a stop) is dropped
  (``_deliver``): the engine thread goes on and the request's receipts document is still written.

Each request's records go to its own ``SessionRecord`` (and, for the window, a ``RecordStream``), its
receipts document to ``ReceiptsDir``; ``on_change`` tells a viewer when a request arrives, starts and
ends. Tokens reach the HTTP side through ``Job.deliver`` (called on the engine thread) with the
target's probabilities of each token's own verification row, accepted draft tokens included.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Sequence

from inspector.engine import GenerationObserver, GenerationSettings, SamplingSettings
from inspector.engine.errors import EngineError, PromptTooLong, RequestCancelled
from inspector.engine.faults import CANCEL, FaultPlan
from inspector.llama.server_parity import server_counted_accepted
from inspector.serve.job import Job, JobResult, ServedRequest, TokenOut
from inspector.serve.params import CompletionParams
from inspector.serve.prompt_cache import cache_update_wanted, common_prefix
from inspector.serve.spec_gate import SpecGate
from inspector.session.session_record import SessionRecord
from inspector.session.run import RunRefused, RunRequest, SessionRun
from inspector.sources.slot_memory import SlotMemory

log = logging.getLogger(__name__)

SERVER_STOPPED = "the server stopped"
"""The error of a request cancelled because the server stopped (``served.error``, the traffic row)."""
CLIENT_GONE = "the client went away"
"""The error of a request cancelled because its client went away."""
INJECTED_CANCEL = "cancelled by an injected fault (cancel, armed on this slot)"
"""The error of a request a cancel fault armed on its slot ended (``ServeSlots.arm``)."""
STOPPING = "the server is stopping"
"""What the client of a request cancelled by the stop is told (503 ``unavailable_error``)."""
KEEP_RECORDS = 64
"""Requests whose ``SessionRecord`` stays in memory (the newest); older ones are read back from their
receipts file when shown, so a long-running server's memory stays flat."""
KEEP_ROWS = 10_000
"""Rows of the traffic list kept in memory (a few hundred bytes each)."""


class _Stream(GenerationObserver):
    """Collects each committed token's visible text (stop strings held back) on the engine thread."""

    def __init__(self) -> None:
        self.deltas: list[str] = []

    def on_token(self, token, text):
        self.deltas.append(text)


def reused_prompt_tokens(cached: Sequence[int], prompt: Sequence[int], cache_prompt: bool) -> int:
    """Prompt tokens a request keeps from the slot's cache (``cached``: the tokens its KV holds):
    the common prefix, but at least one prompt token is decoded again (llama.cpp 0c1e570
    ``update_slots``: ``n_past--`` when the whole prompt is cached); 0 without ``cache_prompt``."""
    if not cache_prompt:
        return 0
    n = common_prefix(cached, prompt)
    return n - 1 if n == len(prompt) and n > 0 else n


class ServeSlot:
    """One slot: its KV session (opened on its first request and kept), the tokens that session holds
    (the prompt cache), what its source remembers, and the request it runs (``run``, on the slot's
    thread). ``slot_id``: 0.. (``/slots``' ``id``). ``pool``: the ``ServeSlots`` it belongs to (the
    scheduler, the source and its options, the settings template, receipts, metrics, the schedule)."""

    def __init__(self, slot_id: int, pool) -> None:
        self.id = slot_id
        self.pool = pool
        self.scheduler = pool.scheduler
        self.runtime = pool.scheduler.runtime
        self.memory = SlotMemory(pool.shared_memory)
        """What the source remembers across this slot's requests (``SourceContext.memory``; llama.cpp's
        shared parts in the pool's, ``inspector.sources.slot_memory``)."""
        self.current: Job | None = None
        """The request running on this slot now."""
        self.finishing = False
        """Its request's reply is sent and the slot is not idle yet: no request is handed out meanwhile."""
        self.last_job: Job | None = None
        """The request running now or the last one that ran (``/slots``)."""
        self.last_used = -1.0
        """``time.monotonic()`` when its last request ended (-1: never; llama-server's ``t_last_used``)."""
        self.session: int | None = None
        self.cached: list[int] = []
        self.faults = FaultPlan()
        """Faults armed on this slot: they fire in its next requests, no other slot's (``ServeSlots.arm``)."""
        self.lock = threading.Lock()
        """Held while the slot's KV session and ``cached`` change hands with the prompt cache (its own request
        starting, ``park`` from another slot's thread)."""

    @property
    def busy(self) -> bool:
        """A request runs on this slot."""
        return self.current is not None

    def run(self, job: Job) -> None:
        """Run ``job`` to its end on the calling thread (the slot's); never raises: a failure ends the request
        with its error and the slot stays usable."""
        self.current = self.last_job = job
        job.slot = job.row.slot = self.id
        job.row.started = time.time()
        try:
            if job.cancelled.is_set():
                self._end_unrun(job, "cancelled", SERVER_STOPPED if self.pool.stopping else
                                f"{CLIENT_GONE} before the request ran")
            else:
                self._run(job)
        except Exception as exc:  # never lose the server to one request
            log.exception("serve: request %d failed", job.id)
            self._end_unrun(job, "error", str(exc) or type(exc).__name__)
        finally:
            job.row.ended = time.time()
            self.current = None
            self.last_used = time.monotonic()
            self.finishing = False

    def drop_session(self) -> None:
        """Drop the slot's KV session (the server stops)."""
        sid, self.session = self.session, None
        if sid is not None:
            try:
                self.scheduler.execute("drop", sid, lambda r: r.drop_session(sid))
            except EngineError:
                pass

    def _changed(self, row: ServedRequest) -> None:
        self.pool.changed(row)

    def _end_unrun(self, job: Job, ended_as: str, error: str) -> None:
        row = job.row
        row.state, row.ended_as, row.error = "done", ended_as, error
        job.result = JobResult(ended_as=ended_as, error=error, prompt_n=len(job.prompt_tokens), slot=self.id,
                               stopped=error == SERVER_STOPPED)
        self._deliver(job, job.result)
        self._changed(row)

    @staticmethod
    def _deliver(job: Job, item) -> None:
        """``job.deliver(item)``; a failure (the HTTP side's event loop closed at a stop, the client gone)
        never ends the engine thread nor loses the request's record: it is logged and the item dropped."""
        try:
            job.deliver(item)
        except Exception as exc:
            log.debug("serve: request %d: could not hand %s to its client: %s", job.id, type(item).__name__, exc)

    def _settings(self, p: CompletionParams, prompt_n: int) -> GenerationSettings:
        room = max(1, self.pool.n_ctx_slot - prompt_n)
        limit = room if p.n_predict < 0 else max(1, min(p.n_predict, room))
        return replace(self.pool.template, max_new_tokens=limit, stop=tuple(p.stop), sampling=p.sampling,
                       probabilities=self.pool.template.probabilities or p.n_probs > 0 or p.logprobs,
                       top_probabilities=max(self.pool.template.top_probabilities, p.n_probs))

    def _ensure_session(self, sampling) -> int:
        """The slot's KV session, opened (empty) on first use. Raises ``EngineError``."""
        if self.session is None:
            self.session = self.scheduler.execute("open", -1, lambda r: r.open_session(sampling)).value
            self.pool.session_opened(self)
            self.cached = []
        return self.session

    def _open_slot_session(self, settings: GenerationSettings, tokens: list[int], reuse: int,
                           on_host: bool = False) -> int:
        """The slot's KV session with ``reuse`` prompt tokens kept and the request's sampler; ``on_host``: its rows
        stay on the host path under ``serve -bs`` (a request asking for ``n_probs``, as llama-server samples such a
        request on the host: tools/server/server-context.cpp 0c1e570, "pre sampling logits")."""
        if self.session is None:
            self._ensure_session(settings.sampling)
            reuse = 0
        sid, cached = self.session, self.cached
        self.scheduler.execute("open", sid,
                               lambda r: r.reopen_session(sid, settings.sampling, reuse, cached, on_host=on_host))
        return sid

    def _run(self, job: Job) -> None:
        p, row, tokens = job.params, job.row, job.prompt_tokens
        if p.n_predict == 0:  # llama-server evaluates the prompt only; nothing to generate here
            row.state, row.ended_as = "done", "limit"
            job.result = JobResult(stop_type="limit", ended_as="length", prompt_n=len(tokens), slot=self.id)
            self._deliver(job, job.result)
            self._changed(row)
            return
        settings = self._settings(p, len(tokens))
        with self.lock:
            job.cache_restored = self._take_prompt_cache(tokens, settings.sampling)
            reuse = reused_prompt_tokens(self.cached, tokens, p.cache_prompt)
        self.pool.park_idle_slots(self)
        record = SessionRecord()
        feed = row.feed

        def push(item, _apply=record.apply, _feed=feed.push if feed is not None else None) -> None:
            _apply(item)
            if _feed is not None:
                _feed(item)

        stream = _Stream()
        request = RunRequest(job.prompt_text, settings, self.pool.source, dict(self.pool.source_options), raw=True,
                             prompt_token_ids=tuple(tokens), draft_max_auto=self.pool.draft_max_auto,
                             conversation=job.conversation, source_memory=self.memory, kv_reuse=reuse,
                             faults=self.faults)
        run = SessionRun(self.scheduler, request, push, observer=stream)
        row.record = record
        row.state = "running"
        try:
            run.tokenize()
            run.templated_text = job.templated_text
            run.make_source()
            if self.pool.spec_max_active is not None and run.source is not None:
                run.source = SpecGate(run.source, self.pool.generating, self.pool.spec_max_active)
            sid = self._open_slot_session(settings, tokens, reuse, on_host=p.n_probs > 0)
        except (RunRefused, EngineError) as exc:
            run.close_source()
            self._end_unrun(job, "error", str(exc))
            return
        row.reused = job.cache_n = reuse
        row.warm = run.source_warm
        gen = run.open(session_id=sid)
        gen.constraints = p.constraints  # grammar, logit bias (resolved by app._prepare); read by gen.start
        job.generation = gen
        self._changed(row)
        sent = 0
        reason, error = "error", ""
        steps = self.scheduler.steps
        fired_before = len(self.faults.fired)
        try:
            if job.cancelled.is_set():
                raise RequestCancelled()
            if steps is not None:  # the batched schedule: from now on every step waits for this slot's rows
                self.scheduler.execute("open", sid, lambda r: steps.activate(sid))
            run.start()
            sent = self._send(job, record, stream, sent)
            for _ in run.steps() if not job.cancelled.is_set() else ():  # cancelled during the prefill: no step
                sent = self._send(job, record, stream, sent)
                if job.cancelled.is_set():
                    break
            if job.cancelled.is_set() and not gen.finished:
                raise RequestCancelled()
            reason = gen.finish_reason
        except RequestCancelled:
            injected = not job.cancelled.is_set() and any(f.kind == CANCEL for f, _w in self.faults.fired[fired_before:])
            reason, error = "cancelled", (SERVER_STOPPED if self.pool.stopping else INJECTED_CANCEL if injected else
                                          CLIENT_GONE)
        except PromptTooLong as exc:
            error = str(exc)
        except Exception as exc:  # an engine error after repair: the complete windows are kept
            error = str(exc) or type(exc).__name__
        finally:
            job.generation = None
            if steps is not None:
                self.scheduler.execute("close", sid, lambda r: steps.deactivate(sid))
        end = run.end(reason, keep_session=True)
        self._send(job, record, stream, sent)
        run.close_source()
        self._keep_cache(gen, end)
        result = self._result(job, gen, record, reuse, reason, error)
        result.stopped = error == SERVER_STOPPED
        if self.pool.receipts is not None:
            result.receipts_path = self.pool.receipts.write(job, record, reuse, reason, error)
        self._finish_row(row, gen, record, result)
        if self.pool.metrics is not None:
            self.pool.metrics.observe(result, self.runtime.n_ctx)
        job.result = result
        self.finishing = True  # the client may send its next request at once: it waits until this slot is idle
        for item in job.held:  # not streamed: the tokens, then the result (posted together: one wake-up)
            self._deliver(job, item)
        job.held = []
        self._deliver(job, result)
        self._changed(row)

    def _send(self, job: Job, record: SessionRecord, stream: _Stream, sent: int) -> int:
        """Deliver the tokens committed since ``sent`` (each with its row's probabilities when the request asked
        for them, ``n_probs``: a plain step's are otherwise left to their batch, ``inspector.engine.deferred_figures``)."""
        tokens = record.tokens
        piece = self.runtime.token_piece
        wanted = job.params.n_probs > 0 or job.params.logprobs  # chat logprobs: the token's own, top_logprobs 0
        timings = None
        if job.params.timings_per_token and sent < len(tokens) and job.generation is not None:
            gen, reuse = job.generation, job.row.reused
            timings = JobResult(prompt_n=len(job.prompt_tokens) - reuse, cache_n=reuse,
                                prompt_ms=gen.prefill_elapsed_us / 1000.0, predicted_n=gen.generated_count,
                                predicted_ms=gen.decode_elapsed_us / 1000.0).timings()
        if sent == 0 and len(tokens) and job.row.first_token_at is None:
            job.row.first_token_at = time.time()
        out = self._deliver if job.params.stream else (lambda _job, item: _job.held.append(item))
        direct = job.direct
        while sent < len(tokens) and sent < len(stream.deltas):
            info = tokens[sent]
            probs = record.token_probabilities(info) if wanted else None
            if probs is None:
                item = TokenOut(info.token, stream.deltas[sent], piece(info.token), None, timings=timings)
            else:
                item = TokenOut(info.token, stream.deltas[sent], piece(info.token), probs.predicted_p,
                                tuple(probs.top), timings=timings)
            if direct is not None:  # written here when the stream lets this thread write (direct_stream)
                item = direct.offer(item)
            if item is not None:
                out(job, item)
            sent += 1
        return sent

    def _take_prompt_cache(self, prompt: list[int], sampling) -> int:
        """This slot takes a request with ``prompt`` (tokens): with llama-server's prompt cache on, save what the
        slot holds and restore the cached prompt that suits the request better, when ``cache_update_wanted``
        (``inspector.serve.prompt_cache``). Returns the tokens restored (0: none). Holding ``lock``. A failure
        (llama.cpp could not save or restore) is logged and empties the slot; the request goes on."""
        cache = self.pool.prompt_cache
        if cache is None or not cache_update_wanted(self.cached, prompt, self.pool.similarity):
            return 0
        try:
            sid = self._ensure_session(sampling)
            self.save_to_cache()
            entry = cache.best(self.cached, prompt)
            if entry is None:
                return 0
            self.scheduler.execute("cache", sid, lambda r: r.restore_sequence(sid, entry.data))
            cache.take(entry)
            self.cached = list(entry.tokens)
            return len(entry.tokens)
        except EngineError as exc:
            log.warning("serve: slot %d: prompt cache: %s", self.id, exc)
            self.clear()
            return 0

    def save_to_cache(self) -> None:
        """Save the slot's KV state and the tokens it holds into the pool's prompt cache (nothing when it holds
        none, or the cache already has them). Holding ``lock``. Raises ``EngineError``."""
        cache, sid, held = self.pool.prompt_cache, self.session, self.cached
        if cache is None or sid is None or not held or cache.holds(held):
            return
        data = self.scheduler.execute("cache", sid, lambda r: r.save_sequence(sid)).value
        cache.store(held, data)

    def clear(self) -> None:
        """Empty the slot's KV sequence (llama-server's ``prompt_clear``); its session stays open. Holding ``lock``."""
        self.cached = []
        sid = self.session
        if sid is not None:
            try:
                self.scheduler.execute("cache", sid, lambda r: r.reopen_session(sid, SamplingSettings(), 0, []))
            except EngineError:
                pass

    def park(self) -> None:
        """Another slot's request started while this one is idle (``--cache-idle-slots``): save this slot's state
        to the prompt cache and, with a unified KV cache, empty it so its cells serve the running slots. Any
        thread; nothing when this slot is running a request."""
        with self.lock:
            if self.busy:
                return
            try:
                self.save_to_cache()
            except EngineError as exc:
                log.warning("serve: slot %d: prompt cache: %s", self.id, exc)
            if self.pool.kv_unified:
                self.clear()

    def _keep_cache(self, gen, end) -> None:
        """What the slot's KV holds now: every token but the current one when the KV is canonical; else
        nothing (the session is emptied, the next request prefills everything)."""
        if not gen.session_retired and end.kv_length is not None and end.kv_length == gen.canonical_position:
            self.cached = list(gen.tokens[:-1])
            return
        self.cached = []
        sid = self.session
        self.session = None
        if sid is not None and not gen.session_retired:
            try:
                self.scheduler.execute("drop", sid, lambda r: r.drop_session(sid))
            except EngineError:
                pass

    def _result(self, job: Job, gen, record: SessionRecord, reuse: int, reason: str, error: str) -> JobResult:
        text = gen.text
        if reason == "eog":
            stop_type = "eos"
        elif reason in ("length", "context_full"):
            stop_type = "limit"
        elif reason == "stop":
            stop_type = "word"
        else:
            stop_type = "none"
        is_eog = self.runtime.is_eog
        counted = [server_counted_accepted(r, is_eog) for r in gen.receipts]
        per_pos: list[int] = []
        for n in counted:
            per_pos.extend([0] * max(0, n - len(per_pos)))
            for i in range(n):
                per_pos[i] += 1
        return JobResult(
            tokens=list(gen.generated), content=text.text, stop_type=stop_type, stopping_word=text.stopped_by or "",
            ended_as=reason, error=error, prompt_n=len(job.prompt_tokens) - reuse, cache_n=reuse,
            prompt_ms=gen.prefill_elapsed_us / 1000.0, predicted_n=gen.generated_count,
            predicted_ms=gen.decode_elapsed_us / 1000.0,
            draft_n=sum(len(r.proposal_token_ids) for r in gen.receipts), draft_n_accepted=sum(counted),
            drafts=len(gen.receipts), accepted_per_position=tuple(per_pos), slot=self.id,
            decodes=-(-(len(job.prompt_tokens) - reuse) // self.runtime.n_batch) + gen.decode_step)

    def _finish_row(self, row: ServedRequest, gen, record: SessionRecord, result: JobResult) -> None:
        row.output_tokens = gen.generated_count
        row.windows = len(gen.receipts)
        row.proposed = result.draft_n
        row.accepted = sum(r.accepted_proposal_tokens for r in gen.receipts)
        row.tokens_per_s = (1e6 * gen.generated_count / gen.decode_elapsed_us) if gen.decode_elapsed_us else None
        row.context_at_windows = tuple((r.base_position, r.accepted_proposal_tokens, len(r.proposal_token_ids))
                                       for r in gen.receipts)
        row.ended_as = result.ended_as
        row.error = result.error
        row.receipts_path = result.receipts_path
        row.state = "done"
        self.pool.evict()
