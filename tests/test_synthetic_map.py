"""The synthetic-acceptance map (issue 39 item 3): predicted speedup over tau x draft cost, the break-even
line, where a run lands, and the tuner's short table. Expected values come from closed forms written
here for hand-made cost models: a flat c(k) = c(1), and a linear one c(k) = c(1) (1 + s (k - 1)), whose
speedup is (1 + a E[L]) / (1 + (s + f) E[L]) at conditional rate a, so it breaks even at a = s + f."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from inspector.bench.synthetic_map import (COST_MAX, TAU_MAX, break_even_cost, break_even_line, break_even_tau,
                                           format_predicted_table, grid_values, landing, predicted_grid)
from inspector.bench.synthetic_table import predicted_speedup
from inspector.engine.settings import GenerationSettings
from inspector.llama.cost_model import CostModel
from inspector.sources.registry import SourceContext, make_source
from inspector.sources.synthetic import constant_rate

D = 8  # the table's draft max
C1 = 12.0


def flat() -> CostModel:
    return CostModel((C1,) * 16)


def linear(s: float) -> CostModel:
    return CostModel(tuple(C1 * (1 + s * (k - 1)) for k in range(1, 17)))


def geometric(a: float, n: int) -> float:
    """1 + a + ... + a^n."""
    return sum(a ** i for i in range(n + 1))


def rate_for(tau: float) -> float:
    """The constant rate a with 1 + a + ... + a^D = tau, by bisection (the test's own)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if geometric(mid, D) < tau else (lo, mid)
    return lo


def test_a_flat_cost_model_predicts_speedup_equal_to_the_tokens_committed_per_window_for_a_free_draft():
    taus = [1.0, 1.5, 2.0, 3.0, 5.5, 8.0]
    row = predicted_grid(flat(), taus, [0.0])[0]
    assert row == pytest.approx(taus, rel=1e-6)


def test_the_grid_is_the_closed_form_of_a_linear_cost_model_at_every_tau_and_draft_cost():
    s = 0.2
    taus, fractions = grid_values(1.0, 8.0, 15), grid_values(0.0, 0.5, 6)
    got = predicted_grid(linear(s), taus, fractions)
    for f, row in zip(fractions, got):
        for tau, value in zip(taus, row):
            a = rate_for(tau)
            expected_l = geometric(a, D - 1)  # E[L]: position j is reached with probability a^(j-1)
            assert value == pytest.approx((1 + a * expected_l) / (1 + (s + f) * expected_l), rel=1e-5), (tau, f)
    cm = linear(s)
    assert got[2][4] == pytest.approx(predicted_speedup(cm, constant_rate(taus[4], D), D, fractions[2]), rel=1e-9)


def test_the_break_even_line_is_where_the_rate_equals_the_slope_plus_the_draft_cost():
    for s in (0.0, 0.15, 0.3):
        cm = linear(s)
        for tau in (1.5, 2.0, 3.0, 6.0):
            assert break_even_cost(cm, tau) == pytest.approx(rate_for(tau) - s, abs=1e-6)
            grid = predicted_grid(cm, [tau], [break_even_cost(cm, tau)])
            assert grid[0][0] == pytest.approx(1.0, abs=1e-6)  # speedup 1 on the line
        for f in (0.0, 0.1, 0.25, 0.5):
            tau = break_even_tau(cm, f)
            if s + f >= 1.0:
                assert tau is None
                continue
            assert tau == pytest.approx(max(1.0, geometric(s + f, D)), abs=1e-4)
            # just left of it slower than plain decoding, just right faster
            if tau > 1.0:
                below, above = predicted_grid(cm, [tau - 0.01, tau + 0.01], [f])[0]
                assert below < 1.0 < above
    line = break_even_line(linear(0.1), [2.0, 4.0])
    assert [t for t, _ in line] == [2.0, 4.0] and line[1][1] > line[0][1]


def test_a_steep_cost_model_never_pays_and_says_so():
    steep = CostModel(tuple(C1 * k for k in range(1, 17)))  # k rows cost k single rows
    assert break_even_tau(steep, 0.25) is None
    assert all(v < 1.0 for v in predicted_grid(steep, [2.0, 5.0], [0.25])[0])
    text = format_predicted_table(steep)
    assert "never" in text and text.count("\n") == 5


def test_the_tuners_table_has_each_cost_once_and_the_speedups_of_the_grid():
    cm = linear(0.25)
    text = format_predicted_table(cm)
    lines = text.splitlines()
    rows = predicted_grid(cm, range(1, 9), [0.0, 0.25, 0.5])
    for line, row, f in zip(lines[2:5], rows, (0.0, 0.25, 0.5)):
        cells = [float(c.rstrip("*x")) for c in line.split()[2:10]]
        assert cells == pytest.approx([round(v, 2) for v in row], abs=0.006)
        assert line.split()[0] == f"{f:g}" and f"tau {geometric(0.25 + f, D):.2f}" in line
    assert "1.33" in lines[2] and lines[2].split()[2] == "0.80x*"  # tau 1: c(1)/c(2) = 1/1.25


def receipt(accepted: int, proposed: int, proposal_us: int):
    return SimpleNamespace(accepted_proposal_tokens=accepted, proposal_token_count=proposed,
                           proposal_elapsed_us=proposal_us)


def test_a_run_lands_at_its_tokens_per_window_and_its_proposal_time_per_token_over_c1():
    rs = [receipt(3, 4, 8000), receipt(0, 4, 8000), receipt(5, 8, 16000)]
    at = landing("draft", rs, 10.0)
    assert at.mean_length == pytest.approx(1 + 8 / 3) and at.windows == 3
    assert at.draft_ms == pytest.approx(2.0) and at.cost_fraction == pytest.approx(0.2)
    assert landing("plain", [], 10.0) is None
    assert 0.0 <= COST_MAX and TAU_MAX == 8.0


def test_a_real_synthetic_run_lands_where_its_rate_and_draft_cost_put_it(runtime, scheduler, make_generation,
                                                                        chat_tokens):
    tokens = chat_tokens("Write a short story about a lighthouse keeper.")
    settings = GenerationSettings(max_new_tokens=32, draft_max=D)
    memory: dict = {}
    landed = {}
    for rate, cost_ms in (("0.3", 0.0), ("0.9", 2.0)):
        ctx = SourceContext(runtime, settings, prompt_tokens=tuple(tokens), scheduler=scheduler, memory=memory)
        src = make_source("synthetic", ctx, {"rates": rate, "seed": "2", "draft_cost_ms": str(cost_ms)})
        g = make_generation(src, tokens, max_new_tokens=32, draft_max=D)
        g.run()
        windows = len(g.receipts)
        assert windows
        at = landing(rate, g.receipts, 10.0)
        assert at.windows == windows
        assert at.mean_length == pytest.approx(sum(len(r.committed_tokens) for r in g.receipts) / windows, abs=0.5)
        landed[rate] = at
    assert landed["0.9"].mean_length > landed["0.3"].mean_length
    assert landed["0.9"].draft_ms >= 2.0 * 0.99  # every proposed token spent its 2 ms
    assert landed["0.9"].cost_fraction == pytest.approx(landed["0.9"].draft_ms / 10.0)


def test_the_table_says_how_many_cells_lie_within_ten_percent_of_their_prediction():
    from inspector.bench.synthetic_table import format_synthetic_table, measured_over_predicted

    rows = [dict(mean_length=1, rate=0.0, cost_fraction=0.0, measured_mean_length=1.0, speedup=0.72,
                 predicted_for_run=0.80, predicted_speedup=0.8),  # 0.90: just within
            dict(mean_length=2, rate=0.5, cost_fraction=0.0, measured_mean_length=1.9, speedup=1.00,
                 predicted_for_run=1.25, predicted_speedup=1.3)]  # 0.80: outside
    assert measured_over_predicted(rows) == pytest.approx([0.9, 0.8])
    text = format_synthetic_table(dict(rows=rows, c_ms=[10.0], draft_max=8, max_new_tokens=64, repeats=3,
                                       plain_tokens_per_s=90.0))
    assert text.splitlines()[-1] == ("measured / predicted for the runs' windows: 0.80..0.90 (median 0.85); "
                                     "1 of 2 cells within 10% of the prediction")


def test_bench_synthetic_sums_up_each_example_and_all_of_them():
    from inspector.bench.synthetic_table import format_examples_summary

    def row(speedup, predicted):
        return dict(speedup=speedup, predicted_for_run=predicted)

    results = {"copy-exact": dict(rows=[row(1.0, 1.0), row(0.8, 1.0)]),  # 1.00 within, 0.80 outside
               "open-ended": dict(rows=[row(1.05, 1.0), row(None, 1.0)])}  # a cell without a speed is left out
    assert format_examples_summary(results).splitlines() == [
        "measured / predicted for the runs' windows, per example:",
        "  copy-exact               0.80..1.00 (median 0.90); 1 of 2 cells within 10%",
        "  open-ended               1.05..1.05 (median 1.05); 1 of 1 cells within 10%",
        "  all examples             0.80..1.05 (median 1.00); 2 of 3 cells within 10%"]


def test_a_cells_plain_baseline_is_the_median_of_the_plain_runs_beside_it_and_its_neighbours():
    from inspector.bench.synthetic_table import local_plain_speed

    plains = [[100.0, 104.0], [90.0, 92.0, 94.0], [80.0], []]
    assert local_plain_speed(plains, 0) == 94.0  # rows 0 and 1: 90 92 94 100 104
    assert local_plain_speed(plains, 1) == 93.0  # rows 0..2: 80 90 92 94 100 104
    assert local_plain_speed(plains, 3) == 80.0  # its own row ran none: row 2's
    assert local_plain_speed([[]], 0) is None
