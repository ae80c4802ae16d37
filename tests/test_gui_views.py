"""Views a new user reads (issue 11): the KV timeline on decode steps, lock timing from the
run's start with 0 µs shown as 0, Statistics with no windows, counts in the right number,
the Compare window's Close, Ctrl+C copying rows, decision ids as text.

The timeline, lock, table and event-log tests read a ``SessionRecord`` filled from a real
engine run on the bundled model, as the window's worker fills it; a scripted source
proposes at the first and fourth decode steps only, so plain steps fall between the two
windows and after the last one (whatever the model predicts)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QItemSelectionModel, Qt
from PySide6.QtWidgets import QAbstractItemView, QApplication, QLineEdit, QTableView, QTabWidget

from inspector.engine.records import LockOperation
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.plots.lock_plots import LockPlots
from inspector.gui.plots.statistics import StatsView
from inspector.session.run_states import BUSY, IDLE
from test_gui_support import kv_data_rect, make_window, part, RUN_TIMEOUT_MS, run_to_end

MAX_TOKENS = 12


def _engine_run(make_generation, scheduler, chat_tokens, runtime, proposals, faults=None):
    """(session, generation) of a scripted-source run to ``MAX_TOKENS`` tokens, resumed after each error;
    the session record is filled by the engine's observer, as the worker fills it (``RecordingObserver``)."""
    from inspector.engine.errors import EngineError
    from inspector.session.session_record import SessionRecord
    from inspector.session.run_records import Progress, RecordingObserver, RunHeader
    from inspector.sources import ScriptedSource
    from test_gui_support import example_text

    prompt = chat_tokens(example_text("copy-with-corrections"))
    s = SessionRecord()
    feed = RecordingObserver(s.apply, runtime.token_text, runtime.n_vocab)
    scheduler.add_listener(s.apply)
    try:
        g = make_generation(ScriptedSource(proposals=[prompt[a:b] for a, b in proposals]), prompt,
                            feed, max_new_tokens=MAX_TOKENS, faults=faults)
        s.apply(RunHeader(g.session_id or 0, "", None, tuple(prompt), runtime.describe(), {}, g.started_us))
        for _ in range(5):
            try:
                g.run()
                break
            except EngineError:
                g.resume()
    finally:
        scheduler.remove_listener(s.apply)
    s.main_session_id = g.session_id
    s.apply(Progress(g.decode_elapsed_us, g.prefill_elapsed_us, g.generated_count, g.canonical_position))
    return s, g


@pytest.fixture
def engine_session(make_generation, scheduler, chat_tokens, runtime):
    """(session, generation) of a finished run: a window at decode step 0, two plain steps,
    a window at step 3, then plain steps to ``MAX_TOKENS`` tokens."""
    s, g = _engine_run(make_generation, scheduler, chat_tokens, runtime, [(5, 8), (0, 0), (0, 0), (9, 10), (0, 0)])
    assert len(g.receipts) == 2 and g.plain_steps >= 3, "the script proposes at two decode steps"
    return s, g


# -- 1. KV timeline ----------------------------------------------------------------------
def test_timeline_x_axis_is_the_decode_step_and_covers_plain_steps(qtbot, engine_session):
    from inspector.gui.plots.timeline import Timeline

    s, g = engine_session
    t = Timeline()
    qtbot.addWidget(t)
    t.set_session(s)
    t.refresh()
    assert t.plot.getPlotItem().getAxis("bottom").labelText == "decode step"
    window_steps = [r.decode_step for r in g.receipts]
    assert window_steps == [0, 3]
    assert list(t.base.xData) == list(t.canonical.xData) == window_steps
    assert list(t.canonical.yData) == [r.canonical_position for r in g.receipts]
    # Every plain step is drawn at its own decode step: windows and plain steps tile 0..n-1.
    plain_steps = [int(x) for x in t.plain.xData]
    assert t.plain_step_count() == g.plain_steps == s.plain_steps
    assert sorted(window_steps + plain_steps) == list(range(g.decode_step))
    assert plain_steps[:2] == [1, 2] and max(plain_steps) > max(window_steps)  # between and after the windows
    assert [int(y) for y in t.plain.yData] == [e.position for e in s.events if e.kind == "step"]
    # The prefill is drawn at decode step -1: the KV length after it is the prompt (its last row gave the
    # first token, which is no decode step), and window 1 (step 0) starts from there.
    prompt = g.prompt_token_count
    assert list(t.prefill.xData) == [-1] and list(t.prefill.yData) == [prompt]
    assert [e.position for e in s.events if e.kind == "prefill"] == [prompt] == [g.receipts[0].base_position]
    # The live KV length starts at the prefill, runs through the last plain step and ends at the canonical
    # position; left of step 0 it is the prefill's alone.
    last = g.decode_step - 1
    assert last < t.live.xData.max() < last + 0.5 and -1.5 < t.live.xData.min() < -1
    before = t.live.xData < -0.5
    assert before.any() and set(t.live.yData[before]) == {prompt} and t.live.yData[0] == prompt
    assert t.live.yData[-1] == g.canonical_position
    assert np.all(np.diff(t.live.xData) >= 0)
    assert t.point_count() == len(g.receipts)


def test_timeline_keeps_one_axis_through_a_failed_window_and_a_discard(qtbot, make_generation, scheduler,
                                                                       chat_tokens, runtime):
    """Window 1 fails at its first token (resumed), window 2's proposal is discarded
    (position_mismatch) and a plain step takes its decode step."""
    from inspector.engine.faults import Fault, FaultPlan
    from inspector.gui.plots.timeline import Timeline

    faults = FaultPlan([Fault("callback_error", 1, 1), Fault("position_drift", 2)])
    s, g = _engine_run(make_generation, scheduler, chat_tokens, runtime, [(5, 8), (0, 0), (9, 10), (0, 0)], faults)
    assert not g.receipts and set(s.failed_windows) == {1}
    assert [d.reason for d in s.discards] == ["execution_failed", "position_mismatch"]
    t = Timeline()
    qtbot.addWidget(t)
    t.set_session(s)
    t.refresh()
    assert list(t.failed.xData) == [s.failed_windows[1].decode_step] == [0]
    plain_steps = [int(x) for x in t.plain.xData]
    assert sorted([0] + plain_steps) == list(range(g.decode_step))
    assert s.discards[1].decode_step in plain_steps  # the discarded proposal's step was a plain step
    assert t.live.yData[-1] == g.canonical_position


def test_timeline_ticks_are_whole_decode_steps(qtbot):
    from inspector.gui.plots.timeline import Timeline

    t = Timeline()
    qtbot.addWidget(t)
    axis = t.plot.getPlotItem().getAxis("bottom")
    for lo, hi in ((-0.3, 1.3), (0.7, 3.3), (-0.3, 40.3), (0, 20000)):
        values = [v for _spacing, level in axis.tickValues(lo, hi, 600) for v in level]
        assert values and all(float(v).is_integer() for v in values), (lo, hi, values)
        assert all(s == "" or "." not in s for s in axis.tickStrings(values, 1, 1))


# -- 2. Lock timing ----------------------------------------------------------------------
def test_lock_time_counts_from_the_run_start(qtbot, engine_session):
    from inspector.gui.plots.lock_plots import LockPlots

    s, g = engine_session
    lp = LockPlots()
    qtbot.addWidget(lp)
    lp.set_session(s)
    lp.refresh()
    first = min(op.started_us for op in s.lock_ops)
    assert first > 0  # the scheduler (the app) started earlier
    prefill = next(op for op in s.lock_ops if op.kind == "prefill" and op.session_id == g.session_id)
    assert list(lp.scatter_wait["prefill"].xData) == [pytest.approx((prefill.started_us - first) / 1e6)]
    xs = np.concatenate([v.xData for v in lp.scatter_wait.values() if v.xData is not None and len(v.xData)])
    assert xs.min() >= 0 and xs.max() <= (max(op.started_us for op in s.lock_ops) - first) / 1e6 + 1e-9
    assert "since the run started" in lp.wait_plot.getPlotItem().getAxis("bottom").labelText


def test_zero_waits_are_drawn_as_zero_not_one_microsecond(qtbot):
    from inspector.gui.plots.lock_plots import LockPlots
    from inspector.session.session_record import SessionRecord

    s = SessionRecord()
    s.main_session_id = 3
    s.lock_ops = [LockOperation("prefill", 3, 7_000_000, 0, 500), LockOperation("verify", 3, 7_001_000, 0, 300),
                  LockOperation("verify", 3, 7_002_000, 1, 250), LockOperation("step", 3, 7_005_000, 40, 1000)]
    lp = LockPlots()
    qtbot.addWidget(lp)
    lp.set_session(s)
    lp.refresh()
    zero_y, one_y = lp.scatter_wait["verify"].yData  # 0 µs on a row of its own below 1 µs (at log10(1))
    assert one_y == 0.0 and zero_y < -0.5
    assert list(lp.scatter_wait["verify"].xData) == pytest.approx([0.001, 0.002])
    assert list(lp.scatter_hold["step"].yData) == [3.0]
    left = lp.wait_plot.getPlotItem().getAxis("left")
    assert left.tickStrings([zero_y, 0.0, 1.0, 3.0, 6.0], 1, 1) == ["0", "1 µs", "10 µs", "1 ms", "1 s"]
    ticks = [v for _s, level in left.tickValues(zero_y - 0.2, 2.2, 300) for v in level]
    assert zero_y in ticks
    x, counts = lp.hist_wait["verify"].getData()
    assert counts[0] == 1 and (x[0] + x[1]) / 2 == zero_y  # the 0 µs bin is drawn at the "0" tick
    assert counts[1:].sum() == 1
    bottom = lp.wait_hist.getPlotItem().getAxis("bottom")
    assert bottom.tickStrings([zero_y], 1, 1) == ["0"]
    assert "<b>prefill</b> 1 op," in lp.totals.text() and "<b>verify</b> 2 ops," in lp.totals.text()


def drawn_tick_labels(axis) -> list[tuple[float, float, str]]:
    """(centre along the axis, room the text takes along it, text) of every tick label pyqtgraph draws on
    ``axis`` (its ``tickValues`` and ``tickStrings`` through ``generateDrawSpecs``, as ``paint`` does), the
    room from the font's metrics: the text's width on a horizontal axis, a line's height on a vertical one."""
    from PySide6.QtGui import QFontMetricsF, QPainter, QPicture

    picture = QPicture()
    painter = QPainter(picture)
    if axis.style["tickFont"]:
        painter.setFont(axis.style["tickFont"])
    metrics = QFontMetricsF(painter.font())
    specs = axis.generateDrawSpecs(painter)
    painter.end()
    vertical = axis.orientation in ("left", "right")
    return [(rect.center().y() if vertical else rect.center().x(),
             metrics.height() if vertical else metrics.horizontalAdvance(text), text)
            for rect, _flags, text in (specs[2] if specs else [])]


def test_lock_plots_are_readable_at_1024x640_and_1280x800(qtbot, runtime, tmp_path):
    """Issue 36, 8 (3): at 1280x800 the lock hold axis wrote eight decades into 65 px (labels over each
    other), at 1024x640 the four plots were bare axes (8 px of data). After a real run, at both sizes every
    plot keeps at least 80 px of data (the plots scroll under the legend when the tab is short) and no two
    tick labels of any axis meet."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    lock_plots = part(w, LockPlots)
    tabs = part(w, QTabWidget, "views")
    run_to_end(qtbot, w)
    lp = lock_plots
    tabs.setCurrentWidget(lp)
    for size in ((1280, 800), (1024, 640)):
        w.resize(*size)
        qtbot.waitExposed(w)
        for _ in range(5):
            QApplication.processEvents()
        assert w.size().width() == size[0] and w.size().height() == size[1]
        for plot in lp.plots():
            name = plot.getPlotItem().getAxis("bottom").labelText
            assert plot.getPlotItem().getViewBox().height() >= 80, (size, name)
            for side in ("bottom", "left"):
                labels = sorted(drawn_tick_labels(plot.getPlotItem().getAxis(side)))
                assert len(labels) >= (2 if side == "bottom" else 1), (size, name, side, labels)
                for (a, room_a, text_a), (b, room_b, text_b) in zip(labels, labels[1:]):
                    assert b - a >= (room_a + room_b) / 2, (size, name, side, text_a, text_b, b - a)
        assert lp.legend.mapTo(lp, lp.legend.rect().bottomLeft()).y() < lp.wait_plot.mapTo(lp, lp.wait_plot.rect().topLeft()).y()
    assert lp.scroll.verticalScrollBar().maximum() > 0  # 1024x640: the plots scroll under the legend
    assert sum(lp.series_counts().values()) > 0


# -- 3. Statistics with no windows -------------------------------------------------------
def test_max_tokens_one_statistics_say_na_and_keep_a_sane_axis(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=1)
    model = w.model
    panel = part(w, ControlPanel)
    stats = part(w, StatsView)
    panel.baseline.setChecked(True)
    run_to_end(qtbot, w)
    st = stats
    st.refresh()
    assert st.summary.windows == 0 and st.summary.generated_tokens == 1
    # The one token came from the prefill's last row: no decode step, so no decode time on either side and
    # no decode tokens/s to compare (the plain run was made, and gave the same token).
    assert model.worker.generation.decode_step == 0 and st.summary.plain_steps == 0
    assert st.summary.decode_tokens_per_s is None
    b = model.session.baseline
    assert b is not None and b["plain_token_ids"] == [t.token for t in model.session.tokens]
    assert b["plain_decode_tokens_per_s"] is None and b["speculative_decode_tokens_per_s"] is None
    assert b["observed_speedup"] is None
    for key in ("acceptance", "mean_len", "expected", "observed"):
        assert st.labels[key].text().startswith("n/a"), (key, st.labels[key].text())
    assert "plain" in st.labels["observed"].text()
    assert st.observed_speedup is None and st.expected_speedup is None
    (x0, x1), (y0, y1) = st.disp.getPlotItem().viewRange()
    assert y0 == pytest.approx(0) and 1 <= y1 <= 1.1
    assert x0 < 0 < 2 < x1 < 3
    (_px0, _px1), (py0, py1) = st.by_pos.getPlotItem().viewRange()
    assert py0 == pytest.approx(0) and py1 <= 1.1
    left = st.disp.getPlotItem().getAxis("left")
    assert all(float(v).is_integer() for _s, level in left.tickValues(0, 1.05, 200) for v in level)


# -- 4. Counts ---------------------------------------------------------------------------
def test_count_noun():
    from inspector.gui.look.wording import count_noun

    assert count_noun(1, "window") == "1 window"
    assert count_noun(2, "window") == "2 windows"
    assert count_noun(0, "window") == "0 windows"
    assert count_noun(1, "discard") == "1 discard" and count_noun(3, "token") == "3 tokens"
    assert count_noun(2, "batch", "batches") == "2 batches" and count_noun(1, "batch", "batches") == "1 batch"


# -- 5. Compare window: Close, Esc, Ctrl+W -----------------------------------------------
def test_compare_window_closes_and_a_running_comparison_goes_on(qtbot, runtime, tmp_path):
    from inspector.bench.compare_result import CompareConfig

    w = make_window(qtbot, runtime, tmp_path, max_tokens=8)
    model = w.model
    v = model.commands.compare()
    qtbot.waitExposed(v)
    assert v.close_button.isVisible()
    v.close_button.click()
    assert not v.isVisible()
    v = model.commands.compare()
    v.set_configs([CompareConfig("plain", "none", 0), CompareConfig("ngram 4", "ngram", 4)])
    with qtbot.waitSignal(model.compareReady, timeout=RUN_TIMEOUT_MS) as blocker:
        assert model.commands.run_compare(v.config_list())
        qtbot.keyClick(v.results, Qt.Key.Key_Escape)  # from a child: Esc reaches the window
        assert not v.isVisible()
        assert model.state == BUSY  # closing hides the window; the comparison keeps running
    result, note = blocker.args
    assert note == "" and len(result.rows) == 2 and not any(r.error for r in result.rows)
    assert model.state == IDLE
    assert model.commands.compare() is v and v.isVisible()
    v.refresh()
    assert v.row_count() == 2 and v.run.isEnabled()
    # Ctrl+W closes it too.
    v.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is v, timeout=5000)
    qtbot.keyClick(v.results, Qt.Key.Key_W, Qt.KeyboardModifier.ControlModifier)
    assert not v.isVisible()
    # Esc in an open cell editor cancels the edit and keeps the window.
    v = model.commands.compare()
    v.configs.editItem(v.configs.item(0, 0))
    assert v.configs.state() == QAbstractItemView.State.EditingState
    label = v.configs.item(0, 0).text()
    (editor,) = [e for e in v.configs.viewport().findChildren(QLineEdit, options=Qt.FindChildOption.FindDirectChildrenOnly)
                 if e.text() == label]  # the label cell's editor (the options cells are line edits too)
    qtbot.keyClick(editor, Qt.Key.Key_Escape)
    assert v.isVisible() and v.configs.state() != QAbstractItemView.State.EditingState
    # Ctrl+C copies the selected result rows.
    v.results.selectRow(1)
    qtbot.keyClick(v.results, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    lines = QApplication.clipboard().text().splitlines()
    assert lines[0].split("\t")[:3] == ["configuration", "decode tokens/s", "speedup vs plain"]
    assert lines[1].split("\t")[0] == "ngram 4" and len(lines) == 2


# -- 6. Ctrl+C copies rows ---------------------------------------------------------------
def _select_rows(view: QTableView, rows) -> None:
    sm = view.selectionModel()
    sm.clearSelection()
    flags = QItemSelectionModel.SelectionFlag.Select | QItemSelectionModel.SelectionFlag.Rows
    for r in rows:
        sm.select(view.model().index(r, 0), flags)
    sm.setCurrentIndex(view.model().index(rows[-1], 0), QItemSelectionModel.SelectionFlag.NoUpdate)


def test_ctrl_c_copies_selected_window_rows_as_tsv(qtbot, engine_session):
    from inspector.gui.look.table_copy import install_row_copy
    from inspector.gui.windows.table import WINDOW_COLUMNS, WindowTableModel

    s, g = engine_session
    model = WindowTableModel()
    model.set_session(s)
    view = QTableView()
    qtbot.addWidget(view)
    view.setModel(model)
    install_row_copy(view)
    install_row_copy(view)  # twice: still one copy
    view.show()
    view.setFocus()
    _select_rows(view, [0, 1])
    QApplication.clipboard().clear()
    qtbot.keyClick(view, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    text = QApplication.clipboard().text()
    receipts = [e.receipt for e in s.windows()]
    assert len(receipts) == 2 and None not in receipts, "the session should hold exactly two verified windows"
    expected = ["\t".join(WINDOW_COLUMNS)] + [
        "\t".join(str(v) for v in (r.window_index, r.disposition, r.proposal_token_count, r.accepted_proposal_tokens,
                                   r.canonical_prediction_count, r.base_position, r.canonical_position,
                                   r.trimmed_rows, f"{r.verification_elapsed_us / 1000:.1f}"))
        for r in receipts]
    assert text.splitlines() == expected
    assert text.endswith("\n")


def test_ctrl_c_copies_event_log_rows(qtbot, engine_session):
    from inspector.gui.plots.event_log import COLUMNS, EventLog

    s, g = engine_session
    log = EventLog()
    qtbot.addWidget(log)
    log.set_session(s)
    log.refresh()
    log.show()
    view = log.table
    model = view.model()
    commit = next(i for i, e in enumerate(s.events) if e.kind == "commit")
    _select_rows(view, [0, commit])
    QApplication.clipboard().clear()
    qtbot.keyClick(view, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    lines = QApplication.clipboard().text().splitlines()
    assert lines[0] == "\t".join(COLUMNS)
    assert len(lines) == 3
    for line, row in zip(lines[1:], (0, commit)):
        assert line.split("\t") == [str(model.data(model.index(row, c)) or "") for c in range(len(COLUMNS))]
    assert lines[2].split("\t")[2] == "commit"
    # With commits hidden (a filtered view), the copy follows what is shown.
    log.hide_commits.setChecked(True)
    _select_rows(log.table, [0, 1])
    qtbot.keyClick(log.table, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    kinds = [line.split("\t")[2] for line in QApplication.clipboard().text().splitlines()[1:]]
    assert len(kinds) == 2 and "commit" not in kinds and "step" not in kinds


# -- 7. Decision ids as text -------------------------------------------------------------
def test_windows_table_shows_decision_ids_as_text(engine_session):
    from inspector.gui.windows.table import WindowTableModel

    s, g = engine_session
    model = WindowTableModel()
    model.set_session(s)
    for row, r in enumerate(g.receipts):
        text = bytes.fromhex(r.decision_id).decode()  # the receipt stores the source's bytes as hex
        assert text.startswith("script:") and r.decision_id != text
        tip = model.data(model.index(row, 0), Qt.ItemDataRole.ToolTipRole)
        assert f"decision {text} " in tip and r.decision_id not in tip
        assert f"decode step {r.decode_step}" in tip


def test_statistics_say_why_the_plain_steps_ran_without_a_proposal_with_each_reasons_meaning(qtbot, engine_session):
    from inspector.gui.plots.statistics import StatsView
    from inspector.sources.scripted import REASONS

    s, g = engine_session
    s.source_name = "scripted"  # what a run's header records (this fixture's header has no settings)
    view = StatsView()
    qtbot.addWidget(view)
    view.set_session(s)
    view.refresh()
    text, tip = view.labels["plain_steps"].text(), view.labels["plain_steps"].toolTip()
    steps = [e.detail.split(": ")[0] for e in g.events if e.kind == "step"]
    assert text.startswith(f"{g.plain_steps}: ") and len(steps) == g.plain_steps
    assert f"{steps.count('script_done')} script_done" in text
    assert REASONS["script_done"] in tip
    balance = view.labels["balance"].text()
    assert balance.startswith("net ") and "(plain steps of this run)" in view.labels["balance"].toolTip(), balance


def test_the_timelines_reason_lane_has_a_row_per_reason_and_a_mark_at_each_plain_steps_decode_step(
        qtbot, engine_session):
    from inspector.gui.plots.timeline import Timeline

    s, g = engine_session
    t = Timeline()
    qtbot.addWidget(t)
    t.set_session(s)
    t.refresh()
    _steps, plain = t.decode_steps()
    marks = t.reason_steps()
    assert [d for d, _c in marks] == [d for d, _p in plain] and len(marks) == g.plain_steps
    codes = [e.detail.split(": ")[0] for e in g.events if e.kind == "step"]
    assert [c for _d, c in marks] == codes
    assert list(t.lane_marks.data["x"]) == [d for d, _c in marks]
    ticks = [label for _v, label in t.lane.getAxis("left")._tickLevels[0]]
    assert ticks == list(dict.fromkeys(codes)) and not t.lane.isHidden()


def test_the_timelines_profit_line_ends_at_the_runs_net_balance_after_its_last_window(qtbot, engine_session):
    from inspector.engine.profit import plain_step_us, run_balance
    from inspector.gui.plots.timeline import Timeline

    s, _g = engine_session
    t = Timeline()
    qtbot.addWidget(t)
    t.set_session(s)
    t.refresh()
    net = run_balance(s.receipts, plain_step_us(s.lock_ops, s.main_session_id)).net_us
    assert s.receipts and not t.profit_plot.isHidden()
    assert list(t.profit.xData) == sorted(r.decode_step for r in s.receipts)
    assert abs(t.profit.yData[-1] - net / 1000) < 1e-6
    assert "plain steps of this run" in t.profit_plot.toolTip()
    t.resize(600, 260)  # a small screen: the KV plot keeps its room, the profit plot hides
    t.show()
    qtbot.waitUntil(lambda: t.profit_plot.isHidden())
    t.resize(600, 700)
    qtbot.waitUntil(lambda: not t.profit_plot.isHidden())


def test_a_short_kv_plot_hides_its_legend_so_the_data_stays_visible(qtbot, engine_session):
    from inspector.gui.plots.timeline import LEGEND_MIN_PLOT_PX, Timeline

    s, _g = engine_session
    t = Timeline()
    qtbot.addWidget(t)
    t.set_session(s)
    t.resize(600, 500)
    t.show()
    t.refresh()
    qtbot.waitUntil(lambda: t.plot.height() >= LEGEND_MIN_PLOT_PX)
    assert t.legend.isVisible()
    t.resize(600, 200)
    qtbot.waitUntil(lambda: t.plot.height() < LEGEND_MIN_PLOT_PX)
    assert not t.legend.isVisible() and "canonical_position" in t.plot.toolTip()


def test_the_kv_legend_is_a_row_above_the_plot_and_hides_no_point(qtbot, engine_session):
    """Issue 36, 8 (1): the legend sat in the plot's bottom right corner over the windows of the middle
    steps (on the screen and in File > Export plots). It is a row of its own above the plot: it meets
    no part of the view box, and every drawn point is inside the view box."""
    from PySide6.QtCore import QPointF

    from inspector.gui.plots.timeline import Timeline

    s, _g = engine_session
    t = Timeline()
    qtbot.addWidget(t)
    t.set_session(s)
    for size in ((1000, 560), (640, 480), (1600, 900)):  # File > Export plots' size, a never shown tab's
        t.resize(*size)
        t.show()
        t.refresh()
        QApplication.processEvents()
        assert t.legend.isVisible(), size
        data = kv_data_rect(t)
        assert data.height() > 150 and not t.legend.geometry().intersects(data), (size, t.legend.geometry(), data)
        vb = t.plot.getPlotItem().getViewBox()
        box = vb.sceneBoundingRect()
        points = [vb.mapViewToScene(QPointF(x, y)) for item in (t.base, t.after, t.canonical, t.plain, t.prefill)
                  for x, y in zip(*item.getData()) if item.xData is not None]
        assert points and all(box.contains(p) for p in points)  # the legend is outside the box: no point under it
    for name in ("live KV length", "base_position", "position_after_verification", "canonical_position",
                 "plain step", "failed window", "prefill"):
        assert name in t.legend.text()


def test_two_token_views_of_one_record_each_redraw_the_end_mark(qtbot, tmp_path):
    """Each token view keeps its own redraw cursor and never writes the record: when the run's
    last token becomes the end token, both views on the record restyle it (no model)."""
    from PySide6.QtGui import QTextCursor

    from inspector.gui.tokens.token_view import TokenView
    from inspector.session.session_record import SessionRecord
    from inspector.session.entries import END
    from test_session_record import SCRIPT, run_scripted

    live, doc, _ = run_scripted(tmp_path, SCRIPT)
    assert live.events[-1].kind == "finish"
    s = SessionRecord()
    views = [TokenView(), TokenView()]
    for v in views:
        qtbot.addWidget(v)
        v.set_session(s)
    version = s.version
    for ev in live.events[:-1]:
        s.apply(ev)
        for v in views:
            v.refresh()
    s.apply(live.events[-1])
    assert s.version > version and s.tokens[-1].outcome == END
    last = len(doc["output"]["token_ids"]) - 1

    def underlined(view: TokenView) -> bool:  # the last character (the end token's) is drawn underlined
        doc = view.stream.document()
        cur = QTextCursor(doc)
        cur.setPosition(doc.characterCount() - 1)  # the format of the character before the cursor
        return cur.charFormat().fontUnderline()

    assert not any(underlined(v) for v in views)
    for v in views:
        v.refresh()
    assert [underlined(v) for v in views] == [True, True]
    assert [v.token_count() for v in views] == [last + 1, last + 1]
