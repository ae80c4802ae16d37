"""A row's probability figures from the sums llama.cpp's graph computed (issue 56: backend sampling).

With ``run -bs`` the figures' sums of every output row are computed inside llama.cpp's graph, on the device
that computed the logits (``inspector.llama.figure_sampler``, a C sampler llama.cpp runs per output row), and
only these cross to the host: the row's ``k`` largest logits and their token ids, the largest logit ``m``,
``z = sum exp(x - m)``, ``s = sum exp(x - m) * (x - m)`` (each ``x - m`` floored at -87, as the C kernel does),
the logit of the row's proposed token and how many logits are above it. ``sampled_figures`` turns them into
the same ``WindowProbabilities`` the host path (``inspector.engine.probabilities.summarise_rows``, softmax
basis) gives: each value the same double expression rounded to 4 significant digits, so both paths agree to
float32 rounding of the sums (tests/test_sampled_figures.py compares them on every row of real runs).

One difference, documented: a proposed token outside the row's ``k`` candidates whose logit is exactly equal
to other tokens' gets the rank after all of them (``greater + 1``), where the host path puts the lower ids
first; an exact float32 tie of two logits outside the top ``k`` is what it takes to see it.
Pure Python: no llama.cpp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from inspector.engine.errors import EngineError
from inspector.engine.probabilities import SOFTMAX, WindowProbabilities

STATS = 5
"""Values after the ``k`` candidates' logits in a row's sampled logits: m, z, s, the proposed logit, greater."""
_DIGITS = 4


@dataclass(frozen=True, slots=True)
class SampledRow:
    """One output row as the graph left it: ``candidates`` (token ids) and ``logits`` (theirs), largest first,
    ties to the lower id (``row_from_outputs`` sorts them); ``m``: the row's largest logit; ``z``, ``s``: the
    sums above; ``proposed_logit``: the proposed token's logit (meaningless on a row without one);
    ``greater``: logits strictly above it."""

    candidates: tuple[int, ...]
    logits: tuple[float, ...]
    m: float
    z: float
    s: float
    proposed_logit: float
    greater: int


def row_from_outputs(candidates: Sequence[int], values: Sequence[float]) -> SampledRow:
    """A ``SampledRow`` from one row's sampled candidates (k token ids, in no order: ggml_top_k's) and sampled
    logits (their k logits, then ``STATS`` values). Raises ``EngineError`` when the counts do not fit."""
    k = len(candidates)
    if k < 1 or len(values) != k + STATS:
        raise EngineError(f"the graph's figures row holds {k} candidates and {len(values)} values "
                          f"(expected k >= 1 and k + {STATS})")
    order = sorted(range(k), key=lambda j: (-values[j], candidates[j]))
    m, z, s, xp, greater = values[k:]
    return SampledRow(tuple(int(candidates[j]) for j in order), tuple(float(values[j]) for j in order),
                      float(m), float(z), float(s), float(xp), int(greater))


def _r(x: float) -> float:
    """4 significant digits, as the host path rounds (``probabilities._r``)."""
    return float(f"{float(x):.{_DIGITS}g}")


def _rank(row: SampledRow, token: int, logit: float | None) -> int:
    """1-based rank by logit of ``token`` in ``row``: its place among the candidates, else ``greater + 1``."""
    if token in row.candidates:
        return row.candidates.index(token) + 1
    if logit is None:
        raise EngineError(f"token {token} is outside the graph's candidates and has no logit of its own")
    return row.greater + 1


def sampled_figures(rows: Sequence[SampledRow], proposed: Sequence[int], predictions: Sequence[int],
                    top: int) -> WindowProbabilities:
    """The softmax figures of ``rows`` (one per verification row, in order): ``proposed[i]`` the proposal token
    row ``i`` judged (fewer than the rows: the bonus row and a plain step's row have none), ``predictions[i]``
    the row's prediction (greedy: the row's argmax, which is a candidate), ``top`` the most likely tokens kept
    per row (2.., at most the candidates). Raises ``EngineError`` for a prediction outside the candidates or
    more tokens asked for than the graph kept."""
    if len(predictions) != len(rows) or len(proposed) > len(rows):
        raise EngineError(f"{len(rows)} rows need {len(rows)} predictions and at most as many proposal tokens, "
                          f"observed {len(predictions)} and {len(proposed)}")
    p_prop, r_prop, p_pred, tokens, top_p, entropy, margin, ranks = [], [], [], [], [], [], [], []
    for i, row in enumerate(rows):
        k = max(2, top)
        if k > len(row.candidates):
            raise EngineError(f"{k} tokens a row asked for; the graph kept {len(row.candidates)}")
        z, m = row.z, row.m
        tokens.append(row.candidates[:k])
        top_p.append(tuple(_r(math.exp(v - m) / z) for v in row.logits[:k]))
        ent = math.log(z) - row.s / z
        entropy.append(_r(ent if ent > 0.0 else 0.0))
        margin.append(_r(row.logits[0] - row.logits[1]))
        pred = predictions[i]
        if pred not in row.candidates:
            raise EngineError(f"row {i}'s prediction {pred} is not among the graph's candidates")
        p_pred.append(_r(math.exp(row.logits[row.candidates.index(pred)] - m) / z))
        ranks.append(_rank(row, pred, None))
        if i < len(proposed):
            t = proposed[i]
            logit = row.logits[row.candidates.index(t)] if t in row.candidates else row.proposed_logit
            p_prop.append(_r(math.exp(logit - m) / z))
            r_prop.append(_rank(row, t, logit))
        else:
            p_prop.append(None)
            r_prop.append(None)
    return WindowProbabilities(SOFTMAX, tuple(p_prop), tuple(r_prop), tuple(p_pred), tuple(tokens),
                               tuple(top_p), tuple(entropy), tuple(margin), None, tuple(ranks))
