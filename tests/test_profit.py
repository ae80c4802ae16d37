"""Profit per window against plain decoding of the same tokens (issue 28 part 2), on tiny receipts."""

from __future__ import annotations

from types import SimpleNamespace as R

from inspector.engine.profit import OwnC1, balance, cumulative_profit_us, plain_step_us, run_balance, window_profit_us


def _r(committed, accepted, proposal=0, verification=0, repair=0, step=0):
    return R(canonical_prediction_count=committed, accepted_proposal_tokens=accepted, proposal_elapsed_us=proposal,
             verification_elapsed_us=verification, repair_elapsed_us=repair, decode_step=step)


def test_a_window_earns_c1_per_committed_token_and_pays_its_proposal_verification_and_repair():
    assert window_profit_us(_r(4, 3, proposal=100, verification=2500, repair=50), 1000.0) == 4000 - 2650
    assert window_profit_us(_r(1, 0, proposal=10, verification=1500), 1000.0) == -510


def test_the_balance_splits_saving_and_losing_windows_and_counts_rejections_at_row_0():
    b = balance([_r(4, 3, verification=2000), _r(1, 0, verification=1500), _r(2, 1, verification=2500),
                 _r(1, 0, verification=1100)], 1000.0, "the cost model")
    assert (b.saved, b.saved_us, b.lost, b.lost_us, b.lost_at_row_0) == (1, 2000, 3, 1100, 2)
    assert b.net_us == 900
    assert b.text() == ("saved 2.0 ms in 1 window, lost 1.1 ms in 3 (2 rejected at row 0); net +0.9 ms at c(1) "
                        "1.0 ms (the cost model)")


def test_c1_is_the_median_plain_step_of_the_runs_own_session_else_the_cost_models():
    ops = [R(kind="step", session_id=0, hold_us=900), R(kind="step", session_id=0, hold_us=1100),
           R(kind="step", session_id=0, hold_us=5000), R(kind="verify", session_id=0, hold_us=9000),
           R(kind="step", session_id=1, hold_us=1)]
    assert plain_step_us(ops, 0) == 1100
    assert plain_step_us(ops[3:4], 0) is None
    assert run_balance([_r(2, 1)], plain_step_us(ops, 0), 700.0).c1_from == "plain steps of this run"
    b = run_balance([_r(2, 1)], plain_step_us(ops[3:4], 0), 700.0)
    assert (b.c1_us, b.c1_from) == (700.0, "the cost model")
    assert run_balance([_r(2, 1)], None, None) is None and run_balance([], 1100.0, 700.0) is None


def test_the_cumulative_profit_line_sums_window_profits_in_decode_step_order():
    windows = [_r(1, 0, verification=1500, step=7), _r(4, 3, verification=2000, step=2),
               _r(2, 1, verification=2500, step=4)]
    steps, total = cumulative_profit_us(windows, 1000.0)
    assert steps == [2, 4, 7]
    assert total == [2000.0, 1500.0, 1000.0]
    assert total[-1] == balance(windows, 1000.0, "x").net_us
    assert cumulative_profit_us([], 1000.0) == ([], [])


def test_the_runs_own_c1_is_computed_again_only_when_lock_operations_arrive():
    ops = [R(kind="step", session_id=0, hold_us=900)]
    own = OwnC1()
    assert own.of(1, ops, 0) == 900
    ops[0] = R(kind="step", session_id=0, hold_us=5)  # same count: the cached value stands
    assert own.of(1, ops, 0) == 900
    ops.append(R(kind="step", session_id=0, hold_us=7))
    assert own.of(1, ops, 0) == 6
    assert own.of(1, ops, 1) is None


def test_a_window_with_profit_exactly_zero_counts_as_saved():
    # 3 committed tokens at c(1) = 1000 us buy 3000 us; the window spent exactly that
    even = _r(3, 2, proposal=200, verification=2700, repair=100)
    assert window_profit_us(even, 1000.0) == 0
    b = balance([even], 1000.0, "the cost model")
    assert (b.saved, b.lost, b.saved_us, b.lost_us) == (1, 0, 0, 0)
    assert b.net_text() == "+0.0 ms"


def test_times_are_written_in_milliseconds_then_seconds_at_their_boundaries():
    """The sentence's durations pinned to literals at each boundary (issue 42: a mutant that moved a
    boundary or a divisor passed every test that built its expectation with the same formatter)."""
    def net(us):
        return balance([_r(1, 1, verification=1000.0 - us)], 1000.0, "x").net_text()

    assert net(9_999) == "+10.0 ms" and net(10_000) == "+10 ms" and net(10_500) == "+10 ms"
    assert net(9_999_999) == "+10000 ms" and net(10_000_000) == "+10.0 s" and net(12_340_000) == "+12.3 s"
    assert net(0) == "+0.0 ms"  # zero profit: saved, with a plus
    assert balance([_r(1, 0, verification=1_500.0)], 1000.0, "x").net_text() == "-0.5 ms"


def test_the_sentence_counts_windows_in_the_singular_and_plural_and_names_rejections_only_when_some():
    two = balance([_r(3, 2), _r(3, 2)], 1000.0, "plain steps of this run")
    assert two.text() == "saved 6.0 ms in 2 windows, lost 0.0 ms in 0; net +6.0 ms at c(1) 1.0 ms (plain steps of this run)"
    assert two.short_text() == "net +6.0 ms: saved 6.0 ms in 2, lost 0.0 ms in 0"
    lost = balance([_r(1, 1, verification=2_000)], 2_500.0, "the cost model")
    assert lost.text() == "saved 0.5 ms in 1 window, lost 0.0 ms in 0; net +0.5 ms at c(1) 2.5 ms (the cost model)"


def test_the_runs_own_c1_is_recomputed_only_when_operations_arrive():
    own = OwnC1()
    ops = [R(kind="step", session_id=0, hold_us=900)]
    assert own.of(1, ops, 0) == 900.0
    ops.append(R(kind="step", session_id=0, hold_us=1_300))
    assert own.of(1, ops, 0) == 1_100.0  # one more operation: computed again
    assert own.of(2, [], 0) is None  # another record


def test_durations_round_at_their_last_digit_with_the_exact_divisors():
    """Values that sit on a rounding edge: a divisor off by one (1001, 1000001) rounds them the other way."""
    def net(us):
        return balance([_r(1, 1, verification=1000.0 - us)], 1000.0, "x").net_text()

    assert net(1_050) == "+1.1 ms"  # 1.05 ms (1050 / 1001 would be 1.049)
    assert net(1_000_000) == "+1000 ms"  # (1000000 / 1001 would be 999)
    assert net(10_050_000) == "+10.1 s"  # 10.05 s (10050000 / 1000001 would be 10.049)
    assert net(-1_050) == "-1.1 ms"


def test_the_sentence_gives_c1_in_milliseconds_to_one_decimal():
    b = balance([_r(1, 1, verification=150_000)], 150_000.0, "the cost model")
    assert b.text() == "saved 0.0 ms in 1 window, lost 0.0 ms in 0; net +0.0 ms at c(1) 150.0 ms (the cost model)"
