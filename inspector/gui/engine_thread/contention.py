"""Background sessions: other requests generating through the same scheduler.

Each background session is its own ``Generation`` on its own KV sequence and
its own Python thread, looping over short requests (plain or n-gram) until
told to stop, so the main session's lock waits become visible. No Qt here:
the worker owns a ``Contention`` and only ever calls it from its thread or
the GUI thread through the thread-safe ``set_count``.
"""

from __future__ import annotations

import logging
import threading

from inspector.engine import Generation, GenerationSettings, RuntimeScheduler, SessionPlace
from inspector.engine.errors import EngineError
from inspector.sources import NgramSource

log = logging.getLogger(__name__)

MAX_BACKGROUND = 3
BACKGROUND_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
BACKGROUND_TOKENS = 48
"""Tokens per background request (then a new request starts)."""


class _Background(threading.Thread):
    def __init__(self, scheduler: RuntimeScheduler, number: int) -> None:
        super().__init__(name=f"spec-inspector-background-{number}", daemon=True)
        self.scheduler = scheduler
        self.number = number
        self.stop_event = threading.Event()
        self.generation: Generation | None = None
        self.requests = 0

    def stop(self) -> None:
        self.stop_event.set()
        g = self.generation
        if g is not None:
            g.cancel()

    def run(self) -> None:
        sched = self.scheduler
        rt = sched.runtime
        try:
            tokens = rt.prompt_tokens(BACKGROUND_PROMPT)
        except EngineError:
            tokens = rt.tokenize(BACKGROUND_PROMPT, True, False)
        while not self.stop_event.is_set():
            try:
                sid = sched.execute("open", -1, lambda r: r.open_session(None)).value
            except EngineError:  # every KV sequence in use: try again shortly
                self.stop_event.wait(0.1)
                continue
            source = NgramSource() if self.number % 2 == 0 else None
            self.requests += 1
            g = Generation(sched, source, tokens, GenerationSettings(max_new_tokens=BACKGROUND_TOKENS),
                           place=SessionPlace(1000 + 100 * self.number + self.requests, sid))
            self.generation = g
            try:
                if not self.stop_event.is_set():
                    g.run()
            except Exception:  # cancelled, or a failure of its own: start over
                pass
            finally:
                self.generation = None
                if not g.session_retired:
                    sched.execute("drop", sid, lambda r: r.drop_session(sid))


class Contention:
    """0..``MAX_BACKGROUND`` background sessions on ``scheduler`` (count in sessions)."""

    def __init__(self, scheduler: RuntimeScheduler) -> None:
        self.scheduler = scheduler
        self._threads: list[_Background] = []
        self._lock = threading.Lock()
        self._stopping: list[_Background] = []

    @property
    def count(self) -> int:
        return len(self._threads)

    def session_ids(self) -> set[int]:
        """KV sequences the background sessions use right now."""
        out = set()
        for t in self._threads:
            g = t.generation
            if g is not None and g.session_id is not None:
                out.add(g.session_id)
        return out

    def set_count(self, n: int) -> None:
        """Start or stop background sessions until ``n`` run (never blocks)."""
        n = max(0, min(MAX_BACKGROUND, n))
        with self._lock:
            while len(self._threads) > n:
                t = self._threads.pop()
                t.stop()
                self._stopping.append(t)
            while len(self._threads) < n:
                used = {t.number for t in self._threads}
                number = next(i for i in range(MAX_BACKGROUND) if i not in used)
                t = _Background(self.scheduler, number)
                self._threads.append(t)
                t.start()

    def stop_all(self, timeout: float = 10.0) -> None:
        """Stop every background session and wait for their threads (seconds)."""
        self.set_count(0)
        with self._lock:
            stopping, self._stopping = self._stopping, []
        for t in stopping:
            t.join(timeout)
