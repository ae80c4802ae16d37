"""``spec-inspector bench``: the command that measures speed, its arguments (``add_bench_commands``, which adds
``compare``'s too: ``inspector.cli.compare``) and its work (``cmd_bench``)."""

from __future__ import annotations

import sys
from pathlib import Path

from inspector.bench.compare import parse_config
from inspector.bench.compare_result import CompareConfig
from inspector.bench.rpc import bench_rpc, format_rpc
from inspector.bench.run import TASKS, format_bench, run_bench
from inspector.bench.server_bench import SERVER_BENCH_CONFIGS, format_server_bench, server_bench, weight_form_speedup
from inspector.bench.server_compare import check_llama_server, is_url
from inspector.bench.server_http import ServerError
from inspector.bench.serve_bench import SERVE_BENCH_CONFIGS, format_serve_bench, serve_bench
from inspector.bench.turns import combine_turns_benches, format_combined, format_turns_bench, run_turns_bench
from inspector.cli.common import EXIT_USAGE, RUNTIME_OPEN_ERRORS, fail, open_target_runtime, progress_line, weight_type
from inspector.cli.bench_best import add_best_flag, bench_best_command
from inspector.cli.bench_concurrency import (add_concurrency_flags, bench_concurrency_command, bench_paired_command,
                                            fill_defaults)
from inspector.cli.bench_costs import (add_context_lengths_flag, bench_context_lengths_command, bench_on_target,
                                       bench_weights_command, print_result)
from inspector.cli.bench_synthetic import add_synthetic_flag, bench_synthetic_command
from inspector.cli.bench_figures import add_figures_flag, bench_figures_command
from inspector.cli.bench_trees import add_trees_flag, bench_trees_command
from inspector.cli.compare import add_compare_command
from inspector.cli.context import add_context_flags, add_threads_flag
from inspector.cli.devices import add_offload_flags
from inspector.cli.ranges import whole_number
from inspector.cli.server_target import our_llama_server
from inspector.engine import GenerationSettings, RuntimeScheduler
from inspector.engine.errors import EngineError
from inspector.engine.llama_settings import DEFAULT_N_CTX
from inspector.llama.cost_cache import placement, store_cost_model
from inspector.llama.cost_model import measure_cost_model

from inspector.llama.model_file import ModelFileError, bundled_model_path
from inspector.llama.quantize import make_draft
from inspector.prompts import TURNS_EXAMPLES, turns_path
from inspector.session.conversation import MAX_TURNS, read_turns


def add_bench_commands(sub) -> None:
    """The ``bench`` and ``compare`` subcommands' arguments (on ``sub``, the CLI's subparsers; compare's from
    ``inspector.cli.compare.add_compare_command``)."""
    bn = sub.add_parser("bench", help="plain vs speculative decoding on fixed tasks, with the cost model",
                        description="Measure plain decoding, our n-gram speculation and llama-cpp-python's "
                                    "LlamaPromptLookupDecoding on the same prompts in one process.")
    bn.add_argument("--model", "-m", type=Path, help="GGUF model (default: the bundled model)")
    bn.add_argument("--target-weights", type=weight_type, metavar="TYPE",
                    help="run the target in this weight type: the model converted with llama.cpp's quantizer (cached; "
                          "the file itself when it already is), e.g. Q8_0; bench --weights compares layouts")
    add_threads_flag(bn, "measure with nothing else running")
    bn.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, from {', '.join(TASKS)}")
    bn.add_argument("--max-tokens", "-n", "--predict", "--n-predict", type=whole_number(1, DEFAULT_N_CTX), default=None,
                    help=f"tokens per run (1..{DEFAULT_N_CTX}, the context) [128; 64 with --concurrency]")
    bn.add_argument("--k-max", type=whole_number(1, 256), default=16,
                    help="largest verify batch in the cost model (1..256) [16]")
    bn.add_argument("--repeats", type=whole_number(1, 1000), default=None,
                    help="repeats per cost-model point (1..1000) [3; 2 rounds with --concurrency]")
    bn.add_argument("--no-llama-cpp-python", action="store_true", help="skip LlamaPromptLookupDecoding")
    bn.add_argument("--weights", metavar="T1,T2,...",
                    help="compare weight layouts instead: convert the model to each type (llama.cpp quantize, "
                         "cached), then per layout c(k), its ceiling, plain vs n-gram on the copy task and whether "
                         "greedy output stays the original's (e.g. Q4_1,Q8_0,Q4_0)")
    add_context_lengths_flag(bn)
    add_synthetic_flag(bn)
    add_trees_flag(bn)
    add_figures_flag(bn)
    add_best_flag(bn)
    add_concurrency_flags(bn)
    bn.add_argument("--json", type=Path, metavar="OUT", help="also write the figures as JSON")
    bn.add_argument("--turns", metavar="FILE|NAME", help="instead: every source over a conversation (e.g. agent-edits; "
                    f"1..{MAX_TURNS} turns): acceptance, mean length, windows, speedup, share of the ceiling, "
                    "proposal time, memory")
    bn.add_argument("--llama-server", nargs="?", const="", default=None, metavar="PATH",
                    help="instead: ours against llama-server (a fresh one per run; default: the one built from our "
                         "llama.cpp) for plain and every llama.cpp source, with and without probabilities, and the "
                         "window against headless; --tasks, --repeats and --config choose the work; the repeats run in rounds "
                         "(every row once per round), each round's three runs (ours, llama-server, ours without "
                         "probabilities) in a rotated order, and medians are compared")
    bn.add_argument("--config", action="append", default=[], metavar="SOURCE[:key=value,...]",
                    help="with --llama-server: a configuration as compare takes it (repeatable; default: plain, "
                         "every llama.cpp n-gram source at draft max 16, and a Q4_0 draft of the model)")
    bn.add_argument("--serve", action="store_true",
                    help="instead: our serve against llama-server (--llama-server PATH, default: the one built from "
                         "our llama.cpp) over HTTP, the bundled examples as streamed greedy chat requests to each in "
                         "turn: decode tokens/s and time to the first token; --tasks, --repeats, --config [none, "
                         "ngram-simple]")
    bn.add_argument("--gui", action="store_true",
                    help="instead: the window against headless in one process (the first of --tasks, run from the "
                         "window offscreen and headless, alternating, --repeats times each): decode tokens/s and "
                         "the GUI thread's CPU share")
    bn.add_argument("--show", action="store_true", help="with --gui: show the window (default: offscreen)")
    add_offload_flags(bn)
    add_context_flags(bn)
    add_compare_command(sub)


def cmd_bench(args) -> int:
    if args.figures:  # no model, its own --repeats default
        return bench_figures_command(args)
    fill_defaults(args)
    if args.paired is not None:
        if args.config or args.concurrency is not None:
            return fail("bench --paired takes --sources (llama-server's n-gram types), not --config or --concurrency",
                        EXIT_USAGE)
        return bench_paired_command(args)
    if args.concurrency is not None:
        if args.config:
            return fail("bench --concurrency takes --sources (llama-server's n-gram types), not --config", EXIT_USAGE)
        return bench_concurrency_command(args)
    if args.config and args.llama_server is None and not args.serve and not args.context_lengths:  # ignored
        return fail("--config chooses the work of bench --llama-server, --serve or --context-lengths: add one, or "
                    "use compare --config", EXIT_USAGE)
    if args.weights:
        return bench_weights_command(args)
    if args.synthetic:
        return bench_synthetic_command(args)
    if args.trees:
        return bench_trees_command(args)
    if args.best:
        return bench_best_command(args)
    if args.context_lengths:
        return bench_context_lengths_command(args)
    if args.turns:
        return _bench_turns(args)
    if args.rpc:
        return _bench_rpc(args)
    if args.serve:
        return _bench_serve(args)
    if args.llama_server is not None:
        return _bench_llama_server(args)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        return fail(f"unknown task {', '.join(unknown) or '(none)'}: expected {', '.join(TASKS)}", EXIT_USAGE)
    if args.gui:
        return _bench_gui(args, tasks[0])
    def work(runtime):
        result = run_bench(runtime, tasks, args.max_tokens, args.k_max, args.repeats, not args.no_llama_cpp_python,
                           lambda m: print(m, file=sys.stderr, flush=True))
        return format_bench(result), result

    return bench_on_target(args, work)


def _window_speed():
    """``inspector.cli.gui_speed``, imported when a bench asks for the window: PySide6 and the window load
    only then, so every other command starts without them."""
    from inspector.cli import gui_speed  # PySide6 only when the window is measured

    return gui_speed


def _bench_gui(args, task: str) -> int:
    """``bench --gui``: ``task`` from the window and headless, alternating (``inspector.cli.gui_speed``)."""
    speed = _window_speed()
    try:
        result = speed.measure(str(args.model) if args.model else None, task, max_tokens=args.max_tokens,
                               repeats=args.repeats, threads=args.n_threads or None, show=args.show)
    except (ModelFileError, EngineError, ValueError, RuntimeError) as exc:
        return fail(str(exc))
    print_result(speed.format_gui_speed(result), result, args.json)
    return 0


def _server_bench_inputs(args):
    """``bench --llama-server`` and ``bench --serve``: ``(tasks, llama-server binary, --config texts)`` checked
    before the model loads (the binary built now when none is given and none is cached), or the exit code
    after saying what is wrong."""
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        return fail(f"unknown task {', '.join(unknown) or '(none)'}: expected {', '.join(TASKS)}", EXIT_USAGE)
    target = args.llama_server or ""  # bench --serve alone: the built one
    if is_url(target):
        return fail("bench --llama-server starts its own llama-server for every run (its flags per configuration, "
                     "a cold start each time): give a llama-server binary, or nothing for the one built from our "
                     "llama.cpp; compare --llama-server URL uses a running one", EXIT_USAGE)
    try:
        if target:
            check_llama_server(target)
        configs = list(args.config)
        for c in configs:
            parse_config(c)  # a bad configuration is said before anything runs
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE)
    target = target or our_llama_server()
    return 1 if target is None else (tasks, target, configs)


def _bench_serve(args) -> int:
    """``bench --serve``: our serve against llama-server over HTTP, per configuration
    (``inspector.bench.serve_bench``)."""
    checked = _server_bench_inputs(args)
    if isinstance(checked, int):
        return checked
    tasks, target, configs = checked
    configs = configs or list(SERVE_BENCH_CONFIGS)
    try:
        runtime = open_target_runtime(args, n_ctx=DEFAULT_N_CTX, n_seq_max=1, n_threads=args.n_threads or None)
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    progress = progress_line
    print(f"llama-server: {target}, {runtime.n_threads} threads on both sides; {args.repeats} repeats, "
          f"{args.max_tokens} tokens", file=sys.stderr, flush=True)
    try:
        rows = serve_bench(runtime, target, examples=tasks, configs=configs, max_tokens=args.max_tokens,
                           repeats=args.repeats, progress=progress)
    except (EngineError, ServerError) as exc:
        return fail(str(exc))
    finally:
        threads = runtime.n_threads
        runtime.close()
    result = {"llama_server": target, "threads": threads, "max_tokens": args.max_tokens, "repeats": args.repeats,
              "examples": tasks, "rows": [r.to_json() for r in rows]}
    print_result(format_serve_bench(rows, examples=tasks, max_tokens=args.max_tokens, repeats=args.repeats,
                                     threads=threads), result, args.json)
    return 1 if any(r.error for r in rows) else 0


def _bench_llama_server(args) -> int:
    """``bench --llama-server [PATH]``: ours against llama-server per example and configuration, with and
    without probabilities (``inspector.bench.server_bench``), then the window against headless
    (``inspector.cli.gui_speed``), in one report."""
    checked = _server_bench_inputs(args)
    if isinstance(checked, int):
        return checked
    tasks, target, configs = checked
    try:
        runtime = open_target_runtime(args, n_ctx=DEFAULT_N_CTX, n_seq_max=1, n_threads=args.n_threads or None)
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    original = str(getattr(runtime, "converted_from", None) or runtime.model_path)  # not a converted form's
    if not configs:
        try:
            draft = make_draft(original, "Q4_0")
        except (ModelFileError, ValueError) as exc:
            runtime.close()
            return fail(str(exc))
        configs = [*SERVER_BENCH_CONFIGS, CompareConfig("draft (Q4_0 of the model) draft_max 8", "draft", 8,
                                                        {"draft_model": str(draft)})]
    progress = progress_line
    print(f"llama-server: {target}, {runtime.n_threads} threads on both sides; {args.repeats} repeats, "
          f"{args.max_tokens} tokens", file=sys.stderr, flush=True)
    try:
        rows = server_bench(runtime, target, examples=tasks, configs=configs, max_tokens=args.max_tokens,
                            repeats=args.repeats, progress=progress)
    except EngineError as exc:
        return fail(str(exc))
    finally:
        model, threads = runtime.model_path, runtime.n_threads
        runtime.close()
    # The rows are kept whatever happens below: a failure there is said in the report, not instead of it.
    try:
        speedup = weight_form_speedup(original, max_tokens=args.max_tokens, repeats=args.repeats, threads=threads,
                                      progress=progress)
    except Exception as exc:
        speedup = {"error": f"{type(exc).__name__}: {exc}"}
    progress("the window against headless (every view live) ...")
    try:
        gui = _window_speed().measure(str(model), max_tokens=args.max_tokens, repeats=max(3, args.repeats), threads=threads)
    except Exception as exc:
        gui = {"error": f"{type(exc).__name__}: {exc}"}
    result = {"llama_server": target, "threads": threads, "max_tokens": args.max_tokens, "repeats": args.repeats,
              "rows": [r.to_json() for r in rows], "weight_form_speedup": speedup, "window_vs_headless": gui}
    print_result(format_server_bench(rows, gui, speedup), result, args.json)
    return 1 if any(r.error for r in rows) or "error" in speedup or "error" in gui else 0


def _bench_turns(args) -> int:
    """``bench --turns FILE|NAME[,NAME...]``: every source over each conversation (``inspector.bench.turns``);
    several bundled names (e.g. ``agent-edits,file-edits``) give one table each on one cost model, then
    every source over all of them."""
    names = [n.strip() for n in args.turns.split(",")]
    if len(names) < 2 or not all(n in TURNS_EXAMPLES for n in names):
        names = [args.turns]  # one conversation: a bundled name or a file (whose name may hold a comma)
    try:
        conversations = {n: read_turns(turns_path(n)) for n in names}
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE)
    try:
        runtime = open_target_runtime(args, n_ctx=DEFAULT_N_CTX, n_seq_max=1, n_threads=args.n_threads or None)
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    scheduler = RuntimeScheduler(runtime)
    results = {}
    try:
        first = next(iter(conversations.values()))
        print(f"measuring the cost model (k = 1..{args.k_max}, {args.repeats} repeats) ...", file=sys.stderr, flush=True)
        cm = measure_cost_model(scheduler, runtime.prompt_tokens(first[0])[:64], k_max=args.k_max, repeats=args.repeats)
        # The sources that decide on c(k) (suffix's adaptive length) read the stored one: this run's, unless
        # disturbed (as bench stores it).
        disturbed = cm.disturbed()
        if disturbed:
            print(f"warning: the cost model looks disturbed ({disturbed}); it is not stored: the sources use the "
                  "one stored before, if any", file=sys.stderr, flush=True)
        else:
            store_cost_model(runtime.model_path, runtime.n_threads, cm, placement(runtime))
        for name, turns in conversations.items():
            progress = lambda i, n, label, c=name: print(f"[{c} {i + 1}/{n}] {label} ...", file=sys.stderr,  # noqa: E731
                                                        flush=True)
            results[name] = run_turns_bench(scheduler, turns, GenerationSettings(max_new_tokens=args.max_tokens), cm,
                                            progress=progress)
    except EngineError as exc:
        return fail(str(exc))
    finally:
        runtime.close()
    failed = any(r["error"] for result in results.values() for r in result["rows"])  # said in its row: exit 1
    if len(results) == 1:
        (result,) = results.values()
        print_result(format_turns_bench(result), result, args.json)
        return 1 if failed else 0
    combined = combine_turns_benches(results)
    text = "\n\n".join([f"conversation {n}:\n{format_turns_bench(r)}" for n, r in results.items()]
                       + [format_combined(combined)])
    print_result(text, {"conversations": results, "all": combined}, args.json)
    return 1 if failed else 0


def _bench_rpc(args) -> int:
    """``bench --rpc HOST:PORT``: c(k) and speedups with the model local and over the RPC servers
    (``inspector.bench.rpc``), in one run."""
    progress = progress_line
    try:
        result = bench_rpc(args.model or bundled_model_path(), args.rpc, max_tokens=args.max_tokens,
                           k_max=args.k_max, repeats=args.repeats, threads=args.n_threads or None,
                           n_gpu_layers=args.n_gpu_layers, progress=progress)
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    print_result(format_rpc(result), result, args.json)
    return 0
