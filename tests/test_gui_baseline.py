"""Compare with plain decoding: the baseline after a run, its mark in the token view,
the Statistics lines, and the ``baseline`` object of exported receipts.

Whatever the model says: the planted divergence sits inside the plain run however
short the model's answer, and Stop meets the comparison while one of its decodes
is held (``DecodeHold``) instead of racing it.
"""

from __future__ import annotations

from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.plots.statistics import StatsView
from inspector.gui.tokens.token_view import TokenView
from inspector.receipts import load_document
from inspector.session.run_states import IDLE, PAUSED
from test_gui_support import part, DecodeHold, example_text, make_window, open_receipts, plain_tokens, run_to_end, \
    run_with_planted_divergence, wait_state

PLANTED = 10
"""Generated-token index where the planted perturbation changes the speculative output
(or the plain run's last token, when the model's answer is shorter)."""


def test_copy_heavy_run_matches_plain_decoding(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    token_view = part(w, TokenView)
    stats = part(w, StatsView)
    panel.baseline.setChecked(True)
    run_to_end(qtbot, w)
    b = model.session.baseline
    assert b is not None and model.session.baseline_result is not None
    assert b["plain_decode_tokens_per_s"] > 0 and b["observed_speedup"] > 0
    label = stats.labels["baseline"].text()
    if b["identical"]:
        assert label.startswith("identical to plain decoding")
        assert b["plain_token_ids"] == [t.token for t in model.session.tokens]
        assert "identical" in token_view.baseline_text()
    else:  # batch arithmetic may flip a near-tie: reported, never hidden
        d = b["divergence"]
        print("near-tie divergence:", d)
        assert d["margin"] < 1.0
        assert token_view.is_marked_divergent(d["index"])
    assert "x" in stats.labels["observed"].text()
    assert not token_view.baseline_label.isHidden()
    assert panel.values()["baseline"] is True


def test_planted_divergence_is_marked_exported_and_reopened(qtbot, runtime, tmp_path):
    """A scripted perturbation of the sampling: while the speculative run goes, the
    target's prediction for generated token ``PLANTED`` is replaced (every row that
    predicts it); the plain baseline afterwards is unperturbed."""
    planted = min(PLANTED, len(plain_tokens(runtime, example_text("copy-with-corrections"))) - 1)
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    token_view = part(w, TokenView)
    stats = part(w, StatsView)
    panel.baseline.setChecked(True)
    prompt_len = len(runtime.prompt_tokens(example_text("copy-with-corrections")))
    row_position = prompt_len - 1 + planted  # the row whose prediction is generated token planted
    run_with_planted_divergence(qtbot, w, runtime, row_position)
    s = model.session
    assert s.divergence_index == planted
    d = s.baseline["divergence"]
    assert d["plain_token"] == (d["speculative_token"] - 1) % runtime.n_vocab
    assert d["speculative_token"] == s.tokens[planted].token
    # The token view marks exactly that token; its tooltip names both tokens and the margin.
    tv = token_view
    assert tv.is_marked_divergent(planted)
    assert (planted == 0 or not tv.is_marked_divergent(planted - 1)) and not tv.is_marked_divergent(planted + 1)
    tip = tv.tooltip(planted)
    assert "first difference from plain decoding" in tip and "margin" in tip
    assert f"({d['plain_token']})" in tip and f"({d['speculative_token']})" in tip
    assert f"token {planted}" in tv.baseline_text()
    assert stats.labels["baseline"].text().startswith(f"diverges at generated token {planted}")
    # Exported receipts carry the baseline; opening them shows the mark again.
    out = tmp_path / "baseline.json"
    with qtbot.waitSignal(model.exported, timeout=60_000):
        model.commands.export_receipts_file(str(out))
    doc = load_document(out)
    assert doc["baseline"]["divergence"]["index"] == planted
    assert doc["baseline"]["identical"] is False
    v = make_window(qtbot, None, tmp_path, settings_file="viewer.ini")
    v_token_view = part(v, TokenView)
    v_stats = part(v, StatsView)
    assert open_receipts(qtbot, v, out) == ""
    v.refresh_all()
    assert v_token_view.is_marked_divergent(planted)
    assert v_stats.labels["baseline"].text() == stats.labels["baseline"].text()


def test_stopped_run_is_compared_over_its_own_tokens(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    panel.baseline.setChecked(True)
    assert model.commands.start_run(paused=True, first_action="window")
    wait_state(qtbot, w, PAUSED)
    with qtbot.waitSignal(model.runFinished, timeout=120_000) as blocker:
        model.commands.stop()
    assert blocker.args[0] == "stopped"
    w.refresh_all()
    b = model.session.baseline
    n = len(model.session.tokens)
    assert 0 < n < 48
    assert len(b["plain_token_ids"]) == n
    if not b["identical"]:  # batch arithmetic may flip a near-tie: reported, never hidden
        assert b["divergence"]["margin"] < 1.0, b["divergence"]


def test_stop_cancels_the_comparison_with_plain_decoding(qtbot, runtime, tmp_path):
    """Stop is pressed while a decode of the comparison is held in the runtime: the
    comparison is cancelled there, however short the run and however fast the CPU."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=8, example="open-ended")
    model = w.model
    panel = part(w, ControlPanel)
    panel.baseline.setChecked(True)
    stopped = []
    model.worker.baselineReady.connect(lambda result, error: stopped.append((result, error)))

    def comparing() -> bool:  # on the engine thread: the run is over, its comparison decodes
        gen = model.worker.generation
        return gen is not None and gen.finished and not model.worker.running

    hold = DecodeHold(runtime, when=comparing)
    with hold.installed(), qtbot.waitSignal(model.runFinished, timeout=180_000):
        assert model.commands.start_run()
        qtbot.waitUntil(hold.held.is_set, timeout=120_000)
        qtbot.waitUntil(lambda: "comparing with plain decoding" in model.status_text, timeout=60_000)
        model.commands.stop()
        hold.release()
    assert hold.released
    assert stopped == [(None, "")]  # cancelled: no result, no error dialog
    assert model.session.baseline is None and model.state == IDLE
