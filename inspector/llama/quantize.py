"""Make a draft model by re-quantizing the target (llama.cpp ``llama_model_quantize``).

On the bundled SmolLM2-135M, a Q4_0 re-quantization disagrees with the target
often enough to show mismatches and corrections (LLAMA_CPP_NOTES: about 44%
of proposals accepted on a story prompt; Q2_K about 35%).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import tempfile
from pathlib import Path

from inspector.llama.model_file import ModelFileError, check_gguf

QUANT_TYPES = {"Q8_0": 7, "Q4_0": 2, "Q4_K_M": 15, "Q3_K_M": 12, "Q2_K": 10, "Q4_1": 3, "Q5_0": 8,
               "IQ4_NL": 25, "F16": 1}
"""Offered types -> llama.cpp ``LLAMA_FTYPE_MOSTLY_*`` values (drafts, and ``bench --weights`` layouts)."""
TARGET_TYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "IQ4_NL", "Q4_K_M", "F16")
"""The types a target can be run in (``--target-weights``, the window's weights choice): the CPU
backend's multi-row kernels cover Q8_0, Q4_0, Q5_0 and IQ4_NL (``inspector.llama.cost_model``)."""
DRAFT_TYPES = ("Q8_0", "Q4_0", "Q4_K_M", "Q3_K_M", "Q2_K")
"""The types offered for a draft made from the target (smaller or differently rounded weights)."""


def cache_dir() -> Path:
    """Where made drafts are kept: ``$XDG_CACHE_HOME/spec-inspector/drafts`` (default ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spec-inspector" / "drafts"


FINGERPRINTS = "fingerprints.json"
"""The file in a conversions folder remembering each model file's ``fingerprint`` by (path, size, mtime,
inode, ctime): a file copied over with its time kept (``cp -p``) still gets a new inode or ctime."""


def fingerprint(path: str | os.PathLike, folder: str | os.PathLike | None = None) -> str:
    """A key of a model file's content: BLAKE2b of the whole file, 12 hex digits (about 0.2 s per 100 MB,
    once: ``folder``'s ``FINGERPRINTS`` file remembers it by absolute path, size, times and inode).
    The same file copied or reinstalled (a new modification time) keeps its key, so its conversions are
    found again instead of made again beside the old ones; files differing anywhere get other keys.
    Raises ``OSError`` when the model cannot be read (an unreadable index is ignored and rewritten)."""
    path = Path(path).resolve()
    st = path.stat()
    stamp = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]
    index_path = Path(folder) / FINGERPRINTS if folder is not None else None
    index: dict = {}
    if index_path is not None:
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
            if not isinstance(index, dict):
                index = {}
        except (OSError, ValueError):
            index = {}
        known = index.get(str(path))
        if isinstance(known, list) and len(known) == 5 and known[:4] == stamp and isinstance(known[4], str):
            return known[4]
    with open(path, "rb") as f:
        key = hashlib.file_digest(f, lambda: hashlib.blake2b(digest_size=6)).hexdigest()
    if index_path is not None:
        index[str(path)] = [*stamp, key]
        try:  # a temporary file of its own: two threads (a draft and a --target-weights form) may write at once
            fd, tmp = tempfile.mkstemp(prefix=f"{FINGERPRINTS}.", dir=index_path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(index, f)
            os.replace(tmp, index_path)
        except OSError:
            pass  # the key is still right; it is computed again next time
    return key


def _remove_mtime_keyed(folder: Path, stem: str, qtype: str, size: int) -> None:
    """Delete conversions of a file named ``stem`` of ``size`` bytes to ``qtype`` that earlier versions keyed
    by modification time (``{stem}.{qtype}.{size}-{mtime}.gguf``): nothing reads those names any more."""
    prefix = f"{stem}.{qtype}.{size}-"
    for old in folder.glob("*.gguf"):  # names compared as text: a stem may hold glob characters ("model[1]")
        if old.name.startswith(prefix) and old.name[len(prefix):-len(".gguf")].isdigit():
            try:
                old.unlink()
            except OSError:  # open elsewhere (Windows), not ours to delete, gone: left as it is
                pass


def make_draft(target: str | os.PathLike, qtype: str = "Q4_0", out_dir: str | os.PathLike | None = None,
               threads: int | None = None) -> Path:
    """Re-quantize ``target`` to ``qtype`` (a key of ``QUANT_TYPES``); return the draft's path.

    A draft made earlier from a file with the same content (``fingerprint``) is reused. Raises
    ``ModelFileError`` (bad target or unreadable, or llama.cpp failed) and ``ValueError`` (unknown type).
    """
    if qtype not in QUANT_TYPES:
        raise ValueError(f"unknown draft type {qtype!r}: expected one of {', '.join(QUANT_TYPES)}")
    info = check_gguf(target)
    src = Path(info.path)
    folder = Path(out_dir) if out_dir is not None else cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        key = fingerprint(src, folder)
        size = src.stat().st_size
    except OSError as exc:
        raise ModelFileError(src, f"cannot read it ({exc.strerror or exc})") from None
    _remove_mtime_keyed(folder, src.stem, qtype, size)
    out = folder / f"{src.stem}.{qtype}.{key}.gguf"
    if out.exists() and out.stat().st_size > 0:
        return out
    import llama_cpp  # llama.cpp loads only when a conversion runs

    from inspector.llama.native import init_backend  # (it loads llama.cpp too)

    init_backend()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANT_TYPES[qtype]
    params.allow_requantize = True
    params.nthread = threads or os.cpu_count() or 1
    tmp = out.with_suffix(".part")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise ModelFileError(src, f"llama.cpp could not re-quantize it to {qtype} (status {rc})")
    os.replace(tmp, out)
    return out


def weight_form(model_path: str | Path, weight_type: str, out_dir=None) -> tuple[Path, bool]:
    """(path of the model in ``weight_type``, converted?): the file itself when its main weight
    type is already ``weight_type``, else a cached llama.cpp re-quantization. Raises
    ``ValueError`` for an unknown type, ``ModelFileError`` when llama.cpp cannot convert it."""
    if check_gguf(model_path).main_weight_type == weight_type:
        return Path(model_path), False
    return make_draft(model_path, weight_type, out_dir), True


def open_target(model_path: str | Path, weight_type: str = "", *, on_convert=None, **runtime_options):
    """A ``LlamaRuntime`` of ``model_path`` run in ``weight_type`` ("" = as stored): the file itself,
    or its cached conversion (``weight_form``; ``on_convert(weight_type)`` is called before one is
    looked up or made, for a progress note), with ``converted_from`` naming the original and
    ``converted_from_weights`` its own main weight type.
    ``runtime_options`` go to ``LlamaRuntime`` (n_ctx, n_threads, progress, offload, ...); with RPC
    servers in ``offload`` the runtime is a ``RemoteRuntime`` (a child process). Raises
    ``ValueError`` (unknown type), ``ModelFileError`` (the file, or the conversion, failed),
    ``RpcUnavailable``, ``RuntimeLost`` (the child died while loading)."""
    path, converted = Path(model_path), False
    if weight_type:
        if on_convert is not None:
            on_convert(weight_type)
        path, converted = weight_form(model_path, weight_type)
    offload = runtime_options.get("offload")
    if offload is not None and offload.rpc:  # llama.cpp's RPC client may abort: not in this process
        from inspector.llama.remote import RemoteRuntime as Runtime  # one of the two, when a model opens
    else:
        from inspector.llama.runtime import LlamaRuntime as Runtime  # (llama.cpp loads here)
    rt = Runtime(path, **runtime_options)
    if converted:
        rt.converted_from = str(Path(model_path).resolve())
        rt.converted_from_weights = check_gguf(model_path).main_weight_type
    return rt
