"""What a new user hit in the window (issue 26): each defect reproduced on the real model.

No test relies on the model's words."""

from __future__ import annotations

from pathlib import Path

from inspector.gui.worker import IDLE
from test_gui_support import make_window, run_to_end

LOAD_TIMEOUT_MS = 180_000


def load_weights(qtbot, w, weight_type: str) -> dict:
    """Choose ``weight_type`` in the weights box and load the model in that form; returns its info."""
    w.panel.set_target_weights(weight_type)
    with qtbot.waitSignal(w.worker.modelLoaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        assert w.load_selected_model()
    qtbot.waitUntil(lambda: w.state == IDLE, timeout=LOAD_TIMEOUT_MS)
    return blocker.args[0]


def test_the_next_turn_continues_a_run_on_another_weight_form(qtbot, runtime, tmp_path, monkeypatch):
    """Defect 1: after a run in Q8_0 form the Next turn row is open (the conversation ran on the chosen
    model, whose loaded file is a cached conversion); choosing another form says so in the window's
    words, never the cache file's name."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    w = make_window(qtbot, runtime, tmp_path, max_tokens=4)
    info = load_weights(qtbot, w, "Q8_0")
    run_to_end(qtbot, w)
    bar = w.conversation_bar
    assert bar.send.isEnabled(), bar.message.placeholderText()
    w.panel.set_target_weights("")
    assert not bar.send.isEnabled()
    why = bar.message.placeholderText()
    assert "Q8_0 form" in why and "weights" in why and Path(info["path"]).name not in why
