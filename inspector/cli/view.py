"""The ``view`` and ``trace`` commands: read a receipts file (or an autosave) without a model."""

from __future__ import annotations

import sys
from pathlib import Path

from inspector.cli.common import EXIT_ERROR, fail
from inspector.cli.ranges import positive
from inspector.engine.records import receipt_from_json
from inspector.receipts import ReceiptsFileError, load_document
from inspector.receipts.document import is_conversation, version_note
from inspector.receipts.trace import trace_file
from inspector.cli.run_output import (document_token_text, format_autosave, format_autosave_turns, format_conversation,
                                  format_document, format_events, format_window_rows, format_windows, turn_heading)
from inspector.session.record_from_file import records_from_autosave


def add_view_commands(sub) -> None:
    """The ``view`` and ``trace`` subcommands' arguments (on ``sub``, the CLI's subparsers)."""
    view = sub.add_parser("view", help="print the summary of a receipts file (.json) or an autosave (.jsonl)")
    view.add_argument("file", type=Path)
    view.add_argument("--windows", action="store_true",
                      help="also print one line per window and per discard (decode step, decision id, outcome)")
    view.add_argument("--events", action="store_true", help="also print the ordered event list (receipts .json)")
    view.add_argument("--window", type=positive, metavar="N", action="append", default=[],
                      help="also print window N row by row with the target's probabilities (repeatable)")
    view.add_argument("--turn", type=positive, metavar="N",
                      help="a conversation file (run --turns, the window's Next turn; run --turns' autosave): show "
                           "turn N as one request")

    tr = sub.add_parser("trace", help="write a Chrome trace (Perfetto) of a receipts file",
                        description="Convert a receipts file to Chrome trace event JSON: open it in "
                                    "https://ui.perfetto.dev or chrome://tracing.")
    tr.add_argument("file", type=Path, help="receipts .json")
    tr.add_argument("-o", "--out", type=Path, required=True, help="trace .json to write")


def cmd_view(args) -> int:
    if not args.file.exists():
        return fail(f"cannot read receipts {args.file}: no such file")
    if args.file.suffix == ".jsonl":
        try:
            turns = records_from_autosave(args.file)
        except ReceiptsFileError as exc:
            return fail(str(exc))
        for k, r in enumerate(turns, 1):  # a damaged header is read as it is: say so
            if r.header_problems:
                print(f"spec-inspector: note: {args.file}: the header{f' of turn {k}' if len(turns) > 1 else ''} is "
                      f"damaged ({'; '.join(r.header_problems)}): what it says of the run may be wrong",
                      file=sys.stderr)
        if len(turns) > 1 and args.turn is None:  # a conversation's autosave (run --turns): a line per turn
            print(format_autosave_turns(turns))
            if args.windows or args.window or args.events:
                print("spec-inspector: note: a conversation's windows and events are per turn: add --turn N",
                      file=sys.stderr)
            return 0
        if args.turn is not None and len(turns) == 1 and not turns[0].conversation:
            return fail(f"{args.file} is one run, not a conversation: --turn does not apply")
        if args.turn is not None and args.turn > len(turns):
            return fail(f"{args.file} has no turn {args.turn} (turns 1..{len(turns)})")
        rec = turns[(args.turn or 1) - 1]
        print(format_autosave(rec))
        if args.windows:
            print("--- windows and discards ---")
            print("\n".join(format_windows(rec.receipts, rec.discards)))
        if args.window and _print_windows(args.window, rec.receipts, rec.text_of, args.file,
                                          skipped=rec.skipped_lines):
            return EXIT_ERROR
        if args.events:
            if rec.events:
                print("--- events ---")
                print("\n".join(format_events(rec.events, rec.text_of, rec.receipts, rec.discards)))
            else:
                print("spec-inspector: note: this autosave holds no event list (written before autosaves kept "
                      "events); view the receipts .json of the run (or use --windows)", file=sys.stderr)
        return 0
    try:
        doc = load_document(args.file)
    except ReceiptsFileError as exc:
        return fail(str(exc))
    if is_conversation(doc):
        if args.turn is None:
            print(format_conversation(doc))
            if args.windows or args.window or args.events:
                print("spec-inspector: note: a conversation's windows and events are per turn: add --turn N",
                      file=sys.stderr)
            return 0
        if args.turn > len(doc["turns"]):
            return fail(f"{args.file} has no turn {args.turn} (turns 1..{len(doc['turns'])})")
        turn = doc["turns"][args.turn - 1]
        print(turn_heading(args.turn, len(doc["turns"]),
                           turn.get("conversation", {}).get("user_text") or turn["prompt"]["text"]))
        doc = turn
    elif args.turn is not None:
        return fail(f"{args.file} is one request, not a conversation: --turn does not apply")
    if args.window and not (args.windows or args.events):
        # Only the asked windows (and which file version they come from), as the docs show (run.md).
        print(f"file: {version_note(doc)}")
        missing = ("this is a schema-1 file, written before per-row probabilities" if doc["schema_version"] == 1
                   else "turned off for this run (--no-probabilities)")
        receipts = _receipts_of(doc, args.file)
        if receipts is None:
            return EXIT_ERROR
        return EXIT_ERROR if _print_windows(args.window, receipts,
                                            document_token_text(doc), args.file, missing) else 0
    print(format_document(doc))
    if args.windows:
        print("--- windows and discards ---")
        print("\n".join(format_windows(doc["windows"], doc["discards"])))
    if args.window:
        receipts = _receipts_of(doc, args.file)
        if receipts is None or _print_windows(args.window, receipts, document_token_text(doc), args.file):
            return EXIT_ERROR
    if args.events:
        print("--- events ---")
        print("\n".join(format_events(doc["events"], document_token_text(doc), doc["windows"], doc["discards"])))
    return 0


def _receipts_of(doc: dict, path) -> list | None:
    """The ``WindowReceipt`` of every window of a loaded document, or None after one line naming the
    first window whose fields do not fit together (the schema checks each field, not their agreement)."""
    out = []
    for i, w in enumerate(doc["windows"]):
        try:
            out.append(receipt_from_json(w))
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            fail(f"{path}: window {w.get('window_index', i + 1)} is damaged ({exc}); expected every probability "
                  "column and row list to have one entry per verification row")
            return None
    return out


def _print_windows(numbers, receipts, token_text, path, missing: str | None = None, skipped: int = 0) -> bool:
    """Print each asked window row by row (``format_window_rows``; ``missing``: why windows have no
    figures); True, after a message naming the windows the file has (and the ``skipped`` damaged lines
    of an autosave, where a window may have been) and before anything is printed, when one of them is
    not in the file."""
    by_index = {r.window_index: r for r in receipts}
    absent = [n for n in numbers if n not in by_index]
    if absent:
        have = f"windows 1..{max(by_index)}" if by_index else "no verified windows"
        if skipped:
            have += f"; {skipped} incomplete or damaged line(s) were skipped, a window may have been among them"
        fail(f"{path} has no window {absent[0]} ({have})")
        return True
    blocks = []
    for n in numbers:  # every asked window formatted before one is printed: a damaged one is one line
        r = by_index[n]
        try:
            blocks.append((n, format_window_rows(r, token_text, *(() if missing is None else (missing,)))))
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            fail(f"{path}: window {n}'s rows do not add up ({type(exc).__name__}: {exc}); expected every "
                  f"probability column and row list to have one entry per verification row "
                  f"({r.verification_rows}): the file is damaged")
            return True
    for n, lines in blocks:
        print(f"--- window {n} ---")
        print("\n".join(lines))
    return False


def cmd_trace(args) -> int:
    """``spec-inspector trace FILE -o OUT`` with the parsed ``args``; returns the exit status (0 or ``EXIT_ERROR``)."""
    if not args.file.exists():
        return fail(f"cannot read receipts {args.file}: no such file")
    try:
        path = trace_file(args.file, args.out)  # read and written piece by piece: any size in little memory
    except ReceiptsFileError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"cannot write {args.out}: {exc.strerror or exc}")
    print(path)
    return 0
