"""Suffix decoding: the most frequent continuation of the longest suffix match, with memory of earlier requests.

After SuffixDecoding (Oliinyk et al., "SuffixDecoding: Extreme Speculative Decoding for Emerging
AI Applications", arXiv 2411.04975) as Snowflake's arctic-inference implements it for vLLM's
``method: suffix``. Sources followed (read, not copied): arctic-inference
``csrc/suffix_decoding/suffix_tree.cc`` (``SuffixTree::speculate``, ``_speculate_path``: the
scoring rule) and ``arctic_inference/suffix_decoding/cache.py`` (``SuffixDecodingCache``: a
tree per request over its prompt and output, one global tree over earlier outputs, FIFO
eviction); vLLM's ``SuffixDecodingProposer`` and the ``suffix_decoding_max_tree_depth`` (24),
``suffix_decoding_max_cached_requests``, ``suffix_decoding_max_spec_factor`` (1.0) and
``suffix_decoding_min_token_prob`` (0.1) options of its ``SpeculativeConfig``.

**The tree.** A bounded suffix trie of depth ``max_tree_depth`` = D: a node is a string of at most
D tokens, its count the number of places it occurs (an occurrence at the very end of a
sequence counts too: it has no continuation), its children the strings one token longer. The
trie is kept implicitly: tokens in one int32 array (sequences separated by -1), a node is the
array of positions where its string ends, found by a vectorized scan; the count is that
array's size, a child is the subset followed by one token. That is the counts of
arctic-inference's tree at 4 bytes per remembered token, and eviction is slicing.

**The scoring rule** (``speculate``). The pattern is the last D tokens of the stream. For every
match length m = 1 .. len(pattern) - 1 whose node exists: from the node follow the child with
the largest count (ties: the most recent occurrence), the path's probability p the product of
count(child) / count(node); a token is proposed while p >= ``min_token_prob``, at most
``floor(max_spec_factor * m + max_spec_offset)`` tokens, the cap and D - m (the depth limits
match plus proposal). Score = the sum of the proposed tokens' p; the best score wins, the
longer match on a tie. Both the request's tree (prompt + output so far) and the global memory
are asked; the memory's draft is used only when its score is strictly higher.

**Memory across requests** (``SuffixMemory`` in ``SourceContext.memory`` under
``("suffix", memory file)``: the stored token sequences do not depend on D or the
thresholds, which apply when asking; the cap ``max_cached_tokens`` is applied at each request's
start). A request's output (the stream after ``prompt_token_count``, as seen at the last
``propose`` and extended by the last receipts' ``committed_tokens``) joins the memory when the
source is closed (the run service closes it after every run) or, if it never was, at the first
``propose`` of the next request. Outputs only, not prompts, as SuffixDecoding's global tree.
When the remembered tokens exceed the cap the oldest requests are dropped first (a single
output longer than the cap keeps its last tokens). ``memory_file``: a JSON file loaded when the
session first uses it (missing: start empty) and written back (atomically) at every close;
a broken file is refused with a ``ValueError`` naming it.

**Not as arctic-inference:** linear drafts only (no ``use_tree_spec`` token trees: the engine
verifies one path); the running request's output is not in the global tree until it ends
(it is in the request's own tree); the cap counts tokens, not requests; ties go to the latest
occurrence (arctic-inference: hash-map order); a proposal scans the remembered tokens
(vectorized, O(tokens)) instead of walking a compressed tree.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import deque
from pathlib import Path

import numpy as np

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest

log = logging.getLogger(__name__)

MAX_DEPTH = 64
"""Largest ``max_tree_depth``; also the -1 padding before the first token of every array."""
PAD = MAX_DEPTH
MEMORY_FORMAT = "spec-inspector suffix memory"
MEMORY_VERSION = 1
MAX_MEMORY_FILE_BYTES = 256 * 1024 * 1024
SMALL = 48
"""Nodes with at most this many occurrences pick their best child in plain Python (else numpy)."""


def _best_child(nxt: np.ndarray) -> tuple[int, int]:
    """(token, count) of the most frequent token >= 0 in ``nxt`` (ties: the latest), or (-1, 0)."""
    if nxt.size <= SMALL:
        counts: dict[int, int] = {}
        last: dict[int, int] = {}
        for j, t in enumerate(nxt.tolist()):
            if t >= 0:
                counts[t] = counts.get(t, 0) + 1
                last[t] = j
        if not counts:
            return -1, 0
        token = max(counts, key=lambda t: (counts[t], last[t]))
        return token, counts[token]
    valid = nxt[nxt >= 0]
    if valid.size == 0:
        return -1, 0
    # Reversed, the first index of a token is its latest occurrence.
    vals, first, counts = np.unique(valid[::-1], return_index=True, return_counts=True)
    i = int(np.lexsort((-first, counts))[-1])  # the largest count, then the smallest reversed index
    return int(vals[i]), int(counts[i])


class _Path:
    """The greedy path from one node (the positions ``ends`` where its string ends), grown on demand:
    the most frequent child while the cumulative probability stays >= ``min_prob``."""

    def __init__(self, a: np.ndarray, ends: np.ndarray, min_prob: float) -> None:
        self.a, self.ends, self.min_prob = a, ends, min_prob
        self.size = ends.size
        self.tokens: list[int] = []
        self.probs: list[float] = []
        self.prob = 1.0
        self.done = False

    def grow(self, limit: int) -> None:
        while not self.done and len(self.tokens) < limit:
            nxt = self.a[self.ends + 1]
            token, count = _best_child(nxt)
            # The node's count includes the occurrences that end here (no continuation).
            prob = self.prob * count / self.ends.size if count else 0.0
            if count == 0 or prob < self.min_prob:
                self.done = True
                break
            self.prob = prob
            self.tokens.append(token)
            self.probs.append(prob)
            self.ends = self.ends[nxt == token] + 1


NO_MATCH = "no_match"
FAILED = "failed"
REASONS = {
    NO_MATCH: "no suffix of the last tokens continues, in the prompt, the output or the memory, with a token "
              "whose path probability stays above min_token_prob",
    FAILED: "the source failed (logged once) and proposes nothing",
}
"""Why the suffix source proposes nothing (its declaration's ``reasons``)."""


def speculate(a: np.ndarray, end: int, pattern, max_tokens: int, depth: int, max_spec_factor: float,
              max_spec_offset: float, min_token_prob: float) -> tuple[tuple[int, ...], float, int]:
    """SuffixDecoding's linear draft for ``pattern`` (the stream's last tokens, at most ``depth``)
    over the tokens ``a[:end]`` (``PAD`` -1 before the first, -1 between sequences and after
    the last). Returns (tokens, score, match length); no tokens when nothing qualifies."""
    best: tuple[tuple[int, ...], float, int] = ((), 0.0, 0)
    if len(pattern) < 2 or max_tokens < 1:
        return best
    ends = np.flatnonzero(a[:end] == pattern[-1])
    path = None
    for m in range(1, len(pattern)):
        if m > 1:
            ends = ends[a[ends - (m - 1)] == pattern[-m]]
        if ends.size == 0:
            break  # no node for this match length (nor for longer ones)
        limit = min(max_tokens, int(m * max_spec_factor + max_spec_offset + 1e-6), depth - m)
        if limit <= 0:
            continue
        if path is None or path.size != ends.size:  # nested sets: the same size is the same node
            path = _Path(a, ends, min_token_prob)
        path.grow(limit)
        probs = path.probs[:limit]
        score = sum(probs)
        if probs and score >= best[1]:
            best = (tuple(path.tokens[:limit]), score, m)
    return best


class _Stream:
    """The request's tokens (prompt + output) in a growing int32 array: ``PAD`` -1s, the tokens, -1s."""

    def __init__(self, tokens) -> None:
        self.n = 0
        self.a = np.full(PAD + max(256, 2 * len(tokens)) + 1, -1, dtype=np.int32)
        self.extend(tokens)

    @property
    def end(self) -> int:
        return PAD + self.n

    def extend(self, tokens) -> None:
        k = len(tokens)
        if not k:
            return
        if self.end + k + 1 > self.a.size:
            grown = np.full(max(self.end + k + 1, 2 * self.a.size), -1, dtype=np.int32)
            grown[: self.end] = self.a[: self.end]
            self.a = grown
        self.a[self.end : self.end + k] = np.asarray(tokens, dtype=np.int32)
        self.n += k

    def truncate(self, n: int) -> None:
        self.a[PAD + n : self.end] = -1
        self.n = n

    def last(self) -> int:
        return int(self.a[self.end - 1]) if self.n else -1

    def tokens(self, start: int = 0) -> np.ndarray:
        return self.a[PAD + start : self.end].copy()


class SuffixMemory:
    """Earlier requests' outputs, oldest first, in one int32 array (``PAD`` -1s, then each output
    followed by -1). ``open``: the requests still running (key -> (stream, prompt count, cap)),
    whose outputs join at ``finish``. ``vocabulary``: the fingerprint of the model's vocabulary
    the token ids belong to (None: unknown)."""

    def __init__(self, sequences=(), vocabulary: dict | None = None) -> None:
        self.flat = np.full(PAD, -1, dtype=np.int32)
        self.lengths: deque[int] = deque()
        self.tokens = 0
        self.vocabulary = vocabulary
        self.open: dict = {}
        for seq in sequences:
            self.add(seq, None)

    def __len__(self) -> int:
        return len(self.lengths)

    def add(self, seq, cap: int | None) -> None:
        """Remember one output; then drop the oldest outputs while more than ``cap`` tokens are kept
        (None: no cap; 0: remember nothing)."""
        seq = np.asarray(seq, dtype=np.int32).ravel()
        if seq.size == 0 or cap == 0:
            return
        if cap is not None and seq.size > cap:
            seq = seq[-cap:]
        self.flat = np.concatenate([self.flat, seq, np.full(1, -1, dtype=np.int32)])
        self.lengths.append(int(seq.size))
        self.tokens += int(seq.size)
        if cap is not None:
            self.trim(cap)

    def trim(self, cap: int) -> None:
        """Drop the oldest outputs while more than ``cap`` tokens are remembered."""
        drop = 0
        while self.tokens > cap and self.lengths:
            n = self.lengths.popleft()
            self.tokens -= n
            drop += n + 1
        if drop:
            self.flat = np.concatenate([self.flat[:PAD], self.flat[PAD + drop :]])

    def sequences(self) -> list[list[int]]:
        out, at = [], PAD
        for n in self.lengths:
            out.append(self.flat[at : at + n].tolist())
            at += n + 1
        return out

    def finish(self, key) -> None:
        """The request ``key`` ended: its output joins the memory (once)."""
        entry = self.open.pop(key, None)
        if entry is not None:
            stream, prompt_count, cap = entry
            self.add(stream.tokens(prompt_count), cap)

    def finish_open(self) -> None:
        """Requests that were never closed ended: their outputs join the memory."""
        for key in list(self.open):
            self.finish(key)

    def save(self, path: str) -> None:
        """Write the memory to ``path`` (JSON, replaced atomically). Raises ``OSError``."""
        doc = {"format": MEMORY_FORMAT, "version": MEMORY_VERSION, "vocabulary": self.vocabulary,
               "sequences": self.sequences()}
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)


def load_memory(path: str, vocabulary: dict | None = None) -> SuffixMemory:
    """The memory saved in ``path``; an empty one when the file does not exist yet (written at the
    first close). Raises ``ValueError`` naming the file: unreadable, not JSON, not a suffix memory,
    malformed sequences, or made for another vocabulary than ``vocabulary``."""
    p = Path(path)
    where = f"suffix memory file {path}"
    if not p.exists():
        return SuffixMemory(vocabulary=vocabulary)
    try:
        if p.stat().st_size > MAX_MEMORY_FILE_BYTES:
            raise ValueError(f"{where} is larger than {MAX_MEMORY_FILE_BYTES // 2**20} MiB")
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where} cannot be read: {exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != MEMORY_FORMAT:
        raise ValueError(f"{where} is not a suffix memory (expected a JSON object with \"format\": "
                         f"\"{MEMORY_FORMAT}\")")
    if doc.get("version") != MEMORY_VERSION:
        raise ValueError(f"{where} has version {doc.get('version')!r}, expected {MEMORY_VERSION}")
    stored = doc.get("vocabulary")
    if stored is not None and not (isinstance(stored, dict) and isinstance(stored.get("n_vocab"), int)):
        raise ValueError(f"{where}: \"vocabulary\" must be null or an object with \"n_vocab\"")
    if vocabulary and stored and stored != vocabulary:
        raise ValueError(f"{where} was made for another model's vocabulary (file: {stored['n_vocab']} tokens, "
                         f"sample {str(stored.get('sample_sha1'))[:8]}; this model: {vocabulary['n_vocab']} tokens, "
                         f"sample {vocabulary['sample_sha1'][:8]})")
    seqs = doc.get("sequences")
    n_vocab = (vocabulary or stored or {}).get("n_vocab")
    if not isinstance(seqs, list):
        raise ValueError(f"{where}: \"sequences\" must be a list of token id lists")
    for i, seq in enumerate(seqs, 1):
        if not isinstance(seq, list) or not all(type(t) is int and t >= 0 for t in seq) or \
                (n_vocab and seq and max(seq) >= n_vocab):
            raise ValueError(f"{where}: sequence {i} is not a list of token ids"
                             + (f" in [0, {n_vocab})" if n_vocab else " >= 0"))
    return SuffixMemory(seqs, vocabulary=vocabulary or stored)


def vocabulary_fingerprint(runtime) -> dict | None:
    """The size and a digest of sampled token texts of ``runtime``'s vocabulary, or None."""
    try:
        n = int(runtime.n_vocab)
        h = hashlib.sha1()
        for i in range(0, n, max(1, n // 256)):
            h.update(str(runtime.token_text(i)).encode("utf-8", "replace") + b"\0")
    except Exception:
        return None
    return {"n_vocab": n, "sample_sha1": h.hexdigest()}


def memory_for(store: dict, memory_file: str = "", runtime=None) -> SuffixMemory:
    """The session's suffix memory (``SourceContext.memory``) for ``memory_file``, made on first use
    (loaded from the file, checked against ``runtime``'s vocabulary). Raises ``ValueError`` for a
    broken file (``load_memory``)."""
    key = ("suffix", os.path.abspath(memory_file) if memory_file else "")
    memory = store.get(key)
    if memory is None:
        vocabulary = vocabulary_fingerprint(runtime) if runtime is not None else None
        memory = load_memory(memory_file, vocabulary) if memory_file else SuffixMemory(vocabulary=vocabulary)
        store[key] = memory
    return memory


class SuffixSource:
    """SuffixDecoding proposals (see the module docstring): the most frequent continuation of the
    longest suffix match in this request's prompt + output or in the outputs of earlier requests
    (``memory``, shared by the session's requests).

    ``max_tree_depth``: 2..64, match plus proposal (tokens); ``max_spec_factor``,
    ``max_spec_offset``: at most factor x match length + offset tokens; ``min_token_prob``: 0..1;
    ``max_cached_tokens``: tokens of earlier outputs remembered (0: this request neither uses nor
    changes the memory); ``memory_file``:
    where the memory is saved at ``close`` ("" : not saved). Decision ids:
    ``suffix:<count>:m<match length>:<req|mem>`` (which tree the draft came from)."""

    name = "suffix"

    def __init__(self, memory: SuffixMemory | None = None, max_tree_depth: int = 24, max_spec_factor: float = 1.0,
                 max_spec_offset: float = 0.0, min_token_prob: float = 0.1, max_cached_tokens: int = 100_000,
                 memory_file: str = "") -> None:
        depth_ok = isinstance(max_tree_depth, int) and not isinstance(max_tree_depth, bool)
        if not depth_ok or not 2 <= max_tree_depth <= MAX_DEPTH:
            raise ValueError(f"max_tree_depth must be a whole number 2 <= max_tree_depth <= {MAX_DEPTH}, "
                             f"observed {max_tree_depth!r}")
        if not 0.0 <= min_token_prob <= 1.0:
            raise ValueError(f"min_token_prob must be 0 <= min_token_prob <= 1, observed {min_token_prob!r}")
        if max_spec_factor < 0:
            raise ValueError(f"max_spec_factor must be >= 0, observed {max_spec_factor!r}")
        if isinstance(max_cached_tokens, bool) or not isinstance(max_cached_tokens, int) or max_cached_tokens < 0:
            raise ValueError(f"max_cached_tokens must be a whole number >= 0, observed {max_cached_tokens!r}")
        self.memory = memory if memory is not None else SuffixMemory()
        self.max_tree_depth = max_tree_depth
        self.max_spec_factor = float(max_spec_factor)
        self.max_spec_offset = float(max_spec_offset)
        self.min_token_prob = float(min_token_prob)
        self.max_cached_tokens = max_cached_tokens
        self.memory_file = memory_file
        if max_cached_tokens:  # 0: this request neither uses nor changes the memory
            self.memory.trim(max_cached_tokens)
        self.remembered_at_start = (len(self.memory), self.memory.tokens)
        self._stream: _Stream | None = None
        self._prompt_count = 0
        self._key = object()  # this source's running request in memory.open
        self._count = 0
        self._failed = False

    def warm_state(self) -> str:
        """What the memory held when this request began (``registry.warm_text``), "" when empty or unused."""
        requests, tokens = self.remembered_at_start
        if not tokens or not self.max_cached_tokens:
            return ""
        return f"{tokens:,} tokens remembered from {requests} earlier request{'s' if requests != 1 else ''}"

    def settings(self) -> dict:
        return {"max_tree_depth": self.max_tree_depth, "max_spec_factor": self.max_spec_factor,
                "max_spec_offset": self.max_spec_offset, "min_token_prob": self.min_token_prob,
                "max_cached_tokens": self.max_cached_tokens, "memory_file": self.memory_file,
                "remembered_requests": self.remembered_at_start[0],
                "remembered_tokens": self.remembered_at_start[1]}

    def _sync(self, tokens, prompt_count: int) -> None:
        st = self._stream
        if st is not None and prompt_count == self._prompt_count and len(tokens) >= st.n and \
                (st.n == 0 or tokens[st.n - 1] == st.last()):
            st.extend(tokens[st.n :])
            return
        if st is not None and prompt_count == self._prompt_count:
            k = min(len(tokens), st.n)
            same = np.asarray(tokens[:k], dtype=np.int64) == st.a[PAD : PAD + k]
            common = k if same.all() else int(np.argmin(same))
            if common >= prompt_count:  # the same request, its stream differed after the prompt
                st.truncate(common)
                st.extend(tokens[common:])
                return
        # A new request: earlier ones (this source's, or never closed) join the memory.
        self.memory.finish_open()
        self._stream = _Stream(tokens)
        self._prompt_count = prompt_count
        if self.max_cached_tokens > 0:
            self.memory.trim(self.max_cached_tokens)
            self.memory.open[self._key] = (self._stream, prompt_count, self.max_cached_tokens)

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        """Up to ``request.max_proposal_tokens`` tokens, or None (never raises: a failure is logged)."""
        try:
            return self._propose(request)
        except Exception:
            if not self._failed:
                log.exception("suffix source failed; proposing nothing")
                self._failed = True
            return NoProposal(FAILED, "logged once")

    def _propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        tokens = request.tokens
        self._sync(tokens, request.prompt_token_count)
        st = self._stream
        pattern = [int(t) for t in tokens[-self.max_tree_depth :]]
        args = (request.max_proposal_tokens, self.max_tree_depth, self.max_spec_factor, self.max_spec_offset,
                self.min_token_prob)
        best, where = speculate(st.a, st.end, pattern, *args), b"req"
        if self.max_cached_tokens > 0 and self.memory.tokens:
            flat = self.memory.flat
            found = speculate(flat, flat.size, pattern, *args)
            if found[1] > best[1]:
                best, where = found, b"mem"
        ids, _, match = best
        if not ids:
            return NoProposal(NO_MATCH)
        self._count += 1
        return Proposal(b"suffix:%d:m%d:%s" % (self._count, match, where), ids)

    def report(self, receipt) -> None:
        """Extend the request's stream with the window's committed tokens (the last window's tokens
        reach the memory this way; ``propose`` is not asked after it)."""
        st = self._stream
        committed = getattr(receipt, "committed_tokens", ())
        if st is not None and committed and receipt.base_position + 1 == st.n:
            st.extend([int(t) for t in committed])

    def discard(self, decision_id: bytes, reason: str) -> None:
        """Nothing to roll back."""

    def close(self) -> None:
        """The request ended: its output joins the memory, which is saved to ``memory_file`` if given
        (a failure to save is logged: closing never raises)."""
        self.memory.finish(self._key)
        if self.memory_file:
            try:
                self.memory.save(self.memory_file)
            except OSError as exc:
                log.warning("could not save the suffix memory to %s: %s", self.memory_file, exc)
