"""Command-line flags for llama.cpp's context settings, with llama.cpp's names and llama-server's
defaults (``common/arg.cpp``, ``common/common.h`` of llama.cpp 0c1e570): ``-b``/``--batch-size``
(our ``--n-batch``), ``-ub``/``--ubatch-size``, ``-fa``/``--flash-attn``, ``-ctk``/``--cache-type-k``,
``-ctv``/``--cache-type-v``; shared by ``run``, ``compare`` and ``bench``
(``inspector.llama.context_settings``)."""

from __future__ import annotations

import argparse

from inspector.cli.ranges import COUNT_MAX, whole_number
from inspector.llama.context_settings import FLASH_ATTN, KV_CACHE_TYPES, OUR_N_BATCH, SERVER_N_BATCH, SERVER_N_UBATCH

N_BATCH = OUR_N_BATCH
"""Our logical batch (rows per decode) when not given (``OUR_N_BATCH``); llama-server's is 2048."""


def add_context_flags(p: argparse.ArgumentParser) -> None:
    """Add ``-b``, ``-ub``, ``-fa``, ``-ctk``, ``-ctv`` to ``p``."""
    types = ", ".join(KV_CACHE_TYPES)
    p.add_argument("-b", "--batch-size", "--n-batch", dest="n_batch", type=whole_number(1), default=N_BATCH,
                   metavar="N", help=f"logical batch: most rows per decode (llama.cpp -b; 1..{COUNT_MAX}); "
                                     "speculation needs >= 2 (proposals are capped at N - 1) "
                                     f"[{N_BATCH}; llama-server's: {SERVER_N_BATCH}]")
    p.add_argument("-ub", "--ubatch-size", dest="n_ubatch", type=whole_number(1), default=SERVER_N_UBATCH,
                   metavar="N", help=f"physical batch: rows per compute pass, at most -b (llama.cpp -ub; "
                                     f"1..{COUNT_MAX}) [{SERVER_N_UBATCH}]")
    p.add_argument("-fa", "--flash-attn", dest="flash_attn", choices=list(FLASH_ATTN), default="auto",
                   help="flash attention (llama.cpp -fa: on, off, or auto = where the backend has it) [auto]")
    p.add_argument("-ctk", "--cache-type-k", dest="type_k", choices=list(KV_CACHE_TYPES), default="f16",
                   metavar="TYPE", help=f"K cache data type (llama.cpp -ctk: {types}) [f16]")
    p.add_argument("-ctv", "--cache-type-v", dest="type_v", choices=list(KV_CACHE_TYPES), default="f16",
                   metavar="TYPE", help=f"V cache data type (llama.cpp -ctv: {types}; a quantized one needs "
                                        "-fa on or auto) [f16]")


def context_options(args) -> dict:
    """``LlamaRuntime`` keyword options from the flags (none of them for a command without the flags)."""
    keys = ("n_batch", "n_ubatch", "flash_attn", "type_k", "type_v")
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}
