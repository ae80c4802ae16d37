"""``bench --figures``: the per-row probability figures' cost against vocabulary size: on the host, on synthetic
rows (``inspector.bench.figures_vocab``), then on real models, the host path against backend sampling
(``inspector.bench.figures_paths``: the bundled model, Gemma 3 270M when installed, ``--model``)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from inspector.bench.figures_paths import bench_models, format_paths, measure_paths
from inspector.bench.figures_vocab import figures_bench, format_figures_bench
from inspector.cli.common import RUNTIME_OPEN_ERRORS, fail

DEFAULT_SAMPLES = 300
"""Timed rows (and windows) per vocabulary when ``--repeats`` does not say."""


def add_figures_flag(parser) -> None:
    """``bench --figures``."""
    parser.add_argument("--figures", action="store_true",
                        help="instead: what the per-row probability figures cost on the host against vocabulary "
                             "size (49,152 tokens as the bundled model, 128k, 152k and 262k as Llama 3, Qwen 2.5 "
                             "and Gemma 3), on synthetic logits rows cold in the caches: a row's argmax, the C "
                             f"kernel's figures of a plain step and of a window, numpy's; --repeats rows each "
                             f"[{DEFAULT_SAMPLES}]; then on the bundled model, Gemma 3 270M (262,144 tokens) when "
                             "its package is installed and --model: plain greedy steps on the host path against "
                             "backend sampling (-bs), alternating blocks, -t threads [all cores]")


def bench_figures_command(args) -> int:
    """Run ``bench --figures`` and print its table (``--json OUT``: the figures)."""
    samples = args.repeats or DEFAULT_SAMPLES
    try:
        costs = figures_bench(samples, numpy_samples=max(3, samples // 10),
                              progress=lambda m: print(m, file=sys.stderr, flush=True))
    except RuntimeError as exc:
        return fail(str(exc))
    print(format_figures_bench(costs), flush=True)
    threads = args.n_threads or os.cpu_count() or 1
    paths = []
    try:
        for name, path in bench_models(args.model):
            paths.append(measure_paths(name, path, threads,
                                       progress=lambda m: print(m, file=sys.stderr, flush=True)))
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    print()
    print(format_paths(paths, threads))
    if args.json:
        args.json.write_text(json.dumps({"synthetic": [dataclasses.asdict(c) for c in costs],
                                         "models": [dataclasses.asdict(p) for p in paths]}, indent=1),
                             encoding="utf-8")
    return 0
