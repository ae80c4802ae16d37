"""llama.cpp's ``ngram-cache`` proposer (lookup decoding) as a source.

Our own Python for the rules of llama.cpp's ``common/ngram-cache.cpp`` / ``.h``
(``common_ngram_cache_update``, ``try_draft``, ``common_ngram_cache_draft``,
``common_ngram_cache_save``/``_load``/``_merge``; stored version
5c5f166e8ba011eb880ebec21497d39e85a91b04), ``common_speculative_impl_ngram_cache`` in
``common/speculative.cpp`` at llama.cpp 0c1e570 (``draft_one``, its ``seq_info`` per slot,
``create_state_ngram_cache``: 8 tokens drafted at most, the dynamic cache neither updated nor
saved) and the ``-lcs``/``-lcd`` flags of ``common/arg.cpp`` at
6870ab7e4d741fffc218dd5d370427d81ab17630. No llama.cpp code is copied.

Three caches map an n-gram to the counts of the tokens that followed it:

- *context*: n-grams of 1..4 tokens of the slot's streams, counted as llama-server 0c1e570's
  slot counts them (``SlotCounts``, kept in ``SourceContext.memory``: one for every request of a
  served slot, a conversation's turns, a window session's runs). The slot remembers how many
  tokens it has counted (``cache_size``). At each query, with the stream ``s`` (the prompt, what
  was generated, the current token), the tokens ``s[cache_size:]`` are counted *alone* (an n-gram
  reaching back before them is not counted) when there are any, and ``cache_size`` becomes
  ``len(s)``; nothing is ever removed and ``cache_size`` never goes down. So an n-gram spanning
  two queries' tokens is never counted, and across requests a new stream adds only its tokens
  past the longest stream counted before, whatever they follow: a stream no longer than that
  adds nothing, an unrelated one adds only its tail past that length. The counts are llama-server's
  whether or not the new request continues the last one (llama-server's ``begin`` for this type
  is a no-op and its checkpoints keep no state of it). The draft itself reads the whole stream.
- *dynamic*: a file's counts (``lookup_cache_dynamic``, ``-lcd``): read when the first source of a
  session with that path is made (empty when the file does not exist yet), then never changed
  while drafting, as in llama-server, where nothing is merged into it. At the end of each run
  the file is written with what was read plus the slot's context counts (llama.cpp's
  ``llama-lookup`` rule for the file, ``common_ngram_cache_merge`` then ``_save``); llama-server
  never writes it. The drafts of a later session (or a llama-server started with the file) read it.
- *static*: 2-gram counts from a file (``lookup_cache_static``, ``-lcs``: read only), e.g.
  made by llama.cpp's ``llama-lookup-create``.

A proposal grows one token at a time, at most ``N_DRAFT`` tokens: for the n-grams ending at
the tip (longest first) the context cache proposes the follower with the largest count
(weighted by 100x its static 2-gram count, 1 when the static cache does not know it) if its
sample is large enough and it has a big enough share (``LAX``); else the dynamic cache with the
stricter ``STRICT`` limits; else the static cache alone (``LAX`` for 2-grams). The first token
without a candidate ends the proposal. Files use llama.cpp's format (little-endian int32:
4 n-gram tokens padded with -1, follower count, then token/count pairs).

``branches`` (ours, issue 40; 1, the default, is llama.cpp's chain): B > 1 proposes a token tree
(``inspector.engine.tree``) where the n-gram that decides a drafted token had other frequent followers:
at the first position where llama.cpp's rule drafts a follower and the same n-gram's next followers
have at least ``MIN_BRANCH_PERCENT`` of its sample each (``tree_draft``), up to B of them become sibling
branches; each branch then continues by llama.cpp's chain rule, the node budget (``N_DRAFT``) shared
between them, the best's first. One split per tree. A tree forms only in windows llama.cpp verifies:
letting followers that pass the share limit only together open windows of their own (two of 40%) was
measured (``bench --trees``, agent-edits: 58 of 61 windows trees, 0.60x plain against the chain's 0.90x):
those windows lose.
"""

from __future__ import annotations

import os
import struct
import tempfile

from inspector.bounded_read import BoundedReadError, read_bounded
from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest
from inspector.engine.tree import is_chain
from inspector.sources.descriptors import Option, SourceDescriptor
from inspector.sources.hash_order import Part

NGRAM_MIN, NGRAM_MAX, NGRAM_STATIC = 1, 4, 2
"""llama.cpp ``LLAMA_NGRAM_MIN``, ``LLAMA_NGRAM_MAX``, ``LLAMA_NGRAM_STATIC``."""
N_DRAFT = 8
"""Most tokens drafted (llama.cpp ``create_state_ngram_cache``: ``n_draft = 8``)."""
LAX = ((2, 66), (2, 50), (1, 50), (1, 50))
"""(minimum sample, minimum percent) per n-gram size 1..4 for the context cache and the static cache."""
STRICT = ((4, 75), (3, 66), (2, 66), (2, 66))
"""The same for the dynamic cache."""
MIN_BRANCH_PERCENT = 25
"""Least share of its n-gram's sample (percent) a follower needs to be a branch of a tree (``branches``)."""
MAX_BRANCHES = 3
"""Most branches at a split (``branches``): the best follower has >= 50% of the count, so at most two
others have ``MIN_BRANCH_PERCENT`` (25%) each."""
MAX_CACHE_FILE_BYTES = 256 * 1024 * 1024
"""Largest lookup-cache file read (``-lcs``/``-lcd``), in bytes read, not as reported: about 10 million
n-grams, a few GB once counted in Python. A FIFO, device or socket is refused by its type."""
_PAD = -1
_NGRAM = struct.Struct("<4i")
_INT = struct.Struct("<i")
_PAIR = struct.Struct("<2i")

Cache = dict
"""tuple of 4 tokens (padded with -1) -> ``Part`` {token: count}, its followers in the order llama.cpp's
``unordered_map`` iterates them (``inspector.sources.hash_order``): ties between equally frequent
followers are broken as llama-server breaks them."""


def _key(tokens) -> tuple:
    return tuple(tokens) + (_PAD,) * (NGRAM_MAX - len(tokens))


def update(cache: Cache, tokens, n_new: int) -> None:
    """Count every n-gram (1..4 tokens) followed by one of the last ``n_new`` tokens."""
    size = len(tokens)
    for n in range(NGRAM_MIN, NGRAM_MAX + 1):
        for i in range(max(size - n_new, n), size):
            key = _key(tokens[i - n:i])
            part = cache.get(key)
            if part is None:
                part = cache[key] = Part()
            part.add(tokens[i])


def merge(target: Cache, add: Cache) -> None:
    """llama.cpp's ``common_ngram_cache_merge``: ``add``'s counts added into ``target``."""
    for ngram, part in add.items():
        into = target.get(ngram)
        if into is None:
            target[ngram] = part.copy()
            continue
        for token, count in part.items():
            into.add(token, count)


def load(path: str, what: str) -> Cache:
    """The cache in ``path`` (at most ``MAX_CACHE_FILE_BYTES``, a regular file: ``read_bounded``);
    raises ``ValueError`` naming the file and the problem."""
    try:
        data = read_bounded(path, MAX_CACHE_FILE_BYTES, what)
    except FileNotFoundError:
        raise ValueError(f"{what} {path}: no such file") from None
    except BoundedReadError as exc:  # a folder, FIFO, device or socket; or over the limit
        raise ValueError(str(exc)) from None
    except OSError as exc:
        raise ValueError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    cache: Cache = {}
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < _NGRAM.size + _INT.size:
            raise ValueError(f"{what} {path}: not a llama.cpp n-gram cache (truncated record at byte {pos})")
        ngram = _NGRAM.unpack_from(data, pos)
        (count,) = _INT.unpack_from(data, pos + _NGRAM.size)
        pos += _NGRAM.size + _INT.size
        if count <= 0 or end - pos < count * _PAIR.size:
            raise ValueError(f"{what} {path}: not a llama.cpp n-gram cache (bad follower count {count} at byte "
                             f"{pos - _INT.size})")
        part = Part()
        for _ in range(count):
            token, n = _PAIR.unpack_from(data, pos)
            pos += _PAIR.size
            if n <= 0 or token < 0:
                raise ValueError(f"{what} {path}: not a llama.cpp n-gram cache (token {token} count {n} at byte "
                                 f"{pos - _PAIR.size})")
            part.add(token, n)
        cache[ngram] = part
    return cache


def check_writable_folder(path: str) -> None:
    """Raise ``ValueError`` (one line, naming ``--lookup-cache-dynamic``) unless the folder of ``path``
    exists and a file can be made there (tried: permission bits do not tell for root or a read-only
    mount), so a dynamic cache is known to be savable before the run, not found unsavable after it."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--lookup-cache-dynamic {path}: the folder {folder} does not exist; expected a path in "
                         "an existing folder (the cache is saved there when the run ends)")
    try:
        fd, probe = tempfile.mkstemp(prefix=".lookup-cache-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"--lookup-cache-dynamic {path}: the folder {folder} is not writable "
                         f"({exc.strerror or exc}); expected a folder the cache can be saved in") from None


def save(cache: Cache, path: str) -> None:
    """Write ``cache`` in llama.cpp's format (through a temporary file, then renamed)."""
    chunks = []
    for ngram, part in cache.items():
        chunks.append(_NGRAM.pack(*ngram) + _INT.pack(len(part)))
        chunks.extend(_PAIR.pack(t, c) for t, c in part.items())
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(b"".join(chunks))
    os.replace(tmp, path)


def _best(part: dict, static_part: dict) -> tuple[int, int, int]:
    """(token, its count, sample) of the follower with the largest count x static weight."""
    best, best_count, best_weight, total = None, 0, 0, 0
    for token, count in part.items():
        weight = 100 * static_part[token] if token in static_part else 1
        if count * weight > best_count * best_weight:
            best, best_count, best_weight = token, count, weight
        total += count
    return best, best_count, total


HISTORY_SHORT = "history_short"
NO_MATCH = "no_match"
REASONS = {
    HISTORY_SHORT: "fewer tokens so far than the static n-gram size (2)",
    NO_MATCH: "no n-gram of the last 1-4 tokens passes llama.cpp's count thresholds in the context, dynamic or "
              "static cache",
}
"""Why ngram-cache proposes nothing (its declaration's ``reasons``)."""


def _group(part: dict, static_part: dict, sample: int, percent: int, branches: int) -> list[int]:
    """The followers of one n-gram to propose: [] unless llama.cpp's rule drafts the best (``_best``:
    sample >= ``sample``, the best's count share >= ``percent``); then ``[best]``, and with ``branches``
    > 1 up to ``branches`` - 1 next ones (ranked by count x static weight, ties in llama.cpp's order)
    with >= ``MIN_BRANCH_PERCENT`` of the sample each after it."""
    best, count, total = _best(part, static_part)
    if total < sample or 100 * count < percent * total:
        return []
    if branches == 1:  # the chain: no ranking (a 1-gram may have hundreds of followers)
        return [best]
    ranked = sorted(part.items(), key=lambda tc: -tc[1] * (100 * static_part[tc[0]] if tc[0] in static_part else 1))
    return [best] + [t for t, c in ranked if t != best and 100 * c >= MIN_BRANCH_PERCENT * total][:branches - 1]


def _choices(seq: list, branches: int, context: Cache, dynamic: Cache, static: Cache) -> list[int]:
    """The next token(s) after ``seq`` (llama.cpp's ``try_draft`` order): the context cache's longest
    n-gram that decides (``LAX``), else the dynamic cache's (``STRICT``), else the static 2-gram (``LAX``
    for 2-grams); ``_group`` per n-gram."""
    static_ngram = _key(seq[-NGRAM_STATIC:])
    static_part = static.get(static_ngram, {})
    ngrams = [_key(seq[-n:]) for n in range(NGRAM_MIN, min(NGRAM_MAX, len(seq)) + 1)]
    for cache, limits in ((context, LAX), (dynamic, STRICT)):
        for i in range(len(ngrams) - 1, -1, -1):
            part = cache.get(ngrams[i])
            if part:
                group = _group(part, static_part, *limits[i], branches)
                if group:
                    return group
    part = static.get(static_ngram)
    return _group(part, {}, *LAX[NGRAM_STATIC - 1], branches) if part else []


def draft(inp, n_draft: int, context: Cache, dynamic: Cache, static: Cache) -> list[int]:
    """llama.cpp's ``common_ngram_cache_draft``: up to ``n_draft`` tokens after ``inp`` (which ends with the
    current token), one at a time by ``_choices``, until a position has no candidate."""
    if len(inp) < NGRAM_STATIC:
        return []
    seq = list(inp)
    out: list[int] = []
    while len(out) < n_draft:
        choice = _choices(seq, 1, context, dynamic, static)
        if not choice:
            break
        out.append(choice[0])
        seq.append(choice[0])
    return out


def tree_draft(inp, n_draft: int, branches: int, context: Cache, dynamic: Cache,
               static: Cache) -> tuple[list[int], list[int]]:
    """(tokens, parents) of the ``branches`` tree (module docstring) after ``inp`` (ending with the current
    token), at most ``n_draft`` tokens; parents as ``inspector.engine.tree`` (0: the current token). Up to
    the first split the tokens are ``draft``'s; each branch goes on by ``draft``. Raises nothing."""
    if len(inp) < NGRAM_STATIC:
        return [], []
    seq = list(inp)
    tokens: list[int] = []
    parents: list[int] = []
    while len(tokens) < n_draft:
        left = n_draft - len(tokens)
        group = _choices(seq, branches if left > 1 else 1, context, dynamic, static)[:left]
        if not group:
            break
        if len(group) == 1:
            parents.append(len(tokens))
            tokens.append(group[0])
            seq.append(group[0])
            continue
        split_row = len(tokens)
        rows = []
        for t in group:
            parents.append(split_row)
            tokens.append(t)
            rows.append(len(tokens))
        share = (n_draft - len(tokens)) // len(group)
        for j, (t, row) in enumerate(zip(group, rows)):
            allowed = n_draft - len(tokens) - share * (len(group) - 1 - j)  # unused budget flows on
            parent = row
            for c in draft(seq + [t], allowed, context, dynamic, static):
                parents.append(parent)
                tokens.append(c)
                parent = len(tokens)
        break
    return tokens, parents


class SlotCounts:
    """A slot's context cache, as llama-server 0c1e570's ``seq_info`` keeps it across requests
    (``common_speculative_impl_ngram_cache``, ``common/speculative.cpp``): the counts and how many
    tokens of the streams have been counted (``cache_size``)."""

    def __init__(self) -> None:
        self.context: Cache = {}
        self.cache_size = 0
        self.requests = 0
        """Requests that queried it (for ``warm_state``)."""

    def count(self, stream) -> None:
        """``draft_one``'s update at a query whose stream (prompt, generated, current token) is
        ``stream``: its tokens past ``cache_size``, counted alone; none when it is no longer."""
        size = len(stream)
        if self.cache_size < size:
            new = list(stream[self.cache_size:])
            update(self.context, new, len(new))
            self.cache_size = size


class NgramCacheSource:
    """llama.cpp ``--spec-type ngram-cache`` (see the module docstring)."""

    name = "ngram-cache"

    def __init__(self, lookup_cache_static: str = "", lookup_cache_dynamic: str = "",
                 memory: dict | None = None, branches: int = 1) -> None:
        if isinstance(branches, bool) or not isinstance(branches, int) or not 1 <= branches <= MAX_BRANCHES:
            raise ValueError(f"branches must be a whole number 1 <= branches <= {MAX_BRANCHES}, observed {branches!r}")
        self.branches = branches
        self.static_path, self.dynamic_path = lookup_cache_static, lookup_cache_dynamic
        if lookup_cache_dynamic:
            check_writable_folder(lookup_cache_dynamic)
        memory = {} if memory is None else memory
        static_abs = os.path.abspath(lookup_cache_static) if lookup_cache_static else ""
        dynamic_abs = os.path.abspath(lookup_cache_dynamic) if lookup_cache_dynamic else ""
        self.static: Cache = {}
        if lookup_cache_static:
            key = ("ngram-cache", "static", static_abs)
            if key not in memory:
                memory[key] = load(lookup_cache_static, "static lookup cache")
            self.static = memory[key]
        key = ("ngram-cache", "dynamic", dynamic_abs)
        if key not in memory:
            loaded: Cache = {}
            if lookup_cache_dynamic and os.path.exists(lookup_cache_dynamic):
                loaded = load(lookup_cache_dynamic, "dynamic lookup cache")
            memory[key] = loaded  # a missing dynamic file is made when the source closes
        self.dynamic: Cache = memory[key]
        key = ("ngram-cache", "slot", static_abs, dynamic_abs)  # one llama-server configuration, one slot
        if key not in memory:
            memory[key] = SlotCounts()
        self.slot: SlotCounts = memory[key]
        self.warm_at_start = (len(self.static), len(self.dynamic), len(self.slot.context), self.slot.cache_size,
                              self.slot.requests)
        self._queried = False
        self._count = 0
        self.closed = False

    @property
    def context(self) -> Cache:
        """The slot's context cache (shared by every request of the session)."""
        return self.slot.context

    def warm_state(self) -> str:
        """The caches' n-grams when this request began (``registry.warm_text``)."""
        static, dynamic, context, counted, requests = self.warm_at_start
        parts = ([f"context cache {context:,} n-grams from {requests} earlier request{'s' if requests != 1 else ''} "
                  f"(this one counts its tokens from position {counted:,} on)"] if context else []) + \
            ([f"static cache {static:,} n-grams"] if static else []) + \
            ([f"dynamic cache {dynamic:,} n-grams from its file"] if dynamic else [])
        return "; ".join(parts)

    def settings(self) -> dict:
        d = {"lookup_cache_static": self.static_path, "lookup_cache_dynamic": self.dynamic_path,
             "n_draft": N_DRAFT}
        if self.branches > 1:  # trees; chains keep the settings they always had
            d["branches"] = self.branches
        return d

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        if not self._queried:
            self._queried = True
            self.slot.requests += 1
        self.slot.count(request.tokens)
        n_draft = min(N_DRAFT, request.max_proposal_tokens)
        if self.branches > 1:
            ids, parents = tree_draft(request.tokens, n_draft, self.branches, self.slot.context, self.dynamic,
                                      self.static)
        else:
            ids = draft(request.tokens, n_draft, self.slot.context, self.dynamic, self.static)
            parents = None
        if not ids:
            return NoProposal(HISTORY_SHORT if len(request.tokens) < NGRAM_STATIC else NO_MATCH)
        self._count += 1
        if parents is not None and not is_chain(parents):
            return Proposal(b"ngram-cache:%d" % self._count, tuple(ids), parents=tuple(parents))
        return Proposal(b"ngram-cache:%d" % self._count, tuple(ids))

    def report(self, receipt) -> None:
        """llama.cpp's ``accept`` is a no-op for ngram-cache: counts come from the stream itself."""

    def discard(self, decision_id: bytes, reason: str) -> None:
        """Nothing to roll back."""

    def close(self) -> None:
        """Write the dynamic cache's file, if named: what was read plus the slot's context counts
        (``llama-lookup``'s rule for the file). The dynamic cache the drafts read is not changed."""
        if self.closed:
            return
        self.closed = True
        if self.dynamic_path:
            out: Cache = {ngram: part.copy() for ngram, part in self.dynamic.items()}
            merge(out, self.slot.context)
            save(out, self.dynamic_path)


def _path_check(source: str, key: str, value) -> str:
    text = "" if value is None else str(value).strip()
    if text and os.path.isdir(text):
        raise ValueError(f"source {source} option {key} must be a file, observed a directory {text!r}")
    return text


NGRAM_CACHE = SourceDescriptor("ngram-cache", (
    Option("lookup_cache_static", "path", "", "llama.cpp -lcs / --lookup-cache-static: path to a static lookup "
           "cache (read, not updated by generation; e.g. from llama-lookup-create; a regular file of at most "
           f"{MAX_CACHE_FILE_BYTES // 2**20} MiB)", label="static cache (-lcs)",
           flag="--lookup-cache-static", aliases=("-lcs",), metavar="FNAME", convert=_path_check,
           placeholder="-lcs file, optional", file_filter="Lookup caches (*.bin);;All files (*)"),
    Option("lookup_cache_dynamic", "path", "", "llama.cpp -lcd / --lookup-cache-dynamic: path to a dynamic lookup "
           "cache (read if it exists and never changed while drafting, as llama-server; written when the run ends "
           "with what was read plus this session's context counts, as llama-lookup; a regular file of at most "
           f"{MAX_CACHE_FILE_BYTES // 2**20} MiB)", label="dynamic cache (-lcd)",
           flag="--lookup-cache-dynamic", aliases=("-lcd",), metavar="FNAME", convert=_path_check, writes=True,
           placeholder="-lcd file, optional", file_filter="Lookup caches (*.bin);;All files (*)"),
    Option("branches", "int", 1, "1: llama.cpp's chain; B: a tree with up to B followers (each >= "
           f"{MIN_BRANCH_PERCENT}% of the n-gram's count) as branches where the n-gram that decides a drafted "
           "token had other frequent followers (ours, not llama-server's; see Token trees)",
           minimum=1, maximum=MAX_BRANCHES),
), help="llama.cpp ngram-cache: lookup decoding from context, dynamic and static n-gram counts",
    capabilities=frozenset({"settings", "close"}), llama_server="ngram-cache", reasons=REASONS)


def make_ngram_cache(ctx, **options) -> NgramCacheSource:
    """Raises ``ValueError`` naming a missing or broken cache file."""
    o = NGRAM_CACHE.with_defaults(options)
    return NgramCacheSource(o["lookup_cache_static"], o["lookup_cache_dynamic"], memory=ctx.memory,
                            branches=o["branches"])


# Each factory carries its declaration, as a plugin's does (``inspector.sources.registry.BUILTIN_FACTORIES``).
make_ngram_cache.descriptor = NGRAM_CACHE
