"""What a served slot's source remembers, and what all slots share, as llama.cpp's speculative types keep it.

llama.cpp 0c1e570 ``common/speculative.cpp`` makes one ``common_speculative`` for all ``n_parallel``
slots; each implementation keeps per-sequence state (``std::vector<...>`` of ``n_seq``) or one shared
state: ``ngram-mod``'s pool (``common_ngram_mod mod``: "shared across all sequences"; its ``seq_info``
is per sequence), ``ngram-simple``'s config (stateless); ``ngram-map-k`` / ``-k4v`` keep a map per
sequence (``std::vector<common_ngram_map> config``), ``ngram-cache`` its caches per sequence
(``sinfos``). So a slot's ``SourceContext.memory`` is its own, except the keys of ``SHARED_BY_SLOTS``,
which live in one dict every slot of the server reads and writes.
"""

from __future__ import annotations

from collections.abc import MutableMapping

SHARED_BY_SLOTS = frozenset({"ngram-mod"})
"""Sources whose memory (keys ``(name, ...)``) every slot shares (module docstring)."""


class SlotMemory(MutableMapping):
    """One slot's ``SourceContext.memory``: its own keys, and ``shared``'s for a key whose first item names a
    source in ``SHARED_BY_SLOTS``."""

    def __init__(self, shared: dict | None = None) -> None:
        self.own: dict = {}
        self.shared = {} if shared is None else shared

    def _where(self, key) -> dict:
        name = key[0] if isinstance(key, tuple) and key else key
        return self.shared if name in SHARED_BY_SLOTS else self.own

    def __getitem__(self, key):
        return self._where(key)[key]

    def __setitem__(self, key, value) -> None:
        self._where(key)[key] = value

    def __delitem__(self, key) -> None:
        del self._where(key)[key]

    def __iter__(self):
        yield from self.own
        yield from (k for k in self.shared if k not in self.own)

    def __len__(self) -> int:
        return len(self.own) + sum(1 for k in self.shared if k not in self.own)
