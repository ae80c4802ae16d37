"""Acceptance statistics on receipts written by hand (issue 42: every figure's expected value worked
out here, never taken from the code under test)."""

from types import SimpleNamespace

import pytest

from inspector.engine.stats import (
    SLOW_VERIFICATION_FACTOR,
    acceptance_by_position,
    accepted_length_histogram,
    decode_tokens_per_s,
    slow_verification_threshold_us,
    summarize,
    summarize_receipts,
)


def _r(proposed, accepted, disposition="first_mismatch"):
    return SimpleNamespace(proposal_token_count=proposed, accepted_proposal_tokens=accepted, disposition=disposition)


def test_acceptance_by_position_divides_accepted_by_offered_at_each_index():
    # index 0 offered by 3 windows, accepted by 2; index 1 offered by 2, accepted by 1; index 2 offered
    # by 1 (the 3-token proposal), accepted by none
    rs = [_r(1, 1), _r(3, 2), _r(2, 0)]
    assert acceptance_by_position(rs) == [2 / 3, 1 / 2, 0 / 1]


def test_acceptance_by_position_counts_a_longer_proposal_after_a_shorter_one_from_zero():
    assert acceptance_by_position([_r(2, 2), _r(4, 4)]) == [1.0, 1.0, 1.0, 1.0]
    assert acceptance_by_position([_r(2, 0), _r(4, 1)]) == [0.5, 0.0, 0.0, 0.0]
    assert acceptance_by_position([]) == []


def test_the_histogram_counts_windows_by_accepted_length_up_to_the_longest_proposal():
    # accepted 0, 2, 2, 3 of proposals 1, 2, 3, 3: lengths 0..3
    assert accepted_length_histogram([_r(1, 0), _r(2, 2), _r(3, 2), _r(3, 3)]) == [1, 0, 2, 1]
    # a full accept right after a shorter window: the list grows to hold index 2
    assert accepted_length_histogram([_r(1, 0), _r(2, 2)]) == [1, 0, 1]
    assert accepted_length_histogram([_r(4, 1)]) == [0, 1, 0, 0, 0]
    assert accepted_length_histogram([]) == []


def test_decode_speed_is_tokens_over_seconds_from_the_first_microsecond():
    assert decode_tokens_per_s(3, 1) == 3_000_000.0
    assert decode_tokens_per_s(10, 2_000_000) == 5.0
    assert decode_tokens_per_s(10, 0) is None


def test_the_summary_adds_up_receipts_by_the_named_definitions():
    rs = [_r(3, 3, "full_accept"), _r(4, 1), _r(2, 0), _r(3, 1, "stopped")]
    s = summarize_receipts(rs, plain_steps=2, discards=1, generated_tokens=12, decode_elapsed_us=3_000_000,
                           prefill_elapsed_us=1_000_000, finish_reason="length")
    assert (s.windows, s.plain_steps, s.discards, s.generated_tokens) == (4, 2, 1, 12)
    assert (s.proposed_tokens, s.accepted_tokens) == (12, 5)
    assert s.dispositions == {"full_accept": 1, "first_mismatch": 2, "stopped": 1}
    assert s.acceptance_rate == 5 / 12
    assert s.mean_accepted_length == 1 + 5 / 4 == 2.25
    # index 0: 3 of 4 windows; 1: only the full accept of 4; 2: 1 of the 3 with 3+ tokens; 3: 0 of 1
    assert s.acceptance_by_position == [3 / 4, 1 / 4, 1 / 3, 0 / 1]
    assert s.accepted_length_histogram == [1, 2, 0, 1, 0]
    assert (s.decode_elapsed_us, s.prefill_elapsed_us) == (3_000_000, 1_000_000)
    assert s.decode_tokens_per_s == 4.0  # 12 tokens in 3 s
    assert s.end_to_end_tokens_per_s == 3.0  # 12 tokens in 3 + 1 s
    assert s.finish_reason == "length"


def test_a_summary_without_windows_or_time_leaves_its_rates_undefined():
    s = summarize_receipts([], plain_steps=3, discards=0, generated_tokens=3, decode_elapsed_us=0)
    assert (s.windows, s.acceptance_rate, s.mean_accepted_length) == (0, None, None)
    assert s.prefill_elapsed_us == 0 and s.decode_tokens_per_s is None and s.end_to_end_tokens_per_s is None
    assert s.finish_reason is None and s.dispositions == {}


def test_end_to_end_speed_counts_prefill_time_from_the_first_microsecond():
    s = summarize_receipts([], plain_steps=0, discards=0, generated_tokens=2, decode_elapsed_us=0, prefill_elapsed_us=1)
    assert s.decode_tokens_per_s is None and s.end_to_end_tokens_per_s == 2_000_000.0
    s = summarize_receipts([], plain_steps=0, discards=0, generated_tokens=6, decode_elapsed_us=1_000_000,
                           prefill_elapsed_us=500_000)
    assert s.end_to_end_tokens_per_s == 4.0  # 6 tokens in 1.5 s


def test_summarize_reads_a_generations_counters():
    g = SimpleNamespace(receipts=[_r(2, 1)], plain_steps=4, discards=[object(), object()], generated_count=7,
                        decode_elapsed_us=2_000_000, prefill_elapsed_us=1_500_000, finish_reason="eog")
    s = summarize(g)
    assert (s.windows, s.plain_steps, s.discards, s.generated_tokens) == (1, 4, 2, 7)
    assert (s.decode_elapsed_us, s.prefill_elapsed_us, s.finish_reason) == (2_000_000, 1_500_000, "eog")
    assert s.decode_tokens_per_s == 3.5 and s.end_to_end_tokens_per_s == 2.0


def test_a_verification_is_slow_above_five_times_the_median_of_five_or_more_windows():
    assert SLOW_VERIFICATION_FACTOR == 5.0
    assert slow_verification_threshold_us([10, 20, 30, 40]) is None  # 4 windows: no median worth it
    assert slow_verification_threshold_us([50, 10, 40, 20, 30]) == 150.0  # median 30 (sorted first)
    assert slow_verification_threshold_us([60, 10, 40, 20, 30, 50]) == 175.0  # median (30 + 40) / 2
    assert slow_verification_threshold_us([8, 1, 7, 2, 6, 3, 5, 4]) == 22.5  # median (4 + 5) / 2 of eight
    assert slow_verification_threshold_us([9, 1, 8, 2, 7, 3, 6, 4, 5]) == 25.0  # median 5 of nine
    assert slow_verification_threshold_us([0, 0, 0, 0, 0]) == 5.0  # median 0 counts as 1 us
    assert slow_verification_threshold_us(iter([7, 7, 7, 7, 7])) == 35.0


def test_speed_against_llama_server_counts_the_tokens_that_cost_a_decode():
    from inspector.engine.stats import server_tokens_per_s
    # llama-server's n_gen_tps: 12 generated, the first from the prompt's last row: 11 in 2.2 s
    assert server_tokens_per_s(12, 2_200_000) == pytest.approx(5.0)
    assert server_tokens_per_s(12, 2_000_000, requests=2) == pytest.approx(5.0)  # two turns, two free tokens
    assert server_tokens_per_s(1, 0) is None and server_tokens_per_s(1, 10) is None
