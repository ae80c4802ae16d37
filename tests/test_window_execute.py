"""``execute_window`` driven directly on the fake runtime with a recording scheduler and a scripted
clock (issue 42): every event, lock operation, receipt field and message pinned to values worked out
by hand. The fake target's greedy prediction after token t is t + 1; the window's current token is 103
at KV position 3 (the prompt 100, 101, 102 is in the KV cache)."""

import threading

import numpy as np

from inspector.engine import window as W
from inspector.engine.errors import DecodeAborted, PositionMismatch, RepairFailed, RequestCancelled
from inspector.engine.faults import Fault, FaultPlan
from inspector.engine.proposal import Proposal
from inspector.engine.scheduler import Timed
from inspector.engine.settings import SamplingSettings
from inspector.engine.window import WindowContext, WindowTrace, execute_window, judged_rows

from fake_runtime import FakeRuntime


class Runtime(FakeRuntime):
    """The fake target, recording the abort event each decode gets and the checkpoint retired, with
    ``decode_logits`` for the rejection rule: after token t, t + 1 has logit 30 (probability 1)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.aborts = []

    def decode_rows(self, sid, tokens, position, abort=None):
        self.aborts.append(abort)
        return super().decode_rows(sid, tokens, position, abort)

    def decode_logits(self, sid, tokens, position, abort=None):
        self.aborts.append(abort)
        self.calls.append(f"logits {len(tokens)}@{position}")
        super().decode_rows(sid, tokens, position, abort)
        logits = np.zeros((len(tokens), self.n_vocab), dtype=np.float32)
        for i, t in enumerate(tokens):
            logits[i, (t + 1) % self.n_vocab] = 30.0
        return logits

    def retire_checkpoint(self, sid, start, count):
        self.calls.append(f"retire {sid} {start} {count}")


class Scheduler:
    """Records (kind, session) of each operation; the n-th operation waited 10·n µs and held 100·n µs."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.ops = []

    def execute(self, kind, sid, op):
        self.ops.append((kind, sid))
        value = op(self.runtime)
        n = len(self.ops)
        return Timed(value, 10 * n, 100 * n)


# perf_counter_ns as execute_window reads it: t_verify, end of verification, t_repair, end of repair,
# total. Verification 2,500,999 ns -> 2500 us; repair 700,500 ns -> 700 us; total from the window's start at
# 1,000,000 ns: 8,999,999 ns -> 8999 us.
CLOCK = [1_000_000, 3_500_999, 4_000_000, 4_700_500, 9_999_999]


def run(proposal, *, rt=None, faults=(), sampling=None, verification="sample_match", probabilities=True,
        generated=1, max_new=16, on_commit=None, before=None, draft=None, draft_q=None, window=1,
        monkeypatch=None):
    rt = rt or Runtime()
    sid = rt.open_session()
    rt.kv[sid] = [100, 101, 102]
    sched = Scheduler(rt)
    events = []
    ctx = WindowContext(sched, sid, 7, threading.Event(), FaultPlan(list(faults)),
                        lambda *e: events.append(e), before_commit=before, sampling=sampling,
                        verification=verification, rng=np.random.default_rng(0), probabilities=probabilities)
    if monkeypatch is not None:
        clock = iter(CLOCK)
        monkeypatch.setattr(W, "perf_counter_ns", lambda: next(clock))
    trace = WindowTrace()
    commits = []

    def commit(token, row, base):
        commits.append((token, row, base))
        return on_commit(token, row, base) if on_commit else False

    p = Proposal(b"\x01\xab", tuple(proposal), draft_probabilities=draft, draft_token_probabilities=draft_q)
    try:
        out = execute_window(ctx, trace, window_index=window, decode_step=4, source_name="src", current=103,
                             proposal=p, base_position=3, generated=generated, max_new_tokens=max_new,
                             on_commit=commit, proposal_elapsed_us=55, started_ns=1_000_000)
    except Exception as exc:  # returned for the test to check: every test asserts its type
        out = exc
    return out, trace, events, sched, rt, commits, ctx


def test_a_full_accept_retires_the_checkpoint_and_its_receipt_has_every_field_by_hand(monkeypatch):
    r, trace, events, sched, rt, commits, _ = run([104, 105, 106], monkeypatch=monkeypatch)
    assert events == [("verify", 1, None, None, 7, "4 rows"), ("repair", 1, None, None, 7, "retire")]
    assert sched.ops == [("verify", 0), ("retire", 0)]
    assert rt.calls == ["decode 4@3", "retire 0 3 4"]
    assert commits == [(104, 0, 3), (105, 1, 3), (106, 2, 3), (107, 3, 3)]
    assert (trace.base_position, trace.position_after_verification, trace.predictions) == (3, 7, (104, 105, 106, 107))
    assert trace.committed == [104, 105, 106, 107] and trace.repaired and not trace.session_retired
    assert (r.request_id, r.session_id, r.window_index, r.decode_step, r.decision_id, r.source) == \
        (7, 0, 1, 4, "01ab", "src")
    assert (r.disposition, r.proposal_token_ids, r.proposal_token_count, r.verification_rows) == \
        ("full_accept", (104, 105, 106), 3, 4)
    assert (r.accepted_proposal_tokens, r.generated_token_count, r.canonical_prediction_count) == (3, 5, 4)
    assert r.committed_tokens == r.verification_row_predictions == (104, 105, 106, 107)
    assert r.correction_or_boundary_token == 107
    assert (r.base_position, r.position_after_verification, r.canonical_position, r.trimmed_rows) == (3, 7, 7, 0)
    assert (r.proposal_elapsed_us, r.verification_elapsed_us, r.repair_elapsed_us, r.total_elapsed_us) == \
        (55, 2500, 700, 8999)
    # verify: the 1st operation (10 us wait, 100 us hold); retire: the 2nd (20, 200)
    assert (r.runtime_lock_wait_us, r.runtime_lock_hold_us, r.runtime_lock_acquires) == (30, 300, 2)
    assert (r.repair, r.verification_rule) == ("retire", "greedy")
    assert r.probabilities.basis == "softmax" and r.probabilities.draft_q is None


def test_the_verify_decode_gets_the_requests_cancel_event():
    r, *_, rt, _commits, ctx = run([104])
    assert rt.aborts == [ctx.cancel]


def test_a_first_mismatch_trims_to_the_canonical_position_and_says_trim():
    r, trace, events, sched, rt, commits, _ = run([104, 999, 5])
    assert events == [("verify", 1, None, None, 7, "4 rows"), ("repair", 1, None, None, 5, "trim")]
    assert sched.ops == [("verify", 0), ("trim", 0)] and rt.calls == ["decode 4@3", "trim 5"]
    assert trace.repaired and not trace.session_retired and rt.kv_length(0) == 5
    assert (r.disposition, r.committed_tokens, r.correction_or_boundary_token, r.trimmed_rows, r.repair) == \
        ("first_mismatch", (104, 105), 105, 2, "trim")


def test_a_stop_on_the_correction_makes_the_window_stopped_without_a_boundary_token():
    r, trace, events, *_ = run([104, 999], on_commit=lambda token, row, base: row == 1)
    assert (r.disposition, r.committed_tokens, r.correction_or_boundary_token) == ("stopped", (104, 105), None)
    assert r.accepted_proposal_tokens == 1 and r.canonical_position == 5


def test_a_stop_on_the_bonus_token_makes_a_full_accept_stopped():
    r, *_ = run([104, 105], on_commit=lambda token, row, base: row == 2)
    assert (r.disposition, r.committed_tokens, r.correction_or_boundary_token) == ("stopped", (104, 105, 106), None)


def test_a_stop_before_the_last_row_commits_up_to_it_and_trims_the_rest():
    r, trace, events, sched, rt, commits, _ = run([104, 105, 106], on_commit=lambda token, row, base: row == 1)
    assert commits == [(104, 0, 3), (105, 1, 3)]
    assert (r.disposition, r.committed_tokens, r.accepted_proposal_tokens, r.trimmed_rows) == ("stopped", (104, 105), 2, 2)
    assert events[-1] == ("repair", 1, None, None, 5, "trim")


def test_before_commit_sees_window_row_token_and_stream_position():
    seen = []
    run([104, 999], before=lambda *a: seen.append(a), window=3)
    assert seen == [(3, 0, 104, 4), (3, 1, 105, 5)]


def test_a_failed_trim_drops_the_session_and_says_why_in_words():
    rt = Runtime()
    rt.trim_result = False
    err, trace, events, sched, rt, commits, _ = run([104, 999], rt=rt)
    assert isinstance(err, RepairFailed)
    assert str(err) == ("repair failed and the session was retired: trim of session 0 to position 5 failed "
                        "(llama_memory_seq_rm returned false)")
    assert events == [("verify", 1, None, None, 6, "3 rows"),
                      ("repair", 1, None, None, None, "trim failed; session retired")]
    assert sched.ops == [("verify", 0), ("trim", 0)] and rt.calls[-1] == "drop 0" and 0 not in rt.kv
    assert trace.session_retired and not trace.repaired
    assert trace.partial(1, 3).committed_tokens == (104, 105) and trace.partial(1, 3).session_retired


def test_an_injected_trim_failure_of_this_window_is_named_as_injected():
    err, trace, events, sched, rt, *_ = run([104, 999], faults=[Fault("trim_failure", 2)], window=2)
    assert isinstance(err, RepairFailed)
    assert str(err) == ("repair failed and the session was retired: trim of session 0 to position 5 failed "
                        "(injected trim failure)")
    assert "trim 5" not in rt.calls and rt.calls[-1] == "drop 0"  # the runtime was never asked to trim
    assert events[-1] == ("repair", 2, None, None, None, "trim failed; session retired")


def test_a_trim_fault_for_another_window_leaves_this_windows_trim_alone():
    r, trace, events, sched, rt, *_ = run([104, 999], faults=[Fault("trim_failure", 5)], window=2)
    assert r.repair == "trim" and rt.calls[-1] == "trim 5" and events[-1] == ("repair", 2, None, None, 5, "trim")


def test_a_trim_that_leaves_the_wrong_length_drops_the_session_with_a_position_mismatch():
    class TrimShort(Runtime):
        def trim(self, sid, position):
            self.calls.append(f"trim {position}")
            del self.kv[sid][position + 1:]  # one token too many kept
            return True

    err, trace, events, sched, rt, *_ = run([104, 999, 5], rt=TrimShort())
    assert isinstance(err, PositionMismatch) and (err.observed, err.expected) == (6, 5)
    assert str(err) == "repair position mismatch: observed 6, expected 5"
    assert events[-1] == ("repair", 1, None, None, None, "trim failed; session retired")
    assert rt.calls[-1] == "drop 0" and trace.session_retired and not trace.repaired


def test_a_verification_that_leaves_the_wrong_length_raises_without_any_repair():
    class DecodeOneMore(Runtime):
        def decode_rows(self, sid, tokens, position, abort=None):
            out = super().decode_rows(sid, tokens, position, abort)
            self.kv[sid].append(0)
            return out

    err, trace, events, sched, rt, *_ = run([104, 105], rt=DecodeOneMore())
    assert isinstance(err, PositionMismatch) and (err.observed, err.expected) == (7, 6)
    assert str(err) == "verification position mismatch: observed 7, expected 6"
    assert events == [] and sched.ops == [("verify", 0)]
    assert trace.position_after_verification == 7 and trace.predictions == (104, 105, 106)


def test_position_drift_of_this_window_decodes_the_current_token_and_the_window_returns_none():
    out, trace, events, sched, rt, *_ = run([104, 105], faults=[Fault("position_drift", 2)], window=2)
    assert out is None and events == []
    assert sched.ops == [("drift", 0), ("verify", 0)] and rt.calls == ["decode 1@3"]
    assert trace.base_position == 3 and trace.position_after_verification is None


def test_position_drift_for_another_window_does_not_fire():
    r, *_ = run([104, 105], faults=[Fault("position_drift", 5)], window=2)
    assert r.disposition == "full_accept"


def test_an_aborted_verification_trims_back_to_the_base_and_raises_request_cancelled():
    class Aborting(Runtime):
        def decode_rows(self, sid, tokens, position, abort=None):
            super().decode_rows(sid, tokens, position, abort)
            raise DecodeAborted(2, len(tokens), position)

    err, trace, events, sched, rt, *_ = run([104, 105], rt=Aborting(), window=2)
    assert type(err) is RequestCancelled
    assert events == [("repair", 2, None, None, 3, "trim after aborted verification")]
    assert sched.ops == [("verify", 0), ("trim", 0)] and rt.calls[-1] == "trim 3" and rt.kv_length(0) == 3
    assert trace.repaired


def test_a_callback_error_is_raised_after_the_trim_and_the_partial_window_says_what_was_committed():
    def boom(token, row, base):
        if row == 1:
            raise KeyError("consumer")
        return False

    err, trace, events, sched, rt, commits, _ = run([104, 105, 106], on_commit=boom)
    assert isinstance(err, KeyError)
    assert events[-1] == ("repair", 1, None, None, 5, "trim")  # 104 and 105 were committed
    p = trace.partial(1, 3)
    assert (p.window_index, p.base_position, p.position_after_verification, p.canonical_position) == (1, 3, 7, 5)
    assert p.committed_tokens == (104, 105) and p.verification_row_predictions == (104, 105, 106, 107)
    assert not p.session_retired


def test_the_sample_match_rule_summarises_rows_on_the_samplers_basis_and_keeps_the_drafts_q():
    sampling = SamplingSettings(temperature=0.7)
    r, *_ = run([104, 999], sampling=sampling, draft_q=(0.51234, 0.25))
    assert r.verification_rule == "sample_match" and r.committed_tokens == (104, 105)
    assert r.probabilities.basis == "sampler" and r.probabilities.draft_q == (0.5123, 0.25)


def test_without_probabilities_a_draft_q_is_not_kept():
    r, *_ = run([104], probabilities=False, draft_q=(0.5,))
    assert r.probabilities is None and r.committed_tokens == (104, 105)


def test_the_rejection_rule_accepts_a_sure_token_and_resamples_the_rejected_one_from_the_target():
    one_hot = [np.eye(1000)[104], np.eye(1000)[999]]
    sampling = SamplingSettings(temperature=0.7)
    r, trace, events, sched, rt, commits, ctx = run([104, 999], sampling=sampling, verification="rejection",
                                                    draft=one_hot)
    # row 0: p(104) = 1 = q(104): accepted; row 1: p(999) = 0: rejected, the residual p - q is all on 105;
    # row 2 (after the rejected 999): a sample of p, all on (999 + 1) % 1000 = 0
    assert r.verification_rule == "rejection" and trace.predictions == (104, 105, 0)
    assert rt.calls[0] == "logits 3@3" and rt.aborts == [ctx.cancel]
    assert (r.disposition, r.committed_tokens, r.accepted_proposal_tokens) == ("first_mismatch", (104, 105), 1)
    p = r.probabilities
    # figures for the judged rows only: row 2 follows the rejected 999 (judged_rows)
    assert p.basis == "sampler" and p.proposed_p == (1.0, 0.0) and p.predicted_p == (1.0, 1.0)
    assert [t[0] for t in p.top_tokens] == [104, 105]


def test_the_rule_for_a_proposal_depends_on_greedy_the_chosen_rule_and_the_drafts_distributions():
    def rule(sampling, verification, draft):
        ctx = WindowContext(None, 0, 0, threading.Event(), FaultPlan([]), print, sampling=sampling,
                            verification=verification)
        return ctx.rule_for(Proposal(b"x", (1,), draft_probabilities=draft))

    hot, greedy = SamplingSettings(temperature=0.7), SamplingSettings(temperature=0.0)
    assert rule(None, "rejection", [[1.0]]) == "greedy"
    assert rule(greedy, "rejection", [[1.0]]) == "greedy"
    assert rule(hot, "rejection", [[1.0]]) == "rejection"
    assert rule(hot, "rejection", None) == "sample_match"
    assert rule(hot, "sample_match", [[1.0]]) == "sample_match"
    assert rule(hot, "sample_match", None) == "sample_match"


def test_the_judged_rows_end_at_the_first_mismatch_and_take_every_row_after_a_full_accept():
    assert judged_rows([5, 6, 7], [5, 9, 7, 8]) == 2  # row 1 rejected 6: its row gives the correction
    assert judged_rows([5, 6, 7], [4, 6, 7, 8]) == 1
    assert judged_rows([5, 6, 7], [5, 6, 7, 8]) == 4  # full accept: the bonus row too
    assert judged_rows([], [3]) == 1
