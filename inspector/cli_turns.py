"""``spec-inspector run --turns FILE``: a conversation, turn after turn, on one loaded target (issue 16).

Each turn is one request whose prompt is the chat so far (``inspector.session.conversation``);
sources keep what they remember across the turns (one ``RunRequest.source_memory``). The text of
every turn streams as it is committed, each turn prints its summary, and ``--receipts OUT.json``
writes one receipts document per turn (``OUT.turn1.json``, ...; each window names its ``turn``
and the document keeps a ``conversation`` block). A turn that cannot run (its prompt no longer
fits the context, the source refuses) ends the conversation with a message naming the turn;
the receipts of the earlier turns are written.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from inspector.cli import EXIT_ERROR, EXIT_GENERATION_ERROR


TURNS_HELP = ("a turns file (user messages separated by lines holding only ---, or a JSON list) or a bundled one "
              "(agent-edits); each turn's prompt is the chat so far, and sources keep their memory across turns")


def add_turns_argument(parser, command: str) -> None:
    """``--turns FILE|NAME`` for ``run`` (one receipts file per turn) or ``compare`` (rows sum the turns)."""
    tail = ("; --receipts writes one file per turn (OUT.turnN.json)" if command == "run" else
            "; each configuration answers with its own history, and each row sums every turn")
    parser.add_argument("--turns", metavar="FILE|NAME", help=f"run a conversation: {TURNS_HELP}{tail}")


def turns_of(args) -> list[str] | None:
    """The turns of ``run --turns`` (None without it). Raises the CLI's ``_UserError`` for a turns file
    that cannot be used (its message names the file and the turn) or for ``--baseline`` with turns."""
    from inspector.cli import _UserError
    from inspector.prompts import turns_path
    from inspector.session.conversation import read_turns

    if args.turns is None:
        return None
    try:
        turns = read_turns(turns_path(args.turns))
    except ValueError as exc:
        raise _UserError(str(exc)) from None
    if args.baseline:
        raise _UserError("--baseline compares one prompt with plain decoding; it does not run with --turns")
    return turns


def turn_receipts_path(path: Path, turn: int) -> Path:
    """``r.json`` -> ``r.turn3.json`` for turn 3."""
    return path.with_name(f"{path.stem}.turn{turn}{path.suffix or '.json'}")


def run_turns(args, runtime, turns: list[str], settings, options: dict) -> int:
    """Run every turn of ``turns`` with the ``run`` arguments ``args`` on ``runtime``; returns the exit
    status (0, ``EXIT_ERROR`` when a turn could not start, ``EXIT_GENERATION_ERROR`` after a failed
    turn). Earlier turns' receipts are written whatever happens to a later one."""
    from inspector.engine import FaultPlan, RuntimeScheduler
    from inspector.engine.errors import EngineError
    from inspector.receipts import ReceiptsFileError, write_document
    from inspector.run_output import StreamPrinter, drive_run, format_summary
    from inspector.session.conversation import ChatHistory, conversation_block, turn_prompt_tokens
    from inspector.session.document import record_document
    from inspector.session.record import SessionRecord
    from inspector.session.run import RunRefused, RunRequest, SessionRun

    scheduler = RuntimeScheduler(runtime)
    history, memory = ChatHistory(), {}
    printer = StreamPrinter(sys.stdout, quiet=args.quiet)
    status = 0
    for n, text in enumerate(turns, 1):
        print(f"--- turn {n}/{len(turns)} ---", flush=True)
        try:
            tokens = turn_prompt_tokens(runtime, history, text)
        except (EngineError, ValueError) as exc:
            print(f"spec-inspector: error: turn {n}: {exc}", file=sys.stderr)
            return EXIT_ERROR
        record = SessionRecord()
        request = RunRequest(text, settings, args.source, options, faults=FaultPlan(list(args.inject)),
                             prompt_token_ids=tuple(tokens), source_memory=memory,
                             draft_max_auto=args.draft_max is None and args.source != "none")
        run = SessionRun(scheduler, request, record.apply, observer=printer)
        try:
            run.tokenize()
            run.make_source()
            gen = run.open()
            t0 = time.perf_counter()
            run.start()
        except (RunRefused, EngineError) as exc:
            print(f"spec-inspector: error: turn {n} ({len(tokens)} prompt tokens, context {runtime.n_ctx}): {exc}",
                  file=sys.stderr)
            run.close_source()
            return EXIT_ERROR
        status = 0 if drive_run(run, gen, printer, args.resume) else EXIT_GENERATION_ERROR
        wall = time.perf_counter() - t0
        printer.newline()
        end = run.end(gen.finish_reason or "error", clean=gen.finished)
        print(format_summary(record.summary(), wall, kv_length=end.kv_length, canonical=end.canonical_position,
                             ended_as=end.reason))
        if args.receipts:
            doc = record_document(record)
            doc["conversation"] = conversation_block(n, turns, history)
            for w in doc["windows"]:
                w["turn"] = n
            out = turn_receipts_path(args.receipts, n)
            try:
                print(f"receipts: {write_document(doc, out)}")
            except (OSError, ReceiptsFileError) as exc:
                print(f"spec-inspector: error: cannot write receipts {out}: {exc}", file=sys.stderr)
                status = EXIT_ERROR
        run.close_source()
        if status:
            print(f"spec-inspector: the conversation stopped at turn {n}", file=sys.stderr)
            return EXIT_GENERATION_ERROR if status == EXIT_GENERATION_ERROR else status
        history.add_turn(text, gen.text.text)
    return status
