"""The adaptive proposal length (inspector.sources.length_policy) and the n-gram source that uses it."""

from __future__ import annotations

import pytest

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import ProposalRequest
from inspector.sources.length_policy import CostAwareLength, best_length, bucket_of, expected_committed
from inspector.sources.ngram import NgramSource


def test_expected_committed_tokens_follow_the_geometric_sum():
    assert expected_committed(0.0, 5) == 1.0
    assert expected_committed(1.0, 5) == 6.0
    assert expected_committed(0.5, 2) == pytest.approx(1.75)


def test_a_proposal_is_made_only_when_it_beats_a_plain_step():
    # Free rows (r = 0): any acceptance pays, so propose the whole cap.
    assert best_length(0.3, 0.0, 8) == 8
    # Rows cost half a step each: p = 0.3 never pays, p = 0.97 pays with a long proposal.
    assert best_length(0.3, 0.5, 8) == 0
    assert best_length(0.97, 0.5, 16) >= 6
    # Rows as expensive as a plain step: never worth it.
    assert best_length(0.99, 1.0, 16) == 0


def test_match_lengths_fall_into_buckets():
    assert [bucket_of(n) for n in (1, 2, 3, 4, 7, 8, 16, 31, 32, 500)] == [0, 1, 1, 2, 2, 3, 4, 4, 5, 5]


def test_the_policy_learns_acceptance_per_match_length_and_the_row_cost_from_receipts():
    policy = CostAwareLength()
    start = policy.length(40, 16)
    for _ in range(10):  # long matches always fully accepted
        policy.observe(40, 8, 8, False, 9, 1000 + 500 * 8)
    assert policy.length(40, 16) > start
    for _ in range(10):  # short matches always rejected at once
        policy.observe(2, 4, 0, True, 5, 1000 + 500 * 4)
    assert policy.length(2, 16) == 0
    # Timings c(k) = 500 + 500 k: r = slope / c(1) = 0.5, once rows of several sizes were seen.
    for k in (1, 4, 8, 12, 16, 2, 6, 10):
        policy.observe(40, k - 1, k - 1, False, k, 500 + 500 * k)
    assert policy.row_cost_ratio == pytest.approx(0.5, rel=0.05)


def request(tokens, cap=16):
    return ProposalRequest(tokens, len(tokens), 0, cap, 1e18)


def test_the_adaptive_ngram_source_names_the_match_length_and_stays_within_the_cap():
    text = list(range(100, 140))
    src = NgramSource(4, 2, length="adaptive", row_cost_ratio=0.1)
    p = src.propose(request(text + text[:20], cap=8))
    assert p is not None and 1 <= len(p.token_ids) <= 8
    assert p.token_ids == tuple(text[20 : 20 + len(p.token_ids)])
    assert b":L20" in p.decision_id
    fixed = NgramSource(4, 2).propose(request(text + text[:20], cap=8))
    assert fixed.token_ids == tuple(text[20:28])


def test_the_adaptive_ngram_source_proposes_nothing_where_it_keeps_failing():
    src = NgramSource(2, 2, length="adaptive", row_cost_ratio=0.5)

    class Receipt:
        proposal_token_count = 2
        accepted_proposal_tokens = 0
        disposition = "first_mismatch"
        verification_rows = 3
        verification_elapsed_us = 2000

    tokens = [1, 2, 3, 9, 9, 1, 2]
    for _ in range(30):
        p = src.propose(request(tokens))
        if isinstance(p, NoProposal):
            break
        r = Receipt()
        r.decision_id = p.decision_id.hex()
        src.report(r)
    assert src.propose(request(tokens)) == NoProposal("adaptive_plain", "match of 2 tokens")


class FirstTokenRejected:
    """An n-gram source whose proposals start with a token the target surely rejects
    (neither its prediction there nor the runner-up: ``scenarios.wrong_token``), the
    rest as the n-gram source proposed it. Every window then commits exactly one
    token, as a plain step does, so runs of any proposal lengths go through the same
    stream positions and the same n-gram matches."""

    def __init__(self, inner: NgramSource, follower) -> None:
        self.inner, self.follower = inner, follower
        self.name = inner.name

    def propose(self, request):
        import dataclasses

        from scenarios import wrong_token

        p = self.inner.propose(request)
        if isinstance(p, NoProposal):
            return p
        ref, second = self.follower.continuation(request.tokens)
        if not ref:
            return p
        wrong = wrong_token(self.follower.runtime, ref[0], second[0])
        return dataclasses.replace(p, token_ids=(wrong,) + tuple(p.token_ids[1:]))

    def report(self, receipt):
        self.inner.report(receipt)

    def discard(self, decision_id, reason):
        self.inner.discard(decision_id, reason)


def test_on_the_real_model_adaptive_lengths_keep_the_output_and_waste_fewer_rows(make_generation, chat_tokens,
                                                                                  scheduler):
    """Where n-gram proposals keep failing, the adaptive length wastes fewer rows than the
    fixed one and predicts at least its speedup, with the same output.

    How often the n-gram source's proposals fail depends on the model's words (so on
    the CPU); here every proposal's first token is one the target surely rejects
    (``FirstTokenRejected``): both runs commit one token per step, so they query the
    source at the same stream positions with the same matches, where the adaptive
    length is never longer than the fixed one, and shorter at the first query (a
    one-token match, whose prior acceptance does not pay for a row). The verify
    batches, receipts and the policy's learning are the real ones.
    """
    from inspector import asset_path
    from inspector.llama.cost_model import CostModel
    from scenarios import Follower, assert_same_greedy_output

    cost = CostModel(tuple(8.0 * (1 + 0.5 * (k - 1)) for k in range(1, 17)))  # r = 0.5, as measured here
    tokens = chat_tokens(asset_path("prompts/code-rewrite.txt").read_text("utf-8").rstrip("\n"))
    runs = {}
    for length in ("fixed", "adaptive"):
        source = FirstTokenRejected(NgramSource(n_min=1, length=length, row_cost_ratio=0.5),
                                    Follower(scheduler, prompt=tokens))
        g = make_generation(source, tokens, max_new_tokens=48)
        g.run()
        runs[length] = g
    fixed, adaptive = runs["fixed"], runs["adaptive"]
    assert fixed.receipts, "the first query of a one-token n-gram source always proposes"
    assert all(r.canonical_prediction_count == 1 for g in runs.values() for r in g.receipts)
    assert_same_greedy_output(scheduler, tokens, fixed.generated, adaptive.generated)
    wasted = {k: sum(r.trimmed_rows for r in g.receipts) for k, g in runs.items()}
    assert wasted["adaptive"] < wasted["fixed"], wasted

    def expected(g):
        return cost.expected_speedup([(r.verification_rows, r.canonical_prediction_count) for r in g.receipts],
                                     g.plain_steps)

    print({k: expected(g) for k, g in runs.items()}, wasted)
    assert expected(adaptive) >= expected(fixed)


def test_a_measured_cost_table_overrides_the_linear_model():
    # Two rows cost almost two steps (matrix-vector vs matrix-matrix kernels): one-token
    # proposals do not pay even at p = 0.8, which the linear model (r = 0.5) would allow.
    assert best_length(0.8, 0.5, 1) == 1
    assert best_length(0.8, 0.5, 1, costs=[1.0, 1.9]) == 0
    policy = CostAwareLength(row_costs=[8.0, 15.2, 20.6, 22.1])
    assert policy.row_costs[1] == pytest.approx(1.9)


def test_stored_cost_models_are_found_per_model_and_thread_count(tmp_path, monkeypatch):
    from inspector.llama.cost_cache import load_cost_model, store_cost_model, stored_row_costs
    from inspector.llama.cost_model import CostModel
    from inspector.sources.registry import SourceContext, available_sources

    monkeypatch.setenv("SPEC_INSPECTOR_COST_CACHE", str(tmp_path / "c.json"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    cm = CostModel(tuple(8.0 + 4.5 * k for k in range(16)))
    assert store_cost_model(model, 2, CostModel((1.0, 2.0))) is None  # too small to keep
    disturbed = CostModel((2976.0,) + tuple(8.0 + 4.5 * k for k in range(1, 16)))  # another process took the CPU
    assert "c(1)" in disturbed.disturbed()
    assert store_cost_model(model, 2, disturbed) is None and load_cost_model(model, 2) is None
    assert store_cost_model(model, 2, cm) is not None
    assert load_cost_model(model, 2) == cm and load_cost_model(model, 1) is None

    class Rt:
        model_path = str(model)
        n_threads = 2

    ctx = SourceContext(Rt(), row_costs=stored_row_costs(Rt()))  # the callers' lookup (cli, window, compare)
    src = available_sources()["ngram"](ctx, length="adaptive")
    assert src.settings()["row_costs"][0] == 1.0 and len(src.settings()["row_costs"]) == 16
    linear = available_sources()["ngram"](ctx, length="adaptive", row_costs="linear")
    assert "row_cost_ratio" in linear.settings()


def test_one_disturbed_cost_median_does_not_steer_the_policy():
    from inspector.sources.length_policy import robust_costs

    clean = [8.0] + [10.0 + 4.0 * k for k in range(2, 17)]
    noisy = list(clean)
    noisy[14] = 2972.0  # another process took the CPU during that measurement
    assert robust_costs(noisy)[14] == pytest.approx(clean[14], rel=0.01)
    assert robust_costs(noisy)[0] == 8.0 and robust_costs(noisy)[1] == pytest.approx(18.0, rel=0.01)


def test_a_bucket_that_stopped_proposing_is_tried_again_later():
    policy = CostAwareLength(row_cost_ratio=0.5)
    for _ in range(6):
        policy.observe(40, 4, 0, True, 5, 3000)
    assert policy.length(40, 16) == 0
    later = [policy.length(40, 16) for _ in range(300)]
    assert later[0] == 0 and max(later) > 0, "without proposals the estimate must fade back toward the prior"


def test_the_best_cut_weighs_the_chance_of_reaching_each_token_against_the_windows_cost():
    from inspector.sources.length_policy import best_cut

    cost = {2: 1.5, 3: 2.0, 4: 2.5}.get  # each extra row half a plain step
    # Sure tokens: 1 + 3 committed for 2.5 (1.6 per plain step) beats 1 + 1 for 1.5 and 1 + 2 for 2.
    assert best_cut([1.0, 1.0, 1.0], cost) == (3, pytest.approx(1.6))
    # A likely first token, then unlikely ones: one token, 1.9 / 1.5.
    assert best_cut([0.9, 0.1, 0.05], cost) == (1, pytest.approx(1.9 / 1.5))
    # Nothing beats a plain step: no proposal.
    assert best_cut([0.4, 0.2], cost) == (0, 1.0)


def test_a_growing_match_counts_each_token_in_the_bucket_of_its_own_match_length():
    grown, flat = CostAwareLength(), CostAwareLength()
    for policy, growing in ((grown, True), (flat, False)):
        policy.observe(6, 4, 3, True, 5, 0, growing=growing)  # matches 6, 7, 8 accepted; rejected after 9
    # Tokens after a 6- or 7-token match (bucket [4, 8)) were accepted; after 8 and 9 one of two.
    assert grown.acceptance(8) < flat.acceptance(8)
    assert grown.acceptance(6) > CostAwareLength().acceptance(6)
    assert flat.acceptance(6) < grown.acceptance(6)


# --- Mutation testing (issue 42): boundaries and figures of the length rule, each computed by hand. ---

import types

from inspector.sources.length_policy import best_cut, robust_costs, row_costs_option


@pytest.mark.parametrize("given, expected", [
    (None, None), ("", "linear"), ("linear", "linear"), ("0.5,1", [0.5, 1.0]), ([2, 3.5], [2.0, 3.5]),
])
def test_the_row_costs_option_takes_linear_or_positive_milliseconds(given, expected):
    assert row_costs_option("ngram", "row_costs", given) == expected


@pytest.mark.parametrize("given", ["0,1", "1,0", "1,inf", "a,b", [], "1,-2"])
def test_a_bad_row_costs_option_is_named(given):
    with pytest.raises(ValueError, match=r"^source ngram option row_costs must be linear or positive milliseconds "
                                         r"per batch of 1, 2, \.\.\. rows \(\"a,b,c\"\), observed "):
        row_costs_option("ngram", "row_costs", given)


def test_a_window_that_only_ties_a_plain_step_is_not_proposed():
    # 1 + 0.5 committed for 1.5 plain steps: rate 1.0, exactly a plain step's
    assert best_cut([0.5], {2: 1.5}.get) == (0, 1.0)
    # min_gain is the bar: rate 1.3 (1 + 0.3 for rows that cost nothing) beats 1.2, not 1.5
    assert best_length(0.3, 0.0, 1, min_gain=1.2) == 1
    assert best_length(0.3, 0.0, 1, min_gain=1.5) == 0


def test_robust_costs_fit_a_median_line_through_three_or_more_batch_sizes():
    # fewer than three batch sizes >= 2: as measured
    assert robust_costs([10, 62, 22]) == [10.0, 62.0, 22.0]
    # (2, 62) (3, 22) (4, 32) (5, 46): pairwise slopes -40 -15 -16/3 10 12 14, median (index 3) 10;
    # intercepts y - 10 x: 42 -8 -8 -4, median (index 2) -4; c(k) = -4 + 10 k
    assert robust_costs([10, 62, 22, 32, 46]) == [10.0, 16.0, 26.0, 36.0, 46.0]
    # exactly three: (2, 20) (3, 40) (4, 30): slopes 20 5 -10, median 5; intercepts 10 25 10, median 10
    assert robust_costs([10, 20, 40, 30]) == [10.0, 20.0, 25.0, 30.0]
    # falling costs: slope -10 clamped to 0; intercepts 30 20 10, median 20; never below c(1)
    assert robust_costs([10, 30, 20, 10]) == [10.0, 20.0, 20.0, 20.0]
    assert robust_costs([25, 30, 20, 10]) == [25.0, 25.0, 25.0, 25.0]


def test_acceptance_before_any_receipt_is_the_prior_of_each_bucket():
    policy = CostAwareLength()
    assert [policy.acceptance(m) for m in (1, 2, 4, 8, 16, 32)] == pytest.approx([0.35, 0.5, 0.65, 0.75, 0.85, 0.9])


def test_observed_counts_fade_by_0_99_per_query_since_they_came():
    policy = CostAwareLength()  # match 2: prior 2 accepted, 2 mismatched
    policy.observe(2, 1, 1, False, 2, 0)
    policy.observe(2, 1, 1, False, 2, 0)  # same query: no fading, 2 accepted
    assert policy.acceptance(2) == pytest.approx(4 / 6)
    policy.query()
    policy.observe(2, 1, 1, False, 2, 0)  # 0.99 * 2 + 1 = 2.98
    policy.query()
    policy.observe(2, 1, 1, False, 2, 0)  # 0.99 * 2.98 + 1 = 3.9502
    assert policy.acceptance(2) == pytest.approx((2 + 3.9502) / (4 + 3.9502))
    policy.query()  # one query later: 0.99 * 3.9502
    assert policy.acceptance(2) == pytest.approx((2 + 0.99 * 3.9502) / (4 + 0.99 * 3.9502))


def test_observe_counts_tokens_and_mismatches_in_their_buckets():
    flat = CostAwareLength()
    flat.observe(6, 4, 3, True, 5, 0)  # all in the bucket of match 6: [4, 8)
    assert (flat.counts[2].accepted, flat.counts[2].mismatched) == (3.0, 1.0)
    assert (flat.counts[3].accepted, flat.counts[3].mismatched) == (0.0, 0.0)
    grown = CostAwareLength()
    grown.observe(6, 4, 3, True, 5, 0, growing=True)  # accepted after 6, 7 ([4, 8)) and 8 ([8, 16)); rejected after 9
    assert (grown.counts[2].accepted, grown.counts[2].mismatched) == (2.0, 0.0)
    assert (grown.counts[3].accepted, grown.counts[3].mismatched) == (1.0, 1.0)


def _receipt(proposed, accepted, disposition, rows, us):
    return types.SimpleNamespace(proposal_token_count=proposed, accepted_proposal_tokens=accepted,
                                 disposition=disposition, verification_rows=rows, verification_elapsed_us=us)


def test_observe_receipt_reads_the_receipts_figures():
    policy = CostAwareLength()
    policy.observe_receipt(6, _receipt(4, 3, "first_mismatch", 5, 0))
    assert (policy.counts[2].accepted, policy.counts[2].mismatched) == (3.0, 1.0)
    policy.observe_receipt(6, _receipt(4, 4, "all_accepted", 5, 0))  # not a mismatch
    assert (policy.counts[2].accepted, policy.counts[2].mismatched) == (7.0, 1.0)
    grown = CostAwareLength()
    grown.observe_receipt(6, _receipt(4, 3, "first_mismatch", 5, 0), growing=True)
    assert (grown.counts[3].accepted, grown.counts[3].mismatched) == (1.0, 1.0)
    # verification times: rows 1..8 at c(k) = 800 + 200 k us: r = 200 / 1000
    timed = CostAwareLength()
    for k in range(1, 9):
        timed.observe_receipt(2, _receipt(k - 1, k - 1, "all_accepted", k, 800 + 200 * k))
    assert timed.row_cost_ratio == pytest.approx(0.2)


def test_the_row_cost_ratio_is_fitted_from_eight_timings_spanning_three_rows_or_more():
    policy = CostAwareLength()
    for k in (1, 2, 3, 4, 1, 2, 3):  # seven timings: not yet
        policy.observe(2, 0, 0, False, k, 800 + 200 * k)
    assert policy.row_cost_ratio == 0.5
    policy.observe(2, 0, 0, False, 4, 800 + 200 * 4)  # the eighth; rows 1..4 span 3
    assert policy.row_cost_ratio == pytest.approx(0.2)
    narrow = CostAwareLength()
    for k in (1, 2, 3) * 4:  # rows 1..3 span only 2
        narrow.observe(2, 0, 0, False, k, 800 + 200 * k)
    assert narrow.row_cost_ratio == 0.5


def test_timings_of_zero_are_ignored_and_one_microsecond_counts():
    policy = CostAwareLength()
    for k in range(1, 8):
        policy.observe(2, 0, 0, False, k, 800 + 200 * k)
    policy.observe(2, 0, 0, False, 9, 0)  # no time measured: not an eighth timing
    assert policy.row_cost_ratio == 0.5
    tiny = CostAwareLength()  # c(k) = 0.8 + 0.2 k us: c(1) = 1 us exactly
    for k in range(1, 9):
        tiny.observe(2, 0, 0, False, k, 0.8 + 0.2 * k)
    assert tiny.row_cost_ratio == pytest.approx(0.2)


def test_the_fitted_ratio_keeps_the_last_64_timings_and_stays_within_0_02_and_1_5():
    policy = CostAwareLength()
    for i in range(64):
        policy.observe(2, 0, 0, False, 1 + i % 8, 1000 * (1 + i % 8))  # r = 1
    assert policy.row_cost_ratio == pytest.approx(1.0)
    for i in range(64):
        policy.observe(2, 0, 0, False, 1 + i % 8, 800 + 200 * (1 + i % 8))  # r = 0.2 replaces them all
    assert policy.row_cost_ratio == pytest.approx(0.2, abs=1e-12)
    steep = CostAwareLength()
    for k in range(1, 9):
        steep.observe(2, 0, 0, False, k, 2000 * k - 1000)  # c(1) = 1000, slope 2000: r = 2, capped
    assert steep.row_cost_ratio == 1.5
    flat = CostAwareLength()
    for k in range(1, 9):
        flat.observe(2, 0, 0, False, k, 1000)  # r = 0: at least 0.02
    assert flat.row_cost_ratio == 0.02


def test_a_fit_whose_one_row_cost_is_zero_or_less_is_ignored():
    policy = CostAwareLength()
    for k in range(2, 10):
        policy.observe(2, 0, 0, False, k, 200 * (k - 1))  # c(1) = 0 on the fitted line
    assert policy.row_cost_ratio == 0.5


def test_a_fixed_ratio_is_kept_whatever_the_timings():
    policy = CostAwareLength(row_cost_ratio=0.3)
    for k in range(1, 9):
        policy.observe(2, 0, 0, False, k, 800 + 200 * k)
    assert policy.row_cost_ratio == 0.3
    assert CostAwareLength(row_cost_ratio=0.0).row_cost_ratio == 0.0
    assert CostAwareLength(row_cost_ratio=0.25).relative_cost(3) == 1.5  # 1 + 0.25 * 2


@pytest.mark.parametrize("kwargs, message", [
    ({"row_cost_ratio": -0.1}, r"^row_cost_ratio must be >= 0, observed -0\.1$"),
    ({"row_costs": []}, r"^row_costs must be positive milliseconds per batch size, observed \[\]$"),
    ({"row_costs": [5.0, 0.0]}, r"^row_costs must be positive milliseconds per batch size, observed \[5\.0, 0\.0\]$"),
])
def test_bad_policy_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CostAwareLength(**kwargs)


def test_costs_below_one_millisecond_are_valid_and_taken_relative_to_one_row():
    assert CostAwareLength(row_costs=[0.5, 1.0]).row_costs == [1.0, 2.0]


def test_the_length_is_within_the_cap_and_uses_the_measured_table():
    free = CostAwareLength(row_cost_ratio=0.0)
    assert free.length(2, 0) == 0
    assert free.length(2, 1) == 1
    # two rows cost three plain steps in the table; three rows and more are free (r = 0 beyond the table)
    table = CostAwareLength(row_cost_ratio=0.0, row_costs=[10.0, 30.0])
    assert table.length(2, 1) == 0  # (1 + 0.5) / 3
    assert table.length(2, 8) == 8
