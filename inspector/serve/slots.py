"""The slots of ``spec-inspector serve`` (llama-server's ``-np N``): one queue, N slots, a thread per slot.

Rules followed from llama.cpp 0c1e570 ``tools/server/server-context.cpp``:

- a request waits in one queue, in arrival order, until a slot is idle; then it takes the idle slot
  whose cached tokens share the largest fraction of its prompt (``get_available_slot``: more than
  ``SLOT_PROMPT_SIMILARITY`` = 0.1 of it, ``--slot-prompt-similarity``), else the least recently used
  idle slot (ties: the later slot, as its ``<=`` does; at start, the last slot).
- each slot is its own KV sequence with its own prompt cache (``inspector.serve.slot``); the sources'
  memory is the slot's, but for what llama.cpp shares across slots (``inspector.sources.slot_memory``).
- **schedules**: ``batched`` (the default with more than one slot) joins every slot's decode of a step
  into one ``llama_decode`` as ``update_slots`` does (``inspector.engine.step_batch``: generating slots'
  sampled token and draft rows first, then prompt chunks up to ``n_batch``); ``locked`` runs each slot's
  session on its own thread with every window verified and repaired under the one runtime lock, no
  cross-slot batching (SPEC "The runtime lock": the lock plots then show the waits). One slot is the
  same in both.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from inspector.engine import GenerationSettings
from inspector.serve.errors import UNAVAILABLE, ApiError
from inspector.serve.job import Job, ServedRequest
from inspector.serve.prompt_cache import DEFAULT_CACHE_RAM_MIB, PromptCache, common_prefix
from inspector.serve.slot import KEEP_RECORDS, KEEP_ROWS, STOPPING, ServeSlot
from inspector.session.run_records import RecordStream

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE = 16
"""Requests that may wait while the slots run; beyond, 503 with ``Retry-After`` (``--max-queue``)."""
SLOT_PROMPT_SIMILARITY = 0.1
"""llama-server's default ``--slot-prompt-similarity`` (``common/common.h``)."""
BATCHED, LOCKED = "batched", "locked"
SCHEDULES = (BATCHED, LOCKED)
"""``--schedule``: how several slots share the runtime (module docstring)."""
MAX_PARALLEL = 256
"""Most slots (``-np``); llama.cpp's ``LLAMA_MAX_SEQ`` is 256."""
WINDOW_SLOTS = 16
"""Most slots the window's Serve offers: the window loads its model with this many KV sequences (or
``n_batch``, if fewer: llama.cpp reserves an output row per sequence)."""


@dataclass(frozen=True)
class SlotOptions:
    """How the queue and the slots run: llama-server's server parameters (``common/common.h`` 0c1e570:
    ``n_parallel``, ``kv_unified``, ``cache_ram_mib``, ``cache_idle_slots``) and ours (``schedule``,
    ``spec_max_active``, ``max_queue``). Checked by ``ServeSlots``, which raises ``ValueError`` for a value it
    cannot run."""

    n_parallel: int = 1
    """Slots (llama-server's ``-np``), 1 .. ``MAX_PARALLEL`` (``check_parallel``)."""
    schedule: str = BATCHED
    """How several slots share the runtime: one of ``SCHEDULES`` (``--schedule``; module docstring)."""
    kv_unified: bool = False
    """Every slot may use the whole context (llama-server's ``-kvu``); else ``n_ctx / n_parallel`` each."""
    spec_max_active: int | None = None
    """Drafts off while more than this many slots generate (``inspector.serve.spec_gate``, ``--spec-max-active``,
    1 or more); None: always on, as llama-server."""
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB
    """llama-server's prompt cache in host memory (``--cache-ram`` MiB; -1: no limit; 0: none)."""
    cache_idle_slots: bool = True
    """Save idle slots to the prompt cache when a request starts (``--cache-idle-slots``)."""
    max_queue: int = DEFAULT_MAX_QUEUE
    """Requests that may wait while the slots run (``--max-queue``; ours); beyond, 503."""


@dataclass(frozen=True)
class RequestTemplate:
    """What every served request runs with: its proposal source and the server's ``GenerationSettings``
    (a request sets its own limits, stop strings and sampling over them: ``ServeSlot``)."""

    source: str = "ngram"
    """A name of ``inspector.sources.registry`` (``none``: plain decoding)."""
    source_options: dict = field(default_factory=dict)
    """The source's options by name (checked by its declaration when a request makes it)."""
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    """The server's template: draft max, proposal deadline (ms), probabilities."""
    draft_max_auto: bool = False
    """Take the draft max from the stored cost model instead (``RunRequest.draft_max_auto``)."""


def check_parallel(n_parallel: int, n_ctx: int, n_batch: int) -> None:
    """Raise ``ValueError`` (one line) unless ``n_parallel`` slots fit: 1 .. ``MAX_PARALLEL``, at least 8
    context positions (tokens) per slot, and ``n_parallel <= n_batch`` (llama.cpp makes a context with
    one output row per sequence and at most ``n_batch`` outputs)."""
    if not 1 <= n_parallel <= MAX_PARALLEL:
        raise ValueError(f"-np {n_parallel}: the number of slots must be 1..{MAX_PARALLEL}")
    if n_ctx // n_parallel < 8:
        raise ValueError(f"-np {n_parallel} slots do not fit a context of {n_ctx} positions "
                         f"({n_ctx // n_parallel} each): raise -c or lower -np")
    if n_parallel > n_batch:
        raise ValueError(f"-np {n_parallel} slots need -b (n_batch) >= {n_parallel}, observed {n_batch}")


def pick_slot(idle: list[ServeSlot], prompt: list[int], similarity: float = SLOT_PROMPT_SIMILARITY) -> ServeSlot:
    """The idle slot a request with ``prompt`` (tokens) takes (module docstring; ``idle`` in slot order,
    not empty)."""
    best, best_sim = None, 0.0
    if similarity > 0 and prompt:
        for slot in idle:
            if not slot.cached:
                continue
            sim = common_prefix(slot.cached, prompt) / len(prompt)
            if sim > best_sim and sim > similarity:
                best, best_sim = slot, sim
    if best is not None:
        return best
    chosen = idle[0]
    for slot in idle:
        if slot.last_used <= chosen.last_used:
            chosen = slot
    return chosen


class ServeSlots:
    """The queue and the slots. ``scheduler``: the runtime's ``RuntimeScheduler`` (the window shares its
    worker's; nothing else decodes while serving). ``request_template``: the proposal source and
    ``GenerationSettings`` of every request (``RequestTemplate``; None: its defaults). ``slot_options``: how
    many slots, their schedule, KV cache, prompt cache and queue (``SlotOptions``; None: one slot).
    ``receipts``: a ``ReceiptsDir`` (None: keep none). ``metrics``: a ``ServeMetrics`` (or None).
    ``on_change(row)``: a request arrived, started or ended (a slot's or the HTTP thread). ``feed``: give
    every request a ``RecordStream`` of its records (the window). Raises ``ValueError`` for a schedule that
    is not one, a slot count the runtime cannot hold (``check_parallel``), ``spec_max_active`` below 1 or a
    batched schedule on a runtime in another process."""

    def __init__(self, scheduler, request_template: RequestTemplate | None = None,
                 slot_options: SlotOptions | None = None, *, receipts=None, metrics=None,
                 on_change: Callable[[ServedRequest], None] | None = None, feed: bool = False) -> None:
        request = request_template or RequestTemplate()
        o = slot_options or SlotOptions()
        n_parallel, schedule, kv_unified, spec_max_active = o.n_parallel, o.schedule, o.kv_unified, o.spec_max_active
        if schedule not in SCHEDULES:
            raise ValueError(f"--schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")
        self.scheduler = scheduler
        self.runtime = scheduler.runtime
        check_parallel(n_parallel, self.runtime.n_ctx, self.runtime.n_batch)
        self.source = request.source
        self.source_options = dict(request.source_options or {})
        self.template = request.settings or GenerationSettings()
        self.draft_max_auto = request.draft_max_auto
        self.max_queue = o.max_queue
        self.receipts = receipts
        self.metrics = metrics
        self.on_change = on_change
        self.feed = feed
        if spec_max_active is not None and spec_max_active < 1:
            raise ValueError(f"--spec-max-active {spec_max_active}: expected 1 or more slots")
        self.spec_max_active = spec_max_active
        """Most slots generating at once with drafts on (``inspector.serve.spec_gate``), or None."""
        self.n_ctx_slot = self.runtime.n_ctx if kv_unified or n_parallel == 1 else self.runtime.n_ctx // n_parallel
        """Positions (tokens) one slot's request may use: the whole context with ``kv_unified`` (one KV pool,
        llama-server's ``-kvu``), else ``n_ctx / n_parallel`` (llama.cpp's ``llama_n_ctx_seq`` of a split
        cache, which llama-server's ``n_ctx_slot`` reads)."""
        self.kv_unified = kv_unified
        self.similarity = SLOT_PROMPT_SIMILARITY
        """The share of a prompt an idle slot must hold to be chosen for it, and the prompt cache's test of that
        choice (llama-server's ``--slot-prompt-similarity``)."""
        self.prompt_cache = PromptCache(o.cache_ram_mib, self.runtime.n_ctx) if o.cache_ram_mib != 0 else None
        """llama-server's prompt cache in host memory (``--cache-ram`` MiB, 0: none; ``inspector.serve.prompt_cache``)."""
        self.cache_idle_slots = o.cache_idle_slots and self.prompt_cache is not None
        """Save idle slots to the prompt cache when a request starts (and empty them with ``kv_unified``)."""
        self.schedule = schedule if n_parallel > 1 else LOCKED
        """The schedule in effect (one slot: ``locked``, the same thing)."""
        self.steps = None
        """The batched schedule's ``StepBatch`` (its steps: what each decode carried), or None."""
        if self.schedule == BATCHED:
            decode_step = getattr(self.runtime, "decode_step", None)
            if decode_step is None:
                raise ValueError("--schedule batched needs the model in this process (a model split over RPC "
                                 "runs in a child process): use --schedule locked")
            self.steps = scheduler.batch_steps(decode_step, self.runtime.n_batch)
            self.runtime.steps = self.steps
            self.steps.listeners.append(self._on_step)
        self._by_session: dict = {}
        self.shared_memory: dict = {}
        """What every slot's source shares (``inspector.sources.slot_memory``)."""
        self.slots = [ServeSlot(i, self) for i in range(n_parallel)]
        self.rows: deque[ServedRequest] = deque(maxlen=KEEP_ROWS)
        self._rows_lock = threading.Lock()
        self._queue: deque[Job] = deque()
        self._assigned: dict[int, Job] = {}
        self._cond = threading.Condition()
        self._next_id = 1
        self.stopping = False
        self._threads: list[threading.Thread] = []

    # -- any thread ---------------------------------------------------------------------
    def start(self) -> None:
        """Start one thread per slot (idempotent); with the batched schedule, probe the runtime's KV rollback first."""
        if not self._threads:
            if self.steps is not None:
                # The runtime's KV rollback probe (a request with a source asks it first) decodes on a spare
                # session: from a slot whose own session is active, that guest decode would wait for a step that
                # waits for the slot. Probed here, before any slot runs, it is decoded alone.
                self.scheduler.execute("probe", -1, lambda rt: getattr(rt, "rollback", None))
            for slot in self.slots:
                t = threading.Thread(target=self._loop, args=(slot,), name=f"spec-inspector serve slot {slot.id}",
                                     daemon=True)
                self._threads.append(t)
                t.start()

    @property
    def n_parallel(self) -> int:
        return len(self.slots)

    @property
    def waiting(self) -> int:
        """Requests queued until a slot is idle."""
        with self._cond:
            return len(self._queue)

    @property
    def processing(self) -> int:
        """Slots running a request."""
        return sum(1 for s in self.slots if s.busy)

    def generating(self) -> int:
        """Slots whose request is generating now (its ``Generation`` open: prefill, windows and plain steps)."""
        return sum(1 for s in self.slots if (job := s.current) is not None and job.generation is not None)

    @property
    def busy(self) -> bool:
        """Some slot runs a request."""
        return any(s.busy for s in self.slots)

    @property
    def last_job(self) -> Job | None:
        """The newest request that ran or runs (any slot)."""
        jobs = [s.last_job for s in self.slots if s.last_job is not None]
        return max(jobs, key=lambda j: j.id) if jobs else None

    def submit(self, job: Job, queued_before: int = 0) -> ServedRequest:
        """Queue ``job``; returns its traffic row. ``queued_before``: jobs of the same request queued before it
        (its other prompts: a request counts once against the limit, as llama-server takes all its prompts).
        Raises ``ApiError`` 503 (``Retry-After: 1``) when ``max_queue`` requests already wait, or the server is
        stopping."""
        with self._cond:
            if self.stopping:
                raise ApiError(STOPPING, UNAVAILABLE)
            if job.params.id_slot >= len(self.slots):
                raise ApiError(f"id_slot {job.params.id_slot}: there are {len(self.slots)} slots (0.."
                               f"{len(self.slots) - 1}; spec-inspector serve -np)")
            if len(self._queue) - queued_before >= self.max_queue:
                raise ApiError(f"the queue is full ({self.max_queue} requests wait for a slot; "
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
            self._dispatch()
        self.changed(row)
        return row

    def cancel(self, job: Job) -> None:
        """The client went away (or the server stops): skip ``job`` if it waits, cancel it if it runs (its
        next commit, the decode in flight, or its place in the coming step). Any thread; idempotent."""
        job.cancelled.set()
        g = job.generation
        if g is not None:
            g.cancel()

    def begin_stop(self) -> None:
        """Refuse new requests and cancel the waiting and running ones as stopped: each ends ``cancelled``
        with ``SERVER_STOPPED`` and its client gets ``STOPPING`` (503). Returns at once; idempotent."""
        with self._cond:
            self.stopping = True
            waiting = list(self._queue) + list(self._assigned.values())
            self._dispatch()
            self._cond.notify_all()
        for job in waiting:
            self.cancel(job)
        for slot in self.slots:
            if slot.current is not None:
                self.cancel(slot.current)

    def stop(self, timeout_s: float = 30.0) -> None:
        """``begin_stop``, then end the slots' threads (they record the cancelled requests) and drop the
        slots' KV sessions."""
        self.begin_stop()
        for t in self._threads:
            t.join(timeout_s)
        for slot in self.slots:
            slot.drop_session()
        if self.steps is not None and getattr(self.runtime, "steps", None) is self.steps:
            self.runtime.steps = None
            self.scheduler.steps = None

    def snapshot_rows(self) -> list[ServedRequest]:
        """The traffic rows, oldest first (a copy of the list; rows are updated in place)."""
        with self._rows_lock:
            return list(self.rows)

    def changed(self, row: ServedRequest) -> None:
        """Tell the viewer (``on_change``) about ``row``; its failure never stops the server."""
        if self.on_change is not None:
            try:
                self.on_change(row)
            except Exception:
                log.exception("serve: on_change failed")

    def evict(self) -> None:
        """Keep the newest ``KEEP_RECORDS`` requests' records in memory (older ones: their receipts file)."""
        with self._rows_lock:
            done = [r for r in self.rows if r.state == "done" and r.record is not None]
        for r in done[:-KEEP_RECORDS]:
            r.record = None
            r.feed = None

    def arm(self, slot_id: int, fault) -> None:
        """Arm ``fault`` (an ``inspector.engine.faults.Fault``) on slot ``slot_id``: it fires in that slot's
        next request only; the other slots run untouched. Raises ``ValueError`` for a slot that is not one."""
        if not 0 <= slot_id < len(self.slots):
            raise ValueError(f"slot {slot_id} is not one of 0..{len(self.slots) - 1}")
        self.slots[slot_id].faults.add(fault)

    def park_idle_slots(self, started: ServeSlot) -> None:
        """A request started on ``started``: with ``--cache-idle-slots``, every other slot that is idle saves its
        state to the prompt cache (and is emptied with a unified KV cache: ``ServeSlot.park``), as llama-server
        does when it launches a task. Called on ``started``'s thread."""
        if not self.cache_idle_slots:
            return
        for slot in self.slots:
            if slot is not started and not slot.busy:
                slot.park()

    def session_opened(self, slot: ServeSlot) -> None:
        """``slot`` opened its KV session (its id is ``slot.session``): the steps it rides in are its request's."""
        self._by_session[slot.session] = slot

    def session_slots(self) -> dict[int, int]:
        """Which slot each KV session the slots opened belongs to (session id: slot id), for a viewer of the
        steps (``StepRecord`` parts name sessions). Any thread."""
        return {sid: slot.id for sid, slot in dict(self._by_session).items()}

    def _on_step(self, record) -> None:
        """A step was decoded (under the runtime lock): each request whose rows it carried keeps it."""
        for part in record.parts:
            slot = self._by_session.get(part.session_id)
            job = slot.current if slot is not None else None
            if job is not None and (not job.steps or job.steps[-1] is not record):
                job.steps.append(record)

    # -- dispatch -----------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Hand queued requests to idle slots, in arrival order (holding ``_cond``); a request that asks for
        a busy slot (``id_slot``) waits for it while later ones go on (llama-server defers its task)."""
        if any(s.finishing for s in self.slots):
            return  # a slot that answered is idle before the next request picks one (llama-server releases it first)
        for job in list(self._queue):
            idle = [s for s in self.slots if not s.busy and s.id not in self._assigned]
            if not idle:
                return
            wanted = job.params.id_slot
            if wanted >= 0:
                idle = [s for s in idle if s.id == wanted]
                if not idle:
                    continue
            slot = pick_slot(idle, job.prompt_tokens, self.similarity)
            self._queue.remove(job)
            self._assigned[slot.id] = job
            self._cond.notify_all()

    def _loop(self, slot: ServeSlot) -> None:
        while True:
            with self._cond:
                while slot.id not in self._assigned and not (self.stopping and not self._queue):
                    self._cond.wait()
                job = self._assigned.pop(slot.id, None)
                if job is None:
                    return
                slot.current = job  # busy before the lock is let go: dispatch skips it
            slot.run(job)
            with self._cond:
                self._dispatch()
