"""The batched schedule: every slot's decode of one step in ONE ``llama_decode``, as llama-server does it.

Rules followed from llama.cpp 0c1e570 ``tools/server/server-context.cpp`` (``update_slots`` /
``pre_decode``): in each step, every generating slot adds its sampled token and its draft rows
(``handle_last_sampled_token``: ``spec_i_batch``), in slot order; then, while the batch holds fewer
than ``n_batch`` rows, slots still prefilling add prompt tokens in slot order, each as many as fit
(``while (... && batch.size() < n_batch)``); only a prompt's last token asks for logits. The step is
decoded once; each slot then reads its own rows.

Here each slot runs its ``Generation`` on its own thread (the engine is unchanged): a decode of an
*active* session (a slot with a request) joins the step (``join``) and waits; the step is decoded
when every active session has joined, so a slot still drafting holds the step back exactly as
llama-server drafts for all slots before it builds the batch. A session that is not active (the
rollback probe a slot's thread runs before its first window) joins as a guest: its step is decoded at
once, with whatever else joined (it never waits for the active sessions: its own thread may be one). The thread that completes the step decodes it (no
extra thread, no extra wake-up), under the runtime lock, which every joiner holds around its decode
and releases only while it waits (``threading.Condition`` over the scheduler's lock).

Differences, each on purpose: a slot's generation rows never split across two decodes (rows that would
pass ``n_batch`` wait for the next step; llama-server splits the batch in ``n_batch`` chunks, which
its per-slot verification does not expect either); a slot whose request was cancelled leaves the step
before it is decoded (``DecodeAborted``) instead of being decoded and released.

Pure Python: the runtime gives the decode (``decode(rows)`` with ``BatchRow`` rows) and reads the rows
back with the offsets ``join`` returns.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

from inspector.engine.errors import DecodeAborted

WAIT_POLL_S = 0.05
"""How often a waiting joiner looks at its cancellation event (seconds)."""
KEEP_STEPS = 20_000
"""Steps kept in ``StepBatch.steps`` (the newest; a few hundred bytes each)."""

PROMPT, PLAIN, DRAFT = "prompt", "plain", "draft"
"""Kinds of rows in a step: prompt tokens, a plain step's one row, a window's verification rows."""


@dataclass(frozen=True, slots=True)
class BatchRow:
    """One row of a step's batch: ``token`` at ``position`` of sequence ``seq``; ``output``: logits wanted."""

    token: int
    position: int
    seq: int
    output: bool


@dataclass(frozen=True, slots=True)
class SlotRows:
    """What one session put into a step: ``kind`` (``prompt``, ``plain`` or ``draft``), its rows."""

    session_id: int
    kind: str
    rows: int
    kv_end: int = -1
    """The session's KV length once the step is decoded (positions, tokens: its rows' last position + 1; a
    window's rejected rows are trimmed after it); -1: not known."""


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One decoded step: ``index`` (1-based over the schedule's life), its start and length (microseconds
    since ``StepBatch.epoch_ns``), what each session put in it (``parts``, batch order) and how many
    sessions were active (had a request) when it was decoded."""

    index: int
    started_us: int
    decode_us: int
    parts: tuple[SlotRows, ...]
    active: int

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    def to_json(self) -> dict:
        return {"step": self.index, "started_us": self.started_us, "decode_us": self.decode_us,
                "active": self.active, "rows": self.rows,
                "parts": [{"session_id": p.session_id, "kind": p.kind, "rows": p.rows, "kv_end": p.kv_end}
                          for p in self.parts]}


@dataclass(eq=False)
class _Entry:
    session_id: int
    tokens: list[int]
    position: int
    all_outputs: bool
    abort: threading.Event | None
    thread: int
    done: int = 0
    """Tokens decoded so far (a prompt may take several steps)."""
    finished: bool = False
    error: BaseException | None = None
    output_first: int = -1
    batch_first: int = -1
    outputs: int = 0
    step: StepRecord | None = None
    steps: list[int] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Joined:
    """Where a joiner's rows landed in the step that finished them: ``output_first`` (its first row with
    logits among the step's outputs), ``batch_first`` (that row's index in the batch), ``outputs`` (its
    rows with logits) and the ``StepRecord``; ``steps``: every step its tokens rode in (a long prompt)."""

    output_first: int
    batch_first: int
    outputs: int
    step: StepRecord
    steps: tuple[int, ...]


class StepBatch:
    """Joins the decodes of the active sessions into steps. ``condition``: a ``threading.Condition`` over
    the runtime lock (every method is called holding it). ``decode(rows)``: decode a list of
    ``BatchRow`` in one ``llama_decode`` (raises as the runtime does). ``n_batch``: most rows per step."""

    def __init__(self, condition: threading.Condition, decode: Callable[[list[BatchRow]], None],
                 n_batch: int) -> None:
        self.condition = condition
        self.decode = decode
        self.n_batch = max(1, n_batch)
        self.active: set[int] = set()
        """Sessions with a request: a step waits for each of them to join."""
        self._pending: dict[int, _Entry] = {}
        self._unread: set[int] = set()
        """Threads whose rows were decoded and not yet read (their operation still runs)."""
        self.steps: deque[StepRecord] = deque(maxlen=KEEP_STEPS)
        self.step_count = 0
        self.busy_sum = 0
        """Sum over steps of the sessions in the step (llama-server's ``n_busy_slots_per_decode`` numerator)."""
        self.epoch_ns = time.perf_counter_ns()
        self.listeners: list[Callable[[StepRecord], None]] = []
        """Called with each decoded step (under the lock: cheap, never the runtime)."""

    # -- membership (holding the lock) ---------------------------------------------------------
    def activate(self, sid: int) -> None:
        """Session ``sid`` has a request: the next steps wait for it."""
        self.active.add(sid)

    def deactivate(self, sid: int) -> None:
        """Session ``sid``'s request ended: steps stop waiting for it (one waiting for it may run now)."""
        self.active.discard(sid)
        self._maybe_run()

    def released(self, thread: int) -> None:
        """The operation of ``thread`` ended: its rows' logits are no longer read, the next step may
        overwrite them (``RuntimeScheduler`` calls this after every operation)."""
        if thread in self._unread:
            self._unread.discard(thread)
            self._maybe_run()

    # -- a decode ----------------------------------------------------------------------------
    def join(self, sid: int, tokens: Sequence[int], position: int, all_outputs: bool,
             abort: threading.Event | None = None) -> Joined:
        """Put ``tokens`` (at ``position ..`` of session ``sid``) into the coming steps and wait until all
        are decoded. ``all_outputs``: logits on every row (a window's or a plain step's rows); else on
        the last only (a prompt). Returns where the rows landed. Raises ``DecodeAborted`` when ``abort``
        is set before its rows were decoded (they leave the step), or the decode's own error."""
        me = threading.get_ident()
        self._unread.discard(me)
        entry = _Entry(sid, list(tokens), position, all_outputs, abort, me)
        self._pending[sid] = entry
        self._maybe_run()
        while not entry.finished:
            if abort is not None and abort.is_set() and entry.done == 0:
                self._pending.pop(sid, None)
                self._maybe_run()
                raise DecodeAborted(2, len(entry.tokens), position)
            self.condition.wait(WAIT_POLL_S)
        if entry.error is not None:
            raise entry.error
        return Joined(entry.output_first, entry.batch_first, entry.outputs, entry.step, tuple(entry.steps))

    # -- the step -----------------------------------------------------------------------------
    def _ready(self) -> bool:
        """A step can be decoded: no rows of the last one are still being read, and every active session
        joined, or a guest did (its thread may be an active session's, inside an operation of its own: a
        probe; it never waits for the others)."""
        if not self._pending or self._unread:
            return False
        return self.active.issubset(self._pending) or any(sid not in self.active for sid in self._pending)

    def _maybe_run(self) -> None:
        while self._ready():
            self._run_step()

    def _run_step(self) -> None:
        rows: list[BatchRow] = []
        parts: list[SlotRows] = []
        taken: list[tuple[_Entry, int, int, int]] = []  # entry, batch start, tokens taken, outputs
        outputs = 0
        ordered = sorted(self._pending.values(), key=lambda e: e.session_id)
        for e in ordered:  # generating slots first, in slot order, never split
            if not e.all_outputs:
                continue
            if rows and len(rows) + len(e.tokens) > self.n_batch:
                continue
            start = len(rows)
            for i, t in enumerate(e.tokens):
                rows.append(BatchRow(t, e.position + i, e.session_id, True))
            taken.append((e, start, len(e.tokens), len(e.tokens)))
            parts.append(SlotRows(e.session_id, DRAFT if len(e.tokens) > 1 else PLAIN, len(e.tokens),
                                   e.position + len(e.tokens)))
        for e in ordered:  # then prompts, in slot order, as many tokens as fit
            if e.all_outputs or len(rows) >= self.n_batch:
                continue
            n = min(len(e.tokens) - e.done, self.n_batch - len(rows))
            start = len(rows)
            last = e.done + n == len(e.tokens)
            for i in range(n):
                rows.append(BatchRow(e.tokens[e.done + i], e.position + e.done + i, e.session_id,
                                     last and i == n - 1))
            taken.append((e, start, n, 1 if last else 0))
            parts.append(SlotRows(e.session_id, PROMPT, n, e.position + e.done + n))
        t0 = time.perf_counter_ns()
        error: BaseException | None = None
        try:
            self.decode(rows)
        except BaseException as exc:  # every joiner of the step gets the decode's error
            error = exc
        t1 = time.perf_counter_ns()
        self.step_count += 1
        self.busy_sum += len({e.session_id for e, *_ in taken})
        record = StepRecord(self.step_count, (t0 - self.epoch_ns) // 1000, (t1 - t0) // 1000, tuple(parts),
                            len(self.active))
        self.steps.append(record)
        for listener in self.listeners:
            listener(record)
        for e, start, n, outs in taken:
            e.steps.append(record.index)
            e.step = record
            if error is not None:
                e.error, e.finished = error, True
            else:
                e.done += n
                if e.done == len(e.tokens):
                    e.finished = True
                    e.batch_first = start if e.all_outputs else start + n - 1
                    e.output_first = outputs
                    e.outputs = outs
                    self._unread.add(e.thread)
            outputs += outs
            if e.finished:
                self._pending.pop(e.session_id, None)
        self.condition.notify_all()

    @property
    def busy_per_decode(self) -> float:
        """Sessions per decoded step on average (llama-server's ``n_busy_slots_per_decode``)."""
        return self.busy_sum / self.step_count if self.step_count else 0.0
