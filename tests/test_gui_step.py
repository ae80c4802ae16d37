"""Step-through: Pause, Step window (one decode step), Step token (one commit), Stop.

Whatever the model says: the target has end-of-generation banned (``NoEndOfTurn``),
so a run never ends before the steps a test takes; a window among the first tokens
comes from the n-gram source's first query (``ngram_min=1``) or from ``follow_window``.
"""

from __future__ import annotations

from inspector.session.run_states import IDLE, PAUSED, TOKEN_HOLD
from scenarios import NoEndOfTurn
from test_gui_support import follow_window, make_window, wait_state


def _steps(w) -> int:
    return w.worker.generation.decode_step


def test_step_window_advances_exactly_one_decode_step(qtbot, runtime, tmp_path):
    w = make_window(qtbot, NoEndOfTurn(runtime), tmp_path)
    w.run.step_window_clicked()  # from idle: starts paused, then runs one step
    wait_state(qtbot, w, PAUSED)
    qtbot.waitUntil(lambda: w.worker.generation is not None and _steps(w) == 1)
    for expected in (2, 3, 4):
        before_tokens = len(w.worker.generation.generated)
        w.run.step_window_clicked()
        qtbot.waitUntil(lambda: w.state == PAUSED and _steps(w) == expected, timeout=60_000)
        g = w.worker.generation
        assert len(g.receipts) + g.plain_steps == expected
        qtbot.waitUntil(lambda: len(w.session.tokens) == len(g.generated))
        assert len(g.generated) > before_tokens
    assert w.panel.run.isEnabled() and w.panel.step_token.isEnabled() and not w.panel.pause.isEnabled()
    with qtbot.waitSignal(w.runFinished, timeout=60_000) as blocker:
        w.run.stop_clicked()
    assert blocker.args[0] == "stopped"
    assert blocker.args[1].kv_length == blocker.args[1].canonical_position


def test_step_token_commits_exactly_one_token(qtbot, runtime, tmp_path):
    w = make_window(qtbot, NoEndOfTurn(runtime), tmp_path, ngram_min=1)
    w.run.step_token_clicked()  # from idle: the worker holds before the first token
    wait_state(qtbot, w, TOKEN_HOLD)
    g = w.worker.generation
    assert len(g.generated) == 0
    seen_windows = set()
    for n in range(1, 13):
        w.run.step_token_clicked()
        qtbot.waitUntil(lambda: w.state == TOKEN_HOLD and len(g.generated) == n, timeout=60_000)
        qtbot.waitUntil(lambda: len(w.session.tokens) == n)
        assert len(g.generated) == n
        assert "about to commit" in w.token_view.hold_label.text()
        seen_windows.update(t.window for t in w.session.tokens if t.window is not None)
    assert seen_windows, "stepping token by token should go through a proposal window"
    # Continue runs to the end.
    with qtbot.waitSignal(w.runFinished, timeout=180_000):
        w.run.run_clicked()
    assert w.state == IDLE and g.finished


def test_pause_between_windows_and_continue(qtbot, runtime, tmp_path, monkeypatch):
    """Window 2 of ``follow_window``'s plan is a first mismatch whatever the model says."""
    w = follow_window(qtbot, monkeypatch, runtime, tmp_path)
    w.panel.break_boxes["first_mismatch"].setChecked(True)
    w.run.start_run()
    wait_state(qtbot, w, PAUSED)
    g = w.worker.generation
    assert g.receipts[-1].disposition == "first_mismatch"
    assert not g.finished
    w.panel.break_boxes["first_mismatch"].setChecked(False)
    with qtbot.waitSignal(w.runFinished, timeout=180_000):
        w.run.run_clicked()
    assert g.finished
