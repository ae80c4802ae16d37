"""The By position tab's figures (issue 39, long contexts) from scripted receipts, events and lock
operations: each window at its base_position with its acceptance, verify cost per row and profit, each
plain step at the KV length before it with its time, and the line that says where the windows stopped
paying and why (stops_paying's rule over groups of windows by position). No model."""

from __future__ import annotations

import pytest

from inspector.engine.records import COMMIT, STEP, EngineEvent, LockOperation, WindowReceipt
from inspector.gui.plots.position_figures import (MAX_GROUPS, plain_steps_by_position, position_figures,
                                                  stopping_line, window_groups)
from inspector.session.session_record import SessionRecord

SID = 2


def receipt(index: int, base: int, proposed: int, accepted: int, verify_us: int, *, proposal_us: int = 0,
            repair_us: int = 0) -> WindowReceipt:
    """A window at KV length ``base`` that proposed ``proposed`` tokens and accepted ``accepted`` (its rows:
    the current token and the proposal)."""
    committed = accepted + 1
    rows = proposed + 1
    return WindowReceipt(
        request_id=1, session_id=SID, window_index=index, decode_step=index, decision_id="", source="ngram",
        disposition="full_accept" if accepted == proposed else "first_mismatch",
        proposal_token_ids=tuple(range(proposed)), proposal_token_count=proposed, verification_rows=rows,
        accepted_proposal_tokens=accepted, generated_token_count=0, canonical_prediction_count=committed,
        committed_tokens=tuple(range(committed)), verification_row_predictions=tuple(range(rows)),
        correction_or_boundary_token=None, base_position=base, position_after_verification=base + rows,
        canonical_position=base + committed, trimmed_rows=rows - committed, proposal_elapsed_us=proposal_us,
        verification_elapsed_us=verify_us, repair_elapsed_us=repair_us, total_elapsed_us=verify_us,
        runtime_lock_wait_us=0, runtime_lock_hold_us=verify_us, runtime_lock_acquires=1, repair="trim")


def step_event(seq: int, after: int, session: int = SID) -> EngineEvent:
    """A plain step whose token reached KV length ``after``."""
    return EngineEvent(seq, seq * 10, STEP, session, None, 5, 0, after)


def step_op(hold_us: int, session: int = SID) -> LockOperation:
    return LockOperation("step", session, 0, 0, hold_us)


def test_each_plain_step_sits_at_the_kv_length_before_it_with_the_time_it_held_the_runtime():
    events = [step_event(0, 6727), EngineEvent(1, 11, COMMIT, SID, None, 5, 0, 6727), step_event(2, 6728),
              step_event(3, 99, session=SID + 1), step_event(4, 6735)]
    ops = [step_op(14_000), LockOperation("verify", SID, 0, 0, 50_000), step_op(1, session=SID + 1),
           step_op(15_000), step_op(17_000)]
    assert plain_steps_by_position(events, ops, SID) == [(6726, 14.0), (6727, 15.0), (6734, 17.0)]


def test_each_window_is_drawn_at_its_base_position_with_its_acceptance_cost_per_row_and_profit():
    rs = [receipt(1, 6730, 4, 3, 40_000), receipt(2, 6741, 4, 0, 30_000, proposal_us=500),
          receipt(3, 6752, 2, 2, 21_000, repair_us=300)]
    events = [step_event(0, 6727), step_event(1, 6728)]
    ops = [step_op(10_000), step_op(12_000)]
    f = position_figures(rs, events, ops, SID, cost_model_c1_us=99_000.0)
    assert f.window_x == (6730, 6741, 6752)  # base_position: not the index, not the canonical position
    assert f.acceptance == (0.75, 0.0, 1.0)
    assert f.verify_row_ms == pytest.approx((8.0, 6.0, 7.0))  # 40 ms / 5 rows, 30 / 5, 21 / 3
    assert (f.c1_us, f.c1_from) == (11_000.0, "plain steps of this run")  # the run's own, not the cost model's
    assert f.profit_ms == pytest.approx((4 * 11 - 40, 11 - 30.5, 3 * 11 - 21.3))
    assert (f.step_x, f.step_ms) == ((6726, 6727), (10.0, 12.0))
    # Without a plain step: the cost model's c(1); without either, no profit.
    g = position_figures(rs, [], [], SID, cost_model_c1_us=9_000.0)
    assert (g.c1_us, g.c1_from, g.profit_ms[0]) == (9_000.0, "the cost model", pytest.approx(4 * 9 - 40))
    h = position_figures(rs, [], [], SID)
    assert h.profit_ms == () and h.c1_us is None and "needs c(1)" in h.verdict


def test_windows_are_grouped_by_position_in_at_most_four_groups_of_three_or_more():
    rs = [receipt(i + 1, 8000 - 10 * i, 4, 4, 10_000) for i in range(13)]  # out of position order
    rows, _costs = window_groups(rs, 5_000.0)
    assert len(rows) == MAX_GROUPS and sum(r.windows for r in rows) == 13
    assert [r.length for r in rows] == sorted(r.length for r in rows) and rows[0].length == 8000 - 120
    assert len(window_groups(rs[:5], 5_000.0)[0]) == 1 and len(window_groups(rs[:6], 5_000.0)[0]) == 2
    assert rows[0].speedup == pytest.approx(5 * 5_000 / 10_000)


def test_the_line_says_the_windows_stop_paying_where_acceptance_falls():
    good = [receipt(i + 1, 6730 + 5 * i, 4, 4, 20_000) for i in range(6)]  # 5 tokens for 20 ms at c(1) 10 ms
    bad = [receipt(i + 7, 6800 + 5 * i, 4, 0, 20_000) for i in range(6)]  # 1 token for 20 ms
    line = stopping_line(good + bad, 10_000.0, "plain steps of this run")
    assert line.startswith("Windows at KV positions 6730–6825 (4 groups of windows, c(1) 10.0 ms from plain "
                           "steps of this run): stops paying at 6800 (0.50x): acceptance:"), line
    assert stopping_line(good, 10_000.0, "x").endswith("pays at every length measured")


def test_the_line_blames_cost_when_as_many_tokens_cost_more_time_and_gives_c1_there():
    near = [receipt(i + 1, 1000 + 5 * i, 4, 4, 20_000) for i in range(6)]
    far = [receipt(i + 7, 7000 + 5 * i, 4, 4, 80_000) for i in range(6)]  # the same acceptance, 4x the time
    steps = [(1001, 10.0), (1012, 10.0), (7003, 16.0), (7020, 16.0)]
    line = stopping_line(near + far, 10_000.0, "the cost model", steps)
    assert "stops paying at 7000 (0.62x): cost:" in line and "c(1) 1.60x the 1000's" in line, line


def test_no_window_yet_says_so():
    assert stopping_line([], 10_000.0, "x").startswith("No window yet")


def test_the_tab_draws_each_figure_at_its_position_and_only_again_when_the_run_moved(qtbot):
    from inspector.gui.plots.positions import PositionsView

    s = SessionRecord()
    s.main_session_id = SID
    for r in (receipt(1, 6730, 4, 3, 40_000), receipt(2, 6741, 4, 0, 30_000)):
        s.apply(r)
    s.apply(step_event(0, 6727))
    s.lock_ops = [step_op(10_000)]
    view = PositionsView()
    qtbot.addWidget(view)
    view.resize(900, 300)
    view.set_session(s)
    view.refresh()
    assert list(view.accept.xData) == [6730, 6741] and list(view.accept.yData) == [0.75, 0.0]
    assert list(view.rows.xData) == [6730, 6741] and list(view.rows.yData) == [8.0, 6.0]
    assert list(view.steps.xData) == [6726] and list(view.steps.yData) == [10.0]
    assert list(view.saved.xData) == [6730] and list(view.lost.xData) == [6741]  # +0 ms and -20 ms
    assert view.verdict.text().startswith("Windows at KV positions 6730–6741 (1 group of windows")
    drawn = view.figures
    view.refresh()
    assert view.figures is drawn  # nothing new: not computed again
    s.apply(receipt(3, 6752, 2, 2, 21_000))
    view.refresh()
    assert list(view.accept.xData) == [6730, 6741, 6752]
    assert view.accept_plot.viewRange()[0][0] > 6000
    # A new session (Ctrl+N) with nothing in it yet: the axis no longer shows the last file's positions.
    view.set_session(SessionRecord())
    view.refresh()
    assert view.accept.xData is None or len(view.accept.xData) == 0
    assert view.accept_plot.viewRange()[0][1] < 100


def test_the_statistics_tab_holds_the_page_and_gives_it_the_session_and_the_cost_model(qtbot):
    from inspector.gui.plots.statistics import StatsView
    from inspector.llama.cost_model import CostModel

    stats = StatsView()
    qtbot.addWidget(stats)
    s = SessionRecord()
    s.main_session_id = SID
    s.apply(receipt(1, 6730, 4, 1, 20_000))
    stats.set_session(s)
    stats.set_cost_model(CostModel((8.0, 12.0)))
    stats.refresh()  # not shown: every page draws (an export, File > Export plots)
    page = stats.positions
    assert stats.pages.indexOf(page) == 1 and stats.pages.currentIndex() == 0
    stats.to_positions.click()
    assert stats.pages.currentWidget() is page
    assert list(page.accept.xData) == [6730]
    assert page.figures.c1_from == "the cost model" and page.figures.profit_ms == (2 * 8 - 20,)
