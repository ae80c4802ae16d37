"""Step-through: Pause, Step window (one decode step), Step token (one commit), Stop.

Whatever the model says: the target has end-of-generation banned (``NoEndOfTurn``),
so a run never ends before the steps a test takes; a window among the first tokens
comes from the n-gram source's first query (``ngram_min=1``) or from ``follow_window``.
"""

from __future__ import annotations

from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.tokens.token_view import TokenView
from inspector.session.run_states import IDLE, PAUSED, TOKEN_HOLD
from scenarios import NoEndOfTurn
from test_gui_support import follow_window, make_window, part, wait_state


def _steps(w) -> int:
    model = w.model
    return model.worker.generation.decode_step


def test_step_window_advances_exactly_one_decode_step(qtbot, runtime, tmp_path):
    w = make_window(qtbot, NoEndOfTurn(runtime), tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    model.commands.step_window()  # from idle: starts paused, then runs one step
    wait_state(qtbot, w, PAUSED)
    qtbot.waitUntil(lambda: model.worker.generation is not None and _steps(w) == 1)
    for expected in (2, 3, 4):
        before_tokens = len(model.worker.generation.generated)
        model.commands.step_window()
        qtbot.waitUntil(lambda: model.state == PAUSED and _steps(w) == expected, timeout=60_000)
        g = model.worker.generation
        assert len(g.receipts) + g.plain_steps == expected
        qtbot.waitUntil(lambda: len(model.session.tokens) == len(g.generated))
        assert len(g.generated) > before_tokens
    assert panel.run.isEnabled() and panel.step_token.isEnabled() and not panel.pause.isEnabled()
    with qtbot.waitSignal(model.runFinished, timeout=60_000) as blocker:
        model.commands.stop()
    assert blocker.args[0] == "stopped"
    assert blocker.args[1].kv_length == blocker.args[1].canonical_position


def test_step_token_commits_exactly_one_token(qtbot, runtime, tmp_path):
    w = make_window(qtbot, NoEndOfTurn(runtime), tmp_path, ngram_min=1)
    model = w.model
    token_view = part(w, TokenView)
    model.commands.step_token()  # from idle: the worker holds before the first token
    wait_state(qtbot, w, TOKEN_HOLD)
    g = model.worker.generation
    assert len(g.generated) == 0
    seen_windows = set()
    for n in range(1, 13):
        model.commands.step_token()
        qtbot.waitUntil(lambda: model.state == TOKEN_HOLD and len(g.generated) == n, timeout=60_000)
        qtbot.waitUntil(lambda: len(model.session.tokens) == n)
        assert len(g.generated) == n
        assert "about to commit" in token_view.hold_label.text()
        seen_windows.update(t.window for t in model.session.tokens if t.window is not None)
    assert seen_windows, "stepping token by token should go through a proposal window"
    # Continue runs to the end.
    with qtbot.waitSignal(model.runFinished, timeout=180_000):
        model.commands.run()
    assert model.state == IDLE and g.finished


def test_pause_between_windows_and_continue(qtbot, runtime, tmp_path, monkeypatch):
    """Window 2 of ``follow_window``'s plan is a first mismatch whatever the model says."""
    w = follow_window(qtbot, monkeypatch, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    panel.break_boxes["first_mismatch"].setChecked(True)
    model.commands.start_run()
    wait_state(qtbot, w, PAUSED)
    g = model.worker.generation
    assert g.receipts[-1].disposition == "first_mismatch"
    assert not g.finished
    panel.break_boxes["first_mismatch"].setChecked(False)
    with qtbot.waitSignal(model.runFinished, timeout=180_000):
        model.commands.run()
    assert g.finished
