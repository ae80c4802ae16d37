"""Make a draft model by re-quantizing the target (llama.cpp ``llama_model_quantize``).

On the bundled SmolLM2-135M, a Q4_0 re-quantization disagrees with the target
often enough to show mismatches and corrections (LLAMA_CPP_NOTES: about 44%
of proposals accepted on a story prompt; Q2_K about 35%).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
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


FINGERPRINT_BYTES = 1 << 20
"""Bytes read from each end of a model file for its cache key (``fingerprint``)."""


def fingerprint(path: str | os.PathLike) -> str:
    """A short key of a model file's content: its size and the BLAKE2b of its first and last
    ``FINGERPRINT_BYTES`` (the GGUF header and tensor list, the last tensors' weights), 12 hex digits.
    The same file copied or reinstalled (a new modification time) keeps its key, so its conversions are
    found again instead of made again beside the old ones. Raises ``OSError`` when it cannot be read."""
    size = os.path.getsize(path)
    h = hashlib.blake2b(str(size).encode(), digest_size=6)
    with open(path, "rb") as f:
        h.update(f.read(FINGERPRINT_BYTES))
        if size > FINGERPRINT_BYTES:
            f.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
            h.update(f.read(FINGERPRINT_BYTES))
    return h.hexdigest()


def make_draft(target: str | os.PathLike, qtype: str = "Q4_0", out_dir: str | os.PathLike | None = None,
               threads: int | None = None) -> Path:
    """Re-quantize ``target`` to ``qtype`` (a key of ``QUANT_TYPES``); return the draft's path.

    A draft made earlier from a file with the same content (``fingerprint``: its size and both ends) is
    reused. Raises ``ModelFileError`` (bad target or unreadable, or llama.cpp failed) and ``ValueError``
    (unknown type).
    """
    if qtype not in QUANT_TYPES:
        raise ValueError(f"unknown draft type {qtype!r}: expected one of {', '.join(QUANT_TYPES)}")
    info = check_gguf(target)
    src = Path(info.path)
    try:
        key = fingerprint(src)
    except OSError as exc:
        raise ModelFileError(src, f"cannot read it ({exc.strerror or exc})") from None
    folder = Path(out_dir) if out_dir is not None else cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
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
