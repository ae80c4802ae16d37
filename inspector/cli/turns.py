"""``spec-inspector run --turns FILE``: a conversation, turn after turn, on one loaded target (issue 16).

Each turn is one request whose prompt is the chat so far (``inspector.session.conversation``);
sources keep what they remember across the turns (one ``RunRequest.source_memory``). The text of
every turn streams as it is committed after the turn's whole user message (``user: ...``, then
``answer:``; not with ``--quiet``), each turn prints its summary, and ``--receipts OUT.json``
writes one conversation receipts document (``inspector.session.conversation.conversation_document``:
one request document per turn, each window naming its ``turn``), written again after every turn.
``--autosave OUT.jsonl`` is the conversation's crash-safe log: one file, every turn appended as it
happens (its own ``header`` line, with the turn's ``conversation`` block: turn, turns, message;
then its records, flushed one by one; ``view`` shows each turn, ``view --turn N`` one).
A turn that cannot run (its prompt no longer fits the context, the source refuses) ends the
conversation with a message naming the turn; the file keeps the earlier turns and says where
the conversation stopped.
"""

from __future__ import annotations

import sys
import time

from inspector.cli.common import EXIT_ERROR, EXIT_GENERATION_ERROR, UserError
from inspector.cli.interrupt import Interrupted, end_interrupted, interrupted_line, signals_held
from inspector.engine import FaultPlan, RuntimeScheduler
from inspector.engine.settings import requested_draft_max
from inspector.engine.errors import EngineError
from inspector.prompts import TURNS_EXAMPLES, turns_path
from inspector.receipts import ReceiptsFileError, write_document
from inspector.receipts.autosave import AutosaveWriter
from inspector.cli.run_output import (StreamPrinter, drive_run, format_reasons, format_summary, tree_line,
                                      turn_heading)
from inspector.session.conversation import MAX_TURNS, Conversation, conversation_document, read_turns
from inspector.session.session_record import SessionRecord
from inspector.session.run import RunRefused, RunRequest, SessionRun
from inspector.session.transcript import message_text

TURNS_HELP = (f"a turns file (user messages separated by lines holding only ---, or a JSON list; 1..{MAX_TURNS} turns) "
              f"or a bundled one ({', '.join(TURNS_EXAMPLES)}); each turn's prompt is the chat so far, and sources "
              "keep their memory across turns")


def add_turns_argument(parser, command: str) -> None:
    """``--turns FILE|NAME`` for ``run`` (one conversation receipts document) or ``compare`` (rows sum the turns)."""
    tail = ("; --receipts writes one conversation document holding every turn" if command == "run" else
            "; each configuration answers with its own history, and each row sums every turn")
    parser.add_argument("--turns", metavar="FILE|NAME", help=f"run a conversation: {TURNS_HELP}{tail}")


def turns_of(args) -> list[str] | None:
    """The turns of ``run --turns`` (None without it). Raises ``UserError`` for a turns file
    that cannot be used (its message names the file and the turn) or for ``--baseline`` with turns."""
    if args.turns is None:
        return None
    try:
        turns = read_turns(turns_path(args.turns))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if args.baseline:
        raise UserError("--baseline compares one prompt with plain decoding; it does not run with --turns")
    return turns


def run_turns(args, runtime, turns: list[str], settings, options: dict) -> int:
    """Run every turn of ``turns`` with the ``run`` arguments ``args`` on ``runtime``; returns the exit
    status (0, ``EXIT_ERROR`` when a turn could not start, ``EXIT_GENERATION_ERROR`` after a failed
    turn). The receipts file holds every turn that ran, whatever happens to a later one."""
    scheduler = RuntimeScheduler(runtime)
    conv = Conversation.opened(args.system_prompt, len(turns))  # every turn's prompt holds it (llama.cpp's -sys)
    printer = StreamPrinter(sys.stdout, quiet=args.quiet)
    current: dict = {}
    for n, text in enumerate(turns, 1):
        try:
            status = _run_turn(args, scheduler, conv, printer, n, text, settings, options, current)
        except Interrupted as exc:  # the turns so far, and this turn's complete windows, are kept
            return _interrupted(args, conv, n, exc, current)
        if status is not None:
            return status
    if len(turns) > 1:
        trees = tree_line([r for g in conv.records for r in g.receipts], runtime, "trees, every turn")
        if trees is not None:
            print(trees)
    return 0


def _run_turn(args, scheduler, conv, printer, n: int, text: str, settings, options, current: dict) -> int | None:
    """Run turn ``n`` (its message ``text``); None when the conversation goes on, else the exit status.
    ``current`` gets the turn's ``run`` and ``record`` as soon as they exist (for an interrupt)."""
    runtime = scheduler.runtime
    turns = conv.planned_turns
    print(turn_heading(n, turns, text), flush=True)
    if not args.quiet:  # the whole message (the heading shortens it), then the answer as it streams
        print(f"{message_text('user', text)}\nanswer:", flush=True)
    record = SessionRecord()
    request = RunRequest(text, settings, args.source, options, faults=FaultPlan(list(args.inject)),
                         system_prompt=args.system_prompt,
                         draft_max_auto=requested_draft_max(args.draft_max)[1],
                         **conv.next_turn(text))
    run = SessionRun(scheduler, request, record.apply, observer=printer, open_autosave=_autosave(args, conv, n, text))
    current.update(run=run, record=record)
    try:
        run.tokenize()
        run.make_source()
        gen = run.open()
        if run.autosave_error:
            raise EngineError(f"cannot write autosave {args.autosave}: {run.autosave_error}")
        t0 = time.perf_counter()
        run.start()
    except (RunRefused, EngineError) as exc:
        size = f"{len(run.prompt_tokens)} prompt tokens, " if run.prompt_tokens else ""
        print(f"spec-inspector: error: turn {n} ({size}context {runtime.n_ctx}): {exc}", file=sys.stderr)
        run.close_source()
        conv.stopped_at = f"turn {n} could not start: {exc}"
        _write(args, conv)
        return EXIT_ERROR
    failed = not drive_run(run, gen, printer, args.resume)
    wall = time.perf_counter() - t0
    printer.newline()
    end = run.end(gen.finish_reason or "error", clean=gen.finished)
    print(format_summary(record.summary(), wall, kv_length=end.kv_length, canonical=end.canonical_position,
                         ended_as=end.reason, incomplete_utf8_bytes=end.incomplete_utf8_bytes,
                         why=format_reasons(record.events, args.source)))
    trees = tree_line(record.receipts, scheduler.runtime)
    if trees is not None:
        print(trees)
    if run.autosave is not None:
        print(f"autosave: {run.autosave.writer.path} (turn {n})")
    if run.autosave_error:
        print(f"spec-inspector: autosave stopped: {run.autosave_error}", file=sys.stderr)
    run.close_source()
    conv.add_turn(record)
    if failed:
        conv.stopped_at = f"turn {n} failed: {'; '.join(end.errors) or end.reason}"
    if not _write(args, conv):
        return EXIT_ERROR
    if failed:
        print(f"spec-inspector: the conversation stopped at turn {n}", file=sys.stderr)
        return EXIT_GENERATION_ERROR
    return None


def _autosave(args, conv, n: int, text: str):
    """``SessionRun``'s ``open_autosave`` for turn ``n`` (message ``text``): ``--autosave``'s file, started
    by the first turn that runs and appended to by each next one; None without ``--autosave``."""
    if not args.autosave:
        return None
    block = {"turn": n, "turns": conv.planned_turns or n, "user_text": text}
    return lambda header: AutosaveWriter(args.autosave, {**header, "conversation": block}, append=bool(conv.records))


def _interrupted(args, conv, n: int, exc, current: dict) -> int:
    """A signal ended turn ``n``: keep it (its complete windows, ``ended_as: interrupted``) when its run
    had opened, write every turn to ``--receipts`` and say so in one line. Returns ``exc.status``."""
    with signals_held():
        run, record = current.get("run"), current.get("record")
        if run is not None and run.generation is not None and record is not None and record.header is not None:
            if run.ended is None:
                end_interrupted(run, exc)
            if record.ended_as is None:
                record.ended_as = "interrupted"
            if not conv.records or conv.records[-1] is not record:
                conv.add_turn(record)
        conv.stopped_at = f"turn {n} interrupted ({exc.name})"
        written = _write(args, conv, quiet=True)
        if written is not False:  # False: the write failed, and its line said why
            windows = sum(len(r.receipts) for r in conv.records)
            autosave = str(args.autosave) if args.autosave and (conv.records or getattr(run, "autosave", None)) else ""
            print(interrupted_line(exc, windows, written, autosave), file=sys.stderr)
    return exc.status


def _write(args, conv, quiet: bool = False):
    """Write ``conv``'s receipts to ``--receipts`` (if given and a turn ran); False after saying why it failed.
    ``quiet``: print nothing on success and return the path written ("" when nothing was)."""
    if not args.receipts or not conv.records:
        return "" if quiet else True
    try:
        path = write_document(conversation_document(conv), args.receipts)
    except (OSError, ReceiptsFileError, ValueError) as exc:
        print(f"spec-inspector: error: cannot write receipts {args.receipts}: {exc}", file=sys.stderr)
        return False
    if quiet:
        return str(path)
    print(f"receipts: {path} (turns 1-{conv.turns})" if conv.turns > 1 else f"receipts: {path} (turn 1)")
    return True
