"""llama.cpp's context settings that change both speed and numerics, with llama.cpp's flag names
(``common/arg.cpp`` of llama.cpp 0c1e570): ``-ub`` physical batch, ``-fa`` flash attention,
``-ctk``/``-ctv`` K and V cache types; and llama-server's defaults for them (``common/common.h``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SERVER_N_BATCH = 2048
"""llama-server's logical batch (``-b``, ``common_params.n_batch``), clamped by llama.cpp to ``-c``."""
OUR_N_BATCH = 512
"""Our logical batch (rows per decode) when none is given (``run -b``, the window's ``-b``); llama-server's
is ``SERVER_N_BATCH`` (the same arithmetic: the physical batch decides it; ours keeps a decode's logits
buffer small)."""
SERVER_N_UBATCH = 512
"""llama-server's physical batch (``-ub``, ``common_params.n_ubatch``): the rows one compute pass takes."""
FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}
"""``-fa`` values -> llama.cpp's ``llama_flash_attn_type`` (llama-server's default: ``auto``)."""
KV_CACHE_TYPES = {"f32": 0, "f16": 1, "bf16": 30, "q8_0": 8, "q4_0": 2, "q4_1": 3, "iq4_nl": 20, "q5_0": 6,
                  "q5_1": 7}
"""``-ctk``/``-ctv`` values (llama.cpp's ``kv_cache_types``, in its order) -> ``ggml_type``
(llama-server's default: ``f16``). Every one but f32, f16 and bf16 is quantized."""
UNQUANTIZED = ("f32", "f16", "bf16")


@dataclass(frozen=True)
class ContextSettings:
    """``n_ubatch``: rows per compute pass (>= 1; llama.cpp caps it at the logical batch);
    ``flash_attn``: ``on``, ``off`` or ``auto``; ``type_k``, ``type_v``: a ``KV_CACHE_TYPES`` name.
    The defaults are llama-server's. Raises ``ValueError`` (one line) for a value llama.cpp does not take."""

    n_ubatch: int = SERVER_N_UBATCH
    flash_attn: str = "auto"
    type_k: str = "f16"
    type_v: str = "f16"

    def __post_init__(self) -> None:
        if not isinstance(self.n_ubatch, int) or self.n_ubatch < 1:
            raise ValueError(f"n_ubatch must be a whole number >= 1, observed {self.n_ubatch!r}")
        if self.flash_attn not in FLASH_ATTN:
            raise ValueError(f"flash attention must be one of {', '.join(FLASH_ATTN)}, observed {self.flash_attn!r}")
        for what, value in (("K", self.type_k), ("V", self.type_v)):
            if value not in KV_CACHE_TYPES:
                raise ValueError(f"{what} cache type must be one of {', '.join(KV_CACHE_TYPES)}, observed {value!r}")

    def refusal(self) -> str:
        """Why llama.cpp would refuse this combination (its rule in ``llama_init_from_model``), or ""."""
        if self.type_v not in UNQUANTIZED and self.flash_attn == "off":
            return (f"a quantized V cache (-ctv {self.type_v}) needs flash attention, observed -fa off "
                    "(expected -fa on or auto, or -ctv f16)")
        return ""

    def apply(self, cparams) -> None:
        """Set these on llama.cpp's ``llama_context_params`` (``n_ubatch`` capped at its ``n_batch``)."""
        cparams.n_ubatch = min(cparams.n_batch, self.n_ubatch)
        cparams.flash_attn_type = FLASH_ATTN[self.flash_attn]
        cparams.type_k = KV_CACHE_TYPES[self.type_k]
        cparams.type_v = KV_CACHE_TYPES[self.type_v]

    def server_args(self) -> list[str]:
        """llama-server's flags for the settings that are not its defaults (none for the defaults)."""
        out: list[str] = []
        if self.n_ubatch != SERVER_N_UBATCH:
            out += ["-ub", str(self.n_ubatch)]
        if self.flash_attn != "auto":
            out += ["-fa", self.flash_attn]
        if self.type_k != "f16":
            out += ["-ctk", self.type_k]
        if self.type_v != "f16":
            out += ["-ctv", self.type_v]
        return out


_KV_LINE = re.compile(r"K \((\w+)\):.*V \((\w+)\):")


def settled(log_lines, asked: ContextSettings) -> tuple[str, str, str]:
    """(flash attention, K type, V type) as llama.cpp settled them when it created the context, read
    from its log: ``auto`` becomes ``on`` or ``off`` ("Flash Attention enabled" / "... set to
    disabled"), and the types from its "llama_kv_cache: size = ... K (f16): ..., V (f16): ..." line.
    What the log does not say stays as ``asked``."""
    fa, k, v = asked.flash_attn, asked.type_k, asked.type_v
    for line in log_lines:
        if "enabling flash_attn" in line or "Flash Attention enabled" in line:
            fa = "on"
        elif "Flash Attention not supported" in line:
            fa = "off"
        m = _KV_LINE.search(line)
        if m:
            k, v = m.group(1), m.group(2)
    return fa, k, v


from inspector.llama.model_file import ModelFileError  # noqa: E402


class ContextRefused(ModelFileError):
    """llama.cpp refuses a context with these settings (or would): the message says which and why."""
