"""How ``measure_cost_model`` times each batch size: as runs meet it (pure: a fake runtime on a fake clock)."""

from __future__ import annotations

import json

import pytest

from inspector.llama import cost_model
from inspector.llama.cost_cache import load_cost_model, store_context_costs, store_cost_model, stored_context_lengths
from inspector.llama.cost_model import (PLAIN_LEAD_STEPS, PLAIN_TIMED_STEPS, CostModel, cost_model_at, cost_model_of,
                                        measure_cost_model, measure_cost_rounds)

SETTLED_MS = 6.0
ROW_MS = 3.0
AFTER_WIDE_EXTRA_MS = (1.5, 0.8, 0.3)
"""A one-row decode right after a wider batch costs this much more, then less step by step (as measured)."""


class FakeClock:
    def __init__(self):
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


class HistoryRuntime:
    """Decodes advance the fake clock: k rows cost SETTLED_MS + ROW_MS (k - 1), plus the extra time of a
    one-row decode that follows a wider batch (``AFTER_WIDE_EXTRA_MS`` for the 1st, 2nd, 3rd in a row)."""

    n_ctx = 512

    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.decodes: list[tuple[int, int]] = []  # (rows, position)
        self.ones_since_wide = 99

    def open_session(self, sampling):
        return 1

    def drop_session(self, sid):
        pass

    def prefill(self, sid, tokens, position):
        self.decodes.append((len(tokens), position))
        self.ones_since_wide = 0

    def decode_rows(self, sid, tokens, position):
        k = len(tokens)
        self.decodes.append((k, position))
        ms = SETTLED_MS + ROW_MS * (k - 1)
        if k == 1:
            if self.ones_since_wide < len(AFTER_WIDE_EXTRA_MS):
                ms += AFTER_WIDE_EXTRA_MS[self.ones_since_wide]
            self.ones_since_wide += 1
        else:
            self.ones_since_wide = 0
        self.clock.ns += int(ms * 1e6)
        return [0] * k

    def trim(self, sid, position):
        return True


class Scheduler:
    def __init__(self, runtime):
        self.runtime = runtime

    def execute(self, name, sid, op):
        class Done:
            value = op(self.runtime)
        return Done()


@pytest.fixture
def fake(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(cost_model, "perf_counter_ns", clock)
    return HistoryRuntime(clock)


def test_c1_is_a_settled_plain_step_not_the_one_row_decode_right_after_a_wide_batch(fake):
    cm = measure_cost_model(Scheduler(fake), list(range(20)), k_max=9, repeats=3)
    assert cm.row_ms[0] == pytest.approx(SETTLED_MS)
    # wider batches are timed right after the batch one row narrower, as windows follow other decodes
    assert cm.row_ms[1:] == pytest.approx(tuple(SETTLED_MS + ROW_MS * (k - 1) for k in range(2, 10)))


def test_the_plain_steps_before_c1_run_at_the_positions_before_it_and_wider_batches_at_the_prompts_end(fake):
    measure_cost_model(Scheduler(fake), list(range(20)), k_max=3, repeats=1)
    base = 19
    one_round = [(1, base + i) for i in range(PLAIN_LEAD_STEPS + PLAIN_TIMED_STEPS)] + [(2, base), (3, base)]
    assert fake.decodes == [(19, 0)] + one_round * 2  # the prefill, the warm-up round, one timed round


def test_a_prompt_that_leaves_no_room_for_the_plain_steps_is_refused(fake):
    fake.n_ctx = 17 + PLAIN_LEAD_STEPS + PLAIN_TIMED_STEPS - 1  # room for 2 verify rows, not for the plain steps
    with pytest.raises(ValueError, match="exceeds n_ctx"):
        measure_cost_model(Scheduler(fake), list(range(17)), k_max=2, repeats=1)
    assert fake.decodes == []


def test_rounds_measured_apart_make_one_cost_model_of_their_medians(fake):
    first = measure_cost_rounds(Scheduler(fake), list(range(20)), k_max=3, repeats=2)
    later = measure_cost_rounds(Scheduler(fake), list(range(20)), k_max=3, repeats=1, warm_up=False)
    assert len(first) == 2 and len(later) == 1
    per_round = PLAIN_LEAD_STEPS + PLAIN_TIMED_STEPS + 2  # the one-row steps, then 2 and 3 rows
    assert len(fake.decodes) == 1 + 3 * per_round + 1 + per_round  # prefill, warm-up, 2 rounds; prefill, 1 round
    assert cost_model_of([(6.0, 9.0, 12.0), (7.0, 10.0, 30.0), (5.0, 9.5, 13.0)]).row_ms == (6.0, 9.5, 13.0)


def test_a_stored_cost_model_timed_the_old_way_is_not_loaded(tmp_path, monkeypatch):
    cache = tmp_path / "c.json"
    monkeypatch.setenv("SPEC_INSPECTOR_COST_CACHE", str(cache))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    cm = CostModel(tuple(8.0 + 4.5 * k for k in range(16)))
    assert store_cost_model(model, 2, cm) == cache
    assert load_cost_model(model, 2) == cm
    data = json.loads(cache.read_text())
    for entry in data.values():
        del entry["c1_timed"]  # as sessions before this one wrote it
    cache.write_text(json.dumps(data))
    assert load_cost_model(model, 2) is None


def test_the_cost_model_between_two_context_lengths_is_linear_in_the_context_and_the_nearest_beyond_them():
    short, long_ = CostModel((10.0, 14.0, 18.0)), CostModel((30.0, 50.0, 70.0, 90.0))
    curves = [(6000, long_), (512, short)]  # any order
    assert cost_model_at(curves, 512 + (6000 - 512) // 4).row_ms == pytest.approx((15.0, 23.0, 31.0))
    assert cost_model_at(curves, 100).row_ms == (10.0, 14.0, 18.0)  # below the shortest: as measured
    assert cost_model_at(curves, 8000).row_ms == (30.0, 50.0, 70.0)  # beyond the longest: not extrapolated
    with pytest.raises(ValueError):
        cost_model_at([], 100)


def test_curves_stored_by_context_length_are_read_at_the_runs_length_and_kept_when_the_one_curve_is_stored(
        tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_INSPECTOR_COST_CACHE", str(tmp_path / "c.json"))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x")
    flat = CostModel(tuple(10.0 + 1.0 * k for k in range(8)))
    steep = CostModel(tuple(40.0 + 30.0 * k for k in range(8)))
    assert stored_context_lengths(model, 2) == [] and load_cost_model(model, 2, context=500) is None
    assert store_context_costs(model, 2, [(2000, steep), (4, CostModel((1.0, 2.0)))]) is not None  # too small: left out
    assert stored_context_lengths(model, 2) == [2000]
    assert load_cost_model(model, 2) == steep  # the only curve
    assert store_cost_model(model, 2, flat, context=100) is not None
    assert stored_context_lengths(model, 2) == [100, 2000]  # the by-context curve is kept
    assert load_cost_model(model, 2) == flat  # without a context: the one curve
    assert load_cost_model(model, 2, context=1050).row_ms[0] == pytest.approx(25.0)  # halfway
    assert load_cost_model(model, 2, context=5000) == steep
    assert load_cost_model(model, 2, "-ngl 99 --rpc 127.0.0.1:50052", context=5000) is None  # another placement
