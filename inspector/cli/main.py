"""The ``spec-inspector`` command line (argparse).

``spec-inspector``            opens the inspector window (GUI).
``spec-inspector run ...``    runs speculative decoding headless and writes receipts.
``spec-inspector view FILE``  prints the summary of a receipts file.
``spec-inspector make-draft`` re-quantizes a model into a draft model.
``spec-inspector trace FILE -o OUT`` writes a Chrome trace (Perfetto) of a receipts file.
``spec-inspector bench`` / ``compare`` measure speed (``inspector.cli.bench``).

Every failure a user can cause (bad flag, missing file, damaged model, prompt
too long) ends with one line on stderr and a non-zero exit status.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from inspector.cli.common import EXIT_ERROR, EXIT_GENERATION_ERROR, EXIT_USAGE  # noqa: F401 (re-exported)
from inspector.cli.common import UserError as _UserError, fail as _fail
from inspector.cli.common import open_target_runtime, read_text, strip_final_newline, weight_type  # noqa: E402


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and the exit status 2)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


from inspector.cli.interrupt import Interrupted, install_interrupt_handlers, signals_held  # noqa: E402
from inspector.cli.paths import OutputPathError, check_outputs  # noqa: E402
from inspector.cli.ranges import COUNT_MAX, whole_number  # noqa: E402
from inspector.cli.ranges import draft_max as _draft_max, fault as _fault  # noqa: E402
from inspector.cli.ranges import setting as _setting, stop_string as _stop_string  # noqa: E402
from inspector.cli.ranges import THREADS, THREADS_MAX  # noqa: E402
from inspector.cli.ranges import positive as _positive  # noqa: E402


from inspector.cli.devices import add_commands as add_device_commands  # noqa: E402
from inspector.cli.context import add_context_flags, context_options  # noqa: E402
from inspector.cli.sampling import add_sampling_flags, sampling_from_args  # noqa: E402
from inspector.cli.devices import add_offload_flags, offload_from_args  # noqa: E402
from inspector.sources.registry import PLAIN  # noqa: E402
from inspector.cli.tune import add_tune_command, cmd_tune  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    from inspector.engine.probabilities import COST_NOTE

    from inspector.engine.faults import FAULT_KINDS
    from inspector.engine.settings import DEFAULT_MAX_NEW_TOKENS, DEFAULT_N_CTX
    from inspector.prompts import EXAMPLES

    parser = _Parser(
        prog="spec-inspector",
        description="See speculative decoding happen on llama.cpp.",
        epilog="Without a command, spec-inspector opens the inspector window; its options: "
               "--model PATH (GGUF to load), --receipts FILE (a receipts .json or autosave .jsonl to open), "
               "--prompt TEXT (prompt to put in the editor).",
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    run = sub.add_parser("run", help="run speculative decoding headless and write receipts",
                         description="Run speculative decoding on a prompt, print the text and a summary, write receipts.")
    p = run.add_mutually_exclusive_group()
    p.add_argument("--prompt", help="the prompt text (sent as a user message through the chat template)")
    p.add_argument("--prompt-file", type=Path, help="read the prompt from this file (UTF-8)")
    p.add_argument("--example", choices=EXAMPLES,
                   help="use one of the bundled example prompts (the window's examples)")
    from inspector.cli.turns import add_turns_argument

    add_turns_argument(p, "run")
    run.add_argument("--model", type=Path, help="GGUF model (default: bundled SmolLM2-135M-Instruct Q4_1)")
    run.add_argument("--target-weights", type=weight_type, metavar="TYPE",
                     help="run the target in this weight type: the model converted with llama.cpp's quantizer (cached; "
                          "the file itself when it already is), e.g. Q8_0; bench --weights compares layouts")
    from inspector.cli.sources import add_source_flags
    from inspector.sources.registry import source_names

    run.add_argument("--source", choices=source_names(), default="ngram",
                     help="proposal source (none: plain one-token decoding; third-party sources come from "
                          "the entry-point group spec_inspector.sources) [ngram]")
    run.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                     help="an option for the source's factory (repeatable; checked against the source's "
                          "declared options)")
    add_source_flags(run)  # --ngram-max, --draft-model, --script, ...: from the sources' declarations
    run.add_argument("--max-tokens", type=_setting("max_new_tokens", int), default=DEFAULT_MAX_NEW_TOKENS,
                     help=f"most tokens to generate (>= 1) [{DEFAULT_MAX_NEW_TOKENS}]")
    run.add_argument("--draft-max", type=_draft_max, default=None, metavar="N|auto",
                     help=f"most proposal tokens per window (0..{COUNT_MAX}), or auto: the best window of the cost model "
                          "stored for this model and thread count (bench, compare --cost-model or the window's "
                          "Cost model tab store one), else 8 [auto]")
    run.add_argument("--n-ctx", type=_positive, default=DEFAULT_N_CTX,
                     help=f"context size in tokens (llama.cpp -c; 1..{COUNT_MAX}) [{DEFAULT_N_CTX}]")
    run.add_argument("--threads", type=THREADS, default=None,
                     help=f"CPU threads (llama.cpp -t; 0..{THREADS_MAX}, ggml's limit) [0 = all cores]; on a busy machine fewer is faster")
    add_offload_flags(run)
    add_context_flags(run)
    run.add_argument("--stop", action="append", default=[], type=_stop_string, metavar="STR",
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
    run.add_argument("--inject", action="append", default=[], type=_fault, metavar="FAULT",
                     help="inject a fault: KIND[@WINDOW[:TOKEN]], KIND one of " + ", ".join(FAULT_KINDS)
                     + " (e.g. callback_error@3:2); repeatable")
    run.add_argument("--resume", action="store_true",
                     help="after an error (e.g. an injected one), resume from the canonical position and finish")
    run.add_argument("--receipts", type=Path, metavar="OUT.json", help="write the receipts document here")
    run.add_argument("--autosave", type=Path, metavar="OUT.jsonl",
                     help="append every receipt, discard and plain step to this JSON Lines file as it happens "
                          "(flushed per record: survives a crash; spec-inspector view opens it)")
    run.add_argument("--proposal-deadline-ms", type=_setting("proposal_deadline_ms", float), default=2000.0,
                     metavar="MS", help="a proposal that arrives later is discarded as deadline_exceeded (> 0) [2000]")
    run.add_argument("--events", action="store_true",
                     help="print the ordered event list (commit lines show the token's p and rank)")
    run.add_argument("--no-probabilities", dest="probabilities", action="store_false",
                     help="keep no per-row probability figures (p, rank, top 5, entropy, margin) in the receipts: "
                          f"the smallest files; they cost {COST_NOTE}")
    run.add_argument("--baseline", action="store_true",
                     help="also run plain one-token decoding with the same sampling and report the first "
                          "token where the outputs differ (and the target's top-2 logit margin there)")
    run.add_argument("--quiet", action="store_true", help="do not stream the generated text")

    view = sub.add_parser("view", help="print the summary of a receipts file (.json) or an autosave (.jsonl)")
    view.add_argument("file", type=Path)
    view.add_argument("--windows", action="store_true",
                      help="also print one line per window and per discard (decode step, decision id, outcome)")
    view.add_argument("--events", action="store_true", help="also print the ordered event list (receipts .json)")
    view.add_argument("--window", type=_positive, metavar="N", action="append", default=[],
                      help="also print window N row by row with the target's probabilities (repeatable)")
    view.add_argument("--turn", type=_positive, metavar="N",
                      help="a conversation file (run --turns, the window's Next turn): show turn N as one request")

    tr = sub.add_parser("trace", help="write a Chrome trace (Perfetto) of a receipts file",
                        description="Convert a receipts file to Chrome trace event JSON: open it in "
                                    "https://ui.perfetto.dev or chrome://tracing.")
    tr.add_argument("file", type=Path, help="receipts .json")
    tr.add_argument("-o", "--out", type=Path, required=True, help="trace .json to write")

    from inspector.bench.run import TASKS

    bn = sub.add_parser("bench", help="plain vs speculative decoding on fixed tasks, with the cost model",
                        description="Measure plain decoding, our n-gram speculation and llama-cpp-python's "
                                    "LlamaPromptLookupDecoding on the same prompts in one process.")
    bn.add_argument("--model", type=Path, help="GGUF model (default: the bundled model)")
    bn.add_argument("--target-weights", type=weight_type, metavar="TYPE",
                    help="run the target in this weight type: the model converted with llama.cpp's quantizer (cached; "
                          "the file itself when it already is), e.g. Q8_0; bench --weights compares layouts")
    bn.add_argument("--threads", type=THREADS, default=None,
                    help=f"CPU threads (llama.cpp -t; 0..{THREADS_MAX}, ggml's limit) [0 = all cores]; measure with nothing else running")
    bn.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, from {', '.join(TASKS)}")
    bn.add_argument("--max-tokens", type=whole_number(1, DEFAULT_N_CTX), default=128,
                    help=f"tokens per run (1..{DEFAULT_N_CTX}, the context) [128]")
    bn.add_argument("--k-max", type=whole_number(1, 256), default=16,
                    help="largest verify batch in the cost model (1..256) [16]")
    bn.add_argument("--repeats", type=whole_number(1, 1000), default=3, help="repeats per cost-model point (1..1000) [3]")
    bn.add_argument("--no-llama-cpp-python", action="store_true", help="skip LlamaPromptLookupDecoding")
    bn.add_argument("--weights", metavar="T1,T2,...",
                    help="compare weight layouts instead: convert the model to each type (llama.cpp quantize, "
                         "cached), then per layout c(k), its ceiling, plain vs n-gram on the copy task and whether "
                         "greedy output stays the original's (e.g. Q4_1,Q8_0,Q4_0)")
    bn.add_argument("--json", type=Path, metavar="OUT", help="also write the figures as JSON")
    bn.add_argument("--turns", metavar="FILE|NAME", help="instead: every source over a conversation (e.g. agent-edits): "
                    "acceptance, mean length, windows, speedup, share of the ceiling, proposal time, memory")
    bn.add_argument("--llama-server", nargs="?", const="", default=None, metavar="PATH",
                    help="instead: ours against llama-server (a fresh one per run; default: the one built from our "
                         "llama.cpp) for plain and every llama.cpp source, with and without probabilities, and the "
                         "window against headless; --tasks, --repeats and --config choose the work")
    bn.add_argument("--config", action="append", default=[], metavar="SOURCE[:key=value,...]",
                    help="with --llama-server: a configuration as compare takes it (repeatable; default: plain, "
                         "every llama.cpp n-gram source at draft max 16, and a Q4_0 draft of the model)")
    add_offload_flags(bn)
    add_context_flags(bn)

    cp = sub.add_parser("compare", help="run one prompt with several configurations, side by side",
                        description="Run one prompt with several configurations (source, draft max, source "
                                    "options) one after the other on one loaded model and print a table; "
                                    "--json/--csv export it.")
    cp.add_argument("--prompt", help="the prompt text (default: the copy-with-corrections example)")
    cp.add_argument("--prompt-file", type=Path, help="read the prompt from this file (UTF-8)")
    add_turns_argument(cp, "compare")
    cp.add_argument("--model", type=Path, help="GGUF model (default: the bundled model)")
    cp.add_argument("-sys", "--system-prompt", default="", metavar="TEXT",
                    help="the chat template's system message before the prompt (llama.cpp's -sys)")
    cp.add_argument("--target-weights", type=weight_type, metavar="TYPE",
                    help="run the target in this weight type: the model converted with llama.cpp's quantizer (cached; "
                          "the file itself when it already is), e.g. Q8_0; bench --weights compares layouts")
    cp.add_argument("--config", action="append", default=[], metavar="SOURCE[:key=value,...]",
                    help="a configuration, e.g. none, ngram:draft_max=4, ngram:draft_max=16,n_min=1, "
                         "draft:draft_model=D.gguf (repeatable; default: plain and ngram with draft_max 4, 8, 16)")
    cp.add_argument("--max-tokens", type=_setting("max_new_tokens", int), default=DEFAULT_MAX_NEW_TOKENS,
                    help=f"tokens per run [{DEFAULT_MAX_NEW_TOKENS}]")
    cp.add_argument("--threads", type=THREADS, default=None,
                    help=f"CPU threads (llama.cpp -t; 0..{THREADS_MAX}, ggml's limit) [0 = all cores]; on a busy machine fewer is faster")
    cp.add_argument("--cost-model", action="store_true",
                    help="measure the cost model first and add each run's expected speedup")
    cp.add_argument("--json", type=Path, metavar="OUT", help="write the comparison as JSON")
    cp.add_argument("--csv", type=Path, metavar="OUT", help="write the comparison as CSV")
    cp.add_argument("--llama-server", nargs="?", const="", default=None, metavar="PATH|URL",
                    help="run each configuration through llama-server too (same prompt tokens, greedy, its flags) "
                         "and show its tokens/s, drafted and accepted beside ours: a llama-server binary (started "
                         "on 127.0.0.1 per configuration), a running server's URL (used as it is), or nothing: "
                         "the one built from our llama.cpp (built once on first use, 7-15 minutes)")
    add_offload_flags(cp)
    add_context_flags(cp)
    add_sampling_flags(cp, "sampling of every configuration (default greedy)")

    from inspector.cli.flags import add_flags_command

    add_flags_command(sub)
    add_tune_command(sub)

    from inspector.llama.quantize import DRAFT_TYPES

    md = sub.add_parser("make-draft", help="make a draft model by re-quantizing the target",
                        description="Re-quantize a GGUF into a smaller type (llama.cpp llama_model_quantize) and "
                                    "print the draft's path; use it with run --source draft --draft-model PATH.")
    md.add_argument("--model", type=Path, help="the target GGUF (default: the bundled model)")
    md.add_argument("--type", choices=list(DRAFT_TYPES), default="Q4_0", help="draft quantization [Q4_0]")
    md.add_argument("--out", type=Path, help="folder for the draft (default: the user cache folder)")
    add_device_commands(sub)
    return parser


def cmd_run(args) -> int:
    from inspector.engine import FaultPlan, RuntimeScheduler
    from inspector.engine.errors import EngineError
    from inspector.llama.devices import RpcUnavailable
    from inspector.llama.model_file import ModelFileError
    from inspector.run_output import StreamPrinter

    try:
        if args.example is not None:
            from inspector.prompts import example_path

            args.prompt_file = example_path(args.example)
        from inspector.cli.turns import turns_of

        turns = turns_of(args)
        if turns is not None:
            prompt = turns[0]
        elif args.prompt is None and args.prompt_file is None:
            raise _UserError("give the prompt with --prompt TEXT, --prompt-file F, --example NAME or --turns FILE")
        else:
            # A prompt file's final newline is the file's, not the prompt's.
            prompt = args.prompt if args.prompt is not None else strip_final_newline(
                read_text(args.prompt_file, "prompt file"))
        if args.raw and args.system_prompt:
            raise _UserError("--system-prompt goes through the chat template: leave out --raw (or the system prompt)")
        options = _source_options(args)  # required options, files and cross-option rules: the declarations'
        settings, notes = _run_settings(args)
    except _UserError as exc:
        return _fail(str(exc), EXIT_USAGE)
    if args.verification == "rejection" and args.source != "draft" and settings.sampling.temperature > 0:
        notes.append(f"--verification rejection needs a draft model's probabilities; the {args.source} source "
                     "has none, so every window verifies with sample_match (each receipt's verification_rule "
                     "says so)")
    for note in notes:
        print(f"spec-inspector: note: {note}", file=sys.stderr)

    from inspector.session.record import SessionRecord
    from inspector.session.run import RunRefused, RunRequest, SessionRun

    try:
        runtime = open_target_runtime(args, n_ctx=args.n_ctx, n_threads=args.threads or None,
                                      n_seq_max=2 if args.baseline else 1)
    except (ModelFileError, EngineError, ValueError, RpcUnavailable) as exc:
        return _fail(str(exc))
    if turns is not None:
        from inspector.cli.turns import run_turns

        try:
            return run_turns(args, runtime, turns, settings, options)
        finally:
            runtime.close()
    record = SessionRecord()
    printer = StreamPrinter(sys.stdout, quiet=args.quiet)
    opener = None
    if args.autosave:
        from inspector.receipts.autosave import AutosaveWriter

        opener = lambda header: AutosaveWriter(args.autosave, header)  # noqa: E731
    request = RunRequest(prompt, settings, args.source, options, raw=args.raw, system_prompt=args.system_prompt,
                         faults=FaultPlan(list(args.inject)),
                         draft_max_auto=args.draft_max is None)
    run = SessionRun(RuntimeScheduler(runtime), request, record.apply, observer=printer, open_autosave=opener)
    try:
        run.tokenize()
    except RunRefused as exc:
        return _fail(str(exc), EXIT_USAGE if exc.what == "empty_prompt" else EXIT_ERROR)
    try:
        run.make_source()
        gen = run.open()
    except RunRefused as exc:
        return _fail(str(exc))
    if run.source_warm:
        print(f"note: the source starts warm: {run.source_warm} (receipts: settings.source.warm)", file=sys.stderr)
    if run.autosave_error:
        return _fail(f"cannot write autosave {args.autosave}: {run.autosave_error}")
    try:
        return _finish_run(args, run, gen, record, printer, request, runtime)
    except Interrupted as exc:  # SIGINT, SIGTERM, SIGHUP: the complete windows are kept (issue 25)
        from inspector.cli.interrupt import keep_interrupted_run

        return keep_interrupted_run(args, run, record, printer, exc)


def _finish_run(args, run, gen, record, printer, request, runtime) -> int:
    """``run``'s run from the prefill to the receipts file; returns the exit status."""
    from inspector.engine.errors import EngineError
    from inspector.receipts import ReceiptsFileError, write_document
    from inspector.run_output import drive_run, format_balance, format_events, format_reasons, format_summary
    from inspector.session.document import record_document

    t0 = time.perf_counter()
    try:
        run.start()
    except EngineError as exc:
        return _fail(str(exc))
    status = 0 if drive_run(run, gen, printer, args.resume) else EXIT_GENERATION_ERROR
    wall = time.perf_counter() - t0
    printer.newline()
    end = run.end(gen.finish_reason or "error", clean=gen.finished)
    if run.autosave_error:
        print(f"spec-inspector: autosave stopped: {run.autosave_error}", file=sys.stderr)
    if args.events:
        for line in format_events(record.events, record.text_of, record.receipts, record.discards):
            print(line)
    for f in request.faults.pending():
        where = f" at window {f.window}" if f.window else ""
        where += f", commit token {f.token}" if f.token else ""
        print(f"spec-inspector: fault {f.kind}{where} never fired (that window or token did not occur)",
              file=sys.stderr)
    if record.finish_reason == "context_full":
        print(f"spec-inspector: generation stopped: the context ({runtime.n_ctx} positions) is full; "
              f"raise --n-ctx", file=sys.stderr)
    print(format_summary(record.summary(), wall, kv_length=end.kv_length, canonical=end.canonical_position,
                         ended_as=end.reason, incomplete_utf8_bytes=end.incomplete_utf8_bytes,
                         why=format_reasons(record.events, args.source)))
    balance = format_balance(record.receipts, record.lock_ops, record.main_session_id)
    if balance:
        print(balance)
    if run.draft_max_from:
        print(f"draft max:            {run.request.settings.draft_max} ({run.draft_max_from})")
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
            return _fail(f"cannot write receipts {args.receipts}: {exc}")
        print(f"receipts: {path}")
    run.close_source()
    runtime.close()
    return status


def _run_settings(args):
    """``(GenerationSettings, notes)`` of ``run``, checked before the model loads.

    The value rules are the engine's (``inspector.engine.settings``): a refused
    value raises ``_UserError`` with the rule's one-line message. ``notes``:
    one line per value llama.cpp gives a meaning (``sampling_settings``:
    negative temperature, top-k <= 0, seed -1 with the seed drawn for the run).
    """
    from inspector.engine import GenerationSettings
    from inspector.engine.settings import check_n_batch_for_source
    from inspector.llama.cost_model import DEFAULT_DRAFT_MAX

    try:
        check_n_batch_for_source(args.n_batch, speculative=args.source != PLAIN)
    except ValueError as exc:
        raise _UserError(f"--n-batch: {exc}") from None
    try:
        sampling, notes = sampling_from_args(args)
        settings = GenerationSettings(
            max_new_tokens=args.max_tokens, stop=tuple(args.stop),
            draft_max=DEFAULT_DRAFT_MAX if args.draft_max is None else args.draft_max,
            proposal_deadline_ms=args.proposal_deadline_ms, sampling=sampling, verification=args.verification,
            probabilities=args.probabilities,
        )
    except ValueError as exc:
        raise _UserError(str(exc)) from None
    return settings, list(notes)


def _source_options(args) -> dict:
    """Keyword options for the source factory, from the source's generated flags and
    --source-option (``inspector.cli.sources.source_options_from_args``); raises ``_UserError``."""
    from inspector.cli.sources import SourceFlagError, source_options_from_args

    try:
        return source_options_from_args(args)
    except SourceFlagError as exc:
        raise _UserError(str(exc)) from None


def cmd_make_draft(args) -> int:
    from inspector.llama.model_file import ModelFileError, bundled_model_path
    from inspector.llama.quantize import make_draft

    try:
        model = args.model or bundled_model_path()
        print(f"re-quantizing {model} to {args.type} ...", file=sys.stderr, flush=True)
        path = make_draft(model, args.type, args.out)
    except (ModelFileError, ValueError, OSError) as exc:
        return _fail(str(exc))
    print(path)
    return 0


def cmd_gui(argv: list[str]) -> int:
    try:
        from inspector.gui.app import main as gui_main
    except ImportError as exc:
        if "inspector.gui" in str(exc):
            return _fail("the inspector window is not part of this build; use `spec-inspector run --help`")
        return _fail(f"cannot start the inspector window: {exc}")
    return gui_main(argv)


COMMANDS = ("run", "view", "make-draft", "trace", "bench", "compare", "rpc-server", "devices", "flags", "tune")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        return _fail(f"unknown command {argv[0]!r}: expected one of {', '.join(COMMANDS)} "
                     f"(no command opens the window; see spec-inspector --help)", EXIT_USAGE)
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        return cmd_gui(argv)
    install_interrupt_handlers()  # SIGINT/SIGTERM/SIGHUP raise Interrupted: one line, never a traceback
    try:
        return _command(argv)
    except (Interrupted, KeyboardInterrupt) as exc:  # before a run had anything to keep
        status = exc.status if isinstance(exc, Interrupted) else 130
        name = f" ({exc.name})" if isinstance(exc, Interrupted) else ""
        return _fail(f"interrupted{name}; nothing was written", status)


def _command(argv: list[str]) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        print(f"spec-inspector {args.command}: error: unrecognized arguments: {' '.join(extras)} "
              f"(see spec-inspector {args.command} --help)", file=sys.stderr)
        return EXIT_USAGE
    try:
        check_outputs(args)  # writable, no folder, never an input: before any work (issue 25)
    except OutputPathError as exc:
        return _fail(str(exc), EXIT_USAGE)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "view":
            from inspector.cli.view import cmd_view

            return cmd_view(args)
        if args.command == "make-draft":
            return cmd_make_draft(args)
        if args.command == "trace":
            from inspector.cli.view import cmd_trace

            return cmd_trace(args)
        if args.command == "bench":
            from inspector.cli.bench import cmd_bench

            return cmd_bench(args)
        if args.command == "compare":
            from inspector.cli.bench import cmd_compare

            return cmd_compare(args)
        if args.command == "rpc-server":
            from inspector.cli.rpc_server import cmd_rpc_server

            return cmd_rpc_server(args)
        if args.command == "flags":
            from inspector.cli.flags import cmd_flags

            return cmd_flags(args)
        if args.command == "tune":
            return cmd_tune(args)
        if args.command == "devices":
            from inspector.cli.devices import cmd_devices

            return cmd_devices(args)
    except BrokenPipeError:  # e.g. `spec-inspector view r.json --windows | head`: the reader left
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    build_parser().print_help()
    return EXIT_USAGE
