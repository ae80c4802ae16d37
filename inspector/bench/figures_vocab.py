"""``bench --figures``: what the per-row probability figures cost on the host against vocabulary size (issue 56).

Every verification row and plain step's row of a run gets its figures (the predicted token's p, the proposed
token's p and rank, the top 5, the margin, the entropy: ``inspector.engine.probabilities``), computed on the host
from the row's logits, so their cost grows with the vocabulary: the bundled model has 49,152 tokens, the models our
users run 128k-262k. This measures that cost per row at the vocabularies of ``VOCABULARIES``, on synthetic float32
logits rows (the figures' arithmetic does not depend on what the row says; their values are not looked at here),
each row cold in the caches as a fresh decode's is (a pool of rows larger than the last-level cache, walked in
order): the greedy prediction the decode path takes (numpy's ``argmax``), the C kernel's figures of a plain
step's row and of a window's rows (``kernel_figures``, what a run uses), and numpy's (``summarise_rows`` with
``kernel=False``, the fallback and the reference).

Backend sampling (``run -bs``: the figures' sums computed in llama.cpp's graph, on the device that made the logits)
is the other path; it needs a model's graph, so ``inspector.bench.figures_paths`` measures it on real models.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from inspector.engine.probabilities import TOP, figure_path, kernel_figures, summarise_rows

VOCABULARIES = (("bundled SmolLM2-135M", 49152), ("Llama 3", 128256), ("Qwen 2.5", 151936), ("Gemma 3", 262144))
"""(model family, n_vocab) measured: the bundled model's and the common large vocabularies."""
POOL_BYTES = 96 << 20
"""Logits held in the pool of rows a measurement walks through (bytes): larger than a desktop CPU's last-level
cache, so every row is read cold, as a fresh decode's logits are on the host."""
WINDOW_ROWS = 5
"""Rows of the measured window: 4 proposal tokens and the bonus row."""


@dataclass(frozen=True)
class FiguresCost:
    """One vocabulary's costs, each the median microseconds a row over ``samples`` measurements."""

    family: str
    n_vocab: int
    argmax_us: float
    """numpy's ``argmax`` of one row (the greedy prediction the decode path takes from every row)."""
    plain_us: float
    """The C kernel's figures of a plain step's one row."""
    window_us: float
    """The C kernel's figures of a ``WINDOW_ROWS``-row window, per row."""
    numpy_us: float | None
    """numpy's figures of the same window, per row (None: not measured)."""
    samples: int


def _rows(n_vocab: int, seed: int) -> np.ndarray:
    """A pool of float32 logits rows (``POOL_BYTES``, at least ``2 * WINDOW_ROWS`` rows) with a model's spread:
    a few tokens stand out of a normal bulk."""
    n = max(2 * WINDOW_ROWS, POOL_BYTES // (4 * n_vocab))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n_vocab), dtype=np.float32) * 2.0
    picks = rng.integers(0, n_vocab, size=(n, 5))
    x[np.arange(n)[:, None], picks] += np.float32(12.0)
    return x


def _median_us(samples: list[int], rows: int) -> float:
    return statistics.median(samples) / 1000.0 / rows


def measure_vocabulary(family: str, n_vocab: int, samples: int = 200, numpy_samples: int = 20,
                       seed: int = 0) -> FiguresCost:
    """The figures' cost at ``n_vocab`` tokens (``FiguresCost``): ``samples`` timed rows or windows of each kind,
    ``numpy_samples`` of numpy's (0: not measured). Raises ``RuntimeError`` without the C kernel (its build failed:
    ``figure_path()`` says so)."""
    x = _rows(n_vocab, seed)
    n = len(x)
    predictions = x.argmax(axis=1).tolist()
    proposed = [int(p) for p in predictions]  # the proposal agrees: the rank is found, as on an accepted row
    clock = time.perf_counter_ns
    argmax, plain, window, by_numpy = [], [], [], []
    i = 0
    if kernel_figures(x[0], TOP, predictions[:1]) is None:
        raise RuntimeError(f"no C kernel for the figures ({figure_path()})")
    # Both paths give the same figures here (what is timed is the figures, not a refusal).
    same = summarise_rows(x[:WINDOW_ROWS], proposed[:WINDOW_ROWS - 1], predictions[:WINDOW_ROWS], kernel=False)
    by_kernel = kernel_figures(x[:WINDOW_ROWS], TOP, predictions[:WINDOW_ROWS], proposed[:WINDOW_ROWS - 1])
    if [list(t) for t in by_kernel.top_tokens] != [list(t) for t in same.top_tokens]:
        raise RuntimeError("the C kernel and numpy disagree on the top tokens")
    for _ in range(samples):
        row = x[i % n]
        t0 = clock()
        int(row.argmax())
        argmax.append(clock() - t0)
        i += 1
        row = x[i % n]
        t0 = clock()
        got = kernel_figures(row, TOP, predictions[i % n:i % n + 1])
        plain.append(clock() - t0)
        if got is None:  # the kernel left the row to numpy: the time would be of nothing
            raise RuntimeError(f"the C kernel left a row of {n_vocab} tokens to numpy")
        i += 1
        j = i % (n - WINDOW_ROWS)
        rows = x[j:j + WINDOW_ROWS]
        t0 = clock()
        got = kernel_figures(rows, TOP, predictions[j:j + WINDOW_ROWS], proposed[j:j + WINDOW_ROWS - 1])
        window.append(clock() - t0)
        if got is None or got.rows != WINDOW_ROWS:
            raise RuntimeError(f"the C kernel left a window of {n_vocab} tokens to numpy")
        i += WINDOW_ROWS
    for _ in range(numpy_samples):
        j = i % (n - WINDOW_ROWS)
        rows = x[j:j + WINDOW_ROWS]
        t0 = clock()
        summarise_rows(rows, proposed[j:j + WINDOW_ROWS - 1], predictions[j:j + WINDOW_ROWS], kernel=False)
        by_numpy.append(clock() - t0)
        i += WINDOW_ROWS
    return FiguresCost(family, n_vocab, _median_us(argmax, 1), _median_us(plain, 1), _median_us(window, WINDOW_ROWS),
                       _median_us(by_numpy, WINDOW_ROWS) if by_numpy else None, samples)


def figures_bench(samples: int = 200, numpy_samples: int = 20, progress=None) -> list[FiguresCost]:
    """``measure_vocabulary`` at every vocabulary of ``VOCABULARIES``, in order (``progress(message)`` before
    each)."""
    out = []
    for family, n_vocab in VOCABULARIES:
        if progress is not None:
            progress(f"figures at {n_vocab:,} tokens ({family}) …")
        out.append(measure_vocabulary(family, n_vocab, samples, numpy_samples))
    return out


def format_figures_bench(costs: list[FiguresCost], step_ms: tuple[float, ...] = (5.0, 20.0)) -> str:
    """The table: per vocabulary the microseconds a row of each measurement, the kernel's nanoseconds per 1,000
    tokens of vocabulary (flat when the cost grows with the vocabulary alone), and what a plain step's
    prediction and figures are of a step of each ``step_ms`` (a GPU step of a small model; a CPU step)."""
    head = (f"{'vocabulary':<22}{'n_vocab':>9}{'argmax':>9}{'plain row':>11}{'window row':>12}{'numpy row':>11}"
            f"{'ns/1k tok':>11}" + "".join(f"{f'% of {s:g} ms':>12}" for s in step_ms))
    lines = ["the figures' cost per row on the host (us; synthetic float32 rows, cold in the caches; median of "
             f"{costs[0].samples if costs else 0}; kernel: {figure_path()})", head]
    for c in costs:
        numpy_us = f"{c.numpy_us:.0f}" if c.numpy_us is not None else "-"
        per_k = c.window_us * 1000.0 / (c.n_vocab / 1000.0)
        shares = "".join(f"{100.0 * (c.argmax_us + c.plain_us) / (s * 1000.0):>11.1f}%" for s in step_ms)
        lines.append(f"{c.family:<22}{c.n_vocab:>9,}{c.argmax_us:>9.0f}{c.plain_us:>11.0f}{c.window_us:>12.0f}"
                     f"{numpy_us:>11}{per_k:>11.0f}{shares}")
    lines.append("argmax: the greedy prediction of a row (numpy); plain row: a plain step's figures (C kernel); "
                 f"window row: a {WINDOW_ROWS}-row window's, per row; numpy row: the fallback's, per row; % of a step: "
                 "a plain step's argmax and figures against a decode step of that length")
    return "\n".join(lines)
