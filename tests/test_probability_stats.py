"""``inspector.engine.probability_stats`` on hand-made receipts (and one engine run on the fake runtime)."""

from __future__ import annotations

import pytest

from inspector.engine.probabilities import WindowProbabilities
from inspector.engine.probability_stats import (
    acceptance_by_probability,
    has_probabilities,
    judged_count,
    judged_tokens,
    probability_by_position,
)
from inspector.engine.records import WindowReceipt


def receipt(p, accepted, disposition, q=None, *, figures=True, index=1) -> WindowReceipt:
    """A window proposing len(p) tokens whose rows gave the proposed tokens probabilities ``p``
    (the bonus row's None added), the draft's ``q``; tokens and positions are made up."""
    n = len(p)
    rows = n + 1
    probs = WindowProbabilities("softmax", tuple(p) + (None,), tuple([1] * n) + (None,), (0.5,) * rows,
                                ((1, 2),) * rows, ((0.5, 0.2),) * rows, (1.0,) * rows, (1.0,) * rows,
                                None if q is None else tuple(q)) if figures else None
    committed = accepted + (0 if disposition == "stopped" else 1)
    proposal = tuple(range(10, 10 + n))
    # the target agrees with the accepted tokens and predicts something else at the first rejection
    predictions = proposal[:accepted] + tuple(range(500, 500 + rows - accepted))
    return WindowReceipt(
        request_id=1, session_id=0, window_index=index, decode_step=index, decision_id="d", source="test",
        disposition=disposition, proposal_token_ids=proposal, proposal_token_count=n,
        verification_rows=rows, accepted_proposal_tokens=accepted, generated_token_count=committed,
        canonical_prediction_count=committed, committed_tokens=predictions[:committed],
        verification_row_predictions=predictions, correction_or_boundary_token=None,
        base_position=10, position_after_verification=10 + rows, canonical_position=10 + committed,
        trimmed_rows=rows - committed, proposal_elapsed_us=1, verification_elapsed_us=1, repair_elapsed_us=1,
        total_elapsed_us=3, runtime_lock_wait_us=0, runtime_lock_hold_us=1, runtime_lock_acquires=1,
        repair="trim", probabilities=probs)


# full accept of 2; a mismatch at index 1 of 4 (indices 2, 3 never judged); a stop after 1 of 3 (the stop
# came with the accepted token: index 1 never judged)
FULL = receipt([0.95, 0.85], 2, "full_accept", q=[0.9, 0.6])
MISMATCH = receipt([0.91, 0.15, 0.99, 0.99], 1, "first_mismatch", q=[0.8, 0.55, 0.3, 0.3])
STOPPED = receipt([0.35, 0.05, 0.05], 1, "stopped", q=[0.5, 0.1, 0.1])
RECEIPTS = [FULL, MISMATCH, STOPPED]


def test_a_stopped_windows_rejected_token_counts_when_its_correction_was_committed():
    r = receipt([0.35, 0.05, 0.05], 1, "first_mismatch")
    from dataclasses import replace

    stopped_on_correction = replace(r, disposition="stopped")  # the correction ended the text (end of turn)
    assert judged_count(stopped_on_correction) == 2
    assert judged_tokens([stopped_on_correction])[-1] == (1, 0.05, False)


def test_judged_tokens_are_the_accepted_ones_and_the_first_mismatch():
    assert [judged_count(r) for r in RECEIPTS] == [2, 2, 1]
    assert judged_tokens(RECEIPTS) == [(0, 0.95, True), (1, 0.85, True), (0, 0.91, True), (1, 0.15, False),
                                       (0, 0.35, True)]
    assert judged_tokens(RECEIPTS, "draft") == [(0, 0.9, True), (1, 0.6, True), (0, 0.8, True), (1, 0.55, False),
                                                (0, 0.5, True)]
    with pytest.raises(ValueError, match="which must be"):
        judged_tokens(RECEIPTS, "other")


def test_acceptance_by_probability_bins_judged_tokens_only():
    bins = acceptance_by_probability(RECEIPTS)
    assert len(bins) == 10 and bins[0].lo == 0.0 and bins[-1].hi == 1.0
    assert sum(b.judged for b in bins) == 5 and sum(b.accepted for b in bins) == 4
    by_lo = {round(b.lo, 1): (b.judged, b.accepted) for b in bins if b.judged}
    # 0.99 (never judged) and 0.05 (after the stop) are not counted
    assert by_lo == {0.1: (1, 0), 0.3: (1, 1), 0.8: (1, 1), 0.9: (2, 2)}
    nine = bins[9]
    assert nine.rate == 1.0 and nine.mean_p == pytest.approx(0.93)
    assert bins[1].rate == 0.0 and bins[5].rate is None and bins[5].mean_p is None
    coarse = acceptance_by_probability(RECEIPTS, edges=(0, 0.5, 1), which="draft")
    assert [(b.judged, b.accepted) for b in coarse] == [(0, 0), (5, 4)]  # 0.5 goes up: bins are [lo, hi)
    assert acceptance_by_probability(RECEIPTS, edges=(0.0, 0.6, 1.0), which="draft")[0].judged == 2


def test_the_top_edge_is_included_and_bad_edges_are_refused():
    r = receipt([1.0], 1, "full_accept")
    assert acceptance_by_probability([r])[-1].judged == 1
    for edges in ((0.5,), (0, 0.5, 0.5, 1), (1, 0)):
        with pytest.raises(ValueError, match="edges"):
            acceptance_by_probability([r], edges=edges)


def test_probability_by_position():
    rows = probability_by_position(RECEIPTS)
    assert [r.position for r in rows] == [1, 2, 3, 4]
    assert [r.offered for r in rows] == [3, 3, 2, 1]
    assert [(r.judged, r.accepted) for r in rows] == [(3, 3), (2, 1), (0, 0), (0, 0)]
    assert rows[0].rate == 1.0 and rows[1].rate == 0.5 and rows[2].rate is None
    assert rows[0].mean_p == pytest.approx((0.95 + 0.91 + 0.35) / 3)
    assert rows[1].mean_p == pytest.approx((0.85 + 0.15) / 2)
    assert rows[3].mean_p is None


def test_receipts_without_figures_count_nowhere():
    bare = [receipt([0.9, 0.9], 2, "full_accept", figures=False, index=i) for i in range(3)]
    assert not has_probabilities(bare)
    assert sum(b.judged for b in acceptance_by_probability(bare)) == 0
    assert probability_by_position(bare) == []
    mixed = bare + [FULL]
    assert has_probabilities(mixed) and [r.offered for r in probability_by_position(mixed)] == [1, 1]
    # no draft q: figures for the target, none for the draft
    no_q = [receipt([0.9], 1, "full_accept")]
    assert has_probabilities(no_q) and not has_probabilities(no_q, "draft")
    assert sum(b.judged for b in acceptance_by_probability(no_q, which="draft")) == 0


def test_an_engine_run_on_the_fake_runtime_counts_every_judged_token():
    """The fake target (50 tokens) predicts t+1 (p about 0.497) and gives t+2 p about 0.07: a
    proposal [c+1, c+3, c+4] accepts one token, rejects the next and never judges the third."""
    from fake_runtime import FakeRuntime, ListSource
    from inspector.engine import Generation, GenerationSettings, RuntimeScheduler

    def one_then_wrong(req):
        c = req.tokens[-1]
        return [(c + 1) % 50, (c + 3) % 50, (c + 4) % 50]

    prompt = [5, 6, 7]
    g = Generation(RuntimeScheduler(FakeRuntime(n_vocab=50)), ListSource([one_then_wrong] * 4), prompt,
                   GenerationSettings(max_new_tokens=12, draft_max=3))
    g.run()
    receipts = g.receipts
    assert len(receipts) == 4 and all(r.probabilities is not None for r in receipts)
    assert all(r.disposition == "first_mismatch" and judged_count(r) == 2 for r in receipts)
    bins = acceptance_by_probability(receipts)
    assert sum(b.judged for b in bins) == 8
    assert [(round(b.lo, 1), b.judged, b.accepted) for b in bins if b.judged] == [(0.0, 4, 0), (0.4, 4, 4)]
    assert [(r.judged, r.accepted) for r in probability_by_position(receipts)] == [(4, 4), (4, 0), (0, 0)]
    off = Generation(RuntimeScheduler(FakeRuntime(n_vocab=50)), ListSource([one_then_wrong]), prompt,
                     GenerationSettings(max_new_tokens=6, draft_max=3, probabilities=False))
    off.run()
    assert off.receipts and not has_probabilities(off.receipts)
