"""``bench``'s cost-model modes: ``--weights`` (c(k) per weight layout, ``inspector.bench.weights``) and
``--context-lengths`` (c(k) per context length, ``inspector.bench.context_costs``), and how every bench
prints its table and writes ``--json``."""

from __future__ import annotations

import argparse
import json
import sys

from inspector.bench.compare import parse_config
from inspector.bench.compare_result import CompareConfig
from inspector.bench.context_costs import (cost_by_context, format_cost_by_context, format_sources_by_context,
                                           sources_by_context)
from inspector.bench.run import TASKS
from inspector.bench.weights import bench_weights, format_weights
from inspector.cli.common import RUNTIME_OPEN_ERRORS, progress_line, EXIT_USAGE, fail, open_target_runtime, weight_type
from inspector.engine import GenerationSettings, RuntimeScheduler
from inspector.engine.llama_settings import DEFAULT_N_CTX
from inspector.engine.errors import EngineError

from inspector.llama.cost_cache import placement, store_context_costs
from inspector.llama.cost_model import measurement_positions
from inspector.llama.model_file import ModelFileError, bundled_model_path
from inspector.prompts import example_prompts

CONTEXT_SOURCES = (CompareConfig("ngram", "ngram", 8), CompareConfig("suffix", "suffix", 8))
"""What ``--context-lengths`` runs beside plain decoding when no ``--config`` is given."""
CONTEXT_LENGTHS_MAX = 131072
"""Most positions ``--context-lengths`` takes (a model's context is its own limit, said when loading)."""


def context_lengths(text: str) -> tuple[int, ...]:
    """``--context-lengths N1,N2,...``: positions (1..``CONTEXT_LENGTHS_MAX``), in the order given."""
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers such as 512,2048,6000, observed {text!r}") from None
    if not out or not all(1 <= n <= CONTEXT_LENGTHS_MAX for n in out):
        raise argparse.ArgumentTypeError(f"expected lengths 1..{CONTEXT_LENGTHS_MAX} such as 512,2048,6000, "
                                         f"observed {text!r}")
    return out


def add_context_lengths_flag(parser) -> None:
    """``bench --context-lengths N1,N2,...``."""
    parser.add_argument("--context-lengths", type=context_lengths, metavar="N1,N2,...",
                        help="instead: c(k) for k = 1..--k-max after prompts of these many tokens (the first task's "
                             "prompt repeated), side by side: attention grows with the context, so a window needs "
                             "more accepted tokens to pay at a long one; then the task after other text that fills "
                             "the KV cache to each length, plain and each --config (default ngram and suffix, draft "
                             "max 8), and where each stops paying and why (e.g. 512,2048,6000; the context is made "
                             "as large as the longest needs)")


def print_result(text: str, result: dict, json_path) -> None:
    """Print a bench table, and write its figures as JSON when ``--json OUT`` was given."""
    print(text)
    if json_path:
        json_path.write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(f"json: {json_path}")


def bench_on_target(args, work, n_ctx: int = DEFAULT_N_CTX) -> int:
    """Open the target runtime as every bench does (``--model``, its weights and offload, ``--threads``; a
    context of ``n_ctx`` positions), run ``work(runtime) -> (table text, figures)``, close the runtime and
    print the table (``--json OUT``: the figures). An engine error or a refused value ends it in one line
    (exit 1); returns the exit status."""
    try:
        runtime = open_target_runtime(args, n_ctx=n_ctx, n_seq_max=1, n_threads=args.n_threads or None)
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    try:
        text, result = work(runtime)
    except (EngineError, ValueError) as exc:
        return fail(str(exc))
    finally:
        runtime.close()
    print_result(text, result, args.json)
    return 0


def bench_weights_command(args) -> int:
    """``bench --weights T1,T2,...``: every weight layout of the model in one run (``inspector.bench.weights``)."""
    try:
        types = [weight_type(t) for t in args.weights.split(",") if t.strip()]
        if not types:
            raise ValueError("no weight type given, e.g. --weights Q4_1,Q8_0,Q4_0")
    except (ValueError, argparse.ArgumentTypeError) as exc:
        return fail(f"--weights: {exc}", EXIT_USAGE)
    progress = progress_line
    try:
        result = bench_weights(args.model or bundled_model_path(), types, max_tokens=args.max_tokens,
                               k_max=args.k_max, repeats=args.repeats, threads=args.n_threads or None,
                               progress=progress)
    except (ModelFileError, EngineError, ValueError) as exc:
        return fail(str(exc))
    print_result(format_weights(result), result, args.json)
    return 0


def bench_context_lengths_command(args) -> int:
    """``bench --context-lengths N1,N2,...``: c(k) at each context length in one run
    (``inspector.bench.context_costs``), on the first of ``--tasks``'s prompts repeated to each length."""
    task = next((t.strip() for t in args.tasks.split(",") if t.strip()), "")
    if task not in TASKS:
        return fail(f"unknown task {task or '(none)'}: expected {', '.join(TASKS)}", EXIT_USAGE)
    lengths = args.context_lengths
    try:
        configs = [parse_config(c) for c in args.config] or list(CONTEXT_SOURCES)  # said before the model loads
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE)

    def work(runtime):
        tokens = runtime.prompt_tokens(example_prompts()[task])
        say = lambda n: print(f"measuring c(k), k = 1..{args.k_max}, after {n} tokens ...",  # noqa: E731
                              file=sys.stderr, flush=True)
        scheduler = RuntimeScheduler(runtime)
        rows = cost_by_context(scheduler, tokens, lengths, k_max=args.k_max, repeats=args.repeats, progress=say)
        # runs read them: a long prompt's draft max and adaptive lengths come from c(k) at its own length
        store_context_costs(runtime.model_path, runtime.n_threads, rows, placement(runtime))
        filler = runtime.prompt_tokens("\n\n".join(t for name, t in example_prompts().items()
                                                if name != task and name in TASKS), True)  # the short ones
        runs = sources_by_context(scheduler, filler, tokens, lengths, configs,
                                  GenerationSettings(max_new_tokens=args.max_tokens),
                                  progress=lambda n: print(f"running plain decoding and {len(configs)} source(s) "
                                                           f"after {n} tokens ...", file=sys.stderr, flush=True))
        result = {"task": task, "context_lengths": [{"context": n, "row_ms": list(cm.row_ms), "ceiling": cm.ceiling,
                                                     "best_rows": cm.best_rows} for n, cm in rows],
                  "sources": [r.__dict__ for r in runs]}
        return format_cost_by_context(rows) + "\n\n" + format_sources_by_context(runs, dict(rows)), result

    return bench_on_target(args, work, n_ctx=max(lengths) + max(measurement_positions(args.k_max), args.max_tokens + 1))
