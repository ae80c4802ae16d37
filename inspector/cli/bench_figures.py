"""``bench --figures``: the per-row probability figures' cost on the host against vocabulary size
(``inspector.bench.figures_vocab``; no model is loaded)."""

from __future__ import annotations

import dataclasses
import json
import sys

from inspector.bench.figures_vocab import figures_bench, format_figures_bench
from inspector.cli.common import fail

DEFAULT_SAMPLES = 300
"""Timed rows (and windows) per vocabulary when ``--repeats`` does not say."""


def add_figures_flag(parser) -> None:
    """``bench --figures``."""
    parser.add_argument("--figures", action="store_true",
                        help="instead: what the per-row probability figures cost on the host against vocabulary "
                             "size (49,152 tokens as the bundled model, 128k, 152k and 262k as Llama 3, Qwen 2.5 "
                             "and Gemma 3), on synthetic logits rows cold in the caches: a row's argmax, the C "
                             f"kernel's figures of a plain step and of a window, numpy's; --repeats rows each "
                             f"[{DEFAULT_SAMPLES}]; no model is loaded")


def bench_figures_command(args) -> int:
    """Run ``bench --figures`` and print its table (``--json OUT``: the figures)."""
    samples = args.repeats or DEFAULT_SAMPLES
    try:
        costs = figures_bench(samples, numpy_samples=max(3, samples // 10),
                              progress=lambda m: print(m, file=sys.stderr, flush=True))
    except RuntimeError as exc:
        return fail(str(exc))
    print(format_figures_bench(costs))
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(c) for c in costs], indent=1), encoding="utf-8")
    return 0
