"""``bench --synthetic``: speedup over plain decoding for mean acceptance lengths 1..8 and draft costs
0..0.5 c(1), measured with the synthetic source beside the cost model's prediction
(``inspector.bench.synthetic_table``)."""

from __future__ import annotations

import sys

from inspector.bench.synthetic_table import format_synthetic_table, synthetic_table
from inspector.cli.bench_costs import bench_on_target
from inspector.prompts import example_prompt

SYNTHETIC_EXAMPLE = "open-ended"
"""The bundled example whose prompt the table decodes (a story: nothing an n-gram would find)."""


def add_synthetic_flag(parser) -> None:
    """``bench --synthetic``."""
    parser.add_argument("--synthetic", action="store_true",
                        help="instead: would a better draft pay here? speedup over plain decoding of the synthetic "
                             "source for mean acceptance lengths 1..8 (tokens per window) and draft costs 0, 0.25, "
                             "0.5 c(1) per token, measured (median of --repeats, --max-tokens each) beside the cost "
                             f"model's prediction, on the {SYNTHETIC_EXAMPLE} example")


def bench_synthetic_command(args) -> int:
    """Run ``bench --synthetic`` and print its table (``--json OUT``: the figures)."""
    def work(runtime):
        result = synthetic_table(runtime, runtime.prompt_tokens(example_prompt(SYNTHETIC_EXAMPLE)),
                                 max_new_tokens=args.max_tokens, repeats=args.repeats,
                                 progress=lambda m: print(m, file=sys.stderr, flush=True))
        return format_synthetic_table(result), result

    return bench_on_target(args, work)

