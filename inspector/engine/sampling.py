"""Probability distributions of a row and rejection-sampling verification (numpy, no Qt).

Verification rules (named in every receipt as ``verification_rule``):

- ``greedy``: temperature 0; the row prediction is the argmax.
- ``sample_match``: the target samples each row with its own sampler and a
  proposal token is accepted while it equals the sample. The output keeps the
  target's distribution exactly, whatever the proposal source.
- ``rejection``: speculative sampling with the draft's probabilities (Leviathan
  et al. 2023; Chen et al. 2023): accept proposal token x with probability
  min(1, p(x)/q(x)); at the first rejection sample the correction from the
  normalized residual max(0, p - q); after a full accept sample the bonus token
  from p. Also exact, and accepts more than ``sample_match``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from inspector.engine.settings import SamplingSettings

GREEDY = "greedy"
SAMPLE_MATCH = "sample_match"
REJECTION = "rejection"
VERIFICATION_RULES = (GREEDY, SAMPLE_MATCH, REJECTION)


def distribution(logits: np.ndarray, s: SamplingSettings) -> np.ndarray:
    """Token probabilities (float64, sums to 1) of one row after the sampling chain.

    Same stages and order as the runtime's llama.cpp chain: top-k, top-p,
    min-p (these three on temperature-1 probabilities), then temperature.
    ``logits``: shape (n_vocab,). Raises ``ValueError`` for temperature <= 0.
    """
    if s.temperature <= 0.0:
        raise ValueError(f"a distribution needs temperature > 0, observed {s.temperature}")
    x = np.asarray(logits)
    n = x.shape[0]
    if 0 < s.top_k < n:
        # Only the top-k candidates can get a probability: work on them (a partition, not a sort
        # of the vocabulary), then scatter back. Ties at the k-th logit are all kept, as before.
        kth = np.partition(x, n - s.top_k)[n - s.top_k]
        idx = np.nonzero(x >= kth)[0]
        out = np.zeros(n, dtype=np.float64)
        out[idx] = _chain(np.asarray(x[idx], dtype=np.float64), s)
        return out
    return _chain(np.asarray(x, dtype=np.float64), s)


def _top_p_order(p: np.ndarray, top_p: float) -> np.ndarray:
    """Indices of the most likely tokens, most likely first (ties: lower index first), at least as many
    as top-p needs (their probabilities sum to >= ``top_p``): the largest 64, 256, ... are partitioned
    out and only they are sorted, never the whole vocabulary."""
    n = p.shape[0]
    m = 64
    while m < n:
        part = np.argpartition(p, n - m)[n - m:]
        if p[part].sum() >= top_p and np.count_nonzero(p >= p[part].min()) == m:  # no tie at the cut
            part = np.sort(part)
            return part[np.argsort(-p[part], kind="stable")]
        m *= 4
    return np.argsort(-p, kind="stable")


def _chain(x: np.ndarray, s: SamplingSettings) -> np.ndarray:
    """top-p, min-p (on temperature-1 probabilities), then temperature, over candidate logits ``x``."""
    keep = np.ones(x.shape[0], dtype=bool)
    if 0.0 < s.top_p < 1.0 or 0.0 < s.min_p < 1.0:
        p = np.exp(x - x.max())
        p /= p.sum()
        if 0.0 < s.top_p < 1.0:
            order = _top_p_order(p, s.top_p)
            cum = np.cumsum(p[order])
            last = int(np.searchsorted(cum, s.top_p)) + 1
            mask = np.zeros_like(keep)
            mask[order[:last]] = True
            keep &= mask
        if 0.0 < s.min_p < 1.0:
            keep &= p >= s.min_p * p.max()
    z = np.where(keep, x / s.temperature, -np.inf)
    p = np.exp(z - z.max())
    return p / p.sum()


def rejection_predictions(
    target_logits: np.ndarray,
    proposal: Sequence[int],
    draft_probabilities: Sequence[np.ndarray],
    sampling: SamplingSettings,
    rng: np.random.Generator,
) -> list[int]:
    """Row predictions of one window under the ``rejection`` rule.

    ``target_logits``: shape (len(proposal) + 1, n_vocab), one row per
    verification row. ``draft_probabilities[i]``: the draft's distribution q
    that proposal[i] was sampled from. Returns len(proposal) + 1 tokens: the
    proposal token where it is accepted, the residual sample at the first
    rejection, and for every later row a sample from p (branch-conditioned,
    never committed). Feeding them to ``classify_window`` gives the exact
    accepted / correction / bonus of speculative sampling.
    """
    n = len(proposal)
    if len(draft_probabilities) != n or target_logits.shape[0] < n + 1:
        raise ValueError(
            f"rejection sampling needs {n} draft distributions and {n + 1} target rows, "
            f"observed {len(draft_probabilities)} and {target_logits.shape[0]}"
        )
    out: list[int] = []
    rejected = False
    for i in range(n + 1):
        p = distribution(target_logits[i], sampling)
        if rejected or i == n:
            out.append(int(rng.choice(p.shape[0], p=p)))
            continue
        x = proposal[i]
        q = np.asarray(draft_probabilities[i], dtype=np.float64)
        qx = q[x]
        if qx > 0.0 and rng.random() < min(1.0, p[x] / qx):
            out.append(x)
            continue
        residual = np.maximum(p - q, 0.0)
        total = residual.sum()
        residual = residual / total if total > 0.0 else p
        out.append(int(rng.choice(residual.shape[0], p=residual)))
        rejected = True
    return out
