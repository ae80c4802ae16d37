"""The runtime scheduler: one lock owning the runtime (SPEC "The runtime lock")."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any, Callable, Generic, TypeVar

from inspector.engine.records import LockOperation
from inspector.engine.step_batch import StepBatch

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Timed(Generic[T]):
    """A value returned from the lock with its lock wait and hold (microseconds)."""

    value: T
    wait_us: int
    hold_us: int


class RuntimeScheduler:
    """Runs every runtime operation under one lock and records its timing.

    ``runtime``: the object handed to every operation (a ``LlamaRuntime`` or a
    test fake). ``history``: how many recent ``LockOperation`` records to keep
    (older ones are dropped; totals per kind are kept for the whole life).
    Listeners added with ``add_listener`` receive each ``LockOperation`` on the
    thread that ran it (they must be cheap and must not call the scheduler).
    """

    def __init__(self, runtime: Any, history: int = 100_000) -> None:
        self.runtime = runtime
        self._lock = threading.Lock()
        self.epoch_ns = perf_counter_ns()
        """``perf_counter_ns`` when the scheduler was made: time zero of ``LockOperation.started_us``."""
        self.operations: deque[LockOperation] = deque(maxlen=history)
        self.totals: dict[str, list[int]] = {}
        """kind -> [acquisitions, total wait us, total hold us]."""
        self._listeners: list[Callable[[LockOperation], None]] = []
        self.steps = None
        """The batched schedule's ``StepBatch`` (``batch_steps``), or None: each decode runs alone."""

    def batch_steps(self, decode: Callable, n_batch: int):
        """Join the decodes of the active sessions into steps (the batched schedule,
        ``inspector.engine.step_batch``): returns the ``StepBatch``, whose condition is this lock.
        ``decode(rows)``: the runtime's one-batch decode; ``n_batch``: most rows per step."""
        if self.steps is None:
            self.steps = StepBatch(threading.Condition(self._lock), decode, n_batch)
        return self.steps

    def add_listener(self, listener: Callable[[LockOperation], None]) -> None:
        """Call ``listener(op)`` after each operation (any thread)."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[LockOperation], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def execute(self, kind: str, session_id: int, operation: Callable[[Any], T]) -> Timed[T]:
        """Run ``operation(runtime)`` holding the lock; return its value with timings.

        The timing is recorded even when ``operation`` raises; the exception
        propagates unchanged.
        """
        t0 = perf_counter_ns()
        with self._lock:
            t1 = perf_counter_ns()
            try:
                value = operation(self.runtime)
            finally:
                if self.steps is not None:
                    self.steps.released(threading.get_ident())
                t2 = perf_counter_ns()
                self._record(kind, session_id, t0, t1, t2)
        return Timed(value, (t1 - t0) // 1000, (t2 - t1) // 1000)

    def _record(self, kind: str, session_id: int, t0: int, t1: int, t2: int) -> None:
        op = LockOperation(kind, session_id, (t0 - self.epoch_ns) // 1000, (t1 - t0) // 1000, (t2 - t1) // 1000)
        self.operations.append(op)
        tot = self.totals.get(kind)
        if tot is None:
            self.totals[kind] = [1, op.wait_us, op.hold_us]
        else:
            tot[0] += 1
            tot[1] += op.wait_us
            tot[2] += op.hold_us
        for listener in self._listeners:
            listener(op)
