"""The probability figures on tiny logits worked out by hand (issue 42): a row's view, the JSON block's
checks, the margin and entropy edges, the sampler basis's columns, ranks outside the top five and the
kept buffers."""

import math
import warnings

import numpy as np
import pytest

from inspector.engine import probabilities as P
from inspector.engine.probabilities import (RowProbabilities, WindowProbabilities, summarise_rows, top_texts_of,
                                            with_top_texts)
from inspector.engine.settings import SamplingSettings


def _block(predicted_rank=(1, 1, 2), draft_q=(0.8, 0.2)):
    return WindowProbabilities("softmax", (0.9, 0.1, None), (1, 3, None), (0.9, 0.6, 0.7), ((5, 6), (8, 7), (9, 4)),
                               ((0.9, 0.05), (0.6, 0.2), (0.7, 0.1)), (0.3, 1.1, 0.8), (2.5, 1.0, 0.4), draft_q,
                               predicted_rank)


def test_a_row_names_its_proposed_and_predicted_tokens_and_takes_every_column_at_its_index():
    w = _block()
    assert w.row(1, (5, 7), (5, 8, 9)) == RowProbabilities(1, 7, 0.1, 3, 8, 0.6, ((8, 0.6), (7, 0.2)), 1.1, 1.0, 0.2,
                                                            "softmax", 1)
    # the bonus row: no proposal token, no draft q; without predictions the top token is the prediction
    assert w.row(2, (5, 7)) == RowProbabilities(2, None, None, None, 9, 0.7, ((9, 0.7), (4, 0.1)), 0.8, 0.4, None,
                                                 "softmax", 2)
    assert w.row(1, (5, 7), (5,)).predicted == 8  # predictions shorter than the rows: the top token
    assert w.row(1, (5, 7), (5, 7, 9)).predicted == 7  # a sampled prediction that is not the top token
    assert w.row(0, (5, 7), (5, 8, 9)).proposed == 5
    assert _block(predicted_rank=None).row(0).predicted_rank is None


def test_a_row_outside_the_window_is_an_index_error_naming_the_row_and_the_windows_size():
    for i in (3, -1):
        with pytest.raises(IndexError) as e:
            _block().row(i)
        assert str(e.value) == f"row {i} of a 3-row window"


def test_a_block_without_draft_q_or_predicted_ranks_reads_back_with_none_and_a_damaged_one_is_refused():
    d = _block(predicted_rank=None, draft_q=None).to_json()
    assert "predicted_rank" not in d and "draft_q" not in d
    back = WindowProbabilities.from_json(d)
    assert back.predicted_rank is None and back.draft_q is None and back == _block(None, None)
    d["entropy"] = [0.3]
    with pytest.raises(ValueError) as e:
        WindowProbabilities.from_json(d)
    assert str(e.value) == "probability columns of different lengths (predicted_p has 3 rows)"


def test_a_sure_row_has_probability_1_entropy_0_and_its_margin_in_logits():
    w = summarise_rows(np.array([[100.0, 0.0, 0.0]], dtype=np.float32), (), (0,))
    assert w.predicted_p == (1.0,) and 0.0 <= w.entropy[0] < 1e-30 and w.margin == (100.0,)  # e^-100 terms
    assert w.top_tokens == ((0, 1, 2),) and w.top_p == ((1.0, 3.72e-44, 3.72e-44),)  # e^-100 = 3.72e-44
    assert (w.proposed_p, w.proposed_rank, w.predicted_rank, w.basis) == ((None,), (None,), (1,), "softmax")


def test_the_margin_of_a_two_token_vocabulary_is_their_difference_and_of_one_token_infinite():
    assert summarise_rows(np.array([[1.0, 3.0]], dtype=np.float32), (), (1,)).margin == (2.0,)
    one = summarise_rows(np.array([[4.0]], dtype=np.float32), (), (0,))
    assert one.margin == (math.inf,) and one.predicted_p == (1.0,) and 0.0 <= one.entropy[0] < 1e-30


def test_a_minus_infinity_logit_raises_no_warning():
    logits = np.array([[0.0, -np.inf, 0.0]], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w = summarise_rows(logits, (), (0,))
    assert w.entropy == (round(math.log(2), 4),) and w.top_p == ((0.5, 0.5, 0.0),)


def test_the_sampler_basis_columns_by_hand():
    """Top-k 2 at temperature 1: row 0 keeps tokens 0, 1 (logits 2, 0): p = e²/(e²+1), 1/(e²+1); row 1
    keeps 2, 0 (logits 5, 0): p = e⁵/(e⁵+1), 1/(e⁵+1). Row 0 judges the proposal token 1 (rank 2)."""
    s = SamplingSettings(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0)
    logits = np.array([[2.0, 0.0, -1.0, -3.0], [0.0, -2.0, 5.0, -1.0]], dtype=np.float32)
    w = summarise_rows(logits, (1,), (0, 2), s)
    a, b = math.e ** 2 / (math.e ** 2 + 1), math.e ** 5 / (math.e ** 5 + 1)
    h = [-(a * math.log(a) + (1 - a) * math.log(1 - a)), -(b * math.log(b) + (1 - b) * math.log(1 - b))]
    assert w.basis == "sampler"
    assert w.predicted_p == pytest.approx((a, b), abs=1e-4)
    assert w.proposed_p[0] == pytest.approx(1 - a, abs=1e-4) and w.proposed_p[1] is None
    assert w.proposed_rank == (2, None) and w.predicted_rank == (1, 1)
    assert w.entropy == pytest.approx(h, abs=1e-4)
    assert w.top_tokens == ((0, 1, 2, 3), (2, 0, 3, 1))
    assert w.top_p[0] == pytest.approx((a, 1 - a, 0.0, 0.0), abs=1e-4)
    assert w.top_p[1] == pytest.approx((b, 1 - b, 0.0, 0.0), abs=1e-4)
    assert w.margin == (2.0, 5.0)


def test_a_token_outside_the_top_five_is_ranked_by_the_logits_above_it_and_equal_ones_of_lower_ids():
    # logits 7 6 5 4 3 2 1 1: token 7 has six higher logits and token 6 equal to it with a lower id: rank 8
    logits = np.array([[7, 6, 5, 4, 3, 2, 1, 1], [0, 0, 0, 0, 0, 0, 0, 9]], dtype=np.float32)
    w = summarise_rows(logits, (7,), (7, 7))
    assert w.proposed_rank == (8, None) and w.predicted_rank == (8, 1)
    s = SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    assert summarise_rows(logits, (7,), (7, 7), s).proposed_rank == (8, None)


def test_a_row_with_nan_logits_puts_the_finite_ones_first_then_the_nans_by_id():
    logits = np.full((1, 8), np.nan, dtype=np.float32)
    logits[0, 1], logits[0, 3] = 1.0, 3.0
    assert summarise_rows(logits, (), (3,)).top_tokens == ((3, 1, 0, 2, 4),)


def test_shapes_that_disagree_are_refused_with_both_counts():
    with pytest.raises(ValueError) as e:
        summarise_rows(np.zeros((1, 2, 3), dtype=np.float32), (), (0, 0))
    assert str(e.value) == ("probabilities need (rows, n_vocab) logits, 2 predictions and at most rows proposal "
                            "tokens, observed logits (1, 2, 3), 2 predictions, 0 proposal tokens")
    with pytest.raises(ValueError):
        summarise_rows(np.zeros((2, 50), dtype=np.float32), (), (0,))  # 2 rows, 1 prediction
    with pytest.raises(ValueError):
        summarise_rows(np.zeros((2, 50), dtype=np.float32), (1, 2, 3), (0, 0))  # 3 proposal tokens, 2 rows
    w = summarise_rows(np.zeros((2, 50), dtype=np.float32), (1, 2), (0, 0))  # as many as rows: allowed
    assert w.proposed_rank == (2, 3)


def test_cold_buffers_give_the_same_figures_as_kept_ones(monkeypatch):
    logits = np.zeros((2, 2500), dtype=np.float32)
    logits[0, 2100], logits[1, 7] = 3.0, 2.0
    warm = summarise_rows(logits, (5,), (2100, 7))
    monkeypatch.setattr(P, "_ONES", {})
    monkeypatch.setattr(P, "_STARTS", {})
    monkeypatch.setattr(P, "_SCRATCH", P.threading.local())
    cold = summarise_rows(logits, (5,), (2100, 7))
    assert cold == warm and cold.top_tokens == ((2100, 0, 1, 2, 3), (7, 0, 1, 2, 3))


def test_the_kept_buffers_are_kept_and_grow_to_the_largest_batch(monkeypatch):
    monkeypatch.setattr(P, "_ONES", {})
    monkeypatch.setattr(P, "_STARTS", {})
    monkeypatch.setattr(P, "_SCRATCH", P.threading.local())
    ones = P._ones(5)
    assert ones.dtype == np.float32 and ones.tolist() == [1.0] * 5 and P._ones(5) is ones
    starts = P._block_starts(2500)
    assert starts.tolist() == [0, 1024, 2048] and P._block_starts(2500) is starts
    a = P._scratch("t", (2, 3), np.float32)
    assert a.shape == (2, 3) and a.dtype == np.float32
    assert P._scratch("t", (1, 3), np.float32).base is a.base  # smaller: the same memory
    b = P._scratch("t", (3, 3), np.float32)
    assert b.shape == (3, 3) and b.base is not a.base  # larger: grown
    assert P._scratch("t", (3, 3), np.bool_).dtype == np.bool_


def test_top_texts_are_added_per_row_and_read_back_as_an_id_to_text_map():
    block = {"top_tokens": [[1, 2], [3]]}
    full = with_top_texts(block, lambda t: f"t{t}")
    assert full == {"top_tokens": [[1, 2], [3]], "top_token_texts": [["t1", "t2"], ["t3"]]}
    assert with_top_texts(None, str) is None
    assert top_texts_of(full) == {1: "t1", 2: "t2", 3: "t3"}
    assert top_texts_of(block) == {} and top_texts_of(None) == {} and top_texts_of({}) == {}


def test_the_drafts_q_is_kept_to_four_digits_and_none_clears_it():
    w = _block(draft_q=None)
    assert w.with_draft_q((0.123456, 0.5)).draft_q == (0.1235, 0.5)
    assert _block().with_draft_q(None).draft_q is None


def test_a_near_tie_is_a_margin_below_half_a_logit_or_the_given_threshold():
    row = _block().row(2)  # margin 0.4
    assert row.near_tie() and not row.near_tie(0.4) and row.near_tie(0.41)
    assert not _block().row(1).near_tie()  # margin 1.0
    assert not RowProbabilities(0, None, None, None, 1, 0.5, (), 0.0, 0.5, None, "softmax").near_tie()  # 0.5: not below
