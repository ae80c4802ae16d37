"""Tokens from the slots' threads to the HTTP side's asyncio queues, with one event-loop wake-up per burst.

``loop.call_soon_threadsafe`` writes to the loop's self-pipe on every call: with ``-np N`` every decode step
hands N tokens over at once, and each write is a system call plus a wake-up of the HTTP thread, which then
competes with llama.cpp's threads for the cores during the next decode (measured: 0.5 s of 32 s at
``-np 4`` in the write alone). ``LoopMail`` keeps the items in one list and wakes the loop only when that
list was empty: the items posted while the loop had not yet run its drain ride along. Each queue gets its
items in the order they were posted.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque


class LoopMail:
    """Posts ``(queue, item)`` pairs from any thread to asyncio queues of the event loop ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._items: deque = deque()
        self._lock = threading.Lock()
        self._scheduled = False
        self.wakeups = 0
        """Times the loop was woken (tests, benchmarks)."""

    def post(self, queue: asyncio.Queue, item) -> None:
        """Put ``item`` into ``queue`` on the loop's thread soon (any thread). Dropped when the loop is closed
        (the server stopped: its clients are gone)."""
        with self._lock:
            self._items.append((queue, item))
            if self._scheduled:
                return
            self._scheduled = True
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self._drain)
            self.wakeups += 1
        except RuntimeError:  # closed since the check
            pass

    def _drain(self) -> None:
        with self._lock:
            items = list(self._items)
            self._items.clear()
            self._scheduled = False
        for queue, item in items:
            queue.put_nowait(item)
