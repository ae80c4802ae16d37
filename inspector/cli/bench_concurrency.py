"""``bench --concurrency 1,2,4``: N concurrent clients against our ``serve -np N`` (batched, locked, and gated
with ``--spec-max-active``) and llama-server ``-np N -kvu``, plain and each ``--sources`` source
(``inspector.bench.concurrency_bench``)."""

from __future__ import annotations

import argparse

from inspector.bench.concurrency_bench import (DEFAULT_LEVELS, DEFAULT_N_PREDICT, DEFAULT_REPEATS, DEFAULT_SOURCES,
                                               MAX_LEVEL, concurrency_bench, parse_levels, source_configs)
from inspector.bench.concurrency_result import format_concurrency_bench
from inspector.bench.paired_bench import DEFAULT_PAIRS, MAX_PAIRS, format_paired_bench, paired_bench
from inspector.bench.server_http import ServerError
from inspector.bench.run import TASKS
from inspector.cli.bench_costs import print_result
from inspector.cli.common import RUNTIME_OPEN_ERRORS, progress_line, EXIT_USAGE, fail, open_target_runtime
from inspector.cli.ranges import whole_number
from inspector.cli.server_target import binary_to_start
from inspector.engine.errors import EngineError
from inspector.engine.llama_settings import DEFAULT_N_CTX


OTHER_DEFAULTS = {"repeats": 3, "max_tokens": 128}
"""``--repeats`` and ``--max-tokens`` of every other bench mode when not given."""


def levels_type(text: str) -> tuple[int, ...]:
    """argparse type of ``--concurrency``: ``parse_levels`` (one-line ``ArgumentTypeError``)."""
    try:
        return parse_levels(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_concurrency_flags(parser) -> None:
    """``bench --concurrency LEVELS``, ``--sources`` and ``--spec-max-active``."""
    parser.add_argument("--concurrency", type=levels_type, nargs="?", const=DEFAULT_LEVELS, default=None,
                        metavar="N1,N2,...",
                        help=f"instead: N clients at once (1..{MAX_LEVEL} per level) each sending the bundled "
                             "examples (or --tasks) as streamed greedy chat requests, against our serve -np N -kvu "
                             "(batched and locked) and llama-server -np N -kvu (--llama-server PATH, default: the "
                             "one built from our llama.cpp), never two servers at once, for plain decoding and each "
                             "--sources source: aggregate tok/s, request latency median and p95, ours/llama-server, "
                             "and the level where speculation stops paying; --repeats rounds of one request per client "
                             f"[{DEFAULT_REPEATS}], --max-tokens per "
                             f"request [{DEFAULT_N_PREDICT}] [{','.join(map(str, DEFAULT_LEVELS))}]")
    parser.add_argument("--sources", default=",".join(DEFAULT_SOURCES), metavar="NAME,...",
                        help="with --concurrency: the speculative sources beside plain decoding, from llama-server's "
                             f"n-gram types [{','.join(DEFAULT_SOURCES)}]")
    parser.add_argument("--paired", type=whole_number(1, MAX_PAIRS, "paired"), nargs="?", const=DEFAULT_PAIRS,
                        default=None, metavar="N",
                        help="instead: N single streamed greedy chat requests (the bundled examples, or --tasks), "
                             "each sent to our serve and to llama-server, both kept running, order ABBA: ours / "
                             "llama-server per pair (total time, per token, first token), median and middle half; "
                             "plain decoding and each --sources source; measures a 1%% difference where "
                             f"--concurrency 1's rounds cannot [{DEFAULT_PAIRS}]")
    parser.add_argument("--spec-max-active", type=whole_number(1, MAX_LEVEL, "spec_max_active"), default=None,
                        metavar="M", help="with --concurrency: also our batched serve with --spec-max-active M "
                                          "(drafts off while more than M slots generate)")


def fill_defaults(args) -> None:
    """``--repeats`` and ``--max-tokens`` not given: the concurrency bench's defaults with ``--concurrency``, the
    other modes' (``OTHER_DEFAULTS``) otherwise."""
    concurrency = getattr(args, "concurrency", None) is not None or getattr(args, "paired", None) is not None
    if args.repeats is None:
        args.repeats = DEFAULT_REPEATS if concurrency else OTHER_DEFAULTS["repeats"]
    if args.max_tokens is None:
        args.max_tokens = DEFAULT_N_PREDICT if concurrency else OTHER_DEFAULTS["max_tokens"]


def _work(args, command: str, why: str):
    """``(tasks, configs, llama-server binary)`` of a bench that starts both servers itself (``--tasks``,
    ``--sources``, ``--llama-server``), or the exit status after a one-line error (``command`` and ``why``
    name it, as ``binary_to_start`` says them)."""
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        return fail(f"unknown task {', '.join(unknown) or '(none)'}: expected {', '.join(TASKS)}", EXIT_USAGE)
    try:
        configs = source_configs([s.strip() for s in args.sources.split(",") if s.strip()])
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE)
    target, status = binary_to_start(args.llama_server, command, why)
    return status if target is None else (tasks, configs, target)


def bench_concurrency_command(args) -> int:
    """Run ``bench --concurrency`` and print its table (``--json OUT``: the figures); exit 2 for bad input
    (said before the model loads), 1 when a server failed."""
    work = _work(args, "bench --concurrency", "run (-np N per level)")
    if isinstance(work, int):
        return work
    tasks, configs, target = work
    levels = args.concurrency
    try:
        runtime = open_target_runtime(args, n_ctx=DEFAULT_N_CTX, n_seq_max=max(levels), n_threads=args.n_threads or None)
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    progress = progress_line
    progress(f"llama-server: {target}, {runtime.n_threads} threads on both sides; levels "
             f"{','.join(map(str, levels))}; {args.repeats} rounds, {args.max_tokens} tokens per request")
    try:
        result = concurrency_bench(runtime, target, levels=levels, configs=configs, examples=tasks,
                                   n_predict=args.max_tokens, repeats=args.repeats,
                                   spec_max_active=args.spec_max_active, progress=progress)
    except (EngineError, ServerError) as exc:
        return fail(str(exc))
    finally:
        threads = runtime.n_threads
        runtime.close()
    doc = {"llama_server": target, "threads": threads, "n_predict": args.max_tokens, "repeats": args.repeats,
           "examples": tasks, "spec_max_active": args.spec_max_active, **result.to_json()}
    print_result(format_concurrency_bench(result, examples=tasks, n_predict=args.max_tokens, repeats=args.repeats,
                                          threads=threads), doc, args.json)
    return 1 if any(c.error for c in result.cells.values()) else 0


def bench_paired_command(args) -> int:
    """Run ``bench --paired N`` and print its table (``--json OUT``: every pair's ratios); exit 2 for bad input
    (said before the model loads), 1 when a server failed."""
    work = _work(args, "bench --paired", "configuration")
    if isinstance(work, int):
        return work
    tasks, configs, target = work
    try:
        runtime = open_target_runtime(args, n_ctx=DEFAULT_N_CTX, n_seq_max=1, n_threads=args.n_threads or None)
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    progress = progress_line
    try:
        rows = paired_bench(runtime, target, configs, pairs=args.paired, examples=tasks, n_predict=args.max_tokens,
                            progress=progress)
    except (EngineError, ServerError) as exc:
        return fail(str(exc))
    finally:
        threads = runtime.n_threads
        runtime.close()
    doc = {"llama_server": target, "threads": threads, "n_predict": args.max_tokens, "pairs": args.paired,
           "examples": tasks, "rows": [r.to_json() for r in rows]}
    print_result(format_paired_bench(rows, pairs=args.paired, n_predict=args.max_tokens, threads=threads), doc,
                 args.json)
    return 0
