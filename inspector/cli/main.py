"""The ``spec-inspector`` command line (argparse): the parser and the dispatch to each command.

``spec-inspector``            opens the inspector window (GUI).
``spec-inspector run ...``    runs speculative decoding headless and writes receipts (``inspector.cli.run``).
``spec-inspector serve``      serves llama-server's HTTP API, every request recorded (``inspector.cli.serve``).
``spec-inspector view FILE``  prints the summary of a receipts file (``inspector.cli.view``).
``spec-inspector make-draft`` re-quantizes a model into a draft model.
``spec-inspector trace FILE -o OUT`` writes a Chrome trace (Perfetto) of a receipts file.
``spec-inspector bench`` / ``compare`` measure speed (``inspector.cli.bench``, ``inspector.cli.compare``).
``spec-inspector audit FILE`` why a greedy run's output differs from plain decoding (``inspector.cli.audit``).
``spec-inspector diff A B`` what changed between two runs of the same prompt (``inspector.cli.diff``).

Every failure a user can cause (bad flag, missing file, damaged model, prompt
too long) ends with one line on stderr and a non-zero exit status.

A new command: a module with ``add_..._command(sub)`` and ``cmd_...(args)``, added to
``build_parser`` and ``HANDLERS`` here. No other module imports this one (but ``__init__``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from inspector.cli.audit import add_audit_command, cmd_audit
from inspector.cli.bench import add_bench_commands, cmd_bench
from inspector.cli.compare import cmd_compare
from inspector.cli.common import EXIT_USAGE, fail
from inspector.cli.devices import add_commands as add_device_commands, cmd_devices
from inspector.cli.diff import add_diff_command, cmd_diff
from inspector.cli.flags import add_flags_command, cmd_flags
from inspector.cli.interrupt import Interrupted, install_interrupt_handlers
from inspector.cli.paths import OutputPathError, check_outputs, expand_user_paths
from inspector.cli.rpc_server import cmd_rpc_server
from inspector.cli.run import add_run_command, cmd_run
from inspector.cli.serve import add_serve_command, cmd_serve
from inspector.cli.standard_output import guard_stdout, restore_stdout, stdout_status
from inspector.cli.tune import add_tune_command, cmd_tune
from inspector.cli.view import add_view_commands, cmd_trace, cmd_view
from inspector.exact_options import ExactOptionParser
from inspector.llama.model_file import ModelFileError, bundled_model_path
from inspector.llama.quantize import DRAFT_TYPES, make_draft
from inspector.start_signals import default_signals


class _Parser(ExactOptionParser):
    """argparse with options by their exact names only (``ExactOptionParser``: llama.cpp's short flags are
    never guessed from a prefix), and a usage error is one line (and the exit status 2)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (``HANDLERS``); a usage error exits with one line and status 2."""
    parser = _Parser(
        prog="spec-inspector",
        description="See speculative decoding happen on llama.cpp.",
        epilog="Without a command, spec-inspector opens the inspector window; its options: "
               "--model PATH (GGUF to load), --receipts FILE (a receipts .json or autosave .jsonl to open), "
               "--prompt TEXT (prompt to put in the editor).",
    )
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    add_run_command(sub)
    add_serve_command(sub)
    add_view_commands(sub)
    add_bench_commands(sub)
    add_flags_command(sub)
    add_tune_command(sub)
    add_audit_command(sub)
    add_diff_command(sub)
    add_make_draft_command(sub)
    add_device_commands(sub)  # devices and rpc-server
    return parser


def add_make_draft_command(sub) -> None:
    """The ``make-draft`` subcommand's arguments (on ``sub``, the CLI's subparsers)."""
    md = sub.add_parser("make-draft", help="make a draft model by re-quantizing the target",
                        description="Re-quantize a GGUF into a smaller type (llama.cpp llama_model_quantize) and "
                                    "print the draft's path; use it with run --source draft --draft-model PATH.")
    md.add_argument("--model", "-m", type=Path, help="the target GGUF (default: the bundled model)")
    md.add_argument("--type", choices=list(DRAFT_TYPES), default="Q4_0", help="draft quantization [Q4_0]")
    md.add_argument("--out", type=Path, help="folder for the draft (default: the user cache folder)")


def cmd_make_draft(args) -> int:
    """``spec-inspector make-draft``: print the draft's path; returns 0, or 1 after one line saying why not."""
    try:
        model = args.model or bundled_model_path()
        print(f"re-quantizing {model} to {args.type} ...", file=sys.stderr, flush=True)
        path = make_draft(model, args.type, args.out)
    except (ModelFileError, ValueError, OSError) as exc:
        return fail(str(exc))
    print(path)
    return 0


def cmd_gui(argv: list[str]) -> int:
    """Open the inspector window with ``argv`` (its own options); returns its exit status, or 1 after one
    line when the window cannot start (a build without it, PySide6 missing)."""
    try:
        from inspector.gui.app import main as gui_main  # PySide6 only when the window opens; may be absent
    except ImportError as exc:
        if "inspector.gui" in str(exc):
            return fail("the inspector window is not part of this build; use `spec-inspector run --help`")
        return fail(f"cannot start the inspector window: {exc}")
    default_signals()  # the window takes Ctrl-C as Python does (quiet only while the imports ran)
    return gui_main(argv)


HANDLERS = {
    "run": cmd_run, "view": cmd_view, "make-draft": cmd_make_draft, "trace": cmd_trace, "bench": cmd_bench,
    "compare": cmd_compare, "rpc-server": cmd_rpc_server, "devices": cmd_devices, "flags": cmd_flags,
    "tune": cmd_tune, "serve": cmd_serve, "audit": cmd_audit, "diff": cmd_diff,
}
"""Each command's function: ``cmd(args) -> exit status``."""
COMMANDS = tuple(HANDLERS)


def main(argv: list[str] | None = None) -> int:
    """The ``spec-inspector`` entry point: a command with ``argv`` (default ``sys.argv[1:]``), or the window
    without one. Returns the exit status (0; 1 an error; 2 a usage error; 3 a failed generation; 128 + a
    signal's number when interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        return fail(f"unknown command {argv[0]!r}: expected one of {', '.join(COMMANDS)} "
                    f"(no command opens the window; see spec-inspector --help)", EXIT_USAGE)
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help"):
        return cmd_gui(argv)
    install_interrupt_handlers()  # SIGINT/SIGTERM/SIGHUP raise Interrupted: one line, never a traceback
    stdout = guard_stdout()  # a failing standard output never costs the files (issue 37)
    try:
        return stdout_status(stdout, _command(argv))
    except (Interrupted, KeyboardInterrupt) as exc:  # before a run had anything to keep
        status = exc.status if isinstance(exc, Interrupted) else 130
        name = f" ({exc.name})" if isinstance(exc, Interrupted) else ""
        return fail(f"interrupted{name}; nothing was written", status)
    finally:
        restore_stdout(stdout)


def _command(argv: list[str]) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        files = [e for e in extras if e.endswith((".json", ".jsonl"))]
        hint = "; two receipts files are compared with spec-inspector diff A.json B.json" \
            if args.command == "compare" and files else ""
        print(f"spec-inspector {args.command}: error: unrecognized arguments: {' '.join(extras)} "
              f"(see spec-inspector {args.command} --help{hint})", file=sys.stderr)
        return EXIT_USAGE
    expand_user_paths(args)  # ~ is the home folder in every path flag: one rule (issue 37)
    try:
        check_outputs(args)  # writable, no folder, never an input, sources' files too: before any work
    except OutputPathError as exc:
        return fail(str(exc), EXIT_USAGE)
    handler = HANDLERS.get(args.command)
    if handler is None:
        build_parser().print_help()
        return EXIT_USAGE
    try:
        return handler(args)
    except BrokenPipeError:  # e.g. `spec-inspector view r.json --windows | head`: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
