"""The Audit window (issue 39, item 1; ``inspector.gui.audit``): Analysis > Audit the difference from plain
decoding runs ``inspector.session.audit_run`` on the engine thread for the shown run, live or opened.

A divergence is planted in the speculative run (its prediction for one generated token replaced while
the run goes, as tests/test_gui_baseline.py does): the audit finds it at that token, no verify width
picks the planted token, so the verdict is "not explained" and loud; the same holds for the receipts
exported and opened again (the KV prefix then rebuilt from its windows too). A plain run equals plain
decoding, and the window says so; Cancel stops an audit. No particular word of the model is asserted.
"""

from __future__ import annotations

import html

from inspector.gui.look.banner_colours import BANNER_DONE, BANNER_ERROR
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.tokens.token_view import TokenView
from inspector.session.audit import NOT_EXPLAINED, RUN_PREFIX
from inspector.session.run_states import BUSY, IDLE
from inspector.sources.registry import PLAIN
from test_gui_support import part, DecodeHold, example_text, make_window, open_receipts, plain_tokens, run_to_end, \
    run_with_planted_divergence

PLANTED = 6
"""Generated-token index of the planted divergence (or the plain run's last token when shorter)."""
MAX_TOKENS = 14
DRAFT_MAX = 3
"""The runs' draft max: the audit tries verify widths 1..DRAFT_MAX + 1."""


def audit(qtbot, w, press=None) -> tuple:
    """Press Analysis > Audit… (or ``press()``) and wait for the audit to end; returns (``AuditShown`` or None,
    message)."""
    with qtbot.waitSignal(w.analysis.audit.audited, timeout=300_000) as blocker:
        (press or w.analysis.audit.act_audit.trigger)()
    return tuple(blocker.args)


def test_a_planted_divergence_is_audited_in_the_window_live_and_opened(qtbot, runtime, tmp_path):
    text = example_text("copy-with-corrections")
    planted = min(PLANTED, len(plain_tokens(runtime, text, MAX_TOKENS)) - 1)
    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX_TOKENS)
    model = w.model
    panel = part(w, ControlPanel)
    token_view = part(w, TokenView)
    panel.draft_max.setValue(DRAFT_MAX)
    panel.baseline.setChecked(True)  # compared with plain decoding after the run: the audit reuses it
    shown, message = audit(qtbot, w)  # no run yet: refused in one line, the engine left alone
    assert shown is None and "no run yet" in message and model.state == IDLE
    assert "no run yet" in w.analysis.audit.view.verdict_text()

    row_position = len(runtime.prompt_tokens(text)) - 1 + planted  # the row that predicts generated[planted]
    run_with_planted_divergence(qtbot, w, runtime, row_position)
    planted_token = model.session.generated_token_ids[planted]
    tv = token_view
    assert f"token {planted}" in tv.baseline_text() and "Audit this difference" in tv.baseline_text()
    shown, message = audit(qtbot, w, lambda: tv.baseline_label.linkActivated.emit("audit"))  # the line's link
    assert message == "" and model.state == IDLE
    a = shown.audit
    assert not a.identical and a.result.position == planted
    assert a.result.speculative_token == planted_token
    assert a.result.plain_token == (planted_token - 1) % runtime.n_vocab
    assert a.result.verdict.startswith(NOT_EXPLAINED)
    v = w.analysis.audit.view
    assert not v.isHidden()
    assert f"generated token {planted}" in v.where.text()
    assert html.escape(repr(shown.text(planted_token))) in v.where.text()  # both tokens, as text
    assert html.escape(repr(shown.text(a.result.plain_token))) in v.where.text()
    assert NOT_EXPLAINED in v.verdict_text() and BANNER_ERROR in v.verdict.styleSheet()  # loud
    rows = v.rows()
    assert [r[0] for r in rows] == [str(k) for k in range(1, DRAFT_MAX + 2)]  # widths 1..draft max + 1
    assert all(r[3].endswith("logits") for r in rows)
    assert all(repr(shown.text(a.result.plain_token)) in r[2] for r in rows)  # every width: plain decoding's pick

    # The receipts, exported and opened again: the same verdict, the KV also rebuilt from the run's windows.
    out = tmp_path / "planted.json"
    with qtbot.waitSignal(model.exported, timeout=60_000):
        model.commands.export_receipts_file(str(out))
    assert open_receipts(qtbot, w, out) == ""
    assert model.session.origin == "document"
    opened, message = audit(qtbot, w)
    assert message == ""
    assert opened.audit.result.position == planted and opened.audit.result.verdict.startswith(NOT_EXPLAINED)
    assert len(opened.audit.tried) == 2 and opened.audit.result.prefix == RUN_PREFIX
    assert "With the KV as plain decoding built it" in v.note.text()


def test_a_plain_run_is_identical_to_plain_decoding_and_the_window_says_so(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=8, example="open-ended")
    model = w.model
    panel = part(w, ControlPanel)
    panel.source.setCurrentText(PLAIN)
    run_to_end(qtbot, w)
    shown, message = audit(qtbot, w)
    assert message == "" and shown.audit.identical
    assert list(shown.audit.reference_tokens) == model.session.generated_token_ids
    v = w.analysis.audit.view
    assert "Identical to plain decoding" in v.verdict_text() and BANNER_DONE in v.verdict.styleSheet()
    assert v.table.isHidden() and v.rows() == []

    # Cancel while the engine thread is surely in the middle of the audit (one of its decodes held): the GUI
    # thread stays free (the window busy, the progress shown), and the audit stops without a result.
    hold = DecodeHold(runtime, when=lambda: w.analysis.audit.busy)
    with hold.installed():
        w.analysis.audit.act_audit.trigger()
        qtbot.waitUntil(hold.held.is_set, timeout=120_000)
        assert model.state == BUSY and not v.progress.isHidden() and not v.cancel.isHidden()
        with qtbot.waitSignal(w.analysis.audit.audited, timeout=120_000) as blocker:
            v.cancel.click()
            hold.release()
    assert tuple(blocker.args) == (None, "cancelled") and model.state == IDLE
    assert "cancelled" in v.verdict_text() and v.progress.isHidden()
