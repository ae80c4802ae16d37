"""``spec-inspector flags CONFIG``: the llama-server arguments of a configuration (issue 16).

The rule is the sources' declarations (``inspector.sources.server_flags``); this prints it.
"""

from __future__ import annotations

import sys

from pathlib import Path

from inspector.cli import EXIT_USAGE, _fail


def add_flags_command(sub) -> None:
    """The ``flags`` subcommand's arguments (on ``sub``, the CLI's subparsers)."""
    fl = sub.add_parser("flags", help="print the llama-server arguments of a configuration",
                        description="Print the exact llama-server arguments that reproduce a configuration of one "
                                    "of llama.cpp's proposers (ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, "
                                    "ngram-cache) or a draft model, with the flag names of 2026's llama-server.")
    fl.add_argument("config", metavar="SOURCE[:key=value,...]",
                    help="a configuration as compare takes it, e.g. ngram-mod:n_min=16 or draft:draft_model=D.gguf")
    fl.add_argument("--model", type=Path, help="add -m MODEL (the target GGUF)")


def cmd_flags(args) -> int:
    """Print ``llama-server ...`` for ``args.config`` (compare's ``SOURCE[:key=value,...]``), then the
    notes of ``server_notes`` on stderr (spec-inspector's own proposal cap, a draft max the type
    ignores, a missing draft model). Exit 2 for an unknown source, a bad option or a source
    llama-server lacks."""
    from inspector.bench.compare import parse_config
    from inspector.sources.server_flags import LLAMA_SERVER_FLAGS_FROM, server_command, server_notes

    try:
        config = parse_config(args.config)
        line = server_command(config.source, config.options, draft_max=config.draft_max,
                              model=str(args.model) if args.model else None)
        notes = server_notes(config.source, config.options, draft_max=config.draft_max)
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    print(line)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"flag names: {LLAMA_SERVER_FLAGS_FROM}", file=sys.stderr)
    return 0
