"""What ``bench --concurrency`` measures and shows: its contenders (``Contender``: which server setup a row
is), each run's figures (``LevelRun``), the cells over rounds (``Cell``: medians, p95, ours / llama-server
ratios), the whole result (``ConcurrencyResult``, with where speculation stops paying) and its text table
(``format_concurrency_bench``). The bench itself, which starts the servers and drives the clients, is
``inspector.bench.concurrency_bench``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import median
from typing import Sequence

from inspector.bench.compare_result import CompareConfig
from inspector.serve.slots import BATCHED
from inspector.sources.registry import PLAIN

LLAMA_SERVER = "llama-server"
OURS_BATCHED = "ours batched"
OURS_LOCKED = "ours locked"


@dataclass(frozen=True)
class Contender:
    """One server setup of a level: ``label`` (the table's), ``ours`` (our serve as a child process, else
    llama-server), our ``schedule`` (``batched`` or ``locked``) and ``spec_max_active`` (slots; None: no gate)."""

    label: str
    ours: bool = True
    schedule: str = BATCHED
    spec_max_active: int | None = None

    def plain_label(self) -> str:
        """The contender whose plain decoding this one's speculation is weighed against."""
        return OURS_BATCHED if self.spec_max_active is not None else self.label


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 < q <= 1) of ``values`` (not empty): the smallest value with at
    least ``q`` of them at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass
class LevelRun:
    """One run: N clients against one server. ``wall_s``: seconds from the clients' start to the last reply;
    ``tokens``: generated tokens over every reply (``timings.predicted_n``); ``latencies_s``: each request's
    seconds, sent -> stream ended; ``draft_n`` / ``draft_n_accepted``: summed over the replies."""

    wall_s: float
    tokens: int
    latencies_s: list[float]
    draft_n: int = 0
    draft_n_accepted: int = 0

    @property
    def tokens_per_s(self) -> float:
        """Aggregate generated tokens per second of wall time."""
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    def to_json(self) -> dict:
        """The run's figures (seconds, tokens)."""
        return {"wall_s": self.wall_s, "tokens": self.tokens, "tokens_per_s": self.tokens_per_s,
                "latencies_s": self.latencies_s, "draft_n": self.draft_n, "draft_n_accepted": self.draft_n_accepted}


@dataclass
class Cell:
    """One level, configuration (``source``: its source name) and contender, over the rounds: ``runs`` (one per
    round it ran), ``ratios`` (ours / llama-server's aggregate tokens/s, per round; empty for llama-server's own
    cell), ``error`` (one line: the server could not run it)."""

    level: int
    source: str
    contender: str
    runs: list[LevelRun] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def tokens_per_s(self) -> float | None:
        """Median over rounds of the aggregate tokens/s (None: no run)."""
        return median(r.tokens_per_s for r in self.runs) if self.runs else None

    @property
    def latency_median_ms(self) -> float | None:
        """Median latency (ms) of every request of every round."""
        return 1000 * median(t for r in self.runs for t in r.latencies_s) if self.runs else None

    @property
    def latency_p95_ms(self) -> float | None:
        """p95 latency (ms, nearest rank) of every request of every round."""
        return 1000 * percentile([t for r in self.runs for t in r.latencies_s], 0.95) if self.runs else None

    @property
    def ratio(self) -> float | None:
        """Median of the rounds' ours / llama-server ratios (None: llama-server's cell, or no pair)."""
        return median(self.ratios) if self.ratios else None

    @property
    def ratio_quartiles(self) -> tuple[float, float]:
        """The first and third quartiles of the rounds' ratios (nearest rank): the middle half of them."""
        return percentile(self.ratios, 0.25), percentile(self.ratios, 0.75)

    def to_json(self) -> dict:
        """The cell's figures (tokens/s, ms) and its runs."""
        return {"level": self.level, "source": self.source, "contender": self.contender,
                "tokens_per_s": self.tokens_per_s, "latency_median_ms": self.latency_median_ms,
                "latency_p95_ms": self.latency_p95_ms, "ratio": self.ratio, "ratios": self.ratios,
                "runs": [r.to_json() for r in self.runs], "error": self.error}


@dataclass
class ConcurrencyResult:
    """The whole bench: its levels, configurations and contenders (labels) and a ``Cell`` for each."""

    levels: tuple[int, ...]
    configs: list[CompareConfig]
    contenders: list[Contender]
    cells: dict[tuple[int, str, str], Cell]

    def cell(self, level: int, source: str, contender: str) -> Cell:
        """The cell of ``level`` clients, ``source`` (a configuration's source name) and ``contender`` (label)."""
        return self.cells[(level, source, contender)]

    def runs_source(self, source: str, contender: Contender) -> bool:
        """Whether ``contender`` runs ``source``'s configuration (the gate only matters when drafting)."""
        return source != PLAIN or contender.spec_max_active is None

    def measured(self, source: str, contender: Contender) -> bool:
        """Whether every level has figures for ``source`` and plain decoding on ``contender``."""
        return all(self.cell(level, s, label).tokens_per_s is not None for level in self.levels
                   for s, label in ((source, contender.label), (PLAIN, contender.plain_label())))

    def stops_paying(self, source: str, contender: Contender) -> int | None:
        """The lowest level whose aggregate tokens/s with ``source`` is at or below plain decoding's on the same
        contender (``Contender.plain_label``), or None: it paid at every level measured (or was not measured)."""
        for level in self.levels:
            spec = self.cell(level, source, contender.label).tokens_per_s
            plain = self.cell(level, PLAIN, contender.plain_label()).tokens_per_s
            if spec is not None and plain is not None and spec <= plain:
                return level
        return None

    def to_json(self) -> dict:
        """Every cell's figures and, per speculative source and contender, where speculation stops paying."""
        speculative = [c.source for c in self.configs if c.source != PLAIN]
        return {"levels": list(self.levels), "configs": [c.to_json() for c in self.configs],
                "contenders": [c.label for c in self.contenders],
                "cells": [c.to_json() for c in self.cells.values()],
                "stops_paying": {s: {c.label: self.stops_paying(s, c) for c in self.contenders} for s in speculative}}


def format_concurrency_bench(result: ConcurrencyResult, *, examples: Sequence[str], n_predict: int, repeats: int,
                             threads: int) -> str:
    """The bench as a text table: a line per level, configuration and contender (aggregate tokens/s, request
    latency median and p95 in ms, ours / llama-server), then where speculation stops paying per contender."""
    num = lambda x, f: f.format(x) if x is not None else "n/a"  # noqa: E731
    lines = [f"concurrency: N clients at once, each sending one streamed greedy chat request per round (one of "
             f"{len(examples)} examples, {n_predict} tokens); -np N -kvu on every server, {threads} threads on both "
             f"sides; medians over {repeats} rounds (servers kept running, order alternating); ours/llama-server: "
             "median of the rounds' ratios [middle half of them]",
             "configurations: " + "; ".join(c.label for c in result.configs),
             f"{'clients':>7s}  {'source':14s} {'server':34s} {'tok/s':>7s} {'median ms':>9s} {'p95 ms':>7s} "
             f"{'ours/llama-server':>22s}"]
    for level in result.levels:
        for config in result.configs:
            for c in result.contenders:
                cell = result.cells.get((level, config.source, c.label))
                if cell is None:
                    continue
                ratio = "-" if not c.ours else num(cell.ratio, "{:.2f}")
                if cell.ratios and len(cell.ratios) > 1:
                    low, high = cell.ratio_quartiles
                    ratio += f" [{low:.2f}-{high:.2f}]"
                tail = f"  error: {cell.error}" if cell.error else ""
                lines.append(f"{level:>7d}  {config.source[:14]:14s} {c.label[:34]:34s} "
                             f"{num(cell.tokens_per_s, '{:.1f}'):>7s} {num(cell.latency_median_ms, '{:.0f}'):>9s} "
                             f"{num(cell.latency_p95_ms, '{:.0f}'):>7s} {ratio:>22s}{tail}")
    lines.append("")
    lines.append("speculation stops paying (its aggregate tok/s <= plain decoding's on the same server) at:")
    for config in result.configs:
        if config.source == PLAIN:
            continue
        said = []
        for c in result.contenders:
            level = result.stops_paying(config.source, c)
            if level is not None:
                said.append(f"{c.label} {level} client{'s' if level > 1 else ''}")
            elif result.measured(config.source, c):
                said.append(f"{c.label} never (up to {max(result.levels)} clients)")
            else:
                said.append(f"{c.label} n/a")
        lines.append(f"  {config.source}: " + "; ".join(said))
    return "\n".join(lines)
