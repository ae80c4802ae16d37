"""llama-server's prompt cache (``--cache-ram``): slots' KV states kept in host memory and restored into any slot.

Rules followed from llama.cpp 0c1e570 (``tools/server/server-task.cpp`` ``server_prompt_cache::alloc`` /
``load`` / ``update``, ``tools/server/server-context.cpp`` ``get_available_slot`` and the launch of a task):

- **when a slot is taken** (``cache_update_wanted``): unless the slot was chosen by prompt similarity and
  keeps at least half of what it holds (``f_keep >= 0.5``), its state is saved to the cache and the cached
  prompt that suits the request best is restored into it (``PromptCache.best``): one that keeps at least a
  quarter of itself (``f_keep >= 0.25``: "don't trash large prompts") and beats the slot's own both in the
  fraction of itself kept and in the fraction of the request covered. A restored entry leaves the cache.
- **saving** (``PromptCache.store``): skipped when an entry already holds the whole prompt or the state alone
  exceeds the size limit; entries the new prompt contains whole are dropped; the oldest go until it fits.
- **limits** (``PromptCache.update``): ``--cache-ram`` MiB (default 8192; -1 no limit, 0 no cache), and
  ``n_ctx`` tokens raised to what the size limit holds at the entries' mean size per token.
- **idle slots** (``--cache-idle-slots``, on by default): when a request starts, every idle slot's state is
  saved, and with a unified KV cache (``-kvu``) the slot is emptied, so its cells serve the running slots.

The bytes are llama.cpp's sequence state (``inspector.llama.sequence_state``). Models with recurrent or
sliding-window memory keep checkpoints beside it in llama-server; this cache keeps none (their state is
saved whole). Thread-safe: every method holds the cache's lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np


DEFAULT_CACHE_RAM_MIB = 8192
"""llama-server's default ``--cache-ram`` (MiB; ``common/common.h`` ``cache_ram_mib``)."""
KEEP_AT_LEAST = 0.25
"""A cached prompt is restored only when the request keeps at least this fraction of it."""
SAVE_BELOW_KEEP = 0.5
"""A slot chosen by similarity is saved first only when the request keeps less than this fraction of it."""
MIB = 1024 * 1024


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists (llama.cpp's ``get_common_prefix``)."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def cache_update_wanted(held: Sequence[int], prompt: Sequence[int], similarity: float) -> bool:
    """Whether a slot holding ``held`` (tokens) that a request with ``prompt`` takes saves its state to the cache
    and looks for a better one (``get_available_slot``'s ``update_cache``): False only when the slot was a
    similarity choice (it shares more than ``similarity`` of the prompt) that keeps at least half of itself."""
    if not held or not prompt:
        return True
    lcp = common_prefix(held, prompt)
    if lcp / len(prompt) <= similarity:
        return True  # the slot came by least recent use (or by id_slot without similarity)
    return lcp / len(held) < SAVE_BELOW_KEEP


@dataclass(frozen=True, eq=False)
class CachedPrompt:
    """One saved slot: the tokens its KV sequence held and that sequence's state (llama.cpp's bytes: the
    ``SequenceState.save`` array, kept as is, or ``bytes``). Entries compare by identity."""

    tokens: tuple[int, ...]
    data: "bytes | np.ndarray"

    @property
    def size(self) -> int:
        """Bytes of state."""
        return len(self.data)


class PromptCache:
    """The saved prompts, oldest first. ``limit_mib``: ``--cache-ram`` (MiB; < 0: no size limit);
    ``limit_tokens``: the context size (tokens; 0: no token limit)."""

    def __init__(self, limit_mib: int = DEFAULT_CACHE_RAM_MIB, limit_tokens: int = 0) -> None:
        self.limit_size = MIB * max(0, limit_mib)
        """Bytes the entries may take (0: no limit)."""
        self.limit_tokens = max(0, limit_tokens)
        self.entries: list[CachedPrompt] = []
        self.saved = 0
        """Prompts saved so far."""
        self.restored = 0
        """Prompts restored into a slot so far."""
        self._lock = threading.Lock()

    def size(self) -> int:
        """Bytes held by every entry."""
        with self._lock:
            return self._size()

    def n_tokens(self) -> int:
        """Tokens held by every entry."""
        with self._lock:
            return sum(len(e.tokens) for e in self.entries)

    def holds(self, tokens: Sequence[int]) -> bool:
        """Whether an entry already holds all of ``tokens`` (saving them again would be skipped)."""
        with self._lock:
            return self._holds(tuple(tokens))

    def store(self, tokens: Sequence[int], data: "bytes | np.ndarray") -> bool:
        """Save a slot's ``tokens`` and state ``data`` (``alloc``'s rules, module docstring); whether it was kept."""
        tokens = tuple(tokens)
        with self._lock:
            if not tokens or self._holds(tokens):
                return False
            if self.limit_size and len(data) > self.limit_size:
                return False
            self.entries = [e for e in self.entries if common_prefix(e.tokens, tokens) != len(e.tokens)]
            while self.entries and self.limit_size and self._size() + len(data) > self.limit_size:
                self.entries.pop(0)
            self.entries.append(CachedPrompt(tokens, data))  # kept, not copied (megabytes)
            self.saved += 1
            self._update()
            return True

    def best(self, held: Sequence[int], prompt: Sequence[int]) -> CachedPrompt | None:
        """The entry to restore into a slot holding ``held`` for a request with ``prompt`` (``load``'s choice,
        module docstring), or None: the slot's own is as good."""
        if not prompt:
            return None
        with self._lock:
            lcp = common_prefix(held, prompt)
            keep_best = lcp / len(held) if held else -1.0  # an empty slot: any entry wins
            sim_best = lcp / len(prompt)
            found = None
            for e in self.entries:
                n = common_prefix(e.tokens, prompt)
                keep, sim = n / len(e.tokens), n / len(prompt)
                if keep < KEEP_AT_LEAST:
                    continue
                if keep_best < keep and sim_best < sim:
                    keep_best, sim_best, found = keep, sim, e
            return found

    def take(self, entry: CachedPrompt) -> None:
        """``entry`` was restored into a slot: it leaves the cache (the slot holds it now)."""
        with self._lock:
            self.entries = [e for e in self.entries if e is not entry]
            self.restored += 1

    def describe(self) -> dict:
        """What the cache holds (``/props``-style figures): entries, tokens, bytes, limits, saves, restores."""
        with self._lock:
            return {"prompts": len(self.entries), "tokens": sum(len(e.tokens) for e in self.entries),
                    "bytes": self._size(), "limit_bytes": self.limit_size, "limit_tokens": self.limit_tokens,
                    "saved": self.saved, "restored": self.restored}

    def _holds(self, tokens: tuple[int, ...]) -> bool:
        return any(common_prefix(e.tokens, tokens) == len(tokens) for e in self.entries)

    def _size(self) -> int:
        return sum(e.size for e in self.entries)

    def _update(self) -> None:
        """``update``: drop the oldest entries past the size limit, then past the token limit (raised to what the
        size limit holds at the entries' mean bytes per token)."""
        while self.entries and self.limit_size and self._size() > self.limit_size:
            self.entries.pop(0)
        n_tokens = sum(len(e.tokens) for e in self.entries)
        per_token = max(1.0, self._size() / max(1, n_tokens))
        limit = max(self.limit_tokens, int(self.limit_size / per_token)) if self.limit_size else self.limit_tokens
        while self.entries and limit and sum(len(e.tokens) for e in self.entries) > limit:
            self.entries.pop(0)
