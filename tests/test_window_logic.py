"""Engine logic on a fake runtime: repair ordering, dispositions, faults, resume.

Every behaviour here also has a real-model test in test_engine_real.py.
"""

import pytest

from inspector.engine import Fault, FaultPlan, Generation, GenerationSettings, RuntimeScheduler
from inspector.engine.errors import InjectedCallbackError, RepairFailed, RequestCancelled

from fake_runtime import FakeRuntime, ListSource, follow


def make(proposals, max_new=8, faults=(), prompt=(100, 101, 102), **kw):
    rt = FakeRuntime(**kw)
    src = ListSource(proposals)
    g = Generation(RuntimeScheduler(rt), src, list(prompt), GenerationSettings(max_new_tokens=max_new, draft_max=16),
                   faults=FaultPlan(list(faults)))
    return rt, src, g


def kinds(g, window=None):
    return [e.kind for e in g.events if window is None or e.window == window]


def test_full_accept_commits_proposal_plus_bonus_and_retires_instead_of_trimming():
    rt, src, g = make([follow(3)])
    g.start()
    g.step()
    r = g.receipts[0]
    assert (r.disposition, r.accepted_proposal_tokens, r.canonical_prediction_count, r.trimmed_rows) == ("full_accept", 3, 4, 0)
    assert r.repair == "retire" and r.runtime_lock_acquires == 2
    assert r.correction_or_boundary_token == r.committed_tokens[-1] == 106
    assert rt.kv_length(g.session_id) == r.canonical_position == r.base_position + 4


def test_first_mismatch_commits_the_correction_and_trims_the_branch():
    rt, src, g = make([[103, 999, 5]])
    g.start()
    g.step()
    r = g.receipts[0]
    assert (r.disposition, r.accepted_proposal_tokens, r.committed_tokens, r.trimmed_rows) == ("first_mismatch", 1, (103, 104), 2)
    assert r.verification_row_predictions[2:] == (0, 6)  # branch-conditioned, never in the output
    assert g.generated == [103, 104]
    assert rt.kv_length(g.session_id) == r.canonical_position


def test_callback_error_reaches_the_caller_only_after_repair():
    rt, src, g = make([follow(4)], faults=[Fault("callback_error", 1, 2)])
    g.start()
    with pytest.raises(InjectedCallbackError):
        g.step()
    assert kinds(g, 1) == ["verify", "commit", "commit", "repair", "error", "discard"]
    assert rt.kv_length(g.session_id) == g.canonical_position == 2 + 2
    assert src.discarded == [(b"p0", "execution_failed")]
    assert g.discards[0].partial.committed_tokens == (103, 104)


def test_cancel_before_third_commit_of_a_full_accept_trims_to_base_plus_two():
    rt, src, g = make([follow(4)], faults=[Fault("cancel", 1, 3)])
    g.start()
    with pytest.raises(RequestCancelled):
        g.step()
    assert "trim 4" in rt.calls and "retire" not in rt.calls
    assert rt.kv_length(g.session_id) == 2 + 2
    assert kinds(g, 1)[-3:] == ["repair", "error", "discard"]


def test_failed_trim_retires_the_session_and_resume_continues_on_a_new_one():
    rt, src, g = make([[103, 999], follow(2)], max_new=6, faults=[Fault("trim_failure")])
    g.start()
    with pytest.raises(RepairFailed, match="session was retired"):
        g.step()
    assert g.session_retired and g.kv_length() is None
    g.resume()
    g.run()
    assert g.generated == [103, 104, 105, 106, 107, 108]
    assert rt.kv_length(g.session_id) == g.canonical_position


def test_position_drift_discards_position_mismatch_and_the_plain_step_repairs_first():
    rt, src, g = make([follow(3)], faults=[Fault("position_drift")])
    g.start()
    g.step()
    assert [d.reason for d in g.discards] == ["position_mismatch"]
    assert g.generated == [103] and g.plain_steps == 1
    assert rt.kv_length(g.session_id) == g.canonical_position


@pytest.mark.parametrize("fault, reason", [
    ("late_proposal", "deadline_exceeded"),
    ("negative_token_id", "invalid_token_id"),
    ("token_id_too_large", "invalid_token_id"),
    ("too_many_tokens", "invalid_token_count"),
])
def test_invalid_or_late_proposals_are_discarded_and_a_plain_step_runs(fault, reason):
    rt, src, g = make([follow(3)], faults=[Fault(fault)])
    g.settings = GenerationSettings(max_new_tokens=8, draft_max=4, proposal_deadline_ms=5)
    g.start()
    g.step()
    assert [d.reason for d in g.discards] == [reason]
    assert src.discarded[0][1] == reason
    assert g.generated == [103] and rt.kv_length(g.session_id) == g.canonical_position


def test_max_new_tokens_inside_a_long_proposal_emits_exactly_that_many():
    for n in (1, 2, 3):
        rt, src, g = make([follow(10)] * 3, max_new=n)
        g.run()
        assert len(g.generated) == n and g.finish_reason == "length"


def test_eog_inside_an_accepted_run_ends_the_output_there():
    rt, src, g = make([follow(6)], eog=(105,))
    g.run()
    assert g.generated == [103, 104, 105] and g.finish_reason == "eog"
    assert g.receipts[0].disposition == "stopped"


def test_a_failing_report_is_logged_never_fatal():
    rt, src, g = make([follow(2)])

    def boom(receipt):
        raise RuntimeError("report failed")

    src.report = boom
    g.run()
    assert g.finish_reason == "length"


def test_proposals_are_capped_so_the_verify_batch_fits_the_context():
    rt, src, g = make([lambda req: [0] * req.max_proposal_tokens] * 50, max_new=100, n_ctx=12, prompt=(1, 2, 3))
    g.run()
    assert g.finish_reason == "context_full"
    assert g.canonical_position == 12 and rt.kv_length(g.session_id) == 12


def test_a_cancel_added_while_holding_before_a_commit_fires_at_that_very_commit():
    """The GUI's "cancel at next commit" pressed while stepping token by token."""
    from inspector.engine import GenerationObserver

    rt, src, g = make([follow(4)])

    class PressCancelAtRow1(GenerationObserver):
        def before_commit(self, window, row, token, position):
            if window == 1 and row == 1:
                g.faults.add(Fault("cancel"))

    g.observer = PressCancelAtRow1()
    g.start()
    g._ctx.before_commit = g.observer.before_commit
    with pytest.raises(RequestCancelled):
        g.step()
    assert g.generated == [103]
    assert kinds(g, 1) == ["verify", "commit", "repair", "error", "discard"]


def test_fault_spec_without_a_token_means_the_next_commit_token():
    assert Fault.parse("cancel").token is None and Fault.parse("cancel@3").window == 3
    assert Fault.parse("callback_error@2:4") == Fault("callback_error", 2, 4)
