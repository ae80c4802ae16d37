"""What makes our runtime's arithmetic llama-server's, and where it is not (issue 23).

llama.cpp's greedy text depends on how the work is cut: the decode schedule (the whole prompt in
one prefill, the first token from its last row), the physical batch, flash attention, the cache
types. The runtime follows llama-server's defaults of llama.cpp 0c1e570 (``common/common.h``
``common_params``; ``tools/server/server-context.cpp``); ``llama_cpp_settings`` writes them into
the receipts with one line for each setting that differs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from inspector.engine.llama_settings import SERVER_N_UBATCH, context_object_settings
from inspector.llama.context_settings import ContextSettings
from inspector.llama.machine import machine_facts

LLAMA_CPP_COMMIT = "0c1e570"
"""The llama.cpp commit llama-cpp-python 0.3.36 vendors (its sdist's ``vendor/llama.cpp``): our
runtime's kernels, and the llama-server our tests and ``compare --llama-server`` build."""


def llama_cpp_settings(runtime) -> dict:
    """The llama.cpp settings of ``runtime`` (a ``LlamaRuntime``) that decide the arithmetic, and in
    ``differs_from_llama_server`` one line for each that is not llama-server's default.

    The decode schedule is the server's; flash attention ``auto``, f16 K and V caches and a 512-row
    physical batch are by default (``LlamaRuntime``'s ``flash_attn``, ``type_k``, ``type_v``,
    ``n_ubatch``; ``server_args`` gives llama-server the same). Our logical batch (``n_batch``, 512
    by default, llama-server's 2048) decides how many rows one decode takes, not the arithmetic:
    recorded, no line. Our unified cache of ``n_seq_max`` sequences (the server: one per slot) does
    not change a sequence's arithmetic (plain greedy output equals llama-server's, tested); the full
    sliding-window cache does, on models with sliding-window attention only (``n_swa`` > 0)."""
    notes = []
    if runtime.swa_full and runtime.n_swa > 0:
        notes.append("swa_full on (llama-server: off unless --swa-full): this model's sliding-window cache is "
                     "kept whole so rejected rows can be removed exactly; start llama-server with --swa-full "
                     "to compare")
    asked = getattr(runtime, "asked", None) or ContextSettings()
    context = getattr(runtime, "context", None) or asked
    in_graph = getattr(runtime, "graph_figures", None) is not None
    if runtime.n_ubatch != SERVER_N_UBATCH:
        notes.append(f"physical batch {runtime.n_ubatch} rows (llama-server: -ub {SERVER_N_UBATCH}): a prompt "
                     f"longer than {runtime.n_ubatch} tokens is computed in other pieces, "
                     "which can flip a near-tie")
    for s in context_object_settings():  # the physical batch: above, as the runtime uses it
        value = getattr(asked, s.name)
        if s.name != "n_ubatch" and value != s.server_default:
            flag = s.server_flags[0] if s.server_flags else s.flags[0]
            notes.append(f"{s.title} {value} (llama-server: {flag} {s.server_default}): start llama-server with "
                         f"{flag} {value}")
    return {
        "commit": LLAMA_CPP_COMMIT,
        "schedule": "whole prompt prefilled, first token from its last row (llama-server's)",
        **context.values(),  # each setting as llama.cpp settled it, by its declared name
        "flash_attn_asked": asked.flash_attn,
        "n_batch": int(runtime.n_batch),
        "n_ubatch": int(runtime.n_ubatch),
        "kv_unified": True,
        "n_seq_max": runtime.n_seq_max,
        "swa_full": bool(runtime.swa_full),
        "backend_sampling": in_graph,
        "server_args": context_server_args(runtime),
        "differs_from_llama_server": notes,
    }


@dataclass(frozen=True)
class ServerContext:
    """What llama-server is started with so it computes as a runtime does: ``context`` (its context settings)
    and ``backend_sampling`` (``-bs``: the runtime samples greedy rows in the graph, ``LlamaRuntime.
    sample_in_graph``; llama-server then samples a request on the backend when it asks for no ``n_probs``,
    tools/server/server-context.cpp 0c1e570)."""

    context: ContextSettings
    backend_sampling: bool = False

    def server_args(self) -> list[str]:
        """llama-server's flags: the context's that are not its defaults, then ``-bs`` when on."""
        return self.context.server_args() + (["-bs"] if self.backend_sampling else [])

    def args(self) -> list[str]:
        """Every context setting as our CLI's (and llama.cpp's) flags (``ContextSettings.args``)."""
        return self.context.args()


def server_context(runtime) -> ServerContext:
    """How to start llama-server so it computes as ``runtime`` does: the physical batch our runtime uses,
    flash attention and cache types as asked (``auto`` stays ``auto``), and ``-bs`` when it samples in the
    graph."""
    asked = getattr(runtime, "asked", None) or ContextSettings()
    return ServerContext(replace(asked, n_ubatch=int(runtime.n_ubatch)),
                         getattr(runtime, "graph_figures", None) is not None)


def context_server_args(runtime) -> list[str]:
    """llama-server's flags that give it ``runtime``'s settings (``-ub``, ``-fa``, ``-ctk``, ``-ctv``, only
    those that are not its defaults; ``-bs``), so both compute alike."""
    return server_context(runtime).server_args()


def server_counted_accepted(receipt, is_eog: Callable[[int], bool]) -> int:
    """The proposal tokens of ``receipt`` llama-server counts as accepted (``draft_n_accepted``).

    The same tokens are committed either way; only the count differs: a proposal token the target
    predicted that is end-of-generation, with more proposal tokens after it, ends llama-server's
    accepting walk as the target's own token (llama.cpp 0c1e570 ``common/sampling.cpp``,
    ``common_sampler_sample_and_accept_n``), where our receipt counts it accepted (SPEC step 5)."""
    n = receipt.accepted_proposal_tokens
    ids = receipt.proposal_token_ids
    if 0 < n < len(ids) and is_eog(ids[n - 1]):
        return n - 1
    return n


def ours_accepted_per_position(receipts, is_eog: Callable[[int], bool] = lambda t: False) -> tuple[int, ...]:
    """Accepted proposal tokens per proposal position 0.. over ``receipts`` (``WindowReceipt``s),
    counted as llama-server counts them (``server_counted_accepted``): position i counts the windows
    whose first i+1 proposal tokens were accepted, as its ``spec_decode_num_accepted_tokens_per_pos``."""
    counts: list[int] = []
    for r in receipts:
        n = server_counted_accepted(r, is_eog)
        if len(counts) < n:
            counts.extend([0] * (n - len(counts)))
        for i in range(n):
            counts[i] += 1
    return tuple(counts)


def describe_runtime(runtime) -> dict:
    """Model facts of a ``LlamaRuntime`` for the receipts document's ``model`` block: the file, its
    vocabulary and weights, the context's size, batch and threads, where the layers went (and any offload
    or RPC devices), the file it was converted from, and ``llama_cpp_settings``."""
    rt = runtime
    return {
        "path": rt.model_path,
        "architecture": rt.architecture,
        "name": rt.info.name,
        "n_vocab": rt.n_vocab,
        "vocab_type": rt.vocab_type,
        "size_bytes": rt.info.size_bytes,
        "n_ctx": rt.n_ctx,
        "n_batch": rt.n_batch,
        "n_threads": rt.n_threads,
        "weights": rt.info.main_weight_type,
        "layers": rt.layers,
        "machine": machine_facts(),
        **({"offload": rt.offload.to_json()} if not rt.offload.default else {}),
        **({"devices": [d.to_json() for d in rt.rpc_devices]} if rt.rpc_devices else {}),
        **({"offload_note": rt.offload_note} if rt.offload_note else {}),
        **({"converted_from": str(rt.converted_from),
            "converted_from_weights": rt.converted_from_weights} if rt.converted_from else {}),
        "llama_cpp": llama_cpp_settings(rt),
    }
