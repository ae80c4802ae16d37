"""``bench --synthetic``: speedup over plain decoding for mean acceptance lengths 1..8 and draft costs
0..0.5 c(1), measured with the synthetic source beside the cost model's prediction
(``inspector.bench.synthetic_table``)."""

from __future__ import annotations

import sys

from inspector.bench.run import TASKS
from inspector.bench.synthetic_table import format_examples_summary, format_synthetic_table, synthetic_table
from inspector.cli.bench_costs import bench_on_target
from inspector.cli.common import EXIT_USAGE, fail
from inspector.prompts import example_prompt

def add_synthetic_flag(parser) -> None:
    """``bench --synthetic``."""
    parser.add_argument("--synthetic", action="store_true",
                        help="instead: would a better draft pay here? speedup over plain decoding of the synthetic "
                             "source for mean acceptance lengths 1..8 (tokens per window) and draft costs 0, 0.25, "
                             "0.5 c(1) per token, measured (median of --repeats, --max-tokens each) beside the cost "
                             "model's prediction, on each of --tasks (about 1 min each at -n 64 --repeats 3)")


def bench_synthetic_command(args) -> int:
    """Run ``bench --synthetic`` on each of ``--tasks`` (the bundled examples) and print a table per example and
    how near each came to the cost model's predictions (``--json OUT``: the figures, per example)."""
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        return fail(f"unknown task {', '.join(unknown) or '(none)'}: expected {', '.join(TASKS)}", EXIT_USAGE)

    def work(runtime):
        results = {}
        for task in tasks:
            print(f"{task}:", file=sys.stderr, flush=True)
            results[task] = synthetic_table(runtime, runtime.prompt_tokens(example_prompt(task)),
                                            max_new_tokens=args.max_tokens, repeats=args.repeats,
                                            progress=lambda m: print(m, file=sys.stderr, flush=True))
        text = "\n\n".join(f"{task}:\n{format_synthetic_table(r)}" for task, r in results.items())
        return f"{text}\n\n{format_examples_summary(results)}", {"examples": results}

    return bench_on_target(args, work)
