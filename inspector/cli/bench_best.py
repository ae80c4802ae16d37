"""``bench --llama-server --best``: per workload our best source against llama-server's best type, and
against the copy oracle (``inspector.bench.best``)."""

from __future__ import annotations


from inspector.bench.best import best_bench, format_best
from inspector.bench.run import TASKS
from inspector.cli.bench_costs import print_result
from inspector.cli.common import RUNTIME_OPEN_ERRORS, progress_line, EXIT_USAGE, fail, open_target_runtime
from inspector.cli.server_target import binary_to_start
from inspector.engine import RuntimeScheduler
from inspector.engine.errors import EngineError
from inspector.engine.llama_settings import DEFAULT_N_CTX
from inspector.llama.cost_cache import load_cost_model, placement, store_cost_model
from inspector.llama.cost_model import measure_cost_model


from inspector.prompts import TURNS_EXAMPLES, example_prompt

BEST_WORKLOADS = (*TASKS, *TURNS_EXAMPLES)
"""What ``--best`` runs unless ``--tasks`` says otherwise: every bundled example and both conversations."""


def add_best_flag(parser) -> None:
    """``bench --best``."""
    parser.add_argument("--best", action="store_true",
                        help="with --llama-server: per workload (every bundled example and both conversations, "
                             "or --tasks) each of our sources and each of llama-server's speculative types at "
                             "the tuner's best settings for it (replayed over our plain run), measured in "
                             "--repeats rounds (which program goes first alternates): both winners x their own "
                             "plain, ours / llama-server, and the copy oracle's bound")


def best_workloads(tasks_text: str) -> list[str]:
    """The workloads of ``--tasks`` (its default: ``BEST_WORKLOADS``). Raises ``ValueError`` naming an
    unknown one."""
    names = [t.strip() for t in tasks_text.split(",") if t.strip()]
    if names == list(TASKS):
        return list(BEST_WORKLOADS)
    unknown = [t for t in names if t not in BEST_WORKLOADS]
    if unknown or not names:
        raise ValueError(f"unknown task {', '.join(unknown) or '(none)'}: expected {', '.join(BEST_WORKLOADS)}")
    return names


def bench_best_command(args) -> int:
    """Run ``bench --llama-server [PATH] --best`` and print its tables (``--json OUT``: the figures)."""
    try:
        workloads = best_workloads(args.tasks)
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE)
    target, status = binary_to_start(args.llama_server, "bench --best", "configuration")
    if target is None:
        return status
    try:
        runtime = open_target_runtime(args, n_ctx=DEFAULT_N_CTX, n_seq_max=1, n_threads=args.n_threads or None)
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    progress = progress_line
    try:
        costs = load_cost_model(runtime.model_path, runtime.n_threads, placement(runtime))
        if costs is None:
            progress("no cost model stored for this model and thread count: measuring it (k = 1..16) ...")
            costs = measure_cost_model(RuntimeScheduler(runtime), runtime.prompt_tokens(example_prompt(TASKS[0]))[:64],
                                       k_max=16, repeats=3)
            disturbed = costs.disturbed()
            if disturbed:  # used for this run's tuning and oracle, not kept for later runs (as bench --turns)
                progress(f"warning: the cost model looks disturbed ({disturbed}); it is not stored")
            else:
                store_cost_model(runtime.model_path, runtime.n_threads, costs, placement(runtime))
        progress(f"llama-server: {target}, {runtime.n_threads} threads on both sides; {args.repeats} rounds, "
                 f"{args.max_tokens} tokens per request; workloads: {', '.join(workloads)}")
        rows = best_bench(runtime, target, costs, workloads=workloads, max_tokens=args.max_tokens,
                          repeats=args.repeats, progress=progress)
    except EngineError as exc:
        return fail(str(exc))
    finally:
        threads = runtime.n_threads
        runtime.close()
    result = {"llama_server": target, "threads": threads, "max_tokens": args.max_tokens, "repeats": args.repeats,
              "cost_model_ms": list(costs.row_ms), "workloads": [w.to_json() for w in rows]}
    print_result(format_best(rows), result, args.json)
    errors = [c for w in rows for c in (*w.ours, *w.server) if c.error]
    return 1 if errors else 0
