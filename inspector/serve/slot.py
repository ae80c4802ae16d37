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
from collections import deque
from dataclasses import replace
from typing import Callable, Sequence

from inspector.engine import GenerationObserver, GenerationSettings
from inspector.engine.errors import EngineError, PromptTooLong, RequestCancelled
from inspector.llama.server_parity import server_counted_accepted
from inspector.serve.errors import UNAVAILABLE, ApiError
from inspector.serve.job import Job, JobResult, ServedRequest, TokenOut
from inspector.serve.params import CompletionParams
from inspector.session.session_record import SessionRecord
from inspector.session.run_records import RecordStream
from inspector.session.run import RunRefused, RunRequest, SessionRun

log = logging.getLogger(__name__)

SERVER_STOPPED = "the server stopped"
"""The error of a request cancelled because the server stopped (``served.error``, the traffic row)."""
CLIENT_GONE = "the client went away"
"""The error of a request cancelled because its client went away."""
STOPPING = "the server is stopping"
"""What the client of a request cancelled by the stop is told (503 ``unavailable_error``)."""
DEFAULT_MAX_QUEUE = 16
"""Requests that may wait while one runs; beyond, 503 with ``Retry-After`` (``--max-queue``)."""
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


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists (llama.cpp's ``get_common_prefix``)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def reused_prompt_tokens(cached: Sequence[int], prompt: Sequence[int], cache_prompt: bool) -> int:
    """Prompt tokens a request keeps from the slot's cache (``cached``: the tokens its KV holds):
    the common prefix, but at least one prompt token is decoded again (llama.cpp 0c1e570
    ``update_slots``: ``n_past--`` when the whole prompt is cached); 0 without ``cache_prompt``."""
    if not cache_prompt:
        return 0
    n = common_prefix(cached, prompt)
    return n - 1 if n == len(prompt) and n > 0 else n


class ServeSlot:
    """The queue and the engine thread. ``scheduler``: the runtime's ``RuntimeScheduler`` (the window
    shares its worker's; nothing else decodes while serving). ``source`` / ``source_options``: the
    proposal source of every request (``none``: plain decoding). ``template``: the server's
    ``GenerationSettings`` (draft max, deadline, probabilities); a request sets its limits, stop
    strings and sampling. ``draft_max_auto``: take the draft max from the stored cost model.
    ``receipts``: a ``ReceiptsDir`` (None: keep none). ``metrics``: a ``ServeMetrics`` (or None).
    ``on_change(row)``: a request arrived, started or ended (engine or HTTP thread). ``feed``: give
    every request a ``RecordStream`` of its records (the window)."""

    def __init__(self, scheduler, source: str = "ngram", source_options: dict | None = None, *,
                 template: GenerationSettings | None = None, draft_max_auto: bool = False,
                 max_queue: int = DEFAULT_MAX_QUEUE, receipts=None, metrics=None,
                 on_change: Callable[[ServedRequest], None] | None = None, feed: bool = False) -> None:
        self.scheduler = scheduler
        self.runtime = scheduler.runtime
        self.source = source
        self.source_options = dict(source_options or {})
        self.template = template or GenerationSettings()
        self.draft_max_auto = draft_max_auto
        self.max_queue = max_queue
        self.receipts = receipts
        self.metrics = metrics
        self.on_change = on_change
        self.feed = feed
        self.memory: dict = {}
        """What the source remembers across requests (``SourceContext.memory``)."""
        self.rows: deque[ServedRequest] = deque(maxlen=KEEP_ROWS)
        self._rows_lock = threading.Lock()
        self._queue: deque[Job] = deque()
        self._cond = threading.Condition()
        self._current: Job | None = None
        self.last_job: Job | None = None
        """The request running now or the last one that ran (``/slots``)."""
        self._next_id = 1
        self._stopping = False
        self._session: int | None = None
        self._cached: list[int] = []
        self._thread: threading.Thread | None = None

    # -- any thread ---------------------------------------------------------------------
    def start(self) -> None:
        """Start the engine thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="spec-inspector serve slot", daemon=True)
            self._thread.start()

    @property
    def waiting(self) -> int:
        """Requests queued behind the running one."""
        with self._cond:
            return len(self._queue)

    @property
    def busy(self) -> bool:
        """A request is running."""
        return self._current is not None

    def submit(self, job: Job, queued_before: int = 0) -> ServedRequest:
        """Queue ``job``; returns its traffic row. ``queued_before``: jobs of the same request queued before it
        (its other prompts: a request counts once against the limit, as llama-server takes all its prompts).
        Raises ``ApiError`` 503 (``Retry-After: 1``) when ``max_queue`` requests already wait, or the slot is
        stopping."""
        with self._cond:
            if self._stopping:
                raise ApiError(STOPPING, UNAVAILABLE)
            if len(self._queue) - queued_before >= self.max_queue:
                raise ApiError(f"the queue is full ({self.max_queue} requests wait behind the running one; "
                               "spec-inspector serve --max-queue): retry later", UNAVAILABLE,
                               headers={"Retry-After": "1"})
            job.id = self._next_id
            self._next_id += 1
            row = ServedRequest(job.id, job.endpoint, job.arrived, len(job.prompt_tokens), job.client,
                                feed=RecordStream() if self.feed else None)
            job.row = row
            with self._rows_lock:
                self.rows.append(row)
            self._queue.append(job)
            self._cond.notify()
        self._changed(row)
        return row

    def cancel(self, job: Job) -> None:
        """The client went away (or the server stops): skip ``job`` if it waits, cancel it if it runs (its
        next commit or the decode in flight). Any thread; idempotent."""
        job.cancelled.set()
        g = job.generation
        if g is not None:
            g.cancel()

    def begin_stop(self) -> None:
        """Refuse new requests and cancel the waiting and the running one as stopped: each ends
        ``cancelled`` with ``SERVER_STOPPED`` (in its record and ``served.error``) and its client gets
        ``STOPPING`` as llama-server's 503 ``unavailable_error``. Returns at once; idempotent."""
        with self._cond:
            self._stopping = True
            waiting = list(self._queue)
            self._cond.notify_all()
        for job in waiting:
            self.cancel(job)
        current = self._current
        if current is not None:
            self.cancel(current)

    def stop(self, timeout_s: float = 30.0) -> None:
        """``begin_stop``, then end the engine thread (it records the cancelled requests) and drop the
        slot's KV session."""
        self.begin_stop()
        if self._thread is not None:
            self._thread.join(timeout_s)
        sid, self._session = self._session, None
        if sid is not None:
            try:
                self.scheduler.execute("drop", sid, lambda r: r.drop_session(sid))
            except EngineError:
                pass

    def snapshot_rows(self) -> list[ServedRequest]:
        """The traffic rows, oldest first (a copy of the list; rows are updated in place)."""
        with self._rows_lock:
            return list(self.rows)

    def _changed(self, row: ServedRequest) -> None:
        if self.on_change is not None:
            try:
                self.on_change(row)
            except Exception:  # a viewer's failure never stops the server
                log.exception("serve: on_change failed")

    # -- the engine thread --------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                job = self._queue.popleft()
                self._current = job
                self.last_job = job
            try:
                if job.cancelled.is_set():
                    self._end_unrun(job, "cancelled", SERVER_STOPPED if self._stopping else
                                    f"{CLIENT_GONE} before the request ran")
                else:
                    self._run(job)
            except Exception as exc:  # never lose the server to one request
                log.exception("serve: request %d failed", job.id)
                self._end_unrun(job, "error", str(exc) or type(exc).__name__)
            finally:
                self._current = None

    def _end_unrun(self, job: Job, ended_as: str, error: str) -> None:
        row = job.row
        row.state, row.ended_as, row.error = "done", ended_as, error
        job.result = JobResult(ended_as=ended_as, error=error, prompt_n=len(job.prompt_tokens),
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
        room = max(1, self.runtime.n_ctx - prompt_n)
        limit = room if p.n_predict < 0 else max(1, p.n_predict)
        return replace(self.template, max_new_tokens=limit, stop=tuple(p.stop), sampling=p.sampling,
                       probabilities=self.template.probabilities or p.n_probs > 0 or p.logprobs,
                       top_probabilities=max(self.template.top_probabilities, p.n_probs))

    def _open_slot_session(self, settings: GenerationSettings, tokens: list[int], reuse: int) -> int:
        """The slot's KV session with ``reuse`` prompt tokens kept and the request's sampler."""
        if self._session is None:
            sampling = settings.sampling
            self._session = self.scheduler.execute("open", -1, lambda r: r.open_session(sampling)).value
            self._cached = []
            reuse = 0
        sid, cached = self._session, self._cached
        self.scheduler.execute("open", sid, lambda r: r.reopen_session(sid, settings.sampling, reuse, cached))
        return sid

    def _run(self, job: Job) -> None:
        p, row, tokens = job.params, job.row, job.prompt_tokens
        if p.n_predict == 0:  # llama-server evaluates the prompt only; nothing to generate here
            row.state, row.ended_as = "done", "limit"
            job.result = JobResult(stop_type="limit", ended_as="length", prompt_n=len(tokens))
            self._deliver(job, job.result)
            self._changed(row)
            return
        settings = self._settings(p, len(tokens))
        reuse = reused_prompt_tokens(self._cached, tokens, p.cache_prompt)
        record = SessionRecord()
        feed = row.feed

        def push(item, _apply=record.apply, _feed=feed.push if feed is not None else None) -> None:
            _apply(item)
            if _feed is not None:
                _feed(item)

        stream = _Stream()
        request = RunRequest(job.prompt_text, settings, self.source, dict(self.source_options), raw=True,
                             prompt_token_ids=tuple(tokens), draft_max_auto=self.draft_max_auto,
                             conversation=job.conversation, source_memory=self.memory, kv_reuse=reuse)
        run = SessionRun(self.scheduler, request, push, observer=stream)
        row.record = record
        row.state = "running"
        try:
            run.tokenize()
            run.templated_text = job.templated_text
            run.make_source()
            sid = self._open_slot_session(settings, tokens, reuse)
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
        try:
            if job.cancelled.is_set():
                raise RequestCancelled()
            run.start()
            sent = self._send(job, record, stream, sent)
            while not gen.finished:
                if job.cancelled.is_set():
                    raise RequestCancelled()
                run.step()
                sent = self._send(job, record, stream, sent)
            reason = gen.finish_reason
        except RequestCancelled:
            reason, error = "cancelled", SERVER_STOPPED if self._stopping else CLIENT_GONE
        except PromptTooLong as exc:
            error = str(exc)
        except Exception as exc:  # an engine error after repair: the complete windows are kept
            error = str(exc) or type(exc).__name__
        finally:
            job.generation = None
        end = run.end(reason, keep_session=True)
        self._send(job, record, stream, sent)
        run.close_source()
        self._keep_cache(gen, end)
        result = self._result(job, gen, record, reuse, reason, error)
        result.stopped = error == SERVER_STOPPED
        if self.receipts is not None:
            result.receipts_path = self.receipts.write(job, record, reuse, reason, error)
        self._finish_row(row, gen, record, result)
        if self.metrics is not None:
            self.metrics.observe(result, self.runtime.n_ctx)
        job.result = result
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
        while sent < len(tokens) and sent < len(stream.deltas):
            info = tokens[sent]
            probs = record.token_probabilities(info) if wanted else None
            if probs is None:
                self._deliver(job, TokenOut(info.token, stream.deltas[sent], piece(info.token), None, timings=timings))
            else:
                self._deliver(job, TokenOut(info.token, stream.deltas[sent], piece(info.token), probs.predicted_p,
                                            tuple(probs.top), timings=timings))
            sent += 1
        return sent

    def _keep_cache(self, gen, end) -> None:
        """What the slot's KV holds now: every token but the current one when the KV is canonical; else
        nothing (the session is emptied, the next request prefills everything)."""
        if not gen.session_retired and end.kv_length is not None and end.kv_length == gen.canonical_position:
            self._cached = list(gen.tokens[:-1])
            return
        self._cached = []
        sid = self._session
        self._session = None
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
            drafts=len(gen.receipts), accepted_per_position=tuple(per_pos),
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
        self._evict()

    def _evict(self) -> None:
        """Keep the newest ``KEEP_RECORDS`` requests' records in memory (older ones: their receipts file,
        when there is one)."""
        with self._rows_lock:
            done = [r for r in self.rows if r.state == "done" and r.record is not None]
        for r in done[:-KEEP_RECORDS]:
            r.record = None
            r.feed = None

