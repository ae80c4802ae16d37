"""Engine logic on a fake runtime: repair ordering, dispositions, faults, resume.

Every behaviour here also has a real-model test in test_engine_real.py.
"""

import pytest

from inspector.engine import Fault, FaultPlan, Generation, GenerationObserver, GenerationSettings, RuntimeScheduler
from inspector.engine.classify import ACCEPTED, BONUS, FROM_PREFILL, PLAIN
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
    # start() committed 103 from the prefill; window 1 verifies [103, 104, 105, 106]: bonus 107
    assert r.committed_tokens == (104, 105, 106, 107)
    assert r.correction_or_boundary_token == r.committed_tokens[-1] == 107
    assert rt.kv_length(g.session_id) == r.canonical_position == r.base_position + 4


def test_first_mismatch_commits_the_correction_and_trims_the_branch():
    rt, src, g = make([[104, 999, 5]])  # current token 103 (from the prefill): 104 right, 999 wrong
    g.start()
    g.step()
    r = g.receipts[0]
    assert (r.disposition, r.accepted_proposal_tokens, r.committed_tokens, r.trimmed_rows) == ("first_mismatch", 1, (104, 105), 2)
    assert r.verification_row_predictions[2:] == (0, 6)  # branch-conditioned, never in the output
    assert g.generated == [103, 104, 105]
    assert rt.kv_length(g.session_id) == r.canonical_position


def test_callback_error_reaches_the_caller_only_after_repair():
    rt, src, g = make([follow(4)], faults=[Fault("callback_error", 1, 2)])
    g.start()
    with pytest.raises(InjectedCallbackError):
        g.step()
    assert kinds(g, 1) == ["verify", "commit", "commit", "repair", "error", "discard"]
    assert rt.kv_length(g.session_id) == g.canonical_position == 3 + 2  # base 3 (the prompt) + 2 committed
    assert src.discarded == [(b"p0", "execution_failed")]
    assert g.discards[0].partial.committed_tokens == (104, 105)


def test_cancel_before_third_commit_of_a_full_accept_trims_to_base_plus_two():
    rt, src, g = make([follow(4)], faults=[Fault("cancel", 1, 3)])
    g.start()
    with pytest.raises(RequestCancelled):
        g.step()
    assert "trim 5" in rt.calls and "retire" not in rt.calls
    assert rt.kv_length(g.session_id) == 3 + 2  # base 3 (the prompt) + the 2 tokens committed
    assert kinds(g, 1)[-3:] == ["repair", "error", "discard"]


def test_failed_trim_retires_the_session_and_resume_continues_on_a_new_one():
    rt, src, g = make([[104, 999], follow(2)], max_new=6, faults=[Fault("trim_failure")])
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
    assert g.generated == [103, 104] and g.plain_steps == 1  # 103 from the prefill, 104 from the plain step
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
    assert g.generated == [103, 104] and g.plain_steps == 1 and rt.kv_length(g.session_id) == g.canonical_position


def test_max_new_tokens_inside_a_long_proposal_emits_exactly_that_many():
    for n in (1, 2, 3):
        rt, src, g = make([follow(10)] * 3, max_new=n)
        g.run()
        assert len(g.generated) == n and g.finish_reason == "length"


def test_eog_inside_an_accepted_run_ends_the_output_there():
    rt, src, g = make([follow(6)], eog=(105,))
    g.run()
    assert g.generated == [103, 104, 105] and g.finish_reason == "eog"
    assert g.receipts[0].disposition == "stopped" and g.receipts[0].committed_tokens == (104, 105)


def test_a_failing_report_is_logged_never_fatal():
    rt, src, g = make([follow(2)])

    def boom(receipt):
        raise RuntimeError("report failed")

    src.report = boom
    g.run()
    assert g.finish_reason == "length"


def test_a_sources_begin_sees_the_prompt_once_before_its_first_query_inside_the_prefill_time():
    rt, src, g = make([follow(2)])
    calls = []
    src.begin = lambda prompt: calls.append((tuple(prompt), len(src.proposals)))
    g.start()
    assert calls == [((100, 101, 102), 1)]  # the prompt, before the one proposal was asked for
    assert g.decode_elapsed_us == 0 and g.prefill_elapsed_us >= 0
    g.run()
    assert len(calls) == 1 and g.receipts[0].accepted_proposal_tokens == 2


def test_a_failing_begin_is_logged_and_the_run_goes_on(caplog):
    rt, src, g = make([follow(2)])

    def boom(prompt):
        raise RuntimeError("begin failed")

    src.begin = boom
    g.run()
    assert g.finish_reason == "length" and g.receipts[0].accepted_proposal_tokens == 2
    assert "failed in begin()" in caplog.text


def test_proposals_are_capped_so_the_verify_batch_fits_the_context():
    rt, src, g = make([lambda req: [0] * req.max_proposal_tokens] * 50, max_new=100, n_ctx=12, prompt=(1, 2, 3))
    g.run()
    assert g.finish_reason == "context_full"
    assert g.canonical_position == 12 and rt.kv_length(g.session_id) == 12


def test_a_cancel_added_while_holding_before_a_commit_fires_at_that_very_commit():
    """The GUI's "cancel at next commit" pressed while stepping token by token."""
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
    assert g.generated == [103, 104]  # the prefill's token and window 1's row 0
    assert kinds(g, 1) == ["verify", "commit", "repair", "error", "discard"]



def test_an_observer_set_after_the_generation_was_made_hears_of_its_discards():
    rt, src, g = make([follow(4)])
    heard = []

    class Listens(GenerationObserver):
        def before_commit(self, window, row, token, position):
            if window == 1 and row == 1:
                g.faults.add(Fault("cancel"))

        def on_discard(self, discard):
            heard.append(discard.reason)

    g.observer = Listens()
    g.start()
    g._ctx.before_commit = g.observer.before_commit
    with pytest.raises(RequestCancelled):
        g.step()
    assert heard == [d.reason for d in g.discards] and len(heard) == 1

def test_fault_spec_without_a_token_means_the_next_commit_token():
    assert Fault.parse("cancel").token is None and Fault.parse("cancel@3").window == 3
    assert Fault.parse("callback_error@2:4") == Fault("callback_error", 2, 4)


# -- the first token: committed by start() from the prefill's last row (SPEC "Prefill and the first token")
def test_start_prefills_the_whole_prompt_and_commits_the_first_token_with_outcome_prefill():
    rt, src, g = make([follow(3)])
    g.start()
    assert rt.calls == ["trim 0", "decode 3@0"]  # the whole prompt in one batch, no other decode
    assert g.generated == [103] and g.tokens[-1] == 103  # the prefill's prediction is the current token
    assert kinds(g) == ["prefill", "commit"]
    prefill, commit = g.events
    assert (prefill.token, prefill.row, prefill.position, prefill.window) == (103, 0, 3, None)
    assert prefill.probabilities is not None and prefill.probabilities.row(0, (), (103,)).predicted == 103
    assert prefill.probabilities.row(0, (), (103,)).top[0][0] == 103
    assert (commit.token, commit.window, commit.row, commit.position) == (103, None, 0, 3)
    assert commit.detail == FROM_PREFILL == "prefill"
    assert rt.kv_length(g.session_id) == g.kv_length() == 3 == g.prompt_token_count == g.canonical_position
    assert g.decode_step == 0 and g.plain_steps == 0 and g.window_count == 0 and not g.receipts
    assert len(src.proposals) == 1  # the source was not asked for the first token
    g.step()  # the first window proposes after the first token, verifying from position 3
    r = g.receipts[0]
    assert r.base_position == 3 and r.proposal_token_ids == (104, 105, 106) and r.decode_step == 0
    assert g.generated == [103, 104, 105, 106, 107] and g.decode_step == 1


def test_max_new_tokens_one_gives_only_the_prefills_token_with_finish_reason_length_and_no_decode_step():
    rt, src, g = make([follow(3)], max_new=1)
    assert g.run() == "length"
    assert g.generated == [103] and g.finish_reason == "length"
    assert g.decode_step == 0 and g.plain_steps == 0 and not g.receipts and not g.discards
    assert rt.calls == ["trim 0", "decode 3@0"] and len(src.proposals) == 1
    assert kinds(g) == ["prefill", "commit", "finish"]
    assert rt.kv_length(g.session_id) == g.canonical_position == 3


def test_an_observer_stopping_on_the_first_token_finishes_callback_stop_in_start():
    rt, src, g = make([follow(3)])
    seen = []

    class StopAtOnce(GenerationObserver):
        def on_token(self, token, text):
            seen.append((token, text))
            return True

    g.observer = StopAtOnce()
    g.start()
    assert g.finished and g.finish_reason == "callback_stop"
    assert seen == [(103, "103 ")] and g.generated == [103]
    assert g.run() == "callback_stop" and g.decode_step == 0 and g.plain_steps == 0
    assert rt.kv_length(g.session_id) == g.canonical_position == 3


def test_an_end_of_generation_first_token_finishes_eog_without_a_decode_step():
    rt, src, g = make([follow(3)], eog=(103,))
    assert g.run() == "eog"
    assert g.generated == [103] and g.decode_step == 0 and g.plain_steps == 0 and not g.receipts
    assert g.text.text == ""  # the end-of-generation token has no text
    assert kinds(g) == ["prefill", "commit", "finish"]


def test_injected_faults_never_fire_on_the_first_token_and_wait_for_the_first_decode_step():
    rt, src, g = make([], faults=[Fault("cancel"), Fault("callback_error")])
    g.start()
    assert g.generated == [103] and not g.errors
    assert len(g.faults.pending()) == 2 and not g.faults.fired
    with pytest.raises(RequestCancelled):
        g.step()  # the plain step after it takes the cancel
    assert g.generated == [103] and g.plain_steps == 0


def test_a_cancel_before_the_first_tokens_commit_leaves_nothing_and_resume_starts_over_to_the_same_stream():
    proposals = [follow(3), None, lambda req: [req.tokens[-1] + 1, 999]]
    _rt, _src, whole = make(list(proposals), max_new=10)
    whole.run()
    rt, src, g = make(list(proposals), max_new=10)
    held = []

    class CancelOnce(GenerationObserver):
        def before_commit(self, window, row, token, position):
            held.append((window, row, token, position))
            if len(held) == 1:
                g.cancel()

    g.observer = CancelOnce()
    with pytest.raises(RequestCancelled):
        g.start()
    assert held == [(None, 0, 103, 3)]  # held before the first token's commit, at position 3
    assert g.generated == [] and g.tokens == [100, 101, 102] and not g.finished
    assert rt.kv_length(g.session_id) == g.kv_length() == 0  # the prompt left the KV cache
    assert kinds(g) == ["prefill", "error"] and g.errors == ["request cancelled"]
    assert g.decode_step == 0 and g.plain_steps == 0 and len(src.proposals) == 3
    g.resume()  # starts over: prefills the prompt again and commits the first token
    assert g.generated == [103] and rt.kv_length(g.session_id) == 3
    assert g.run() == whole.finish_reason == "length"
    assert g.generated == whole.generated == [103, 104, 105, 106, 107, 108, 109, 110, 111, 112]
    assert [r.committed_tokens for r in g.receipts] == [r.committed_tokens for r in whole.receipts]
    assert g.plain_steps == whole.plain_steps and rt.kv_length(g.session_id) == g.canonical_position


def test_the_session_record_shows_the_first_token_as_from_the_prefill_and_not_as_a_plain_step():
    from inspector.session.session_record import SessionRecord
    from inspector.session.entries import END

    rt, src, g = make([follow(2)], max_new=5)
    g.start()
    rec = SessionRecord()
    rec.extend(g.events)
    assert rec.kv_length == 3 and rec.plain_steps == 0
    first = rec.tokens[0]
    assert (first.token, first.window, first.row, first.position, first.proposed, first.outcome) == \
        (103, None, 0, 3, None, FROM_PREFILL)
    assert rec.token_probabilities(first).predicted == 103  # the prefill row's figures
    n = len(g.events)
    g.run()  # window 1: 104, 105 accepted, 106 bonus; then one plain step: 107 (max 5 tokens)
    rec.extend(g.receipts)
    rec.extend(g.events[n:])
    assert [(t.token, t.outcome) for t in rec.tokens] == [(103, FROM_PREFILL), (104, ACCEPTED), (105, ACCEPTED),
                                                           (106, BONUS), (107, END)]
    assert rec.tokens[4].window is None and g.events[-2].detail == PLAIN  # the last commit: a plain step
    assert rec.plain_steps == g.plain_steps == 1 and rec.summary().plain_steps == 1
    assert rec.summary().generated_tokens == 5 and rec.finish_reason == "length"


def test_an_unfired_fault_says_which_condition_the_run_never_met():
    from inspector.engine.faults import Fault, ordinal

    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]
    f = Fault("callback_error", token=20)
    assert f.describe() == "callback_error at commit token 20 of a window (the 20th token one window commits)"
    assert f.why_unfired(windows=5, most_committed=9).endswith("no window committed 20 tokens (the most one committed: 9)")
    assert "verified 2 window(s), not 3" in Fault("cancel", window=3).why_unfired(windows=2, most_committed=4)
    assert "no window needed a repair" in Fault("trim_failure").why_unfired(windows=4, most_committed=4)
    assert "no proposal window ran" in Fault("position_drift").why_unfired(windows=0, most_committed=0)
