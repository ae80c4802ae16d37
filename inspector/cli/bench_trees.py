"""``bench --trees``: each branching source as a chain and as a tree with the same node budget, on each of
``--tasks``, beside plain decoding (``inspector.bench.tree_bench``)."""

from __future__ import annotations

import sys

from inspector.bench.run import TASKS
from inspector.bench.tree_bench import format_tree_bench, tree_bench
from inspector.cli.bench_costs import bench_on_target
from inspector.cli.common import EXIT_USAGE, fail
from inspector.prompts import TURNS_EXAMPLES


def add_trees_flag(parser) -> None:
    """``bench --trees``."""
    parser.add_argument("--trees", action="store_true",
                        help="instead: tree or chain? c(k) of tree-shaped batches against chains, then each "
                             "branching source (suffix, ngram, ngram-cache, a Q4_0 draft of the model) as a chain and as a tree "
                             "of the same node budget (draft max 8) beside plain decoding on each of --tasks (the "
                             "bundled examples; add agent-edits, file-edits for the conversations), --repeats each "
                             "in rotating order: speedup, tokens per window, rows verified per token, tree windows, "
                             "and which form was faster and why; per workload the best chain against the best tree")


def bench_trees_command(args) -> int:
    """Run ``bench --trees`` and print its table (``--json OUT``: the figures)."""
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS and t not in TURNS_EXAMPLES]
    if unknown or not tasks:
        return fail(f"unknown task {', '.join(unknown) or '(none)'}: expected {', '.join((*TASKS, *TURNS_EXAMPLES))}",
                    EXIT_USAGE)

    def work(runtime):
        result = tree_bench(runtime, tasks, max_tokens=args.max_tokens, repeats=args.repeats,
                            progress=lambda m: print(m, file=sys.stderr, flush=True))
        return format_tree_bench(result), result

    return bench_on_target(args, work)
