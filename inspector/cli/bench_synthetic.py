"""``bench --synthetic``: speedup over plain decoding for mean acceptance lengths 1..8 and draft costs
0..0.5 c(1), measured with the synthetic source beside the cost model's prediction
(``inspector.bench.synthetic_table``). ``add_synthetic_flag`` and ``bench_synthetic_command`` are for
``bench``'s parser and dispatch; until they are wired there, ``python -m inspector.cli.bench_synthetic
[--max-tokens N] [--repeats R] [--threads T] [--json OUT]`` runs the same table on the bundled model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from inspector.bench.synthetic_table import format_synthetic_table, synthetic_table
from inspector.cli.common import fail, open_target_runtime
from inspector.engine.errors import EngineError
from inspector.engine.llama_settings import DEFAULT_N_CTX
from inspector.llama.devices import RpcUnavailable
from inspector.llama.model_file import ModelFileError, bundled_model_path
from inspector.llama.runtime import LlamaRuntime
from inspector.prompts import example_prompt

SYNTHETIC_EXAMPLE = "open-ended"
"""The bundled example whose prompt the table decodes (a story: nothing an n-gram would find)."""


def add_synthetic_flag(parser) -> None:
    """``bench --synthetic``."""
    parser.add_argument("--synthetic", action="store_true",
                        help="instead: would a better draft pay here? speedup over plain decoding of the synthetic "
                             "source for mean acceptance lengths 1..8 (tokens per window) and draft costs 0, 0.25, "
                             "0.5 c(1) per token, measured (median of --repeats, --max-tokens each) beside the cost "
                             f"model's prediction, on the {SYNTHETIC_EXAMPLE} example")


def bench_synthetic_command(args) -> int:
    """Run ``bench --synthetic`` and print its table (``--json OUT``: the figures)."""
    try:
        runtime = getattr(args, "runtime", None) or open_target_runtime(args, n_ctx=DEFAULT_N_CTX, n_seq_max=1,
                                                                        n_threads=args.threads or None)
    except (ModelFileError, EngineError, ValueError, RpcUnavailable) as exc:
        return fail(str(exc))
    try:
        result = synthetic_table(runtime, runtime.prompt_tokens(example_prompt(SYNTHETIC_EXAMPLE)),
                                 max_new_tokens=args.max_tokens, repeats=args.repeats,
                                 progress=lambda m: print(m, file=sys.stderr, flush=True))
    except EngineError as exc:
        return fail(str(exc))
    finally:
        runtime.close()
    print(format_synthetic_table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(f"json: {args.json}")
    return 0


def main(argv=None) -> int:
    """The table from the command line on the bundled model (or ``--model``), without ``bench``'s other flags."""
    p = argparse.ArgumentParser(prog="python -m inspector.cli.bench_synthetic", description=__doc__.splitlines()[0])
    p.add_argument("--model", "-m", type=Path, default=None, help="GGUF model (default: the bundled model)")
    p.add_argument("--max-tokens", "-n", type=int, default=64, help="tokens per run [64]")
    p.add_argument("--repeats", type=int, default=3, help="runs per cell, and cost-model rounds [3]")
    p.add_argument("--threads", "-t", type=int, default=None, help="CPU threads (default: llama.cpp's choice)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the figures as JSON")
    args = p.parse_args(argv)
    model = args.model or bundled_model_path()
    print(f"loading {model} ...", file=sys.stderr, flush=True)
    kw = {"n_threads": args.threads} if args.threads else {}
    args.runtime = LlamaRuntime(str(model), n_ctx=DEFAULT_N_CTX, n_batch=512, n_seq_max=1, **kw)
    return bench_synthetic_command(args)


if __name__ == "__main__":
    sys.exit(main())
