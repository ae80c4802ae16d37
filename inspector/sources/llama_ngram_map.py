"""llama.cpp's n-gram map proposers as sources: ``ngram-simple``, ``ngram-map-k``, ``ngram-map-k4v``.

Our own Python for the rules of llama.cpp's ``common/ngram-map.cpp`` (functions
``common_ngram_simple_draft``, ``common_ngram_map_begin``, ``common_ngram_map_draft``,
``common_ngram_map_accept``; constants in ``common/ngram-map.h``) at commit
6870ab7e4d741fffc218dd5d370427d81ab17630, with the per-type parameters of llama-server
2026 (``--spec-ngram-simple-size-n`` ..., ``common_params_speculative_ngram_map``:
size_n 12, size_m 48, min_hits 1). No llama.cpp code is copied.

Terms: the *key* is the last ``size_n`` tokens (the current token included); a *value* is the
``size_m`` tokens that followed an earlier occurrence of the key.

- ``ngram-simple``: the most recent earlier occurrence of the key; proposes up to ``size_m`` of
  the tokens after it, nothing when fewer than ``size_n`` tokens follow it, nothing until the
  stream has more than ``size_n + size_m + 1`` tokens. Remembers nothing.
- ``ngram-map-k``: keys are found through an index of the history (the occurrence recorded when
  the key was first indexed, else the newest one not yet indexed); each key remembers how many
  of its last proposal were accepted and proposes ``min(size_m, that number)`` tokens next time
  (so a key whose proposal was wholly refused proposes nothing again). Needs ``2*size_n +
  size_m`` tokens. As in llama.cpp, key-only mode ignores ``min_hits``.
- ``ngram-map-k4v``: as map-k, but a key must have been hit ``min_hits`` times, and up to 4
  distinct values per key are counted; it proposes only when the most frequent value occurs at
  least twice as often as all others together. As in llama.cpp the proposed tokens are those
  after the matched occurrence (the statistics only decide whether to propose).

Differences: llama.cpp's 2^18-slot hash of key positions may collide (then a key is missed); we
index keys exactly (a dict), so we never miss one. The map state (keys, counts, accepted
lengths) is kept in ``SourceContext.memory`` per option set and reused by the next request
when its tokens extend the stored history (llama.cpp keeps it per server slot).
"""

from __future__ import annotations

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest
from inspector.sources.descriptors import Option, SourceDescriptor

HISTORY_SHORT = "history_short"
NO_MATCH = "no_match"
LEARNED_ZERO = "learned_zero"
BELOW_MIN_HITS = "below_min_hits"
NO_DOMINANT_VALUE = "no_dominant_value"
REASONS = {
    HISTORY_SHORT: "too few tokens so far for a key and its continuation (ngram-simple: size_n + size_m + 2; "
                   "ngram-map: 2 size_n + size_m)",
    NO_MATCH: "the last size_n tokens occurred nowhere earlier with a continuation after them",
    LEARNED_ZERO: "the key matched, but its last proposal had 0 tokens accepted, so it now proposes 0",
}
"""Why ngram-simple and ngram-map-k propose nothing (their declarations' ``reasons``)."""
REASONS_K4V = {**REASONS,
               BELOW_MIN_HITS: "the key has been seen fewer than min_hits times",
               NO_DOMINANT_VALUE: "no continuation of the key has at least twice the count of the others"}
"""ngram-map-k4v's reasons."""

MAX_VALUES = 4
"""Values counted per key (llama.cpp ``COMMON_NGRAM_MAX_VALUES``)."""
MAX_VALUE_COUNT = 16380
"""Largest hit count of a key or value (llama.cpp ``COMMON_NGRAM_MAX_VALUE_COUNT``)."""
MAX_SIZE = 1024
"""Largest size_n / size_m llama-server accepts (``--spec-ngram-*-size-n`` 1..1024)."""


def _begin_tokens(request: ProposalRequest) -> list[int]:
    """llama.cpp's ``begin`` prompt: the tokens before the first drafting point."""
    return list(request.tokens[: min(request.prompt_token_count, len(request.tokens) - 1)])


def simple_draft(tokens, sampled: int, size_n: int, size_m: int) -> list[int]:
    """The ngram-simple rule: ``tokens`` is the history without ``sampled`` (the current token)."""
    cur = len(tokens)
    if cur <= size_n + size_m + 1:
        return []
    pattern = list(tokens[cur - size_n + 1:]) + [sampled]
    for j in range(cur - size_n - 1, 0, -1):  # position 0 is never a match, as in llama.cpp
        if list(tokens[j:j + size_n]) == pattern:
            copy = min(size_m, cur - (j + size_n))
            return list(tokens[j + size_n:j + size_n + copy]) if copy >= size_n else []
    return []


class _Key:
    __slots__ = ("key_idx", "stat_idx", "hits", "values")

    def __init__(self, key_idx: int, size_m: int) -> None:
        self.key_idx = key_idx
        self.stat_idx = 0
        self.hits = 0
        # [value_idx (0: unused), count, accepted at last proposal]
        self.values = [[0, 0, size_m] for _ in range(MAX_VALUES)]


class MapState:
    """What llama.cpp's ``common_ngram_map`` keeps: keys with their statistics, an index of key
    positions (``index_last``: positions up to it are indexed) and the request bookkeeping."""

    def __init__(self, size_n: int, size_m: int, key_only: bool, min_hits: int) -> None:
        self.n, self.m, self.key_only, self.min_hits = size_n, size_m, key_only, min_hits
        self.keys: list[_Key] = []
        self.index: dict[tuple, int] = {}
        self.index_last = 0
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.history: list[int] = []
        self.why = NO_MATCH
        """Why the last ``draft`` was empty (``REASONS_K4V`` codes)."""
        self.last: tuple[int, int] | None = None  # (key, value slot) of the last proposal

    def begin(self, tokens) -> None:
        size_begin = len(tokens)
        if size_begin < self.idx_last_check:
            # The history was cut back: forget what was learned past the previous begin.
            cut = self.size_last_begin
            self.index = {k: v for k, v in self.index.items() if v < cut}
            self.index_last = max(cut - 1, 0)
            kept = []
            for key in self.keys:
                if key.key_idx >= cut:
                    continue
                if not self.key_only:
                    live = [v for v in key.values if v[0] and v[0] < cut]
                    key.values = live + [[0, 0, 0] for _ in range(MAX_VALUES - len(live))]
                    if not live:
                        continue
                kept.append(key)
            self.keys = kept
        self.idx_last_check = max(self.size_last_begin - 1, 0)
        self.size_last_begin = size_begin

    def _matches(self, inp, j: int, key) -> bool:
        return list(inp[j:j + self.n]) == key

    def draft(self, inp, sampled: int) -> list[int]:
        """llama.cpp's ``common_ngram_map_draft``: ``inp`` without ``sampled``."""
        self.last = None
        n, m = self.n, self.m
        cur = len(inp)
        if cur < 2 * n + m:
            self.why = HISTORY_SHORT
            return []
        self.idx_last_check = cur
        key = list(inp[cur - n + 1:]) + [sampled]
        top = cur - n - m - 1  # the last position a key may start at (m tokens follow it)
        begin = self.size_last_begin
        match = 0
        found = self.index.get(tuple(key))
        if found is not None and found < top:
            match = found
        old = range(begin - n - m - 1, self.index_last, -1) if begin > n + m + 1 else range(0)
        new = range(top, max(begin, self.index_last), -1)
        if not match:
            match = next((j for j in old if self._matches(inp, j, key)), 0)
        if not match:
            match = next((j for j in new if self._matches(inp, j, key)), 0)
        for j in (*old, *new):  # index the new positions, the first occurrence seen wins
            self.index.setdefault(tuple(inp[j:j + n]), j)
        self.index_last = max(top, self.index_last)
        if not match:
            self.why = NO_MATCH
            return []
        offset = next((i for i, k in enumerate(self.keys) if self._matches(inp, k.key_idx, key)), None)
        if offset is None:
            self.keys.append(_Key(match, m))
            offset = len(self.keys) - 1
        entry = self.keys[offset]
        entry.hits = min(entry.hits + 1, MAX_VALUE_COUNT)
        self.why = LEARNED_ZERO  # an empty answer from here on: the key's learned length is 0
        if self.key_only:
            self.last = (offset, 0)
            return list(inp[match + n:match + n + min(m, entry.values[0][2])])
        if entry.hits < self.min_hits:
            self.why = BELOW_MIN_HITS
            return []
        for i in range(entry.stat_idx, match + 1):
            if not self._matches(inp, i, key):
                continue
            follow = list(inp[i + n:i + n + m])
            for v in entry.values:
                if v[0] == 0:
                    v[0], v[1], v[2] = i + n, 0, m
                if v[0] == i + n or list(inp[v[0]:v[0] + m]) == follow:
                    v[1] = min(v[1] + 1, MAX_VALUE_COUNT)
                    break
        entry.stat_idx = match
        best = max(range(MAX_VALUES), key=lambda s: (entry.values[s][1], -s))
        top_count = entry.values[best][1]
        others = sum(v[1] for s, v in enumerate(entry.values) if s != best)
        if others > 0 and top_count < 2 * others:
            self.why = NO_DOMINANT_VALUE
            return []
        self.last = (offset, best)
        return list(inp[match + n:match + n + min(m, entry.values[best][2])])

    def accept(self, accepted: int) -> None:
        """llama.cpp's ``common_ngram_map_accept``: the next proposal of that key is at most this long."""
        if self.last is not None:
            key, slot = self.last
            self.keys[key].values[slot][2] = accepted


class _Base:
    def _answer(self, request: ProposalRequest, ids: list[int], tag: str, why: str) -> Proposal | NoProposal:
        ids = ids[: request.max_proposal_tokens]
        if not ids:
            return NoProposal(why)
        self._count += 1
        self._pending = (b"%s:%d" % (tag.encode(), self._count)).hex()
        return Proposal(bytes.fromhex(self._pending), tuple(ids))

    def discard(self, decision_id: bytes, reason: str) -> None:
        """Nothing was verified: nothing to learn."""
        self._pending = None


class NgramSimpleSource(_Base):
    """llama.cpp ``--spec-type ngram-simple`` (see the module docstring)."""

    name = "ngram-simple"

    def __init__(self, size_n: int = 12, size_m: int = 48) -> None:
        self.size_n, self.size_m = size_n, size_m
        self._count = 0
        self._pending = None

    def settings(self) -> dict:
        return {"size_n": self.size_n, "size_m": self.size_m}

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        tokens = request.tokens
        ids = simple_draft(tokens[:-1], tokens[-1], self.size_n, self.size_m)
        why = HISTORY_SHORT if len(tokens) - 1 <= self.size_n + self.size_m + 1 else NO_MATCH
        return self._answer(request, ids, f"ngram-simple:n{self.size_n}", why)

    def report(self, receipt) -> None:
        """ngram-simple learns nothing from verification (llama.cpp's ``accept`` is a no-op)."""


class NgramMapSource(_Base):
    """llama.cpp ``--spec-type ngram-map-k`` (``key_only``) or ``ngram-map-k4v``."""

    def __init__(self, size_n: int = 12, size_m: int = 48, min_hits: int = 1, key_only: bool = True,
                 memory: dict | None = None) -> None:
        self.name = "ngram-map-k" if key_only else "ngram-map-k4v"
        self.size_n, self.size_m, self.min_hits, self.key_only = size_n, size_m, min_hits, key_only
        self.memory = {} if memory is None else memory
        self.memory_key = (self.name, size_n, size_m, min_hits)
        kept = self.memory.get(self.memory_key)
        self.remembered_at_start = (len(kept.history), len(kept.keys)) if kept is not None else (0, 0)
        self.state: MapState | None = None
        self._count = 0
        self._pending = None

    def settings(self) -> dict:
        return {"size_n": self.size_n, "size_m": self.size_m, "min_hits": self.min_hits}

    def warm_state(self) -> str:
        """The map kept from an earlier request when this one began (``registry.warm_text``): it is used
        when this request's prompt continues that history (a conversation's next turn)."""
        tokens, keys = self.remembered_at_start
        if not tokens:
            return ""
        return f"a map of {keys:,} keys over {tokens:,} tokens of an earlier request"

    def begin(self, prompt) -> None:
        """A new request (the engine calls it after the prefill, as llama-server calls
        ``common_ngram_map_begin`` when the prompt is done): index the prompt, once: the map's history
        is the prompt now, so the first query continues it instead of beginning again."""
        p = list(prompt)
        self._state_for(p, p).history = p

    def _state_for(self, tokens, begin: list[int]) -> MapState:
        """The map for a stream ``tokens``: this request's, or the memory's when ``begin`` (the
        request's prompt) continues its history, else a new one; ``begin`` is indexed."""
        st = self.state
        if st is not None and len(tokens) >= len(st.history) and list(tokens[:len(st.history)]) == st.history:
            return st
        st = self.memory.get(self.memory_key)
        if st is None or list(begin[:len(st.history)]) != st.history[:len(begin)]:
            st = MapState(self.size_n, self.size_m, self.key_only, self.min_hits)  # another stream
        st.begin(begin)
        self.memory[self.memory_key] = st
        self.state = st
        return st

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        tokens = request.tokens
        st = self._state_for(tokens, _begin_tokens(request))
        ids = st.draft(tokens[:-1], tokens[-1])
        st.history = list(tokens)
        return self._answer(request, ids, f"{self.name}:n{self.size_n}", st.why)

    def report(self, receipt) -> None:
        """Store the accepted length for the key (and value) of the verified proposal."""
        if self.state is not None and receipt.decision_id == self._pending:
            self.state.accept(receipt.accepted_proposal_tokens)
        self._pending = None


def _sizes(name: str, prefix: str, with_hits: bool, hits_note: str = "") -> tuple[Option, ...]:
    opts = [
        Option("size_n", "int", 12, f"llama.cpp spec.{prefix}.size_n: length of the lookup n-gram (tokens)",
               minimum=1, maximum=MAX_SIZE, control_max=64, flag=f"--spec-{name}-size-n"),
        Option("size_m", "int", 48, f"llama.cpp spec.{prefix}.size_m: length of the draft m-gram (tokens; "
               "the proposal is also capped by draft max)", minimum=1, maximum=MAX_SIZE, control_max=128,
               flag=f"--spec-{name}-size-m"),
    ]
    if with_hits:
        opts.append(Option("min_hits", "int", 1, f"llama.cpp spec.{prefix}.min_hits: minimum hits of the key "
                           "before it is used" + hits_note, minimum=1, maximum=MAX_VALUE_COUNT, control_max=64,
                           flag=f"--spec-{name}-min-hits", control=not hits_note))
    return tuple(opts)


NGRAM_SIMPLE = SourceDescriptor("ngram-simple", _sizes("ngram-simple", "ngram_simple", False),
                                help="llama.cpp ngram-simple: the m tokens after the last earlier match of the "
                                     "last n tokens", capabilities=frozenset({"settings"}), llama_server="ngram-simple",
                                reasons=REASONS)
NGRAM_MAP_K = SourceDescriptor("ngram-map-k", _sizes("ngram-map-k", "ngram_map_k", True,
                                                     " (llama.cpp's key-only mode does not use it)"),
                               help="llama.cpp ngram-map-k: n-gram keys; each key proposes as many tokens as "
                                    "were accepted last time", capabilities=frozenset({"settings"}), llama_server="ngram-map-k",
                               reasons=REASONS)
NGRAM_MAP_K4V = SourceDescriptor("ngram-map-k4v", _sizes("ngram-map-k4v", "ngram_map_k4v", True),
                                 help="llama.cpp ngram-map-k4v: n-gram keys with up to 4 counted m-gram values; "
                                      "proposes when one value dominates", capabilities=frozenset({"settings"}), llama_server="ngram-map-k4v",
                                 reasons=REASONS_K4V)


def make_ngram_simple(ctx, **options) -> NgramSimpleSource:
    o = NGRAM_SIMPLE.with_defaults(options)
    return NgramSimpleSource(o["size_n"], o["size_m"])


def make_ngram_map_k(ctx, **options) -> NgramMapSource:
    o = NGRAM_MAP_K.with_defaults(options)
    return NgramMapSource(o["size_n"], o["size_m"], o["min_hits"], key_only=True, memory=ctx.memory)


def make_ngram_map_k4v(ctx, **options) -> NgramMapSource:
    o = NGRAM_MAP_K4V.with_defaults(options)
    return NgramMapSource(o["size_n"], o["size_m"], o["min_hits"], key_only=False, memory=ctx.memory)


SOURCES = {"ngram-simple": (make_ngram_simple, NGRAM_SIMPLE), "ngram-map-k": (make_ngram_map_k, NGRAM_MAP_K),
           "ngram-map-k4v": (make_ngram_map_k4v, NGRAM_MAP_K4V)}
"""Source name -> (factory, declaration), registered by ``inspector.sources.registry``."""
