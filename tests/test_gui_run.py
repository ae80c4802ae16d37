"""A full run of the copy-heavy example: every view holds what the receipts hold."""

from __future__ import annotations

import threading

from PySide6.QtCore import QElapsedTimer, QPoint, Qt, QTimer
from PySide6.QtGui import QTextCursor

from PySide6.QtWidgets import QTabWidget
from inspector.gui.look import outcomes as O
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.plots.event_log import EventLog
from inspector.gui.plots.lock_plots import LockPlots
from inspector.gui.plots.statistics import StatsView
from inspector.gui.plots.timeline import Timeline
from inspector.gui.tokens.token_view import TokenView
from inspector.gui.windows.detail import WindowDetail
from inspector.session.run_states import PAUSED
from test_gui_support import DecodeHold, follow_window, make_window, part, run_to_end, wait_state


def test_copy_heavy_run_fills_every_view(qtbot, runtime, tmp_path, monkeypatch):
    """The source proposes the target's own continuation with a surely rejected token
    every other window (``follow_window``): accepted tokens, corrections and trimmed
    rows whatever the model says (an n-gram source gets them only where the model copies)."""
    w = follow_window(qtbot, monkeypatch, runtime, tmp_path)
    model = w.model
    token_view = part(w, TokenView)
    window_detail = part(w, WindowDetail)
    timeline = part(w, Timeline)
    lock_plots = part(w, LockPlots)
    stats = part(w, StatsView)
    event_log = part(w, EventLog)
    tabs = part(w, QTabWidget, "views")
    reason, info = run_to_end(qtbot, w)
    g = model.worker.generation
    s = model.session
    assert reason == g.finish_reason
    assert len(g.receipts) >= 2
    assert "first_mismatch" in {r.disposition for r in g.receipts}
    # Token view: exactly the committed tokens, nothing branch-conditioned.
    assert [t.token for t in s.tokens] == g.generated
    assert token_view.token_count() == len(g.generated)
    assert token_view.stream.toPlainText() == "".join(t.shown for t in model.session.tokens)
    # Window table, timeline, statistics: one entry per receipt.
    assert window_detail.window_count() == len(g.receipts)
    assert timeline.point_count() == len(g.receipts)
    assert stats.summary.windows == len(g.receipts)
    engine = g.summary()
    assert stats.summary.acceptance_rate == engine.acceptance_rate
    assert stats.summary.acceptance_by_position == engine.acceptance_by_position
    assert stats.summary.dispositions == engine.dispositions
    assert stats.summary.plain_steps == g.plain_steps
    # Event log: every engine event, in order.
    assert event_log.kinds() == [e.kind for e in g.events]
    # Token outcomes agree with the receipts.
    outcomes = {t.outcome for t in s.tokens}
    assert O.ACCEPTED in outcomes and O.FROM_PREFILL in outcomes
    assert outcomes <= {O.ACCEPTED, O.CORRECTION, O.BONUS, O.PLAIN, O.FROM_PREFILL, O.END}
    # The first token, and only it, came from the prefill's last row: in no window, no plain step.
    assert [t.index for t in s.tokens if t.outcome == O.FROM_PREFILL] == [0] and s.tokens[0].window is None
    assert sum(len(r.committed_tokens) for r in g.receipts) + g.plain_steps + 1 == len(g.generated)
    assert s.tokens[-1].outcome == O.END
    for r in g.receipts:
        toks = [t for t in s.tokens if t.window == r.window_index]
        assert [t.token for t in toks] == list(r.committed_tokens)
        assert sum(t.outcome == O.ACCEPTED for t in toks) == r.accepted_proposal_tokens
    # KV state after the run.
    assert info.kv_length == info.canonical_position == g.canonical_position
    # The lock plots saw the main session's verify operations.
    assert lock_plots.series_counts()["verify"] == len(g.receipts)
    # Selecting a window shows its rows; rows past the committed ones are struck through.
    r = next(r for r in g.receipts if r.trimmed_rows > 0)
    window_detail.select_window(r.window_index)
    assert window_detail.rows.rowCount() == r.verification_rows
    last = window_detail.rows.item(r.verification_rows - 1, 0)
    assert last.font().strikeOut()
    assert not window_detail.rows.item(0, 0).font().strikeOut()
    # Hover text of an accepted token names window, row, proposal and position.
    t = next(t for t in s.tokens if t.outcome == O.ACCEPTED)
    tip = token_view.tooltip(t.index)
    assert f"window {t.window}, row {t.row} at KV position {t.position - 1}" in tip
    assert f"the prefill's last row (the prompt's last token at KV position {s.prompt_token_count - 1})" in \
        token_view.tooltip(0)
    # The pointer finds that token in the text, and a click selects its window.
    tabs.setCurrentWidget(timeline)
    stream = token_view.stream
    cur = QTextCursor(stream.document())
    cur.setPosition(token_view._starts[t.index])
    stream.setTextCursor(cur)
    stream.ensureCursorVisible()
    point = stream.cursorRect(cur).center() + QPoint(3, 0)
    assert stream.token_at(point) == t.index
    qtbot.mouseClick(stream.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert tabs.currentWidget() is window_detail
    assert window_detail.selected == t.window


def test_gui_thread_never_blocks_while_generating(qtbot, runtime, tmp_path):
    """The engine decodes on its own thread: while a decode of the run is held inside
    the runtime (``DecodeHold``), the window's event loop keeps turning, and the decode
    goes on only once the GUI thread has turned it several times. No timing is asserted
    (speed is measured by ``spec-inspector bench``); the longest event-loop stop of the
    run is printed."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    model = w.model
    panel = part(w, ControlPanel)
    panel.background.setValue(1)
    qtbot.waitExposed(w)

    def engine_thread() -> bool:  # the run's decodes: not the GUI thread, not a background session
        t = threading.current_thread()
        return t is not threading.main_thread() and not t.name.startswith("spec-inspector-background")

    hold = DecodeHold(runtime, when=lambda: engine_thread() and model.worker.running)
    ticks_while_held = [0]
    gaps, clock = [], QElapsedTimer()
    clock.start()
    last = [clock.elapsed()]

    def tick():
        now = clock.elapsed()
        if model.session.tokens or hold.held.is_set():
            gaps.append(now - last[0])
        last[0] = now
        if hold.held.is_set() and not hold.released:
            ticks_while_held[0] += 1
            if ticks_while_held[0] >= 5:
                hold.release()  # the GUI thread turned 5 times while the engine sat in a decode

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(tick)
    timer.start()
    try:
        with hold.installed():
            run_to_end(qtbot, w)
    finally:
        timer.stop()
        panel.background.setValue(0)
    assert hold.held.is_set() and hold.released, "the event loop did not turn while the engine decoded"
    assert threading.main_thread().name not in hold.threads, "a decode ran on the GUI thread"
    print(f"longest event-loop stop while generating: {max(gaps)} ms over {len(gaps)} ticks")


def test_background_sessions_make_lock_waits_visible(qtbot, runtime, tmp_path):
    """The run starts paused and goes on once an operation of a background session was
    recorded (waiting for it, not for time), so the plots show background operations
    however fast the main run is."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=40)
    model = w.model
    panel = part(w, ControlPanel)
    lock_plots = part(w, LockPlots)
    panel.background.setValue(2)
    qtbot.waitUntil(lambda: model.worker.contention is not None and model.worker.contention.count == 2)
    assert model.commands.start_run(paused=True)
    wait_state(qtbot, w, PAUSED)
    main = model.session.main_session_id

    def background_ops():
        return [op for op in model.session.lock_ops if op.session_id >= 0 and op.session_id != main]

    qtbot.waitUntil(lambda: len(background_ops()) > 0, timeout=120_000)
    with qtbot.waitSignal(model.runFinished, timeout=180_000):
        model.commands.run()
    w.refresh_all()
    counts = lock_plots.series_counts()
    assert counts["background"] > 0
    ops = [op for op in model.session.lock_ops if op.session_id == model.session.main_session_id]
    assert ops and all(op.wait_us >= 0 for op in ops)
    panel.background.setValue(0)
    assert model.worker.contention.count == 0
