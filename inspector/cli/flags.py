"""``spec-inspector flags CONFIG``: the llama-server arguments of a configuration (issue 16).

The rule is the sources' declarations (``inspector.sources.server_flags``); this prints it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from inspector.bench.compare import parse_config
from inspector.cli.common import EXIT_USAGE, fail as _fail
from inspector.cli.context import add_context_flags, add_n_ctx_flag, add_threads_flag, context_from_args
from inspector.cli.ranges import whole_number
from inspector.cli.sampling import add_sampling_flags, sampling_from_args
from inspector.sources.server_flags import LLAMA_SERVER_FLAGS_FROM, server_command, server_notes


def add_flags_command(sub) -> None:
    """The ``flags`` subcommand's arguments (on ``sub``, the CLI's subparsers)."""
    fl = sub.add_parser("flags", help="print the llama-server arguments of a configuration",
                        description="Print the exact llama-server arguments that reproduce a configuration of one "
                                    "of llama.cpp's proposers (ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, "
                                    "ngram-cache) or a draft model, with the flag names of 2026's llama-server, and "
                                    "the context and sampling flags whose values are not llama-server's defaults "
                                    "(run's defaults: greedy, so --temp 0; -c 2048; -b 512; the seed).")
    fl.add_argument("config", metavar="SOURCE[:key=value,...]",
                    help="a configuration as compare takes it, e.g. ngram-mod:n_min=16 or draft:draft_model=D.gguf")
    fl.add_argument("--model", "-m", type=Path, help="add -m MODEL (the target GGUF)")
    add_threads_flag(fl, "0: no -t (llama.cpp's own default)")
    add_n_ctx_flag(fl)
    fl.add_argument("-sys", "--system-prompt", default="", metavar="TEXT",
                    help="the run's system prompt: llama-server has no flag for it, a note says where it goes")
    add_context_flags(fl)
    add_sampling_flags(fl)


def cmd_flags(args) -> int:
    """Print ``llama-server ...`` for ``args.config`` (compare's ``SOURCE[:key=value,...]``) with the context
    and sampling flags (``server_arguments``), then the notes of ``server_notes`` on stderr
    (spec-inspector's own proposal cap, a draft max the type ignores, a missing draft model, where a
    system prompt goes). Exit 2 for an unknown source, a bad option, a source llama-server lacks, or
    context settings llama.cpp refuses."""
    try:
        config = parse_config(args.config)
        sampling, sampling_notes = sampling_from_args(args)
        context = context_from_args(args)
        if context.refusal():
            raise ValueError(f"llama.cpp refuses this context: {context.refusal()}")
        line = server_command(config.source, config.options, draft_max=config.draft_max,
                              model=str(args.model) if args.model else None, sampling=sampling, n_ctx=args.n_ctx,
                              n_batch=args.n_batch, context=context, n_threads=args.n_threads)
        notes = [*sampling_notes, *server_notes(config.source, config.options, draft_max=config.draft_max,
                                                system_prompt=args.system_prompt)]
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)
    print(line)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"flag names: {LLAMA_SERVER_FLAGS_FROM}", file=sys.stderr)
    return 0
