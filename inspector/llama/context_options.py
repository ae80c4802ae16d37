"""llama.cpp's context settings as ``LlamaRuntime``'s keyword options (``-b``, ``-ub``, ``-fa``, ``-ctk``,
``-ctv``; ``inspector.llama.context_settings``): their keys, the defaults a model is loaded with when
nothing else is set, the settings a runtime was made with, and as llama.cpp applies them to a context.
The window's worker and side panel read them (``inspector.gui.panel.context_controls``), no Qt here.
"""

from __future__ import annotations

from inspector.llama.context_settings import OUR_N_BATCH, SERVER_N_UBATCH

CONTEXT_KEYS = ("n_batch", "n_ubatch", "flash_attn", "type_k", "type_v")
"""The settings' keys: ``LlamaRuntime``'s keyword options, ``ContextControls.values()``' and QSettings' names."""
DEFAULT_CONTEXT = {"n_batch": OUR_N_BATCH, "n_ubatch": SERVER_N_UBATCH, "flash_attn": "auto", "type_k": "f16",
                   "type_v": "f16"}
"""What the window loads a model with when nothing else is set (``run``'s defaults)."""


def loaded_context(llama_cpp: dict | None) -> dict | None:
    """The context settings a runtime was made with, from its ``llama_cpp`` block (``describe()``, a
    receipts file's model): flash attention as asked (``auto`` stays ``auto``). None without a block."""
    if not isinstance(llama_cpp, dict):
        return None
    out = {k: llama_cpp.get(k, DEFAULT_CONTEXT[k]) for k in CONTEXT_KEYS}
    out["flash_attn"] = llama_cpp.get("flash_attn_asked", out["flash_attn"])
    return out


def effective_context(options: dict, n_ctx: int) -> dict:
    """``options`` as llama.cpp applies them to a context of ``n_ctx`` positions: the logical batch at
    most ``n_ctx``, the physical batch at most the logical one (what a runtime's block records)."""
    out = {**DEFAULT_CONTEXT, **options}
    out["n_batch"] = min(int(out["n_batch"]), int(n_ctx))
    out["n_ubatch"] = min(int(out["n_ubatch"]), out["n_batch"])
    return out
