"""The C kernel behind the softmax figures (``inspector.engine.figure_kernel``, issue 53): built by the install,
exact top tokens (ties to the lower id), sums within float32 rounding of float64's, rows it cannot take left to
numpy, and the same figures as the numpy path on every row of a real run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inspector.engine import deferred_figures, probabilities
from inspector.engine.probabilities import KERNEL_MAX_TOP, figure_path, summarise_rows
from inspector.llama import runtime as llama_runtime
from tests.scenarios import Follower

PROMPT = "Repeat exactly: the quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog."


def _kernel():
    from inspector.engine import figure_kernel  # the import itself is the first test's point

    return figure_kernel


def _reference(row: np.ndarray, k: int):
    """z, s and the top k of one row in float64 and a stable sort: what the kernel must give."""
    order = np.argsort(-row, kind="stable")[:k]
    d = row.astype(np.float64) - float(row.max())
    e = np.exp(np.maximum(d, -87.0))
    return float(e.sum()), float((e * np.maximum(d, -87.0)).sum()), order.tolist(), row[order].tolist()


def _same_figures(a, b) -> None:
    """The kernel's figures and numpy's: equal tokens and ranks, values equal to float32 rounding (4 digits kept,
    so the last one may differ by one)."""
    assert a.basis == b.basis and a.rows == b.rows
    assert a.top_tokens == b.top_tokens and a.proposed_rank == b.proposed_rank
    assert a.predicted_rank == b.predicted_rank
    for col in ("predicted_p", "entropy", "margin"):
        assert np.allclose(getattr(a, col), getattr(b, col), rtol=2e-3, atol=1e-6), col
    assert [p is None for p in a.proposed_p] == [p is None for p in b.proposed_p]
    assert np.allclose([p or 0.0 for p in a.proposed_p], [p or 0.0 for p in b.proposed_p], rtol=2e-3, atol=1e-6)
    assert np.allclose(a.top_p, b.top_p, rtol=2e-3, atol=1e-6)


def test_the_install_built_the_kernel_and_the_figures_say_which_path_runs():
    k = _kernel()
    assert k.isa() in ("x86-64-v3", "baseline")
    assert figure_path() == f"C ({k.isa()})"


def test_the_kernel_gives_the_top_tokens_of_a_stable_sort_and_the_sums_of_float64():
    k = _kernel()
    rng = np.random.default_rng(3)
    for n_vocab in (1, 7, 64, 65, 1000, 49152, 49157):
        x = (rng.standard_normal((3, n_vocab)) * 4).astype(np.float32)
        top = min(5, n_vocab)
        for row, got in zip(x, k.rows(x, n_vocab, top)):
            z, s, ids, vals = got
            rz, rs, rids, rvals = _reference(row, top)
            assert list(ids) == rids and list(vals) == rvals
            assert z == pytest.approx(rz, rel=2e-6) and s == pytest.approx(rs, rel=2e-6, abs=1e-6)


def test_ties_go_to_the_lower_id_across_blocks_and_in_one():
    k = _kernel()
    x = np.zeros((2, 5000), dtype=np.float32)
    x[0, [4000, 70, 3000, 64, 63, 1]] = 2.0  # six tied at the top, in several 64-logit blocks
    x[1, :] = 1.0  # a flat row: the first k ids
    got = k.rows(x, 5000, 5)
    assert list(got[0][2]) == [1, 63, 64, 70, 3000]
    assert list(got[1][2]) == [0, 1, 2, 3, 4] and got[1][0] == pytest.approx(5000.0)


def test_minus_infinity_logits_count_as_nothing_and_nan_or_plus_infinity_rows_are_left_to_numpy():
    k = _kernel()
    x = np.zeros((3, 300), dtype=np.float32)
    x[0, 100:] = -np.inf  # 100 finite zeros: z = 100 (plus 200 * 1.6e-38)
    x[1, 7] = np.nan
    x[2, 9] = np.inf
    got = k.rows(x, 300, 5)
    assert got[0][0] == pytest.approx(100.0) and got[0][1] == pytest.approx(0.0, abs=1e-30)
    assert got[1] is None and got[2] is None
    # summarise_rows then takes the numpy path for the whole call: the figures numpy alone gives
    a, b = summarise_rows(x, (), (0, 0, 9)), summarise_rows(x, (), (0, 0, 9), kernel=False)
    assert a.top_tokens == b.top_tokens
    assert a.entropy[0] == pytest.approx(np.log(100.0), rel=1e-4) and a.entropy == b.entropy


def test_a_buffer_that_is_not_whole_rows_or_a_k_out_of_range_is_a_value_error():
    k = _kernel()
    x = np.zeros(10, dtype=np.float32)
    for n_vocab, top in ((3, 1), (10, 0), (10, 11), (10, KERNEL_MAX_TOP + 1)):
        with pytest.raises(ValueError, match="not whole rows|outside"):
            k.rows(x, n_vocab, top)


def test_more_tokens_than_the_kernel_keeps_or_a_strided_block_take_the_numpy_path():
    x = (np.random.default_rng(2).standard_normal((2, 4000)) * 3).astype(np.float32)
    wide = summarise_rows(x, (), x.argmax(axis=1).tolist(), top=KERNEL_MAX_TOP + 6)
    assert len(wide.top_tokens[0]) == KERNEL_MAX_TOP + 6
    _same_figures(wide, summarise_rows(x, (), x.argmax(axis=1).tolist(), top=KERNEL_MAX_TOP + 6, kernel=False))
    strided = x[:, ::2]
    _same_figures(summarise_rows(strided, (), strided.argmax(axis=1).tolist()),
                  summarise_rows(strided, (), strided.argmax(axis=1).tolist(), kernel=False))


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 3000), st.integers(1, 4), st.integers(2, KERNEL_MAX_TOP), st.integers(0, 2**32 - 1),
       st.sampled_from(["normal", "ties", "minus_inf"]))
def test_the_kernels_figures_equal_numpys_on_any_rows(n_vocab, n_rows, top, seed, kind):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n_rows, n_vocab)) * 5).astype(np.float32)
    if kind == "ties":
        x = np.round(x)  # few distinct values: many ties
    elif kind == "minus_inf":
        x[:, rng.random(n_vocab) < 0.3] = -np.inf
        x[:, 0] = 1.0  # at least one finite logit per row
    top = min(top, n_vocab)
    proposed = rng.integers(0, n_vocab, size=n_rows - 1).tolist()
    predictions = x.argmax(axis=1).tolist()
    _same_figures(summarise_rows(x, proposed, predictions, top=top),
                  summarise_rows(x, proposed, predictions, top=top, kernel=False))


def test_every_row_of_a_real_run_has_the_same_figures_on_both_paths(make_generation, scheduler, chat_tokens,
                                                                     monkeypatch):
    """Plain steps (at once, in llama.cpp's buffer) and windows (``row_probabilities``) of a greedy run on the
    bundled model: each call's rows summarised by numpy too, from the same logits, before the next decode."""
    pairs = []
    real = probabilities.summarise_rows

    def both(logits, *args, **kwargs):
        ours = real(logits, *args, **kwargs)
        pairs.append((ours, real(np.array(logits), *args, **{**kwargs, "kernel": False})))
        return ours

    def plain(row, k, predictions, proposed=(), draft_q=None):  # a plain step's row goes to the kernel directly
        ours = real_kernel(row, k, predictions, proposed, draft_q)
        pairs.append((ours, real(np.array(row).reshape(1, -1), proposed, predictions, top=k, kernel=False)))
        return ours

    real_kernel = probabilities.kernel_figures
    monkeypatch.setattr(llama_runtime, "summarise_rows", both)
    monkeypatch.setattr(deferred_figures, "summarise_rows", both)
    monkeypatch.setattr(deferred_figures, "kernel_figures", plain)
    prompt = chat_tokens(PROMPT)
    plan = ((4, None), (4, 1), None, None)  # a full accept, a first mismatch, two plain steps
    g = make_generation(Follower(scheduler, plan, prompt=prompt), prompt, max_new_tokens=24, draft_max=4)
    g.run()
    assert g.figures is not None and g.figures.at_once and g.figures.batches == 0
    windows = [p for p, _ in pairs if p.rows > 1 or p.proposed_rank[0] is not None]
    assert g.receipts and g.plain_steps >= 1 and len(windows) >= 2 and len(pairs) >= g.plain_steps + len(windows)
    for ours, reference in pairs:
        _same_figures(ours, reference)


def _python_figures(x: np.ndarray, k: int, predictions, proposed):
    """The softmax figures written out in Python from ``rows()``'s sums and top tokens: the expressions
    ``summarise_rows``' numpy path evaluates, each rounded as it rounds (``float(f"{v:.4g}")``)."""
    import math

    def r(v):
        return float(f"{float(v):.4g}")

    def rank(row, ids, t):
        if t in ids:
            return ids.index(t) + 1
        return int(np.count_nonzero(row > row[t]) + np.count_nonzero(row[:t] == row[t])) + 1

    cols = [[] for _ in range(8)]
    for i, (z, s, ids, vals) in enumerate(_kernel().rows(x, x.shape[1], k)):
        row, m = x[i], vals[0]
        prop = i < len(proposed)
        cols[0].append(r(math.exp(float(row[proposed[i]]) - m) / z) if prop else None)
        cols[1].append(rank(row, list(ids), proposed[i]) if prop else None)
        cols[2].append(r(math.exp(float(row[predictions[i]]) - m) / z))
        cols[3].append(tuple(ids))
        cols[4].append(tuple(r(math.exp(v - m) / z) for v in vals))
        cols[5].append(r(max(0.0, math.log(z) - s / z)))
        cols[6].append(r(vals[0] - vals[1]))
        cols[7].append(rank(row, list(ids), predictions[i]))
    return tuple(tuple(c) for c in cols)


def test_the_kernels_figures_are_exactly_the_python_expressions_of_its_sums():
    rng = np.random.default_rng(11)
    for n_vocab, n_rows, k in ((49152, 1, 5), (49152, 5, 5), (3000, 4, 20), (10, 3, 2)):
        x = (rng.standard_normal((n_rows, n_vocab)) * 4).astype(np.float32)
        x[0, 3] = x[0].max()  # a tie at the top: the lower id first
        predictions = x.argmax(axis=1).tolist()
        predictions[-1] = int(rng.integers(0, n_vocab))  # a prediction that is not the argmax (a grammar's)
        proposed = rng.integers(0, n_vocab, size=n_rows - 1).tolist()  # mostly outside the top: ranks counted
        assert _kernel().figures(x, n_vocab, k, predictions, proposed) == _python_figures(x, k, predictions, proposed)


def test_a_token_outside_the_vocabulary_is_left_to_numpy_which_refuses_it():
    x = np.zeros((2, 50), dtype=np.float32)
    assert _kernel().figures(x, 50, 5, [0, 0], [50]) is None
    assert _kernel().figures(x, 50, 5, [0, -1], []) is None
    with pytest.raises(IndexError):
        summarise_rows(x, [50], [0, 0])


def test_the_figures_refuse_predictions_that_do_not_match_the_rows():
    x = np.zeros((2, 50), dtype=np.float32)
    with pytest.raises(ValueError):
        _kernel().figures(x, 50, 5, [0], [])
    with pytest.raises(ValueError):
        _kernel().figures(x, 50, 5, [0, 0], [1, 2, 3])
    with pytest.raises(ValueError):
        _kernel().figures(x, 49, 5, [0, 0], [])
