"""``spec-inspector run``: speculative decoding headless, the text streamed, a summary and receipts.

One prompt (``--prompt``, ``--prompt-file``, ``--example``) runs through the run service
(``inspector.session.run.SessionRun``) to its end; ``--turns FILE`` runs a conversation instead
(``inspector.cli.turns``). Every failure a user can cause ends with one line on stderr and a
non-zero exit status (``inspector.cli.common``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from inspector.cli.common import (EXIT_ERROR, EXIT_GENERATION_ERROR, EXIT_USAGE, RUNTIME_OPEN_ERRORS, UserError,
                                  add_backend_sampling_flag, backend_sampling_refusal, fail, open_target_runtime,
                                  read_text, start_backend_sampling, strip_final_newline, weight_type)
from inspector.cli.context import add_context_flags, add_n_ctx_flag, add_threads_flag
from inspector.cli.devices import add_offload_flags
from inspector.cli.interrupt import Interrupted, keep_interrupted_run, signals_held
from inspector.cli.ranges import (draft_max as draft_max_value, fault as fault_value, setting,
                                  stop_string)
from inspector.engine.llama_settings import COUNT_MAX
from inspector.cli.sampling import add_sampling_flags, sampling_from_args
from inspector.cli.sources import SourceFlagError, add_source_flags, source_options_from_args
from inspector.cli.turns import add_turns_argument, run_turns, turns_of
from inspector.engine import FaultPlan, GenerationSettings, RuntimeScheduler
from inspector.engine.errors import EngineError
from inspector.engine.faults import FAULT_KINDS
from inspector.engine.probabilities import COST_NOTE
from inspector.engine.settings import DEFAULT_MAX_NEW_TOKENS, check_n_batch_for_source, requested_draft_max
from inspector.llama.cost_cache import placement


from inspector.prompts import ALL_EXAMPLES, LONG_EXAMPLES, example_n_ctx, example_path
from inspector.receipts import ReceiptsFileError, write_document
from inspector.receipts.autosave import AutosaveWriter
from inspector.cli.run_output import (StreamPrinter, drive_run, format_balance, format_events, format_reasons,
                                      format_summary, tree_line)
from inspector.session.contention import run_contention_note
from inspector.session.document import record_document
from inspector.session.session_record import SessionRecord
from inspector.session.run import RunRefused, RunRequest, SessionRun
from inspector.sources.registry import PLAIN, describe_source, source_names


def add_run_command(sub) -> None:
    """The ``run`` subcommand's arguments (on ``sub``, the CLI's subparsers)."""
    run = sub.add_parser("run", help="run speculative decoding headless and write receipts",
                         description="Run speculative decoding on a prompt, print the text and a summary, write receipts.")
    p = run.add_mutually_exclusive_group()
    p.add_argument("--prompt", "-p", help="the prompt text (sent as a user message through the chat template)")
    p.add_argument("--prompt-file", "-f", "--file", type=Path,
                   help="read the prompt from this file (UTF-8; llama.cpp -f)")
    p.add_argument("--example", choices=ALL_EXAMPLES,
                   help="use one of the bundled example prompts (the window's examples); "
                        f"{', '.join(LONG_EXAMPLES)} runs in a context of {example_n_ctx(LONG_EXAMPLES[0])} "
                        "positions unless -c says otherwise")

    add_turns_argument(p, "run")
    run.add_argument("--model", "-m", type=Path, help="GGUF model (default: bundled SmolLM2-135M-Instruct Q4_1)")
    run.add_argument("--target-weights", type=weight_type, metavar="TYPE",
                     help="run the target in this weight type: the model converted with llama.cpp's quantizer (cached; "
                          "the file itself when it already is), e.g. Q8_0; bench --weights compares layouts")

    run.add_argument("--source", choices=source_names(), default="ngram",
                     help="proposal source (none: plain one-token decoding; third-party sources come from "
                          "the entry-point group spec_inspector.sources) [ngram]")
    run.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                     help="an option for the source's factory (repeatable; checked against the source's "
                          "declared options)")
    add_source_flags(run)  # --ngram-max, --draft-model, --script, ...: from the sources' declarations
    run.add_argument("--max-tokens", "-n", "--predict", "--n-predict", type=_max_tokens, default=DEFAULT_MAX_NEW_TOKENS,
                     help=f"most tokens to generate (llama.cpp -n; >= 1, or -1: until the end of generation or a "
                          f"full context) [{DEFAULT_MAX_NEW_TOKENS}]")
    run.add_argument("--draft-max", "--draft", "--draft-n", "--spec-draft-n-max", type=draft_max_value, default=None, metavar="N|auto",
                     help=f"most proposal tokens per window (0..{COUNT_MAX}), or auto: the best window of the cost model "
                          "stored for this model and thread count (bench, compare --cost-model or the window's "
                          "Cost model tab store one), else 8 [auto]")
    add_n_ctx_flag(run)  # -c, --ctx-size, --n-ctx
    run.set_defaults(n_ctx=None)  # not given: the example's context (``example_n_ctx``), else the default
    add_threads_flag(run, "on a busy machine fewer is faster")
    add_offload_flags(run)
    add_context_flags(run)
    run.add_argument("--stop", action="append", default=[], type=stop_string, metavar="STR",
                     help="stop string, non-empty (repeatable)")
    run.add_argument("--raw", action="store_true", help="send the prompt as is, without the chat template")
    run.add_argument("-sys", "--system-prompt", default="", metavar="TEXT",
                     help="the chat template's system message before the prompt (llama.cpp's -sys); "
                          "kept in the receipts; not with --raw")
    add_sampling_flags(run)
    run.add_argument("--verification", choices=["sample_match", "rejection"], default="sample_match",
                   help="with temperature > 0: accept while the target's sample equals the proposal "
                        "(sample_match), or rejection sampling with the draft's probabilities (rejection; "
                        "draft source only) [sample_match]")
    run.add_argument("--inject", action="append", default=[], type=fault_value, metavar="FAULT",
                     help="inject a fault: KIND[@WINDOW[:TOKEN]], KIND one of " + ", ".join(FAULT_KINDS)
                     + " (e.g. callback_error@3:2); repeatable")
    run.add_argument("--resume", action="store_true",
                     help="after an error (e.g. an injected one), resume from the canonical position and finish")
    run.add_argument("--receipts", type=Path, metavar="OUT.json", help="write the receipts document here")
    run.add_argument("--autosave", type=Path, metavar="OUT.jsonl",
                     help="append every receipt, discard and plain step to this JSON Lines file as it happens "
                          "(flushed per record: survives a crash; spec-inspector view opens it); with --turns, "
                          "every turn to this one file (view --turn N shows one)")
    run.add_argument("--proposal-deadline-ms", type=setting("proposal_deadline_ms", float), default=2000.0,
                     metavar="MS", help="a proposal that arrives later is discarded as deadline_exceeded (> 0) [2000]")
    run.add_argument("--events", action="store_true",
                     help="print the ordered event list (commit lines show the token's p and rank)")
    run.add_argument("--no-probabilities", dest="probabilities", action="store_false",
                     help="keep no per-row probability figures (p, rank, top 5, entropy, margin) in the receipts: "
                          f"the smallest files; they cost {COST_NOTE}")
    add_backend_sampling_flag(run)
    run.add_argument("--baseline", action="store_true",
                     help="also run plain one-token decoding with the same sampling and report the first "
                          "token where the outputs differ (and the target's top-2 logit margin there)")
    run.add_argument("--quiet", action="store_true", help="do not stream the generated text")


def rejection_note(source: str, verification: str, temperature: float) -> str:
    """The note ``run`` prints when ``--verification rejection`` cannot apply: at temperature > 0 the rule
    needs the draft's probabilities, which only a source declaring ``draft_probabilities`` gives
    (``SourceDescriptor.gives_draft_probabilities``); "" otherwise."""
    if verification != "rejection" or temperature <= 0:
        return ""
    if describe_source(source).gives_draft_probabilities:
        return ""
    return (f"--verification rejection needs a draft model's probabilities; the {source} source "
            "has none, so every window verifies with sample_match (each receipt's verification_rule says so)")


def cmd_run(args) -> int:
    """``spec-inspector run`` with the parsed ``args``; returns the exit status (0, ``EXIT_USAGE``,
    ``EXIT_ERROR``, ``EXIT_GENERATION_ERROR`` or 128 + a signal's number)."""
    try:
        if args.example is not None:
            args.prompt_file = example_path(args.example)
        if args.n_ctx is None:
            args.n_ctx = example_n_ctx(args.example or "")
            if args.example in LONG_EXAMPLES:
                print(f"spec-inspector: note: the {args.example} example runs in a context of {args.n_ctx} "
                      "positions (-c to change it)", file=sys.stderr)

        turns = turns_of(args)
        if turns is not None:
            prompt = turns[0]
        elif args.prompt is None and args.prompt_file is None:
            raise UserError("give the prompt with --prompt TEXT, --prompt-file F, --example NAME or --turns FILE")
        else:
            # A prompt file's final newline is the file's, not the prompt's.
            prompt = args.prompt if args.prompt is not None else strip_final_newline(
                read_text(args.prompt_file, "prompt file"))
        if args.raw and args.system_prompt:
            raise UserError("--system-prompt goes through the chat template: leave out --raw (or the system prompt)")
        options = _source_options(args)  # required options, files and cross-option rules: the declarations'
        settings, notes = _run_settings(args)
        if args.backend_sampling and backend_sampling_refusal(args, settings.sampling):
            raise UserError(backend_sampling_refusal(args, settings.sampling))
    except UserError as exc:
        return fail(str(exc), EXIT_USAGE)
    note = rejection_note(args.source, args.verification, settings.sampling.temperature)
    if note:
        notes.append(note)
    for note in notes:
        print(f"spec-inspector: note: {note}", file=sys.stderr)

    try:
        runtime = open_target_runtime(args, n_ctx=args.n_ctx, n_threads=args.n_threads or None,
                                      n_seq_max=2 if args.baseline else 1)
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    if args.backend_sampling:
        refused = start_backend_sampling(runtime, settings.top_probabilities)
        if refused:
            runtime.close()
            return fail(refused)
    if turns is not None:
        try:
            return run_turns(args, runtime, turns, settings, options)
        finally:
            runtime.close()
    record = SessionRecord()
    printer = StreamPrinter(sys.stdout, quiet=args.quiet)
    opener = None
    if args.autosave:
        opener = lambda header: AutosaveWriter(args.autosave, header)  # noqa: E731
    request = RunRequest(prompt, settings, args.source, options, raw=args.raw, system_prompt=args.system_prompt,
                         faults=FaultPlan(list(args.inject)),
                         draft_max_auto=requested_draft_max(args.draft_max)[1])
    run = SessionRun(RuntimeScheduler(runtime), request, record.apply, observer=printer, open_autosave=opener)
    try:
        run.tokenize()
    except RunRefused as exc:
        return fail(str(exc), EXIT_USAGE if exc.what == "empty_prompt" else EXIT_ERROR)
    try:
        run.make_source()
        gen = run.open()
    except RunRefused as exc:
        return fail(str(exc))
    if run.source_warm:
        print(f"note: the source starts warm: {run.source_warm} (receipts: settings.source.warm)", file=sys.stderr)
    if run.autosave_error:
        return fail(f"cannot write autosave {args.autosave}: {run.autosave_error}")
    try:
        return _finish_run(args, run, gen, record, printer, request, runtime)
    except Interrupted as exc:  # SIGINT, SIGTERM, SIGHUP: the complete windows are kept (issue 25)

        return keep_interrupted_run(args, run, record, printer, exc)


def _finish_run(args, run, gen, record, printer, request, runtime) -> int:
    """``run``'s run from the prefill to the receipts file; returns the exit status."""
    t0 = time.perf_counter()
    try:
        run.start()
    except EngineError as exc:
        return fail(str(exc))
    status = 0 if drive_run(run, gen, printer, args.resume) else EXIT_GENERATION_ERROR
    wall = time.perf_counter() - t0
    printer.newline()
    end = run.end(gen.finish_reason or "error", clean=gen.finished)
    if run.autosave_error:
        print(f"spec-inspector: autosave stopped: {run.autosave_error}", file=sys.stderr)
    if args.events:
        for line in format_events(record.events, record.text_of, record.receipts, record.discards):
            print(line)
    most = max((len(r.committed_tokens) for r in record.receipts), default=0)
    for f in request.faults.pending():
        print(f"spec-inspector: fault {f.why_unfired(len(record.receipts), most)}", file=sys.stderr)
    contended = run_contention_note(record, runtime.model_path, runtime.n_threads, placement(runtime))
    if contended:
        print(f"spec-inspector: {contended}", file=sys.stderr)
    if record.finish_reason == "context_full" and args.max_tokens != -1:
        print(f"spec-inspector: generation stopped: the context ({runtime.n_ctx} positions) is full; "
              f"raise --n-ctx", file=sys.stderr)
    print(format_summary(record.summary(), wall, kv_length=end.kv_length, canonical=end.canonical_position,
                         ended_as=end.reason, incomplete_utf8_bytes=end.incomplete_utf8_bytes,
                         why=format_reasons(record.events, args.source)))
    balance = format_balance(record.receipts, record.lock_ops, record.main_session_id)
    if balance:
        print(balance)
    trees = tree_line(record.receipts, runtime)
    if trees is not None:
        print(trees)
    if run.draft_max_from:
        print(f"draft max:            {run.request.settings.draft_max} ({run.draft_max_from})")
    if args.backend_sampling:
        print("backend sampling:     on (-bs: each row's prediction and figures computed in llama.cpp's graph)")
    policy = getattr(run.source, "policy", None)
    if policy is not None and not record.receipts:
        costs = "the stored cost model" if policy.row_costs is not None else \
            f"the linear cost model (each extra row = {policy.row_cost_ratio:.2f} of a step)"
        print(f"note: the adaptive length proposed nothing: with {costs} no proposal length was expected to "
              f"beat a plain step (use --ngram-length fixed to see windows anyway)")
    if run.autosave is not None:
        print(f"autosave: {run.autosave.writer.path}")
    if args.baseline:
        print("baseline: plain one-token decoding of the same prompt ...", file=sys.stderr, flush=True)
        baseline = run.compare_with_plain()
        if baseline is None:  # the speculative receipts are kept either way
            print(f"spec-inspector: baseline failed: {record.baseline_error}", file=sys.stderr)
        else:
            print(f"baseline:             {baseline.describe()}")
    if args.receipts:
        try:
            with signals_held():  # a Ctrl-C now would leave no receipts
                path = write_document(record_document(record), args.receipts)
        except (OSError, ReceiptsFileError) as exc:
            return fail(f"cannot write receipts {args.receipts}: {exc}")
        print(f"receipts: {path}")
    run.close_source()
    runtime.close()
    return status


def _max_tokens(text: str) -> int:
    """``-n``: -1 (llama.cpp's "until the end of generation or a full context"), or a count >= 1."""
    return -1 if text.strip() == "-1" else setting("max_new_tokens", int)(text)


def _run_settings(args):
    """``(GenerationSettings, notes)`` of ``run``, checked before the model loads.

    The value rules are the engine's (``inspector.engine.settings``): a refused
    value raises ``UserError`` with the rule's one-line message. ``notes``:
    one line per value llama.cpp gives a meaning (``sampling_settings``:
    negative temperature, top-k <= 0, seed -1 with the seed drawn for the run).
    """
    try:
        check_n_batch_for_source(args.n_batch, speculative=args.source != PLAIN)
    except ValueError as exc:
        raise UserError(f"--n-batch: {exc}") from None
    try:
        sampling, notes = sampling_from_args(args)
        settings = GenerationSettings(
            max_new_tokens=args.n_ctx if args.max_tokens == -1 else args.max_tokens, stop=tuple(args.stop),
            draft_max=requested_draft_max(args.draft_max)[0],
            proposal_deadline_ms=args.proposal_deadline_ms, sampling=sampling, verification=args.verification,
            probabilities=args.probabilities,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return settings, list(notes)


def _source_options(args) -> dict:
    """Keyword options for the source factory, from the source's generated flags and
    --source-option (``inspector.cli.sources.source_options_from_args``); raises ``UserError``."""
    try:
        return source_options_from_args(args)
    except SourceFlagError as exc:
        raise UserError(str(exc)) from None
