"""Plain steps' probability figures, summarised in batches after the steps (issue 41).

A plain step decodes one row; its figures (``inspector.engine.probabilities.summarise_rows``) cost
0.23-0.35 ms right after the decode, against ~0.07 ms of arithmetic: the decode has evicted every cache,
so each numpy call and each line of Python meets cold memory. ``FigureBatch`` copies the step's row of
logits while it is hot, minus its largest logit (~0.02 ms: the softmax's subtraction done in the copy's
pass), and summarises up to ``BATCH_ROWS`` rows in one ``summarise_rows`` call, when the
batch is full, when its oldest row is ``MAX_AGE_MS`` old (under one redraw period of the window), or when
the generation ends; the cold start is then paid once per batch.

Where the C kernel sums the figures (``inspector.engine.probabilities.figure_path``; the softmax basis, at most
``KERNEL_MAX_TOP`` tokens kept) a row costs ~30 us summarised where it lies in llama.cpp's buffer, less than
copying it (~95 us): ``FigureBatch`` then summarises each row as it comes (``at_once``), and its stand-in is
ready at once; the batches stay for the sampler basis and for a build without the kernel (issue 53).

The step's event carries a ``DeferredFigures`` at once: a stand-in for the row's ``WindowProbabilities``
that reads as one (every attribute and method). Reading it before its batch ran summarises the batch
there and then, on the reader's thread, so every reader sees the figures it asks for: the event stream,
``serve``'s ``n_probs``, a hover. Readers that can wait test ``ready`` first: the autosave (a later line
carries the figures) and the token view (it marks the token at a later redraw).
"""

from __future__ import annotations

import threading
from time import perf_counter_ns
from typing import Callable

import numpy as np

from inspector.engine.probabilities import TOP, WindowProbabilities, kernel_figures, kernel_takes, summarise_rows
from inspector.engine.settings import GenerationSettings, SamplingSettings

BATCH_ROWS = 8
"""Rows summarised together at most (8 rows of a 49,152-token vocabulary: a 1.5 MB buffer)."""
MAX_AGE_MS = 50.0
"""A pending row older than this (milliseconds) is summarised at the generation's next check: the
window redraws every 67 ms (15 Hz), so a view is at most one redraw behind."""


def split_rows(figures: WindowProbabilities) -> list[WindowProbabilities]:
    """``figures``'s rows as one-row ``WindowProbabilities`` each, in order (a plain step's form: no
    proposed token, no draft q)."""
    out = []
    for i in range(figures.rows):
        out.append(WindowProbabilities(
            figures.basis, (figures.proposed_p[i],), (figures.proposed_rank[i],), (figures.predicted_p[i],),
            (figures.top_tokens[i],), (figures.top_p[i],), (figures.entropy[i],), (figures.margin[i],), None,
            None if figures.predicted_rank is None else (figures.predicted_rank[i],)))
    return out


class DeferredFigures:
    """One plain step's figures: a ``WindowProbabilities`` once its batch ran (``value``); reading any
    of its attributes before then runs the batch (any thread). ``ready``: the figures exist."""

    __slots__ = ("_batch", "_value")

    def __init__(self, batch: "FigureBatch | None") -> None:
        self._batch = batch
        self._value: WindowProbabilities | None = None

    @property
    def ready(self) -> bool:
        """True once the batch holding this row was summarised."""
        return self._value is not None

    @property
    def value(self) -> WindowProbabilities:
        """The figures, summarising the batch now if it has not run (``FigureBatch.flush``)."""
        batch = self._batch
        if self._value is None and batch is not None:
            batch.flush()
        return self._value

    def resolve(self, figures: WindowProbabilities) -> None:
        """Give this stand-in its figures (its ``FigureBatch`` does, when it summarises the batch)."""
        self._value = figures
        self._batch = None  # the batch's buffer (8 rows of logits) is not kept alive by the figures

    def __getattr__(self, name: str):
        if name.startswith("__") or name in self.__slots__:  # copy/pickle probes, an unset slot: not the figures'
            raise AttributeError(name)
        return getattr(self.value, name)

    def __eq__(self, other) -> bool:
        other = other.value if isinstance(other, DeferredFigures) else other
        return self.value == other

    __hash__ = None

    def __repr__(self) -> str:
        return f"DeferredFigures({self._value!r})" if self._value is not None else "DeferredFigures(pending)"


def figure_batch(runtime, settings: GenerationSettings) -> "FigureBatch | None":
    """The ``FigureBatch`` of a generation on ``runtime`` with ``settings``: None without probabilities, or
    when the runtime's logits are not in this process (``local_logits`` false, e.g. a ``RemoteRuntime``: each
    step then summarises its own row). Its copy and summary times go to the runtime's benchmark counters
    (``probability_ns``, ``probability_rows``) when it keeps them."""
    if not settings.probabilities or not getattr(runtime, "local_logits", False):
        return None

    def account(ns: int, rows: int) -> None:
        if hasattr(runtime, "probability_ns"):
            runtime.probability_ns += ns
            runtime.probability_rows += rows

    return FigureBatch(runtime.n_vocab, settings.sampling, account, top=settings.top_probabilities)


def summarises_at_once(sampling: SamplingSettings | None, top: int = TOP) -> bool:
    """True where a plain step's row is best summarised at once, in place: the C kernel is built and sums this
    basis for ``top`` tokens a row (``kernel_takes``): then summarising costs less than copying the row."""
    return kernel_takes(sampling, top)


class FigureBatch:
    """The pending plain-step rows of one generation (``n_vocab`` logits each) and their summaries.

    ``add`` runs on the generation's thread under the runtime lock (the row is llama.cpp's until the
    next decode); ``flush`` on any thread (a lock keeps the two apart). ``sampling``: the session's
    sampler (the figures' basis, as ``summarise_rows``). ``account(ns, rows)``: told the time each copy
    and each summary took (the runtime's benchmark counters). ``top``: the most likely tokens kept per row.
    ``at_once``: summarise each row in ``add``, in place (no copy, no batch); None: where the C kernel sums
    this basis (``summarises_at_once``)."""

    def __init__(self, n_vocab: int, sampling: SamplingSettings | None = None,
                 account: Callable[[int, int], None] | None = None, rows: int = BATCH_ROWS, top: int = TOP,
                 at_once: bool | None = None) -> None:
        if rows < 1:
            raise ValueError(f"a figure batch holds at least 1 row, observed {rows}")
        self.n_vocab = n_vocab
        self.sampling = sampling
        self.top = top
        self._account = account or (lambda _ns, _rows: None)
        self._capacity = rows
        self._shift = sampling is None or sampling.greedy  # the softmax basis: rows are kept minus their max
        self.at_once = summarises_at_once(sampling, top) if at_once is None else at_once
        self._k = min(max(2, top), n_vocab)  # the kept tokens a row, clamped as summarise_rows clamps them
        self._all_shifted = True
        self._buffer: np.ndarray | None = None
        self._pending: list[tuple[DeferredFigures, int]] = []
        self._oldest_ns = 0
        self._lock = threading.Lock()
        self.batches = 0
        """Summaries run (benchmarks and tests)."""

    @property
    def pending(self) -> int:
        """Rows copied, not summarised yet."""
        return len(self._pending)

    def add(self, logits_row: np.ndarray, prediction: int) -> DeferredFigures:
        """Copy one row of logits (``n_vocab`` float32; the plain step's ``prediction``, a token id) and
        return its stand-in. A full batch is summarised first. Raises ``ValueError`` for a row of
        another length."""
        if logits_row.shape != (self.n_vocab,):
            raise ValueError(f"a row of {self.n_vocab} logits expected, observed shape {logits_row.shape}")
        if self.at_once:  # straight to the kernel (the row where it lies; its Python costs ~40 us a step cold)
            t = perf_counter_ns()
            prediction = int(prediction)
            figures = kernel_figures(logits_row, self._k, (prediction,))
            if figures is None:  # a row the kernel leaves (NaN, +inf): the numpy path, as summarise_rows does
                figures = summarise_rows(logits_row.reshape(1, -1), (), [prediction], self.sampling, top=self.top)
            handle = DeferredFigures(None)
            handle.resolve(figures)
            self._account(perf_counter_ns() - t, 1)
            return handle
        with self._lock:
            if len(self._pending) >= self._capacity:
                self._flush_locked()
            t = perf_counter_ns()
            if self._buffer is None:
                self._buffer = np.empty((self._capacity, self.n_vocab), dtype=np.float32)
            slot = self._buffer[len(self._pending)]
            top = logits_row.max() if self._shift else np.nan  # the row is hot in cache now, not at the flush
            if np.isfinite(top):
                np.subtract(logits_row, top, out=slot)  # the copy and the softmax's subtraction in one pass
            else:  # a NaN or infinite row (or the sampler basis): copied as is
                np.copyto(slot, logits_row)
                self._all_shifted = False
            handle = DeferredFigures(self)
            if not self._pending:
                self._oldest_ns = t
            self._pending.append((handle, int(prediction)))
            self._account(perf_counter_ns() - t, 0)
        return handle

    def due(self, now_ns: int | None = None) -> bool:
        """True when the pending rows fill the batch or the oldest is ``MAX_AGE_MS`` old (``now_ns``:
        ``perf_counter_ns()`` by default)."""
        if not self._pending:
            return False
        now = perf_counter_ns() if now_ns is None else now_ns
        return len(self._pending) >= self._capacity or now - self._oldest_ns >= MAX_AGE_MS * 1e6

    def flush_if_due(self) -> None:
        """``flush`` when ``due()``."""
        if self.due():
            self.flush()

    def flush(self) -> None:
        """Summarise every pending row (one ``summarise_rows`` call) and give each stand-in its figures."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        pending = self._pending
        if not pending:
            return
        t = perf_counter_ns()
        figures = summarise_rows(self._buffer[:len(pending)], (), [p for _h, p in pending], self.sampling,
                                 shifted=self._all_shifted, top=self.top)
        for (handle, _p), row in zip(pending, split_rows(figures)):
            handle.resolve(row)
        self._pending = []
        self._all_shifted = True
        self.batches += 1
        self._account(perf_counter_ns() - t, len(pending))
