"""What makes our runtime's arithmetic llama-server's, and where it is not (issue 23).

llama.cpp's greedy text depends on how the work is cut: the decode schedule (the whole prompt in
one prefill, the first token from its last row), the physical batch, flash attention, the cache
types. The runtime follows llama-server's defaults of llama.cpp 0c1e570 (``common/common.h``
``common_params``; ``tools/server/server-context.cpp``); ``llama_cpp_settings`` writes them into
the receipts with one line for each setting that differs.
"""

from __future__ import annotations

LLAMA_CPP_COMMIT = "0c1e570"
"""The llama.cpp commit llama-cpp-python 0.3.36 vendors (its sdist's ``vendor/llama.cpp``): our
runtime's kernels, and the llama-server our tests and ``compare --llama-server`` build."""
SERVER_N_UBATCH = 512
"""llama-server's physical batch (``-ub``, ``common_params.n_ubatch``): the rows one compute pass takes."""


def llama_cpp_settings(runtime) -> dict:
    """The llama.cpp settings of ``runtime`` (a ``LlamaRuntime``) that decide the arithmetic, and in
    ``differs_from_llama_server`` one line for each that is not llama-server's default.

    The decode schedule, flash attention ``auto``, f16 K and V caches and a 512-row physical batch
    are the server's. Our unified cache of ``n_seq_max`` sequences (the server: one per slot) does
    not change a sequence's arithmetic (plain greedy output equals llama-server's, tested); the full
    sliding-window cache does, on models with sliding-window attention only (``n_swa`` > 0)."""
    notes = []
    if runtime.swa_full and runtime.n_swa > 0:
        notes.append("swa_full on (llama-server: off unless --swa-full): this model's sliding-window cache is "
                     "kept whole so rejected rows can be removed exactly; start llama-server with --swa-full "
                     "to compare")
    if runtime.n_ubatch != SERVER_N_UBATCH:
        notes.append(f"physical batch {runtime.n_ubatch} rows (llama-server: -ub {SERVER_N_UBATCH}): a prompt "
                     f"longer than {runtime.n_ubatch} tokens is computed in other pieces, "
                     "which can flip a near-tie")
    return {
        "commit": LLAMA_CPP_COMMIT,
        "schedule": "whole prompt prefilled, first token from its last row (llama-server's)",
        "flash_attn": runtime.flash_attn,
        "type_k": "f16",
        "type_v": "f16",
        "n_ubatch": int(runtime.n_ubatch),
        "kv_unified": True,
        "n_seq_max": runtime.n_seq_max,
        "swa_full": bool(runtime.swa_full),
        "differs_from_llama_server": notes,
    }
