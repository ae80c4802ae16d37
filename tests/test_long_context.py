"""The bundled long example (issue 39, long contexts) on the real model: more than 6,000 prompt tokens
run headless (``run --example long-file-edit``: the context is raised to 8192 by itself) and in the window
(picking the example raises the context field; Run loads the model at it), and the By position tab draws
the run's windows and plain steps at the KV positions they ran at, after the prompt. One prefill each
(a minute or more on 2 cores): a short generation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QTabWidget

from inspector.gui.plots.positions import PositionsView
from inspector.gui.plots.statistics import StatsView
from inspector.prompts import LONG_EXAMPLE_N_CTX, LONG_FILE_EDIT
from inspector.session.run_states import IDLE

LONG_TIMEOUT_S = 900
"""A 6,700-token prefill took 178 s on this 2-core machine while other processes used most of it."""
MIN_PROMPT = 6000


@pytest.mark.slow  # two 6,700-token prefills: 2-8 minutes on 2 cores (448 s with the load at 7)
def test_the_long_example_runs_headless_and_in_the_window_with_the_per_position_plots(qtbot, tmp_path):
    # Headless: the example brings its own context; the prefill is told on standard error.
    out = tmp_path / "long.json"
    p = subprocess.run([sys.executable, "-m", "inspector", "run", "--example", LONG_FILE_EDIT, "-n", "8",
                        "--ngram-min", "1", "--receipts", str(out)],
                       capture_output=True, text=True, timeout=LONG_TIMEOUT_S)
    assert p.returncode == 0, p.stderr
    assert f"runs in a context of {LONG_EXAMPLE_N_CTX} positions" in p.stderr
    doc = json.loads(out.read_text("utf-8"))
    prompt = len(doc["prompt"]["token_ids"])
    assert prompt >= MIN_PROMPT and doc["model"]["n_ctx"] == LONG_EXAMPLE_N_CTX
    assert f"prefill: {prompt} prompt tokens" in p.stderr
    assert 1 <= len(doc["output"]["token_ids"]) <= 8
    assert all(w["base_position"] >= prompt for w in doc["windows"])

    # The window: picking the example raises the context from the default; Run loads the model at it.
    from inspector.gui.shell.main_window import MainWindow
    from inspector.gui.panel.control_panel import ControlPanel
    from test_gui_support import part

    w = MainWindow(None, settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat),
                   data_dir=tmp_path / "data")
    model = w.model
    stats = part(w, StatsView)
    tabs = part(w, QTabWidget, "views")
    qtbot.addWidget(w)
    w.show()
    panel = part(w, ControlPanel)
    assert panel.n_ctx.value() < LONG_EXAMPLE_N_CTX
    panel.choose_example(LONG_FILE_EDIT)
    assert panel.n_ctx.value() == LONG_EXAMPLE_N_CTX and panel.prompt_box.context_note.isVisible()
    panel.max_tokens.setValue(8)
    panel.ngram_min.setValue(1)  # the first query proposes: a window whatever the model says
    try:
        with qtbot.waitSignal(model.runFinished, timeout=LONG_TIMEOUT_S * 1000):
            assert model.commands.start_run()
        qtbot.waitUntil(lambda: model.state == IDLE, timeout=30_000)
        s = model.session
        assert model.model_info["n_ctx"] == LONG_EXAMPLE_N_CTX
        assert s.prompt_token_count == prompt and s.summary().generated_tokens >= 1
        assert s.receipts, "ngram_min 1 proposes at the first query"
        view = stats.positions
        assert isinstance(view, PositionsView)
        tabs.setCurrentWidget(stats)
        stats.pages.setCurrentWidget(view)
        w.refresh_all()
        f = view.figures
        assert list(view.accept.xData) == [r.base_position for r in s.receipts]
        assert min(f.window_x + f.step_x) >= prompt  # every window and plain step ran after the long prompt
        assert all(ms > 0 for ms in f.verify_row_ms + f.step_ms)
        assert view.verdict.text().startswith("Windows at KV position")
    finally:
        w.close()


def test_a_context_given_with_c_wins_over_the_long_examples_own(tmp_path):
    p = subprocess.run([sys.executable, "-m", "inspector", "run", "--example", LONG_FILE_EDIT, "-c", "4096", "-n", "1",
                        "--receipts", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "runs in a context of" not in p.stderr
    assert "but the context holds 4096" in p.stderr, p.stderr
    assert not (tmp_path / "r.json").exists()


def test_only_a_long_example_raises_the_context_field_and_the_note_follows_it(qtbot, tmp_path):
    from inspector.gui.panel.control_panel import ControlPanel

    panel = ControlPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.n_ctx.setValue(2048)
    panel.choose_example("copy-exact")
    assert panel.n_ctx.value() == 2048 and not panel.prompt_box.context_note.isVisible()
    panel.choose_example(LONG_FILE_EDIT)
    assert panel.n_ctx.value() == LONG_EXAMPLE_N_CTX and panel.prompt_box.context_note.isVisible()
    panel.n_ctx.setValue(4096)  # the user's choice stands; the note says it is too small
    assert "needs a context of 8192" in panel.prompt_box.context_note.text()
    panel.n_ctx.setValue(16384)  # never lowered
    panel.choose_example("copy-exact")
    panel.choose_example(LONG_FILE_EDIT)
    assert panel.n_ctx.value() == 16384 and "context of 16384 positions" in panel.prompt_box.context_note.text()
    panel.choose_example("open-ended")
    assert not panel.prompt_box.context_note.isVisible()
