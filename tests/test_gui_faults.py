"""Fault buttons: verify -> commits -> repair -> error, KV length = canonical, Resume finishes exactly."""

from __future__ import annotations

import pytest

from inspector.gui import worker as W
from inspector.gui.session_model import SessionData
from inspector.receipts import load_document
from test_gui_support import MAX_TOKENS, example_text, make_window, reference_tokens, wait_state

EXAMPLE = "copy-with-corrections"


@pytest.fixture(scope="module")
def reference(request):
    return {}


def _expected(make_generation, chat_tokens, reference):
    if "tokens" not in reference:
        reference["tokens"] = reference_tokens(make_generation, chat_tokens, example_text(EXAMPLE))
    return reference["tokens"]


def _start_paused(qtbot, w):
    w.step_window_clicked()
    wait_state(qtbot, w, W.PAUSED)
    qtbot.waitUntil(lambda: w.worker.generation is not None and w.worker.generation.decode_step == 1)


@pytest.mark.parametrize("button, token", [
    ("fault_cancel", None),
    ("fault_callback", 2),
    ("fault_trim", None),
])
def test_fault_button_repairs_then_reports_and_resume_finishes(qtbot, runtime, tmp_path, make_generation,
                                                               chat_tokens, reference, button, token):
    expected = _expected(make_generation, chat_tokens, reference)
    w = make_window(qtbot, runtime, tmp_path)
    _start_paused(qtbot, w)
    if token is not None:
        w.panel.fault_token.setValue(token)
    getattr(w.panel, button).click()
    assert w.worker.faults.pending()
    with qtbot.waitSignal(w.errorShown, timeout=120_000):
        w.run_clicked()
    assert w.state == W.ERROR
    g = w.worker.generation
    info = w.error_info
    # Repaired state: KV length = canonical position (or the session retired, and says so).
    if button == "fault_trim":
        assert info["retired"] and info["kv_length"] is None
        assert "retired" in w.banner.text()
    else:
        assert info["kv_length"] == info["canonical_position"] == g.canonical_position
        assert "repaired" in w.banner.text()
    # Event order of the failed window: verify, commit..., repair, error.
    qtbot.waitUntil(lambda: any(e.kind == "error" for e in w.session.events))
    err = next(e for e in w.session.events if e.kind == "error")
    window_events = [e.kind for e in w.session.events if e.window == err.window and e.seq <= err.seq]
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
        assert err.window in w.session.failed_windows
        # Numbered as in the event log: a row marked "failed (no receipt)".
        m = w.window_detail.model
        row = m.row_of(err.window)
        assert row is not None and m.index(row, 1).data() == "failed (no receipt)"
        assert m.index(row, 0).data() == str(err.window)
    assert w.panel.resume.isEnabled()
    with qtbot.waitSignal(w.runFinished, timeout=180_000) as blocker:
        w.resume_clicked()
    assert blocker.args[1]["kv_length"] == blocker.args[1]["canonical_position"]
    assert list(g.generated) == expected
    assert [t.token for t in w.session.tokens] == expected
    # The exported receipts keep the failed window; opened again it shows the same state.
    out = tmp_path / "fault.json"
    with qtbot.waitSignal(w.files.exported, timeout=60_000):
        w.files.export_receipts(str(out))
    reopened = SessionData.from_document(load_document(out))
    assert set(reopened.failed_windows) == set(w.session.failed_windows)
    assert [t.token for t in reopened.tokens] == expected


def test_position_drift_is_discarded_and_resynced(qtbot, runtime, tmp_path, make_generation, chat_tokens, reference):
    expected = _expected(make_generation, chat_tokens, reference)
    w = make_window(qtbot, runtime, tmp_path)
    _start_paused(qtbot, w)
    w.panel.fault_drift.click()
    with qtbot.waitSignal(w.runFinished, timeout=180_000) as blocker:
        w.run_clicked()
    reasons = [d.reason for d in w.session.discards]
    assert "position_mismatch" in reasons
    assert blocker.args[1]["kv_length"] == blocker.args[1]["canonical_position"]
    assert [t.token for t in w.session.tokens] == expected
    assert len(expected) == MAX_TOKENS or w.worker.generation.finish_reason == "eog"
