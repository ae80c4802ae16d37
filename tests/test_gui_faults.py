"""Fault buttons: verify -> commits -> repair -> error, KV length = canonical, Resume finishes exactly.

Whatever the model says: the runs propose the target's own continuation with a
surely rejected token every other window (``follow_window``) on the target with
end-of-generation banned, so after the first (paused) step the next window
commits 2 tokens and is trimmed after a mismatch, and the run goes on to
``MAX_TOKENS``; the expected output is the target's plain greedy one.
"""

from __future__ import annotations

import pytest

from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.plots.statistics import StatsView
from inspector.gui.windows.detail import WindowDetail
from inspector.gui.shell.banner import Banner
from inspector.receipts import load_document
from inspector.session.record_from_file import record_from_document
from inspector.session.run_states import ERROR, IDLE, PAUSED
from test_gui_support import part, MAX_TOKENS, assert_same_greedy_output, example_text, follow_window, plain_tokens, \
    wait_state

EXAMPLE = "copy-with-corrections"


@pytest.fixture(scope="module")
def reference(request):
    return {}


def _expected(runtime, reference):
    if "tokens" not in reference:
        reference["tokens"] = plain_tokens(runtime, example_text(EXAMPLE), MAX_TOKENS, end_of_turn=False)
    return reference["tokens"]


def _same_output(runtime, expected, observed) -> bool:
    """Equal to the plain greedy output, or a reported near-tie (then not compared further)."""
    assert_same_greedy_output(runtime, example_text(EXAMPLE), expected, observed, end_of_turn=False)
    return list(observed) == list(expected)


def _start_paused(qtbot, w):
    model = w.model
    model.commands.step_window()
    wait_state(qtbot, w, PAUSED)
    qtbot.waitUntil(lambda: model.worker.generation is not None and model.worker.generation.decode_step == 1)


@pytest.mark.parametrize("button, token", [
    ("fault_cancel", None),
    ("fault_callback", 2),
    ("fault_trim", None),
])
def test_fault_button_repairs_then_reports_and_resume_finishes(qtbot, runtime, tmp_path, monkeypatch, reference,
                                                               button, token):
    expected = _expected(runtime, reference)
    assert len(expected) == MAX_TOKENS
    w = follow_window(qtbot, monkeypatch, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    window_detail = part(w, WindowDetail)
    stats = part(w, StatsView)
    _start_paused(qtbot, w)
    if token is not None:
        panel.fault_token.setValue(token)
    getattr(panel, button).click()
    assert model.worker.faults.pending()
    with qtbot.waitSignal(model.errorShown, timeout=120_000):
        model.commands.run()
    assert model.state == ERROR
    stats.refresh()
    assert stats.labels["finish"].text() == "— (stopped by an error: Resume continues it)"  # issue 54 item 9
    g = model.worker.generation
    info = w.error_info
    # Repaired state: KV length = canonical position (or the session retired, and says so).
    if button == "fault_trim":
        assert info.retired and info.kv_length is None
        assert "retired" in model.banner_html
    else:
        assert info.kv_length == info.canonical_position == g.canonical_position
        assert "repaired" in model.banner_html
    # Event order of the failed window: verify, commit..., repair, error.
    qtbot.waitUntil(lambda: any(e.kind == "error" for e in model.session.events))
    err = next(e for e in model.session.events if e.kind == "error")
    window_events = [e.kind for e in model.session.events if e.window == err.window and e.seq <= err.seq]
    assert err.window == 2, "every step is a window: the fault fires in the one after the paused step"
    if err.window is not None:
        assert window_events[0] == "verify"
        assert window_events[-2:] == ["repair", "error"]
        assert set(window_events[1:-2]) <= {"commit"}
        if button == "fault_callback":
            assert window_events.count("commit") == token
        if button == "fault_cancel":
            assert window_events.count("commit") == 0
        # The failed window appears in the window table with its repaired state.
        w.refresh_all()
        assert err.window in model.session.failed_windows
        # Numbered as in the event log: a row marked "failed (no receipt)", or "cancelled (no receipt)" for a
        # cancellation (as a Stop ends a window: repaired, not a failure).
        m = window_detail.model
        row = m.row_of(err.window)
        label = "cancelled (no receipt)" if button == "fault_cancel" else "failed (no receipt)"
        assert row is not None and m.index(row, 1).data() == label
        assert model.session.window(err.window).discard.cancelled == (button == "fault_cancel")
        assert m.index(row, 0).data() == str(err.window)
    assert panel.resume.isEnabled()
    with qtbot.waitSignal(model.runFinished, timeout=180_000) as blocker:
        model.commands.resume()
    assert blocker.args[1].kv_length == blocker.args[1].canonical_position
    assert [t.token for t in model.session.tokens] == list(g.generated)
    _same_output(runtime, expected, g.generated)
    # The exported receipts keep the failed window; opened again it shows the same state.
    out = tmp_path / "fault.json"
    with qtbot.waitSignal(model.exported, timeout=60_000):
        model.commands.export_receipts_file(str(out))
    reopened = record_from_document(load_document(out))
    assert set(reopened.failed_windows) == set(model.session.failed_windows)
    assert [t.token for t in reopened.tokens] == list(g.generated)


def test_position_drift_is_discarded_and_resynced(qtbot, runtime, tmp_path, monkeypatch, reference):
    expected = _expected(runtime, reference)
    w = follow_window(qtbot, monkeypatch, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    _start_paused(qtbot, w)
    panel.fault_drift.click()
    with qtbot.waitSignal(model.runFinished, timeout=180_000) as blocker:
        model.commands.run()
    reasons = [d.reason for d in model.session.discards]
    assert "position_mismatch" in reasons
    assert blocker.args[1].kv_length == blocker.args[1].canonical_position
    assert [t.token for t in model.session.tokens] == list(model.worker.generation.generated)
    _same_output(runtime, expected, model.worker.generation.generated)
    assert len(model.session.tokens) == MAX_TOKENS


def test_an_armed_fault_that_never_fires_is_named_at_the_end_with_the_reason(qtbot, runtime, tmp_path):
    """"Fail callback at token 64" on a 12-token run: arming says what 64 counts; the run's end says the
    fault never fired and why (the most tokens a window committed, from the run's own receipts)."""
    from test_gui_support import make_window

    w = make_window(qtbot, runtime, tmp_path, max_tokens=12, ngram_min=1)
    model = w.model
    panel = part(w, ControlPanel)
    w.resize(1024, 640)  # the small screen of the trial, where the note was cut to "…"
    panel.fault_token.setValue(64)
    panel.fault_callback.click()
    assert model.state == IDLE and w.run.armed_faults.pending()
    w.redraw()
    armed = panel.pending_faults.text()
    assert "armed for the next run" in armed and "commit token 64" in armed and "64th token one window commits" in armed
    with qtbot.waitSignal(model.runFinished, timeout=120_000):
        model.commands.run()
    most = max((len(r.committed_tokens) for r in model.session.receipts), default=0)
    assert most < 64
    banner, tip = model.banner_html, model.banner_tip
    assert "<br>Not fired: callback_error at commit token 64" in banner, banner  # one line, cut to fit
    why = f"no window committed 64 tokens (the most one committed: {most})"
    assert why in tip, tip
    # Cut to one line at 1024 pixels, it ends with a details link that shows the whole text (a trial never read
    # a tooltip's rest).
    assert "href='details'" in banner and why not in banner, banner
    banner_label = part(w, Banner)
    banner_label.linkActivated.emit("details")
    assert banner_label.details.isVisible() and why in banner_label.details.text()
    banner_label.details.close()


def test_arming_a_fault_moves_no_button(qtbot, runtime, tmp_path):
    """Issue 54 item 8: the red "armed for the next run" note has its room reserved: arming a fault leaves Run
    and Step where they were, so a click meant for Run never lands on Step."""
    from test_gui_support import make_window

    w = make_window(qtbot, runtime, tmp_path, max_tokens=12, ngram_min=1)
    panel = part(w, ControlPanel)
    w.show()
    qtbot.waitExposed(w)
    w.redraw()
    before = {name: b.mapTo(w, b.rect().topLeft()) for name, b in (("run", panel.run),
                                                                   ("step", panel.step_window))}
    panel.fault_token.setValue(64)
    panel.fault_callback.click()
    w.redraw()
    qtbot.wait(50)
    assert panel.pending_faults.text()
    after = {name: b.mapTo(w, b.rect().topLeft()) for name, b in (("run", panel.run),
                                                                  ("step", panel.step_window))}
    assert after == before
