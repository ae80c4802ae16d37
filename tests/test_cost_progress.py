"""Progress, time left and Cancel of a cost-model measurement (issue 54 item 2; pure: a fake runtime
on a fake clock, as tests/test_cost_measurement.py)."""

from __future__ import annotations

import threading

import pytest

from inspector.llama import cost_model
from inspector.llama.cost_model import measure_cost_model
from inspector.llama.cost_progress import (PLAN, PREFILL, ROUNDS, CostMeasureCancelled, MeasureClock, duration_text,
                                           partial_rows, progress_text)
from test_cost_measurement import FakeClock, HistoryRuntime, Scheduler


class ChunkedRuntime(HistoryRuntime):
    """The fake runtime with an ``n_batch`` of 8 and a prefill that costs 1 ms per token."""

    n_batch = 8

    def prefill(self, sid, tokens, position):
        super().prefill(sid, tokens, position)
        self.clock.ns += int(len(tokens) * 1e6)


@pytest.fixture
def fake(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(cost_model, "perf_counter_ns", clock)
    return ChunkedRuntime(clock)


def test_progress_goes_through_the_prefill_chunks_then_every_round_and_k_and_the_time_left_reaches_zero(fake):
    seen = []
    measure_cost_model(Scheduler(fake), list(range(20)), k_max=3, repeats=2, progress=seen.append)
    assert seen[0].stage == PLAN and seen[0].left_s is None and seen[0].decodes == 3 * (16 + 2)
    prefill = [p for p in seen if p.stage == PREFILL]
    assert [p.prefilled for p in prefill] == [8, 16, 19]  # 19 tokens before the last, in chunks of 8
    rounds = [(p.round, p.k) for p in seen if p.stage == ROUNDS]
    assert rounds == [(r, k) for r in range(3) for k in (1, 2, 3)]  # the warm-up round 0, then 1..2
    assert seen[-1].left_s == 0 and seen[-1].fraction == 1.0
    fractions = [p.fraction for p in seen[1:]]
    assert all(0 < f <= 1 for f in fractions)
    # After the first round the estimate is exact: the fake's rounds all cost the same.
    after_first = next(p for p in seen if p.stage == ROUNDS and p.round == 1 and p.k == 1)
    assert after_first.left_s == pytest.approx(seen[-1].elapsed_s - after_first.elapsed_s)
    assert seen[1].estimate_s is not None  # said up front: after the first chunk, then kept up to date
    assert all(p.estimate_s == pytest.approx(p.elapsed_s + p.left_s) for p in seen[1:])
    assert seen[-1].estimate_s == pytest.approx(seen[-1].elapsed_s)


def test_cancel_stops_before_the_next_batch_size_and_keeps_the_curve_timed_so_far(fake):
    cancel = threading.Event()

    def progress(p):
        if p.stage == ROUNDS and p.round == 1 and p.k == 2:  # the first timed round, after k = 2
            cancel.set()

    with pytest.raises(CostMeasureCancelled) as caught:
        measure_cost_model(Scheduler(fake), list(range(20)), k_max=5, repeats=3, progress=progress, cancel=cancel)
    partial = caught.value.partial
    assert len(partial.row_ms) == 2 and partial.row_ms[0] == pytest.approx(6.0)
    assert caught.value.note == "k = 1..2 of 5, 1 of 3 repeats"
    widths = [rows for rows, _position in fake.decodes[1 + 3:]]  # after the prefill's 3 chunks
    assert widths.count(2) == 2 and 3 not in widths[16 + 4:]  # warm-up round, then k = 1, 2 only


def test_cancel_during_the_prefill_keeps_nothing_and_decodes_no_batch(fake):
    cancel = threading.Event()
    with pytest.raises(CostMeasureCancelled) as caught:
        measure_cost_model(Scheduler(fake), list(range(20)), k_max=3, repeats=1, cancel=cancel,
                           progress=lambda p: p.stage == PREFILL and cancel.set())
    assert caught.value.partial is None and fake.decodes == [(8, 0)]


def test_partial_rows_take_the_median_of_the_rounds_that_reached_each_k():
    assert partial_rows([(6.0, 9.0, 12.0), (8.0, 10.0)]) == (7.0, 9.5, 12.0)
    assert partial_rows([]) == () and partial_rows([()]) == ()


def test_cancel_during_the_warm_up_round_keeps_no_curve(fake):
    cancel = threading.Event()

    def progress(p):
        if p.stage == ROUNDS and p.round == 0 and p.k == 4:  # the untimed warm-up round, well into it
            cancel.set()

    with pytest.raises(CostMeasureCancelled) as caught:
        measure_cost_model(Scheduler(fake), list(range(20)), k_max=5, repeats=3, progress=progress, cancel=cancel)
    assert caught.value.partial is None and caught.value.note == ""


def test_the_clock_extrapolates_a_prefill_that_gets_dearer_with_the_context():
    clock = MeasureClock(prompt_tokens=40, chunk=10, k_max=2, rounds=1)
    clock.prefill_done(0, 10, 1.0)
    clock.prefill_done(10, 10, 2.0)  # 0.1 s per token at 0, 0.2 at 10: +0.01 per position
    assert clock.prefill_left() == pytest.approx(10 * 0.3 + 10 * 0.4)


def test_texts():
    assert duration_text(None) == "" and duration_text(3) == "a few seconds" and duration_text(42) == "about 42 s"
    assert duration_text(83) == "about 1 min 25 s" and duration_text(120) == "about 2 min"
    clock = FakeClock()
    rt = ChunkedRuntime(clock)
    seen = []
    cost_model.perf_counter_ns, real = clock, cost_model.perf_counter_ns
    try:
        measure_cost_model(Scheduler(rt), list(range(20)), k_max=3, repeats=2, progress=seen.append)
    finally:
        cost_model.perf_counter_ns = real
    assert progress_text(seen[0]) == ("after 20 prompt tokens: prefill, then a warm-up round and 2 timed rounds of "
                                      "k = 1..3 rows (54 decodes)")
    assert progress_text(seen[1]).startswith("prefill 8/20 prompt tokens · ")
    assert progress_text(seen[-1]).startswith("round 2 of 2, k = 3 of 3")
