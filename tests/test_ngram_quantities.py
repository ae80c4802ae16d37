"""How much the n-gram source proposes, on token lists written by hand (issue 42: quantities pinned by
oracles that do not come from the code under test): after the prompt, after its own output, across
incremental queries, at each n-gram size and cap."""

from __future__ import annotations

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest
from inspector.sources.ngram import NgramSource


def ask(source, tokens, prompt_len, cap=8):
    return source.propose(ProposalRequest(tuple(tokens), prompt_len, 0, cap, float("inf")))


def test_after_the_prompt_it_proposes_what_followed_the_last_occurrence_up_to_the_cap():
    s = NgramSource(n_max=2, n_min=2)
    prompt = [1, 2, 3, 4, 5, 6, 1, 2]
    p = ask(s, prompt, len(prompt), cap=3)
    assert isinstance(p, Proposal) and tuple(p.token_ids) == (3, 4, 5)
    p = ask(NgramSource(n_max=2, n_min=2), prompt, len(prompt), cap=8)
    assert tuple(p.token_ids) == (3, 4, 5, 6, 1, 2)  # everything after the match, to the stream's end


def test_it_keeps_indexing_its_own_output_across_incremental_queries():
    s = NgramSource(n_max=2, n_min=2)
    prompt = [10, 11, 12]
    stream = list(prompt)
    assert isinstance(ask(s, stream, 3), NoProposal)
    for t in (20, 21, 22, 23):  # generated: a pair (20, 21) the prompt never had
        stream.append(t)
        ask(s, stream, 3)
    stream += [20, 21]  # the output repeats its own earlier pair: only the output can propose what follows
    p = ask(s, stream, 3)
    assert isinstance(p, Proposal) and tuple(p.token_ids) == (22, 23, 20, 21)
    stream += [22, 23, 20]  # the newest occurrence wins: (23, 20) last followed by 21
    p = ask(s, stream, 3, cap=2)
    assert tuple(p.token_ids) == (21, 22)


def test_the_largest_n_gram_that_matches_decides_and_a_smaller_one_is_the_fallback():
    s = NgramSource(n_max=3, n_min=1)
    # (7, 8, 9) occurred followed by 1; the 1-gram (9) occurred last followed by 2
    stream = [7, 8, 9, 1, 5, 9, 2, 6, 7, 8, 9]
    p = ask(s, stream, len(stream), cap=1)
    assert tuple(p.token_ids) == (1,) and b":n3:" in p.decision_id
    s = NgramSource(n_max=3, n_min=1)
    stream = [4, 9, 2, 6, 3, 9]  # no 3- or 2-gram repeats; the 1-gram (9) does
    p = ask(s, stream, len(stream), cap=2)
    assert tuple(p.token_ids) == (2, 6) and b":n1:" in p.decision_id


def test_a_new_request_that_does_not_extend_the_stream_starts_the_index_again():
    s = NgramSource(n_max=2, n_min=2)
    assert isinstance(ask(s, [1, 2, 3, 1, 2], 5), Proposal)
    p = ask(s, [5, 6, 1, 2], 4)  # another request: (1, 2) is no longer followed by 3 anywhere
    assert isinstance(p, NoProposal)


# --- Mutation testing (issue 42): the rules the surviving mutants changed, each pinned by hand. ---

import types

import pytest

from inspector.sources.length_policy import bucket_of
from inspector.sources.ngram import ADAPTIVE_PLAIN, NGRAM, NO_MATCH, make_ngram


def test_an_n_gram_ending_right_before_the_last_token_is_indexed_at_once():
    # [7, 7, 7] with n = 2: (7, 7) ended at position 2 (followed by the last 7), so it proposes (7,)
    p = ask(NgramSource(n_max=2, n_min=2), [7, 7, 7], 3, cap=4)
    assert isinstance(p, Proposal) and tuple(p.token_ids) == (7,)


def test_the_one_gram_of_the_first_token_is_indexed():
    # n_min 1: (5,) first ended at position 1, followed by 6 then 5
    p = ask(NgramSource(n_max=1, n_min=1), [5, 6, 5], 3, cap=4)
    assert isinstance(p, Proposal) and tuple(p.token_ids) == (6, 5)


def test_every_size_from_n_max_down_to_n_min_is_tried():
    # no 3-gram repeats, the 2-gram (1, 2) does: followed by 5, 9, 1, 2
    p = ask(NgramSource(n_max=3, n_min=2), [1, 2, 5, 9, 1, 2], 6, cap=8)
    assert isinstance(p, Proposal) and tuple(p.token_ids) == (5, 9, 1, 2) and p.decision_id == b"ngram:1:n2:L2"


def test_a_stream_shorter_than_the_largest_n_still_tries_the_smaller_sizes():
    p = ask(NgramSource(n_max=4, n_min=1), [3, 3], 2, cap=4)
    assert isinstance(p, Proposal) and tuple(p.token_ids) == (3,) and p.decision_id == b"ngram:1:n1:L1"


def test_the_match_length_stops_at_the_start_of_the_stream():
    # (1, 2) at 0..1 matches the last two tokens; nothing precedes it: match 2, not more
    p = ask(NgramSource(n_max=2, n_min=2), [1, 2, 1, 2], 4, cap=8)
    assert p.decision_id == b"ngram:1:n2:L2" and tuple(p.token_ids) == (1, 2)


def test_the_match_length_counts_each_earlier_token_that_still_matches():
    # (1, 2) at 1..2 is preceded by 5 as the last (1, 2) is: match 3, then the stream's start
    p = ask(NgramSource(n_max=2, n_min=2), [5, 1, 2, 9, 5, 1, 2], 7, cap=2)
    assert p.decision_id == b"ngram:1:n2:L3" and tuple(p.token_ids) == (9, 5)


def test_the_match_length_is_capped_at_64():
    seq = list(range(100, 170))  # 70 tokens, then again: the context matches 70 tokens back
    p = ask(NgramSource(n_max=2, n_min=2), seq + seq, 140, cap=3)
    assert p.decision_id == b"ngram:1:n2:L64" and tuple(p.token_ids) == (100, 101, 102)


def test_decision_ids_count_the_proposals_from_one():
    s = NgramSource(n_max=2, n_min=2)
    stream = [4, 5, 6, 4, 5]
    assert ask(s, stream, 5).decision_id == b"ngram:1:n2:L2"
    assert isinstance(ask(s, stream + [8], 5), NoProposal)  # (5, 8) never occurred: not counted
    assert ask(s, stream + [8, 4, 5], 5).decision_id == b"ngram:2:n2:L2"
    assert ask(s, stream + [8, 4, 5], 5).decision_id == b"ngram:3:n2:L2"


@pytest.mark.parametrize("second, proposed", [
    ([5, 6, 1, 2, 9, 2, 6, 1, 2], (9, 2, 6, 1, 2)),  # position 6 differs (a 6), position 5 is the old last token
    ([5, 6, 1, 2, 9, 1, 1, 1, 2], (9, 1, 1, 1, 2)),  # position 6 differs (a 1, the old last-but-one)
])
def test_a_longer_request_that_differs_at_the_last_indexed_position_starts_again(second, proposed):
    s = NgramSource(n_max=2, n_min=2)
    assert tuple(ask(s, [5, 6, 1, 2, 9, 1, 2], 7).token_ids) == (9, 1, 2)
    # a new request: (1, 2) last occurred at 2..3 of it (followed by 9), not where the old stream had it
    p = ask(s, second, 9)
    assert tuple(p.token_ids) == proposed


def test_no_match_says_which_sizes_were_tried():
    p = ask(NgramSource(n_max=4, n_min=2), [1, 2, 3], 3)
    assert p == NoProposal(NO_MATCH, "no 2..4-gram")
    p = ask(NgramSource(n_max=3, n_min=3), [1, 2, 3, 4], 4)
    assert p == NoProposal(NO_MATCH, "no 3-gram")
    assert NO_MATCH == "no_match" and ADAPTIVE_PLAIN == "adaptive_plain"


def test_constructor_defaults_and_settings_are_pinned():
    assert NgramSource().settings() == {"n_max": 4, "n_min": 2, "length": "fixed"}
    assert NgramSource(5, 3).settings() == {"n_max": 5, "n_min": 3, "length": "fixed"}
    assert NgramSource(length="adaptive", row_cost_ratio=0.123456).settings() == {
        "n_max": 4, "n_min": 2, "length": "adaptive", "row_cost_ratio": 0.1235}
    # a measured table, relative to one row: 3 / 3, 4 / 3 (rounded to 4 places)
    assert NgramSource(length="adaptive", row_costs=[3.0, 4.0]).settings() == {
        "n_max": 4, "n_min": 2, "length": "adaptive", "row_costs": [1.0, 1.3333]}


@pytest.mark.parametrize("kwargs, message", [
    ({"n_max": 0}, r"^n_max must be a whole number >= 1 \(tokens\), observed 0$"),
    ({"n_min": 0}, r"^n_min must be a whole number >= 1 \(tokens\), observed 0$"),
    ({"n_max": 2.5}, r"^n_max must be a whole number >= 1 \(tokens\), observed 2\.5$"),
    ({"n_min": True}, r"^n_min must be a whole number >= 1 \(tokens\), observed True$"),
    ({"n_max": 2, "n_min": 3}, r"^n-gram sizes must satisfy 1 <= n_min <= n_max, observed n_min=3, n_max=2$"),
    ({"length": "long"}, r"^length must be 'fixed' or 'adaptive', observed 'long'$"),
])
def test_bad_constructor_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NgramSource(**kwargs)


def test_the_options_cross_rule_names_the_default_used():
    assert NGRAM.check_options({"n_min": 3, "n_max": 3}) == {"n_min": 3, "n_max": 3}
    with pytest.raises(ValueError, match=r"^source ngram options must satisfy 1 <= n_min <= n_max, "
                                         r"observed n_min=5, n_max=4 \(the default\)$"):
        NGRAM.check_options({"n_min": 5})
    with pytest.raises(ValueError, match=r"observed n_min=5, n_max=3$"):
        NGRAM.check_options({"n_min": 5, "n_max": 3})


def test_make_ngram_passes_every_option_on():
    ctx = types.SimpleNamespace(row_costs=None)
    assert make_ngram(ctx, n_max=6, n_min=3).settings() == {"n_max": 6, "n_min": 3, "length": "fixed"}
    assert make_ngram(ctx, length="adaptive", row_cost_ratio="0.25").settings() == {
        "n_max": 4, "n_min": 2, "length": "adaptive", "row_cost_ratio": 0.25}
    # no stored cost model, none given: the linear model with the default ratio
    assert make_ngram(ctx, length="adaptive").settings() == {
        "n_max": 4, "n_min": 2, "length": "adaptive", "row_cost_ratio": 0.5}
    stored = types.SimpleNamespace(row_costs=(2.0, 3.0))
    assert make_ngram(stored, length="adaptive").settings()["row_costs"] == [1.0, 1.5]
    assert make_ngram(stored, length="adaptive", row_costs="linear").settings()["row_cost_ratio"] == 0.5


def _receipt(decision_id, proposed, accepted):
    return types.SimpleNamespace(decision_id=decision_id.hex(), proposal_token_count=proposed,
                                 accepted_proposal_tokens=accepted, disposition="all_accepted",
                                 verification_rows=proposed + 1, verification_elapsed_us=0)


def test_adaptive_length_learns_from_the_receipt_of_its_proposal():
    s = NgramSource(n_max=2, n_min=2, length="adaptive", row_cost_ratio=0.0)  # free rows: propose all
    p = ask(s, [1, 2, 3, 1, 2], 5)
    assert tuple(p.token_ids) == (3, 1, 2) and p.decision_id == b"ngram:1:n2:L2"
    s.report(_receipt(p.decision_id, 3, 3))
    assert s.policy.counts[bucket_of(2)].accepted == 3.0  # learned for match length 2
    s.report(_receipt(p.decision_id, 3, 3))  # reported twice: learned once
    assert s.policy.counts[bucket_of(2)].accepted == 3.0


def test_adaptive_length_forgets_the_outstanding_decisions_past_256():
    s = NgramSource(n_max=2, n_min=2, length="adaptive", row_cost_ratio=0.0)
    # 257 outstanding when the 258th is made (more than 256): those 257 are forgotten
    ids = [ask(s, [1, 2, 3, 1, 2], 5).decision_id for _ in range(258)]
    s.report(_receipt(ids[0], 1, 1))
    s.report(_receipt(ids[256], 1, 1))
    assert s.policy.counts[bucket_of(2)].accepted == 0.0
    s.report(_receipt(ids[257], 1, 1))
    assert s.policy.counts[bucket_of(2)].accepted == 1.0


def test_adaptive_length_weighs_only_the_tokens_that_followed_the_match():
    # (7, 7) followed by one token: a one-token proposal costs 3 plain steps (the table), so nothing is
    # proposed; longer windows would be free (r = 0 beyond the table) but there is nothing to fill them
    s = NgramSource(n_max=2, n_min=2, length="adaptive", row_cost_ratio=0.0, row_costs=[10.0, 30.0])
    p = ask(s, [7, 7, 7], 3, cap=8)
    assert p == NoProposal(ADAPTIVE_PLAIN, "match of 2 tokens")


def test_a_discarded_decision_is_not_learned_from():
    s = NgramSource(n_max=2, n_min=2, length="adaptive", row_cost_ratio=0.0)
    p = ask(s, [1, 2, 3, 1, 2], 5)
    s.discard(p.decision_id, "test")
    s.report(_receipt(p.decision_id, 3, 3))
    assert s.policy.counts[bucket_of(2)].accepted == 0.0


def test_discarding_an_unknown_or_hex_named_decision_is_quiet_and_forgets_it():
    s = NgramSource(n_max=2, n_min=2, length="adaptive", row_cost_ratio=0.0)
    s.discard(b"never-proposed", "test")  # nothing pending under that id: no error
    p = ask(s, [1, 2, 3, 1, 2], 5)
    s.discard(p.decision_id.hex(), "test")  # the receipts' form of the id (hex text)
    s.report(_receipt(p.decision_id, 3, 3))
    assert s.policy.counts[bucket_of(2)].accepted == 0.0


@pytest.mark.parametrize("given, expected", [("", None), ("auto", None), (None, None), ("0", 0.0), ("0.25", 0.25)])
def test_the_row_cost_ratio_option_takes_auto_or_a_finite_number_from_zero(given, expected):
    assert NGRAM.check_options({"row_cost_ratio": given}) == {"row_cost_ratio": expected}


@pytest.mark.parametrize("given", ["bogus", "-1", "inf", "-inf"])
def test_a_bad_row_cost_ratio_option_is_named(given):
    with pytest.raises(ValueError, match=r"^source ngram option row_cost_ratio must be auto or a finite number >= 0 "
                                         r"\(cost of one more row as a fraction of a one-row decode\), observed '"
                                         + given + "'$"):
        NGRAM.check_options({"row_cost_ratio": given})
