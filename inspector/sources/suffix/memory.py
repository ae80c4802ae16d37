"""What the suffix source remembers across requests: earlier outputs, their cap, the memory file.

``SuffixMemory`` lives in ``SourceContext.memory`` under ``("suffix", memory file)``; see the package
docstring for when an output joins it and how the cap and the file work.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import deque

import numpy as np

from inspector.bounded_read import BoundedReadError, read_bounded_text
from inspector.sources.suffix.tree import PAD

MEMORY_FORMAT = "spec-inspector suffix memory"
MEMORY_VERSION = 1
MAX_MEMORY_FILE_BYTES = 256 * 1024 * 1024
"""Largest memory file read, in bytes read (not as reported); a FIFO, device or socket is refused by its type."""


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
        self.policy = None
        """The adaptive length's learned acceptance (a ``CostAwareLength``), shared by the session's
        requests that use the memory; not saved to the memory file."""
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
    first close). Raises ``ValueError`` naming the file: unreadable, not a regular file, more than
    ``MAX_MEMORY_FILE_BYTES`` (``read_bounded_text``), not JSON, not a suffix memory, malformed
    sequences, or made for another vocabulary than ``vocabulary``."""
    where = f"suffix memory file {path}"
    if not os.path.exists(path):
        return SuffixMemory(vocabulary=vocabulary)
    try:
        text = read_bounded_text(path, MAX_MEMORY_FILE_BYTES, "suffix memory file")
    except BoundedReadError as exc:  # a folder, FIFO, device or socket; or over the limit
        raise ValueError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{where} cannot be read: {exc}") from None
    try:
        doc = json.loads(text)
    except RecursionError:
        raise ValueError(f"{where} is not a suffix memory: its JSON is nested too deeply") from None
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
            # The piece decoded with U+FFFD (not ``token_text``, whose labels show bytes as <0xNN>), as
            # memories were stamped before: their files keep matching.
            h.update(runtime.token_piece(i, True).decode("utf-8", "replace").encode("utf-8") + b"\0")
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
