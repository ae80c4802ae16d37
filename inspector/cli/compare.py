"""``spec-inspector compare``: one prompt with several configurations side by side on one loaded model, its
arguments (``add_compare_command``) and its work (``cmd_compare``), with llama-server's rows beside ours when
``--llama-server`` asks (``inspector.bench.server_compare``)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from inspector.bench.compare import default_configs, parse_config, run_compare
from inspector.bench.compare_result import format_compare, write_compare_csv, write_compare_json
from inspector.bench.server_client import SERVER_LIMITS_HELP
from inspector.bench.server_compare import check_llama_server, compare_with_llama_server, format_server_rows, is_url
from inspector.bench.server_http import REQUEST_DEADLINE_S, ServerError
from inspector.cli.audit import compare_verdicts
from inspector.cli.common import (EXIT_USAGE, RUNTIME_OPEN_ERRORS, UserError, add_backend_sampling_flag,
                                  backend_sampling_refusal, fail, open_target_runtime, read_text,
                                  start_backend_sampling, strip_final_newline, weight_type)
from inspector.cli.context import add_context_flags, add_threads_flag
from inspector.cli.devices import add_offload_flags
from inspector.cli.ranges import setting, whole_number
from inspector.cli.sampling import add_sampling_flags, sampling_from_args
from inspector.cli.server_target import our_llama_server
from inspector.cli.turns import add_turns_argument
from inspector.engine import GenerationSettings, RuntimeScheduler
from inspector.engine.errors import EngineError
from inspector.engine.llama_settings import DEFAULT_N_CTX
from inspector.engine.settings import DEFAULT_MAX_NEW_TOKENS
from inspector.llama.cost_cache import load_cost_model, placement, store_cost_model
from inspector.llama.cost_model import measure_cost_model, verify_cost_diagnosis
from inspector.llama.server_parity import server_context
from inspector.prompts import DEFAULT_EXAMPLE, example_path, turns_path
from inspector.session.conversation import read_turns


def add_compare_command(sub) -> None:
    """The ``compare`` subcommand's arguments (on ``sub``, the CLI's subparsers; ``add_bench_commands`` adds it
    after ``bench``)."""
    cp = sub.add_parser("compare", help="run one prompt with several configurations, side by side",
                        description="Run one prompt with several configurations (source, draft max, source "
                                    "options) one after the other on one loaded model and print a table; "
                                    "--json/--csv export it.")
    cp.add_argument("--prompt", "-p", help="the prompt text (default: the copy-with-corrections example)")
    cp.add_argument("--prompt-file", "-f", "--file", type=Path,
                    help="read the prompt from this file (UTF-8; llama.cpp -f)")
    add_turns_argument(cp, "compare")
    cp.add_argument("--model", "-m", type=Path, help="GGUF model (default: the bundled model)")
    cp.add_argument("-sys", "--system-prompt", default="", metavar="TEXT",
                    help="the chat template's system message before the prompt (llama.cpp's -sys)")
    cp.add_argument("--target-weights", type=weight_type, metavar="TYPE",
                    help="run the target in this weight type: the model converted with llama.cpp's quantizer (cached; "
                          "the file itself when it already is), e.g. Q8_0; bench --weights compares layouts")
    cp.add_argument("--config", action="append", default=[], metavar="SOURCE[:key=value,...]",
                    help="a configuration, e.g. none, ngram:draft_max=4, ngram:draft_max=16,n_min=1, "
                         "draft:draft_model=D.gguf (repeatable; default: plain and ngram with draft_max 4, 8, 16)")
    cp.add_argument("--max-tokens", "-n", "--predict", "--n-predict", type=setting("max_new_tokens", int), default=DEFAULT_MAX_NEW_TOKENS,
                    help=f"tokens per run [{DEFAULT_MAX_NEW_TOKENS}]")
    add_threads_flag(cp, "on a busy machine fewer is faster")
    cp.add_argument("--repeats", type=whole_number(1, 100), default=3,
                    help="runs per configuration, in rounds (every configuration once per round, plain first, so a "
                         "slow phase of the machine reaches them all): tok/s and speedups are medians, the other "
                         "columns the first round's (1..100) [3]")
    cp.add_argument("--cost-model", action="store_true",
                    help="measure the cost model first and add each run's expected speedup")
    add_backend_sampling_flag(cp)
    cp.add_argument("--json", type=Path, metavar="OUT", help="write the comparison as JSON")
    cp.add_argument("--csv", type=Path, metavar="OUT", help="write the comparison as CSV")
    cp.add_argument("--llama-server", nargs="?", const="", default=None, metavar="PATH|URL",
                    help="run each configuration through llama-server too (same prompt tokens, greedy, its flags) "
                         "and show its tokens/s, drafted and accepted beside ours: a llama-server binary (started "
                         "on 127.0.0.1 per configuration), a running server's URL (used as it is), or nothing: "
                         "the one built from our llama.cpp (built once on first use, 7-15 minutes)")
    cp.add_argument("--llama-server-timeout", type=whole_number(1, 86400, name="seconds"),
                    default=int(REQUEST_DEADLINE_S), metavar="S", help=SERVER_LIMITS_HELP)
    add_offload_flags(cp)
    add_context_flags(cp)
    add_sampling_flags(cp, "sampling of every configuration (default greedy)")



def cmd_compare(args) -> int:
    """``spec-inspector compare``: the prompt (or a conversation, ``--turns``) with each configuration in turn on
    one loaded model, the table printed, exported with ``--json`` / ``--csv``, and llama-server's rows beside ours
    with ``--llama-server``. Returns the exit status: 2 for a usage error, 1 when a run, the comparison or an
    export failed, else 0."""
    try:
        # parse_config checks each source name (UnknownSource) and its options before the model loads.
        configs = [parse_config(c) for c in args.config]  # none: the defaults, after the cost model
        if args.prompt is not None and args.prompt_file is not None:
            raise UserError("give --prompt or --prompt-file, not both")
        turns = None
        if args.turns is not None:
            if args.prompt is not None or args.prompt_file is not None:
                raise UserError("give --turns or a prompt (--prompt, --prompt-file), not both")
            if args.llama_server is not None:
                raise UserError("--llama-server compares one prompt, not a conversation: leave out --turns "
                                 "(or --llama-server)")
            turns = read_turns(turns_path(args.turns))
            prompt = turns[0]
        elif args.prompt is not None:
            prompt = args.prompt
        else:
            prompt = strip_final_newline(read_text(
                args.prompt_file or example_path(DEFAULT_EXAMPLE), "prompt file"))
        sampling, _notes = sampling_from_args(args)
        if args.llama_server is not None and not sampling.greedy:
            raise UserError("compare --llama-server compares greedy decoding (its requests are greedy, with the "
                             "penalties given): leave out --temperature, or --llama-server")
        if args.backend_sampling and backend_sampling_refusal(args, sampling):
            raise UserError(backend_sampling_refusal(args, sampling))
        if args.llama_server:  # a path or URL that cannot serve is said before anything runs
            check_llama_server(args.llama_server, args.llama_server_timeout)
    except (ValueError, UserError) as exc:
        return fail(str(exc), EXIT_USAGE)
    except ServerError as exc:  # a URL (a path that is no llama-server is a ValueError: a usage error above)
        return fail(str(exc))
    try:
        runtime = open_target_runtime(args, n_ctx=DEFAULT_N_CTX, n_seq_max=2, n_threads=args.n_threads or None)
        tokens = runtime.prompt_tokens(prompt, system_prompt=args.system_prompt)
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    settings = GenerationSettings(max_new_tokens=args.max_tokens, sampling=sampling)
    refused = start_backend_sampling(runtime, settings.top_probabilities) if args.backend_sampling else ""
    if refused:
        runtime.close()
        return fail(refused)
    scheduler = RuntimeScheduler(runtime)
    cost_model = None
    if args.cost_model:
        print("measuring the cost model ...", file=sys.stderr, flush=True)
        try:
            cost_model = measure_cost_model(scheduler, tokens[:64], k_max=16, repeats=3)
        except EngineError as exc:  # e.g. a lost RPC server
            runtime.close()
            return fail(str(exc))
        store_cost_model(runtime.model_path, runtime.n_threads, cost_model, placement(runtime))
        print("cost model: " + verify_cost_diagnosis(cost_model, runtime.info.weight_types))
    if not configs:
        configs = default_configs(cost_model or load_cost_model(runtime.model_path, runtime.n_threads, placement(runtime)))
    progress = lambda i, n, label: print(f"[{i + 1}/{n}] {label} ...", file=sys.stderr, flush=True)  # noqa: E731
    try:
        turn_progress = None if turns is None else (  # noqa: E731
            lambda k, n, i, m, label: print(f"    turn {k}/{n}", file=sys.stderr, flush=True))
        result = run_compare(scheduler, tokens, configs, settings, cost_model=cost_model, progress=progress,
                             turns=turns, turn_progress=turn_progress, keep_runs=args.llama_server is not None,
                             system_prompt=args.system_prompt, repeats=args.repeats)
    except EngineError as exc:  # e.g. a lost RPC server: one line, not a traceback
        runtime.close()
        return fail(str(exc))
    if turns is not None:
        print(f"conversation: {len(turns)} turns ({args.turns}); each row sums every turn")
    print(format_compare(result))
    if turns is None:  # a row whose text differs: does batch-shape numerics explain it? (spec-inspector audit)
        for line in compare_verdicts(scheduler, tokens, result, sampling):
            print(line)
    server_failed = False
    if args.llama_server is not None:
        try:
            server_rows = _compare_with_server(args.llama_server, result, runtime, scheduler, tokens, settings,
                                               args.llama_server_timeout)
        except Exception as exc:  # one line; our rows are printed above and still exported below
            print(f"spec-inspector: error: llama-server comparison failed: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            server_rows = None
        if server_rows is None:
            server_failed = True
        else:
            result = replace(result, llama_server=server_rows)
            print(format_server_rows(server_rows))
            server_failed = any(r.error for r in server_rows)
    try:
        if args.json:
            print(f"json: {write_compare_json(result, args.json)}")
        if args.csv:
            print(f"csv: {write_compare_csv(result, args.csv)}")
    except OSError as exc:
        return fail(f"cannot write the comparison: {exc}")
    runtime.close()
    return 1 if server_failed or any(r.error for r in result.rows) else 0


def _compare_with_server(target: str, result, runtime, scheduler, tokens, settings, timeout_s: float):
    """``compare --llama-server``: llama-server's rows for ``result`` (``inspector.bench.server_compare``),
    or None after printing why there is no llama-server to run (a failed build)."""
    target = target or our_llama_server()
    if target is None:
        return None
    where = target if is_url(target) else f"{target}, {runtime.n_threads} threads"
    print(f"llama-server: {where} ...", file=sys.stderr, flush=True)
    return compare_with_llama_server(
        target, result, model=runtime.model_path, prompt_tokens=tokens, n_predict=settings.max_new_tokens,
        threads=runtime.n_threads, n_ctx=runtime.n_ctx, scheduler=scheduler, context=server_context(runtime),
        request_timeout_s=timeout_s,
        progress=lambda i, n, label: print(f"[{i + 1}/{n}] llama-server: {label} ...", file=sys.stderr, flush=True))
