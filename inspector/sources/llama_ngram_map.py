"""llama.cpp's n-gram map proposers as sources: ``ngram-simple``, ``ngram-map-k``, ``ngram-map-k4v``.

Our own Python for the rules of llama.cpp's ``common/ngram-map.cpp`` (functions
``common_ngram_simple_draft``, ``common_ngram_map_hash``, ``common_ngram_map_begin``,
``common_ngram_map_draft``, ``common_ngram_map_accept``; constants in ``common/ngram-map.h``) at
commit 0c1e570 (the llama.cpp llama-cpp-python 0.3.36 vendors), called as llama-server's
``common_speculative_impl_ngram_map_k`` (``common/speculative.cpp``) and ``update_slots``
(``tools/server/server-context.cpp``) call them, with the per-type parameters of llama-server
(``--spec-ngram-simple-size-n`` ..., ``common_params_speculative_ngram_map``: size_n 12, size_m 48,
min_hits 1). No llama.cpp code is copied.

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

Across requests (llama-server keeps one map per slot for every request; ours is the one in
``SourceContext.memory`` per option set, which ``serve`` shares by every request and a conversation by its
turns): each request begins the kept map with its prompt (``MapState.begin``, llama.cpp's
``common_ngram_map_begin``), whatever that prompt is. Only the lengths count, never the tokens: when the
prompt is shorter than the stream of the last draft, keys (and, in k4v, values) at or after the shrink
point (the previous prompt's length, or ``len(prompt) - size_n - size_m`` when the prompt is shorter than
that) are dropped, as are the hash slots holding such positions, and the index resumes just before that
point; everything before it is kept, so a prompt that does not continue the earlier tokens keeps keys,
values and hash slots whose positions now index its own tokens (a key is found only where its tokens
happen to be there again; a stale hash slot stays taken, so the n-gram hashed to it is not indexed).
When the prompt is not shorter, nothing is dropped and positions up to the last indexed one are never
indexed or searched again. A conversation's next turn continues the tokens, so all of that is kept as it
should be.

The hash index is llama.cpp's: 2^18 slots (``COMMON_NGRAM_HASH_MAP_SIZE``) of positions, the LCG hash of
the ``size_n`` tokens, the first position stored in a slot keeps it, so colliding n-grams are missed
and found as llama-server misses and finds them.
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
"""Why ngram-simple proposes nothing (its declaration's ``reasons``)."""
REASONS_K = {**REASONS,
             NO_MATCH: "the last size_n tokens were not found where the map looks (its index of positions, "
                       "then the positions not indexed yet) with a continuation after them"}
"""ngram-map-k's reasons: it may miss an earlier occurrence (module docstring)."""
REASONS_K4V = {**REASONS_K,
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


HASH_SLOTS = 1 << 18
"""Slots of the index of key positions (llama.cpp ``COMMON_NGRAM_HASH_MAP_SIZE``)."""
LCG_FACTOR = 2654435761
"""llama.cpp's ``LCG_FACTOR``: the hash multiplier."""


def ngram_hash(tokens, start: int, size: int) -> int:
    """llama.cpp's ``common_ngram_map_hash`` of ``tokens[start:start + size]`` (32 bits), as its slot of
    ``HASH_SLOTS`` (only the low 18 bits of the 32 decide the slot, so it is computed modulo 2^18)."""
    h = 0
    for t in tokens[start:start + size]:
        h = (h * LCG_FACTOR + t) & (HASH_SLOTS - 1)
    return h


class _Key:
    __slots__ = ("key_idx", "stat_idx", "hits", "values")

    def __init__(self, key_idx: int, size_m: int) -> None:
        self.key_idx = key_idx
        self.stat_idx = 0
        self.hits = 0
        # [value_idx (0: unused), count, accepted at last proposal]
        self.values = [[0, 0, size_m] for _ in range(MAX_VALUES)]


class MapState:
    """What llama.cpp's ``common_ngram_map`` keeps: keys with their statistics, the hash index of key
    positions (``slots``: slot -> position; ``index_last``, llama.cpp's ``key_map_last_idx``: positions up
    to it are indexed) and the request bookkeeping (``size_last_begin``, ``idx_last_check``)."""

    def __init__(self, size_n: int, size_m: int, key_only: bool, min_hits: int) -> None:
        self.n, self.m, self.key_only, self.min_hits = size_n, size_m, key_only, min_hits
        self.keys: list[_Key] = []
        self.slots: dict[int, int] = {}
        self.index_last = 0
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.seen = 0
        """Tokens of the last stream begun or drafted on (the warm state's figure)."""
        self.why = NO_MATCH
        """Why the last ``draft`` was empty (``REASONS_K4V`` codes)."""
        self.last: tuple[int, int] | None = None  # (key, value slot) of the last proposal

    def begin(self, tokens) -> None:
        """llama.cpp's ``common_ngram_map_begin``: a request's prompt. Only its length is read (module
        docstring): a prompt shorter than the last draft's stream drops what lies at or after the shrink
        point; what lies before it is kept, whatever tokens now stand at those positions."""
        size_begin = len(tokens)
        self.seen = size_begin
        cleanup = self.size_last_begin
        if cleanup > size_begin:
            cleanup = size_begin - self.n - self.m if size_begin > self.n + self.m else 0
        if size_begin < self.idx_last_check:
            self.slots = {h: j for h, j in self.slots.items() if j < cleanup}
            self.index_last = cleanup - 1 if cleanup > 0 else 0
            kept = []
            for key in self.keys:
                if key.key_idx >= cleanup:
                    continue
                if not self.key_only:
                    live = [v for v in key.values if v[0] and v[0] < cleanup]
                    # llama.cpp shifts the live values left and clears the freed slots' index and count
                    # (their accepted length is reset when a slot is filled again)
                    key.values = live + [[0, 0, 0] for _ in range(MAX_VALUES - len(live))]
                    if not live:
                        continue
                kept.append(key)
            self.keys = kept
        self.idx_last_check = size_begin
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
        found = self.slots.get(ngram_hash(key, 0, n), 0)
        if found and found < top and self._matches(inp, found, key):  # the slot may hold another n-gram
            match = found
        old = range(begin - n - m - 1, self.index_last, -1) if begin > n + m + 1 else range(0)
        new = range(top, max(begin, self.index_last), -1)
        if not match:
            match = next((j for j in old if self._matches(inp, j, key)), 0)
        if not match:
            match = next((j for j in new if self._matches(inp, j, key)), 0)
        for j in (*old, *new):  # index the new positions: a slot keeps the first position stored in it
            self.slots.setdefault(ngram_hash(inp, j, n), j)
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
        self.remembered_at_start = (kept.seen, len(kept.keys)) if kept is not None else (0, 0)
        self.state: MapState | None = None
        self._count = 0
        self._pending = None

    def settings(self) -> dict:
        return {"size_n": self.size_n, "size_m": self.size_m, "min_hits": self.min_hits}

    def warm_state(self) -> str:
        """The map kept from earlier requests when this one began (``registry.warm_text``): this request
        begins it with its prompt, whatever that prompt is, as llama-server's slot does."""
        tokens, keys = self.remembered_at_start
        if not tokens:
            return ""
        return f"a map of {keys:,} keys over {tokens:,} tokens of an earlier request"

    def begin(self, prompt) -> None:
        """A new request (the engine calls it after the prefill, as llama-server calls
        ``common_ngram_map_begin`` when the prompt is done; else the first query does): the kept map (a
        new one at the first request) begins with the prompt, once per request."""
        if self.state is not None:
            return
        st = self.memory.get(self.memory_key)
        if st is None:
            st = self.memory[self.memory_key] = MapState(self.size_n, self.size_m, self.key_only, self.min_hits)
        st.begin(prompt)
        self.state = st

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        tokens = request.tokens
        if self.state is None:
            self.begin(_begin_tokens(request))
        st = self.state
        ids = st.draft(tokens[:-1], tokens[-1])
        st.seen = len(tokens)
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
                               reasons=REASONS_K)
NGRAM_MAP_K4V = SourceDescriptor("ngram-map-k4v", _sizes("ngram-map-k4v", "ngram_map_k4v", True),
                                 help="llama.cpp ngram-map-k4v: n-gram keys with up to 4 counted m-gram values; "
                                      "proposes when one value dominates", capabilities=frozenset({"settings"}), llama_server="ngram-map-k4v",
                                 reasons=REASONS_K4V)


def make_ngram_simple(ctx, **options) -> NgramSimpleSource:
    """The ``ngram-simple`` source; options checked with ``NGRAM_SIMPLE`` (``ValueError``)."""
    o = NGRAM_SIMPLE.with_defaults(options)
    return NgramSimpleSource(o["size_n"], o["size_m"])


def make_ngram_map_k(ctx, **options) -> NgramMapSource:
    """The ``ngram-map-k`` source (key-only; its map kept in ``ctx.memory``); options checked with ``NGRAM_MAP_K``."""
    o = NGRAM_MAP_K.with_defaults(options)
    return NgramMapSource(o["size_n"], o["size_m"], o["min_hits"], key_only=True, memory=ctx.memory)


def make_ngram_map_k4v(ctx, **options) -> NgramMapSource:
    """The ``ngram-map-k4v`` source (its map kept in ``ctx.memory``); options checked with ``NGRAM_MAP_K4V``."""
    o = NGRAM_MAP_K4V.with_defaults(options)
    return NgramMapSource(o["size_n"], o["size_m"], o["min_hits"], key_only=False, memory=ctx.memory)


# Each factory carries its declaration, as a plugin's does (``inspector.sources.registry.BUILTIN_FACTORIES``).
make_ngram_simple.descriptor = NGRAM_SIMPLE
make_ngram_map_k.descriptor = NGRAM_MAP_K
make_ngram_map_k4v.descriptor = NGRAM_MAP_K4V
