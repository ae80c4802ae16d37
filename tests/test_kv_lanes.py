"""The Slots page's KV lanes (issue 53): each slot's KV length over the batched schedule's steps, a lane per slot.
The geometry on hand-made steps, and the widget fed a hand-made ``LanesFeed`` (no model)."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from inspector.engine.step_batch import DRAFT, PLAIN, PROMPT, SlotRows, StepRecord
from inspector.gui.serve.concurrency_lanes import ConcurrencyLanes, LanesFeed, newest_steps
from inspector.gui.serve.kv_lanes import LANE_FILL, LANE_FOOT, kv_lines, kv_scale, lane_y, nice_ceiling

# Session 7 is slot 0, session 9 slot 1, session 4 (a probe) no slot's; times in µs since the epoch.
SLOTS = {7: 0, 9: 1}
STEPS = [
    # the KV rollback probe Serve runs first, alone (no session active), on the sequence slot 0 opens later
    StepRecord(1, 0, 500, (SlotRows(7, PLAIN, 1, 1),), 0),
    StepRecord(2, 0, 2000, (SlotRows(7, PROMPT, 5, 5),), 1),
    # slot 0 drafts 4 rows (kv 5 -> 9); slot 1's prompt reused a prefix of 3 (3 -> 8); the probe rides along
    StepRecord(3, 10_000, 3000, (SlotRows(7, DRAFT, 4, 9), SlotRows(9, PROMPT, 5, 8), SlotRows(4, PLAIN, 1, 1)), 2),
    # slot 0's window kept 1 of its 4 rows: trimmed to 6, the next row makes 7; an unknown kv_end is left out
    StepRecord(4, 20_000, 1000, (SlotRows(7, PLAIN, 1, 7), SlotRows(9, PLAIN, 1, -1)), 2),
]


def test_kv_lines_rise_by_each_steps_rows_and_drop_where_a_window_was_trimmed():
    lines = kv_lines(STEPS, SLOTS, zero_s=5.0, n_slots=2)
    assert len(lines.x) == len(lines.kv) == 2
    # Slot 0: not the probe's step; step 2 (5.000-5.002) 0 -> 5; held to step 3 (5.010-5.013) 5 -> 9; held to
    # step 4 (5.020-5.021) where it starts from the trimmed 6 -> 7.
    assert lines.kv[0].tolist() == [0, 0, 5, 5, 5, 5, 9, 9, 6, 6, 7]
    assert np.allclose(lines.x[0], [5.0, 5.002, 5.002, 5.01, 5.01, 5.013, 5.013, 5.02, 5.02, 5.021, 5.021])
    drops = np.flatnonzero(np.diff(lines.kv[0]) < 0)
    assert drops.tolist() == [7] and lines.x[0][8] == pytest.approx(5.02)  # the trim shows at step 4's start
    # Slot 1: one prompt step from its reused prefix (3) to 8; step 4's kv_end unknown: nothing more.
    assert lines.kv[1].tolist() == [3, 3, 8] and np.allclose(lines.x[1], [5.01, 5.013, 5.013])
    assert lines.largest == 9 and lines.scale == 10  # rounded up to 1, 2, 5 x 10^k
    # Lanes of equal height, slot 0 on top: slot i's lane spans [n-1-i, n-i).
    assert np.allclose(lines.y(0), 1 + LANE_FOOT + LANE_FILL * lines.kv[0] / 10)
    assert np.allclose(lines.y(1), 0 + LANE_FOOT + LANE_FILL * lines.kv[1] / 10)
    assert lines.y(0).min() >= 1 and lines.y(0).max() < 2 and lines.y(1).min() >= 0 and lines.y(1).max() < 1
    # A slot no step carried has an empty line; no steps: nothing drawn.
    three = kv_lines(STEPS, SLOTS, 5.0, 3)
    assert len(three.kv[2]) == 0 and three.kv[0].tolist() == lines.kv[0].tolist()
    assert lane_y(three.kv[0], 0, 3, three.scale).min() >= 2
    empty = kv_lines([], SLOTS, 0.0, 2)
    assert [len(k) for k in empty.kv] == [0, 0] and empty.largest == 0 and empty.scale == 1


def test_the_scale_rounds_up_within_a_slots_context_and_the_drawn_steps_are_the_newest():
    assert [nice_ceiling(n) for n in (1, 2, 3, 6, 10, 11, 199, 201, 5001)] == [1, 2, 5, 10, 10, 20, 200, 500, 10000]
    assert kv_scale(0) == 1 and kv_scale(130) == 200
    assert kv_scale(130, n_ctx_slot=170) == 170  # at most the slot's context when it holds them
    assert kv_scale(300, n_ctx_slot=170) == 500  # a length over it (not expected) still fits its lane
    assert kv_lines(STEPS, SLOTS, 0.0, 2, n_ctx_slot=8).scale == 10  # 9 tokens drawn

    class Batch:
        steps = deque(StepRecord(i, 1000 * i, 100, (SlotRows(7, PLAIN, 1, 10 + i),), 1) for i in range(1, 51))

    kept = newest_steps(Batch, keep=3)
    lines = kv_lines(kept, SLOTS, 0.0, 1)
    assert len(lines.kv[0]) == 3 + 4 * 2  # steps 48-50: 3 points for the first, 4 for each later one
    assert lines.kv[0][0] == 57 and lines.kv[0][-1] == 60 and lines.x[0][0] == pytest.approx(0.048)


class FakeBatch:
    """What the lanes read of a ``StepBatch``."""

    def __init__(self, steps):
        self.steps = deque(steps)
        self.step_count = len(steps)
        self.epoch_ns = 0


def test_the_widget_draws_a_line_per_slot_from_the_feed_and_hides_without_steps(qtbot):
    feed = {"value": LanesFeed([], FakeBatch(STEPS), SLOTS, 2, n_ctx_slot=512)}
    lanes = ConcurrencyLanes(lambda: feed["value"])
    qtbot.addWidget(lanes)
    lanes.resize(800, 500)
    lanes.show()
    lanes.refresh()
    kv = lanes.kv
    assert kv.isVisible() and lanes.steps_plot.isVisible()
    zero_s = lanes.perf_to_epoch - lanes.origin  # the batch's epoch is perf_counter 0
    want = kv_lines(STEPS, SLOTS, zero_s, 2, 512)
    assert want.scale == 10 and len(kv.curves) == 2
    for slot in (0, 1):
        x, y = kv.curves[slot].getData()
        assert np.allclose(x, want.x[slot]) and np.allclose(y, want.y(slot))
    x, y = kv.curves[0].getData()
    assert np.allclose(y, 1 + LANE_FOOT + LANE_FILL * np.array([0, 0, 5, 5, 5, 5, 9, 9, 6, 6, 7]) / 10)
    # Its x axis is the request lanes' (seconds since Serve began), same as the steps' cells.
    assert kv.plot.getPlotItem().getViewBox().linkedView(0) is lanes.lanes_plot.getPlotItem().getViewBox()
    assert np.isclose(x[0], lanes.cells.x0[0]) and lanes.cells.index.tolist() == [2, 3, 3, 4, 4]  # no probe cell
    assert "0–10 tokens" in kv.note.text() and "512" in kv.note.text()
    assert "0–10 tokens" in kv.plot.getPlotItem().getAxis("left").toolTip()
    ticks = kv.plot.getPlotItem().getAxis("left")._tickLevels[0]
    assert [t for _, t in ticks] == ["slot 0", "slot 1"] and ticks[0][0] > ticks[1][0]  # slot 0 on top

    # A new step: the next tick draws it.
    more = STEPS + [StepRecord(5, 30_000, 1000, (SlotRows(9, DRAFT, 3, 11),), 2)]
    feed["value"] = LanesFeed([], FakeBatch(more), SLOTS, 2, n_ctx_slot=512)
    lanes.refresh()
    assert kv.curves[1].getData()[1].size == 3 + 4 and kv.lines.kv[1][-1] == 11 and kv.lines.scale == 20

    # The locked schedule (no steps): hidden, as the steps strip is.
    feed["value"] = LanesFeed([], None, SLOTS, 2)
    lanes.refresh()
    assert not kv.isVisible() and not lanes.steps_plot.isVisible()
