"""How sure the target was on each verification row (issue 15), from the logits the verify batch produced.

No extra decode: ``summarise_rows`` reads the (rows, n_vocab) logits of the batch that
verified the proposal (or of a plain step) and keeps, per row, the target's probability
and rank of the proposed token, the top ``TOP`` tokens with probabilities, the entropy
and the logit margin between the top two. A window's figures are one
``WindowProbabilities`` (columns, one entry per verification row); ``row(i)`` gives
one row as a ``RowProbabilities``.

Basis (named in every block as ``basis``):

- ``softmax`` (temperature 0, greedy): the raw softmax of the logits.
- ``sampler`` (temperature > 0): the session's sampler chain, ``inspector.engine.sampling.
  distribution`` (top-k, top-p, min-p, temperature, as llama.cpp's chain): tokens the
  chain cuts have probability 0.

Ranks always follow the logits (1 = the argmax; ties go to the lower token id, as
``numpy.argmax`` and ``llama_sampler_init_greedy`` pick). The margin is in logits
(the top token's logit minus the second's), whatever the basis. Entropy is in nats.

Cost: for the softmax basis the C kernel ``inspector.engine.figure_kernel`` (built by pip install; issue 53)
finds each row's largest logits and sums its exp and exp * logit in two passes over the row: ~30 microseconds
a row of 49,152 logits with AVX2, ~100 on baseline x86-64. Without it (or for more than ``KERNEL_MAX_TOP``
tokens kept, or a row with a NaN or +inf logit) numpy does: the top ``TOP`` from the maxima of blocks of
1,024 logits, one comparison pass and a sort of the few candidates (never a sort or partition of the
vocabulary), one exp pass and two dot products per row: 150-300 microseconds a row. The two paths give the
same figures to float32 rounding (tests/test_figure_kernel.py). ``bench`` prints the time per row and the path.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from inspector.engine.sampling import distribution
from inspector.engine.settings import SamplingSettings

try:
    from inspector.engine import figure_kernel
except ImportError:  # pragma: no cover - built without a C compiler (pyproject's optional extension): numpy
    figure_kernel = None

TOP = 5
"""Tokens kept per row with their probabilities."""
SOFTMAX = "softmax"
SAMPLER = "sampler"
BASES = (SOFTMAX, SAMPLER)
DEFAULT_NEAR_TIE_MARGIN = 0.5
"""A row whose top two logits differ by less than this (logits) is a near-tie: a different
CPU's kernels can swap the two (the baseline's divergence check uses the same idea)."""
COST_NOTE = ("about 0.06-0.1 ms per verification row and 0.1-0.2 ms for a plain step's row on a 2-core CPU with "
             "the C kernel the install builds (without it, in numpy: 0.1-0.15 and 0.15-0.3 ms; spec-inspector "
             "bench --llama-server prints it as p/row, and which path runs)")
"""What the figures cost, as the CLI help and the window's tooltip say it (measured by ``bench``)."""
KERNEL_MAX_TOP = 64
"""Most tokens per row the C kernel keeps (its ``MAX_K``); a request for more takes the numpy path."""
_BLOCK = 1024
_DIGITS = 4


def figure_path() -> str:
    """Which code sums the softmax figures here: ``"C (x86-64-v3)"`` or ``"C (baseline)"`` (the kernel, and the
    instruction set it picked at load time), or ``"numpy"`` (the extension did not build)."""
    return "numpy" if figure_kernel is None else f"C ({figure_kernel.isa()})"


def kernel_takes(sampling: SamplingSettings | None, top: int = TOP) -> bool:
    """True when the C kernel sums this basis's figures (module docstring): it is built, the basis is the
    softmax (no sampler, or temperature 0) and at most ``KERNEL_MAX_TOP`` tokens a row are kept (``top``)."""
    return figure_kernel is not None and (sampling is None or sampling.greedy) and max(2, top) <= KERNEL_MAX_TOP


def kernel_figures(x: np.ndarray, k: int, predictions: Sequence[int], proposed: Sequence[int] = (),
                   draft_q: Sequence[float] | None = None) -> "WindowProbabilities | None":
    """The softmax figures of every row of ``x`` (rows x n_vocab, or one row of n_vocab) from the C kernel (module
    docstring), each value the expression the numpy path evaluates, rounded alike; ``k``: the most likely tokens
    kept per row (2..``KERNEL_MAX_TOP``, at most n_vocab: the caller's ``top``, as ``summarise_rows`` clamps it).
    None when the numpy path must do it: no kernel, ``k`` above ``KERNEL_MAX_TOP``, logits that are not one
    C-contiguous float32 block, a row the kernel leaves (NaN, +inf), a token id outside the vocabulary. A plain
    step's row goes straight here (``inspector.engine.deferred_figures``: no shape checks on the decode path)."""
    if figure_kernel is None or k > KERNEL_MAX_TOP or x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    cols = figure_kernel.figures(x, x.shape[-1], k, predictions, proposed)
    if cols is None:
        return None
    p_prop, r_prop, p_pred, top_tokens, top_p, ent, margin, ranks = cols
    return WindowProbabilities(SOFTMAX, p_prop, r_prop, p_pred, top_tokens, top_p, ent, margin,
                               None if draft_q is None else tuple(_r(q) for q in draft_q), ranks)


def _r(x: float) -> float:
    """4 significant digits: small probabilities keep their size (3.2e-05, not 0.0)."""
    return float(f"{float(x):.{_DIGITS}g}")


@dataclass(frozen=True, slots=True)
class RowProbabilities:
    """One verification row's figures (a view of ``WindowProbabilities``).

    ``proposed``: the proposal token this row judged, None on the bonus row (the row after
    the last proposal token) and on a plain step. ``proposed_p``/``proposed_rank``: its
    target probability (0..1) and rank (1 = top by logits), None with it. ``predicted``: the
    row's prediction (what the target would commit here) and ``predicted_p`` its
    probability. ``top``: (token, probability) pairs, most likely first. ``entropy``: nats.
    ``margin``: logits, top minus second. ``draft_q``: the draft's probability of the
    proposed token (draft sources only), else None.
    """

    row: int
    proposed: int | None
    proposed_p: float | None
    proposed_rank: int | None
    predicted: int
    predicted_p: float
    top: tuple[tuple[int, float], ...]
    entropy: float
    margin: float
    draft_q: float | None
    basis: str
    predicted_rank: int | None = None
    """The prediction's rank by logit (1 at T = 0; a sampled token may rank lower)."""

    def near_tie(self, threshold: float = DEFAULT_NEAR_TIE_MARGIN) -> bool:
        """True when the top two logits differ by less than ``threshold`` (logits)."""
        return self.margin < threshold


@dataclass(frozen=True, slots=True)
class WindowProbabilities:
    """Per-row probability figures of one verify batch (or plain step), as columns.

    Every tuple has one entry per verification row except ``draft_q`` (one per proposal
    token, or None when the source is not a draft model). ``proposed_p``/``proposed_rank``
    are None on the bonus row and for a plain step's single row. The receipts document
    stores exactly these columns (``to_json``; schema ``$defs/probabilities``).
    """

    basis: str
    proposed_p: tuple[float | None, ...]
    proposed_rank: tuple[int | None, ...]
    predicted_p: tuple[float, ...]
    top_tokens: tuple[tuple[int, ...], ...]
    top_p: tuple[tuple[float, ...], ...]
    entropy: tuple[float, ...]
    margin: tuple[float, ...]
    draft_q: tuple[float, ...] | None = None
    predicted_rank: tuple[int, ...] | None = None
    """Rank of each row's prediction by logit (1 unless the target sampled another token, T > 0)."""

    @property
    def rows(self) -> int:
        """Verification rows (1 for a plain step)."""
        return len(self.predicted_p)

    def row(self, i: int, proposal: Sequence[int] = (), predictions: Sequence[int] = ()) -> RowProbabilities:
        """Row ``i`` (0-based) as a ``RowProbabilities``; ``proposal``/``predictions``: the window's
        tokens (the receipt's), to name the proposed and predicted token. Raises ``IndexError``."""
        if not 0 <= i < self.rows:
            raise IndexError(f"row {i} of a {self.rows}-row window")
        proposed = proposal[i] if i < len(proposal) else None
        predicted = predictions[i] if i < len(predictions) else self.top_tokens[i][0]
        q = self.draft_q[i] if self.draft_q is not None and i < len(self.draft_q) else None
        rank = self.predicted_rank[i] if self.predicted_rank is not None else None
        return RowProbabilities(i, proposed, self.proposed_p[i], self.proposed_rank[i], predicted,
                                self.predicted_p[i], tuple(zip(self.top_tokens[i], self.top_p[i])),
                                self.entropy[i], self.margin[i], q, self.basis, rank)

    def with_draft_q(self, q: Sequence[float] | None) -> "WindowProbabilities":
        """A copy with the draft's probabilities of the proposed tokens."""
        return replace(self, draft_q=None if q is None else tuple(_r(v) for v in q))

    def to_json(self) -> dict:
        """The compact per-window block of the receipts document (lists of columns)."""
        d = {
            "basis": self.basis,
            "proposed_p": list(self.proposed_p),
            "proposed_rank": list(self.proposed_rank),
            "predicted_p": list(self.predicted_p),
            "top_tokens": [list(t) for t in self.top_tokens],
            "top_p": [list(p) for p in self.top_p],
            "entropy": list(self.entropy),
            "margin": list(self.margin),
        }
        if self.draft_q is not None:
            d["draft_q"] = list(self.draft_q)
        if self.predicted_rank is not None:
            d["predicted_rank"] = list(self.predicted_rank)
        return d

    def top_token_ids(self) -> set[int]:
        """Every token id in the rows' top 5 (whose texts a document stores beside them)."""
        return {t for row in self.top_tokens for t in row}

    @classmethod
    def from_json(cls, d: dict) -> "WindowProbabilities":
        """Inverse of ``to_json``. Raises ``KeyError``/``TypeError``/``ValueError`` on a damaged block
        (columns of different lengths included)."""
        out = cls(
            str(d["basis"]),
            tuple(d["proposed_p"]), tuple(d["proposed_rank"]), tuple(d["predicted_p"]),
            tuple(tuple(t) for t in d["top_tokens"]), tuple(tuple(p) for p in d["top_p"]),
            tuple(d["entropy"]), tuple(d["margin"]),
            None if d.get("draft_q") is None else tuple(d["draft_q"]),
            None if d.get("predicted_rank") is None else tuple(d["predicted_rank"]),
        )
        n = out.rows
        if any(len(c) != n for c in (out.proposed_p, out.proposed_rank, out.top_tokens, out.top_p,
                                     out.entropy, out.margin)):
            raise ValueError(f"probability columns of different lengths (predicted_p has {n} rows)")
        return out


def _top(x: np.ndarray, k: int) -> tuple[list[list[int]], list[list[float]]]:
    """(indices, values) of each row's ``k`` largest logits, largest first (ties: lower index
    first), as lists: one list of ``k`` per row.

    ``x``: (rows, n_vocab) float32. The k-th largest of the ``_BLOCK``-logit block maxima is
    at most the row's k-th largest logit (k blocks each hold one at least as large), so
    every logit at or above it is a candidate: one max pass per block, one comparison pass
    and a sort of the few candidates, never a partition of the vocabulary (numpy's
    ``argpartition`` of 49,152 logits takes ~0.5 ms). Equal logits are all candidates, so
    ties go to the lower token ids exactly, as ``_ranks`` counts them. Right after a decode
    every numpy call costs 10-20 microseconds (cold caches), so there are few of them, each
    over all rows, and the candidates are sorted in Python."""
    n, v = x.shape
    k = min(k, v)
    nb = -(-v // _BLOCK)
    if nb > k:
        block_max = np.maximum.reduceat(x, _block_starts(v), axis=1)  # (n, nb), no copy of x
        floor = np.partition(block_max, nb - k, axis=1)[:, nb - k:nb - k + 1]
    else:
        floor = np.partition(x, v - k, axis=1)[:, v - k:v - k + 1]  # exact
    flat = np.flatnonzero(np.greater_equal(x, floor, out=_scratch("ge", x.shape, np.bool_)))
    if flat.size > _PYTHON_SORT_MAX * n:  # many ties (a flat row): numpy sorts them
        return _top_sorted(x, k)
    vals = x.reshape(-1)[flat].tolist()
    rows: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    for f, value in zip(flat.tolist(), vals):
        r, c = divmod(f, v)
        rows[r].append((-value, c))
    idx, top = [], []
    for cands in rows:
        if len(cands) < k:  # NaN logits: no comparison holds
            return _top_sorted(x, k)
        cands.sort()
        idx.append([c for _, c in cands[:k]])
        top.append([-value for value, _ in cands[:k]])
    return idx, top


_PYTHON_SORT_MAX = 256
"""Candidates per row above which ``_top`` lets numpy sort (ties spread over many tokens)."""


def _top_sorted(x: np.ndarray, k: int) -> tuple[list[list[int]], list[list[float]]]:
    """``_top`` by a stable sort of every row (NaN last): the slow, exact way for rows with NaN or
    hundreds of equal logits."""
    idx = np.argsort(-x, axis=1, kind="stable")[:, :k]
    return idx.tolist(), np.take_along_axis(x, idx, axis=1).tolist()


_ONES: dict[int, np.ndarray] = {}
_STARTS: dict[int, np.ndarray] = {}
_SCRATCH = threading.local()


def _scratch(name: str, shape: tuple[int, int], dtype) -> np.ndarray:
    """A (rows, n_vocab) buffer of this thread's, kept between calls and grown to the largest
    batch seen (a 17-row window of a 49,152-token vocabulary: 3.3 MB per float32 buffer):
    fresh arrays that size would be new pages for the kernel to fault in at every call
    (2 ms for 17 rows)."""
    kept = getattr(_SCRATCH, name, None)
    size = shape[0] * shape[1]
    if kept is None or kept.size < size or kept.dtype != dtype:
        kept = np.empty(size, dtype=dtype)
        setattr(_SCRATCH, name, kept)
    return kept[:size].reshape(shape)


def _ones(v: int) -> np.ndarray:
    """A float32 vector of ``v`` ones (kept: the row sums are dots with it)."""
    out = _ONES.get(v)
    if out is None:
        out = _ONES[v] = np.ones(v, dtype=np.float32)
    return out


def _block_starts(v: int) -> np.ndarray:
    """0, ``_BLOCK``, 2 ``_BLOCK``, ... below ``v`` (kept: ``reduceat``'s segment starts)."""
    out = _STARTS.get(v)
    if out is None:
        out = _STARTS[v] = np.arange(0, v, _BLOCK)
    return out


def _ranks(x: np.ndarray, tokens: Sequence[int], top_idx: Sequence[Sequence[int]]) -> list[int]:
    """1-based rank by logit of ``tokens[i]`` in row ``i`` of ``x`` (ties: lower token id first).

    A token among the row's top ``TOP`` (``top_idx``, from ``_top``) has its place there; the
    others are counted in one vectorised pass over their rows (logits above the token's),
    plus the equal logits of lower ids."""
    k = len(tokens)
    out: list[int] = [0] * k
    rest = []
    for i, t in enumerate(tokens):
        row = top_idx[i]
        if t in row:
            out[i] = row.index(t) + 1
        else:
            rest.append(i)
    if rest:
        sub = x[rest]
        toks = [tokens[i] for i in rest]
        values = x[rest, toks]
        above = np.count_nonzero(sub > values[:, None], axis=1)
        for j, i in enumerate(rest):
            out[i] = int(above[j]) + int(np.count_nonzero(sub[j, : toks[j]] == values[j])) + 1
    return out


def _logits_of(x: np.ndarray, top_idx: Sequence[Sequence[int]], top_val: Sequence[Sequence[float]],
               rows: Sequence[int], tokens: Sequence[int]) -> list[float]:
    """The logit of ``tokens[j]`` in row ``rows[j]`` of ``x``: from the row's top ``TOP`` (``_top``) when it is
    there (a greedy prediction always is), the rest in one gather (none for most plain steps and windows)."""
    out: list[float] = []
    missing = []
    for j, (r, t) in enumerate(zip(rows, tokens)):
        idx = top_idx[r]
        if t in idx:
            out.append(top_val[r][idx.index(t)])
        else:
            out.append(0.0)
            missing.append(j)
    if missing:
        got = x[[rows[j] for j in missing], [tokens[j] for j in missing]].tolist()
        for j, v in zip(missing, got):
            out[j] = v
    return out


def _numpy_sums(x: np.ndarray, m: Sequence[float], shifted: bool) -> tuple[list[float], list[float]]:
    """Per row of ``x``: z = sum exp(x - m) and s = sum exp(x - m) * (x - m), ``m`` the rows' largest logits (0
    when ``shifted``), in numpy (the path without the C kernel, and its reference)."""
    n = x.shape[0]
    # One row (a plain step) subtracts a Python float: one numpy call fewer (each costs 10-20 us cold).
    if shifted:
        x_m = x
    else:
        shift = m[0] if n == 1 else np.array(m, dtype=np.float32)[:, None]
        x_m = np.subtract(x, shift, out=_scratch("shifted", x.shape, np.float32))
    e = np.exp(x_m, out=_scratch("exp", x.shape, np.float32))
    # Row sums, and entropy = log z - sum(e * (x - max)) / z: BLAS (one thread: thread_pools).
    z = (e @ _ones(x.shape[1])).tolist()
    with np.errstate(invalid="ignore"):  # 0 * -inf where a logit is -inf: mended below
        s = [float(e[i] @ x_m[i]) for i in range(n)]
    for i in range(n):
        if not math.isfinite(s[i]):  # a -inf logit (0 * -inf): that row in float64, masked
            d = x_m[i].astype(np.float64)
            keep = np.isfinite(d)
            s[i] = float(np.exp(d[keep]) @ d[keep])
    return z, s


def summarise_rows(
    logits: np.ndarray,
    proposed: Sequence[int],
    predictions: Sequence[int],
    sampling: SamplingSettings | None = None,
    draft_q: Sequence[float] | None = None,
    shifted: bool = False,
    top: int = TOP,
    kernel: bool = True,
) -> WindowProbabilities:
    """The probability figures of a verify batch (or a plain step's single row).

    ``logits``: (rows, n_vocab) float32, row i predicting the token after row i's token.
    ``proposed``: the proposal tokens (rows - 1 of them for a window, none for a plain
    step): row i judges ``proposed[i]``. ``predictions``: the row predictions the rule
    picked (one per row). ``sampling``: the session's sampler (None or temperature 0:
    softmax basis; else the sampler basis). ``draft_q``: the draft's probability of each
    proposed token, kept as is. ``shifted``: each row's largest logit was already subtracted from it (its
    maximum is 0; ``FigureBatch`` does it while copying the row, hot in cache then): the softmax basis skips
    its own subtraction, one pass over the rows fewer (a row and the row minus a constant have the same figures
    up to float32 rounding: at times the 4th significant digit of a probability). Values are rounded to 4
    significant digits (the receipts keep what the window shows: 3). ``top``: how many of each row's most
    likely tokens are kept (>= 2; ``TOP`` unless a served request asks ``n_probs`` for more). ``kernel``: let the
    C kernel sum the softmax basis where it can (module docstring); False: numpy only (the reference, in tests).
    Raises ``ValueError`` when the shapes disagree.
    """
    x = np.asarray(logits)
    if x.ndim != 2 or x.shape[0] != len(predictions) or len(proposed) > x.shape[0]:
        raise ValueError(f"probabilities need (rows, n_vocab) logits, {len(predictions)} predictions and at most "
                         f"rows proposal tokens, observed logits {x.shape}, {len(predictions)} predictions, "
                         f"{len(proposed)} proposal tokens")
    n = x.shape[0]
    sampled = sampling is not None and not sampling.greedy
    if kernel and kernel_takes(sampling, top):
        figures = kernel_figures(x, min(max(2, top), x.shape[1]), predictions, proposed, draft_q)
        if figures is not None:
            return figures
    top_idx, top_val = _top(x, max(2, top))
    margin = [t[0] - t[1] if len(t) > 1 else math.inf for t in top_val]
    predictions = [int(t) for t in predictions]
    proposed = [int(t) for t in proposed]
    k = len(proposed)
    if not sampled:
        # x - max: <= 0, no cancellation below. Into kept buffers (``_scratch``).
        m = [t[0] for t in top_val]
        z, s = _numpy_sums(x, m, shifted)
        ent = [_r(max(0.0, math.log(z[i]) - s[i] / z[i])) for i in range(n)]
        top_p = [tuple(_r(math.exp(t - m[i]) / z[i]) for t in top_val[i]) for i in range(n)]
        picked = _logits_of(x, top_idx, top_val, list(range(n)) + list(range(k)), predictions + proposed)
        p_pred = [_r(math.exp(picked[i] - m[i]) / z[i]) for i in range(n)]
        p_prop = [_r(math.exp(picked[n + i] - m[i]) / z[i]) for i in range(k)] + [None] * (n - k)
        r_prop = _ranks(x, proposed, top_idx) + [None] * (n - k)
    else:
        p_prop, r_prop, p_pred, top_p, ent = [], [], [], [], []
        for i in range(n):
            row = x[i]
            p = distribution(row, sampling)
            nz = p[p > 0.0]
            ent.append(_r(max(0.0, float(-(nz * np.log(nz)).sum()))))
            top_p.append(tuple(_r(p[t]) for t in top_idx[i]))
            p_pred.append(_r(p[predictions[i]]))
            p_prop.append(_r(p[proposed[i]]) if i < len(proposed) else None)
        r_prop = _ranks(x, proposed, top_idx) + [None] * (n - k)
    return WindowProbabilities(
        SAMPLER if sampled else SOFTMAX,
        tuple(p_prop), tuple(r_prop), tuple(p_pred),
        tuple(tuple(r) for r in top_idx), tuple(top_p), tuple(ent),
        tuple(_r(m) for m in margin),
        None if draft_q is None else tuple(_r(q) for q in draft_q),
        tuple(_ranks(x, predictions, top_idx)),
    )


def with_top_texts(block: dict | None, token_text) -> dict | None:
    """A block's JSON form (``to_json``) with ``top_token_texts`` (one list of texts per row) added, so a
    file shows the top 5 without the model; ``token_text(id) -> str``. None stays None."""
    if block is None:
        return None
    return {**block, "top_token_texts": [[token_text(t) for t in row] for row in block["top_tokens"]]}


def top_texts_of(block: dict | None) -> dict[int, str]:
    """The id -> text pairs a stored block holds (``with_top_texts``); {} for None or a block without them."""
    if not block or "top_token_texts" not in block:
        return {}
    return {t: str(x) for ids, texts in zip(block["top_tokens"], block["top_token_texts"]) for t, x in zip(ids, texts)}
