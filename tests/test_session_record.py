"""The session record without Qt or a model: built live, from its receipts document and from
its autosave, the three agree on the same run; token outcomes are the engine's.

The fake target predicts (t + 1) % n_vocab after token t (``fake_runtime``), so scripted
proposals decide exactly which tokens are accepted, corrected or bonus. The same record
is built on the real model in ``test_cli.py`` (``run --receipts --autosave``) and the window tests.
"""

from __future__ import annotations

import pytest

from inspector.engine import Fault, FaultPlan, GenerationSettings, RuntimeScheduler
from inspector.engine.classify import (
    ACCEPTED,
    BONUS,
    BRANCH,
    CORRECTION,
    FROM_PREFILL,
    NOT_COMMITTED,
    NOT_COMMITTED_YET,
    NOT_VERIFIED,
    PLAIN,
    row_outcomes,
    token_outcome,
)
from inspector.engine.errors import EngineError
from inspector.receipts import validate_document
from inspector.receipts.autosave import AutosaveWriter
from inspector.session.document import record_document
from inspector.session.entries import END
from inspector.session.record_from_file import record_from_autosave, record_from_document
from inspector.session.run import RunRefused, RunRequest, SessionRun
from inspector.session.run_records import RecordStream, RunEnd
from inspector.session.session_record import SessionRecord

from fake_runtime import FakeRuntime, ListSource, follow


class DescribedRuntime(FakeRuntime):
    """The fake target with what the run service and the document need from a runtime."""

    def __init__(self, model_path, **kw):
        super().__init__(**kw)
        self.model_path = str(model_path)

    def describe(self) -> dict:
        return {"path": self.model_path, "architecture": "fake", "n_vocab": self.n_vocab, "n_ctx": self.n_ctx}

    def chat_prompt(self, text, system_prompt=""):
        return system_prompt + text

    def prompt_tokens(self, text, raw=False, system_prompt=""):
        return [100 + (ord(c) % 50) for c in system_prompt + text]


def run_scripted(tmp_path, proposals, *, faults=(), max_new=10, resume=True):
    """Run ``proposals`` through the run service with a live record and an autosave;
    returns (record, document, autosave path)."""
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF fake weights")
    rt = DescribedRuntime(model, eog=(999,))
    record = SessionRecord()
    autosave = tmp_path / "run.jsonl"
    request = RunRequest("abc", GenerationSettings(max_new_tokens=max_new, draft_max=16), "list",
                         faults=FaultPlan(list(faults)))
    run = SessionRun(RuntimeScheduler(rt), request, record.apply, make_source=lambda req: ListSource(proposals),
                     open_autosave=lambda header: AutosaveWriter(autosave, header))
    gen = run.prepare()
    run.start()
    while not gen.finished:
        try:
            run.step()
        except EngineError:  # an injected fault's error (after its repair); an AssertionError is no such thing
            if not resume:
                break
            gen.resume()
    run.end(gen.finish_reason or "error")
    doc = record_document(record)
    validate_document(doc)
    return record, doc, autosave


def view_of(s: SessionRecord) -> dict:
    """What the views show of a record (everything but times, which an autosave keeps too)."""
    return {
        "tokens": [(t.token, t.text, t.window, t.row, t.position, t.proposed, t.outcome) for t in s.tokens],
        "windows": [(e.window_index, e.failed, e.proposal, e.predictions, e.committed, e.row_outcomes())
                    for e in s.windows()],
        "events": [(e.seq, e.t_us, e.kind, e.window, e.token, e.row, e.position, e.detail) for e in s.events],
        "discards": [(d.reason, d.proposal_token_ids, d.error) for d in s.discards],
        "plain_steps": s.plain_steps,
        "finish_reason": s.finish_reason,
        "prompt": (s.prompt_text, s.prompt_token_count),
        "summary": {k: v for k, v in s.summary().to_json().items() if "per_s" not in k and "elapsed" not in k},
    }


SCRIPT = [follow(2), lambda req: [req.tokens[-1] + 1, 999, 5], None, [2, 3]]
"""After the first token (committed from the prefill): a full accept (2 + bonus), a first mismatch
at row 1, a plain step, a mismatch at row 0."""


def test_live_document_and_autosave_records_of_one_run_agree(tmp_path):
    live, doc, autosave = run_scripted(tmp_path, SCRIPT)
    from_doc = record_from_document(doc)
    from_autosave = record_from_autosave(autosave)
    assert view_of(live) == view_of(from_doc) == view_of(from_autosave)
    assert not from_autosave.unfinished and from_autosave.skipped_lines == 0
    assert [e.kind for e in from_autosave.events][:3] == ["prefill", "commit", "verify"]  # the first token, then window 1


def test_a_failed_window_and_its_repair_agree_in_all_three_records(tmp_path):
    live, doc, autosave = run_scripted(tmp_path, [follow(3), follow(3), follow(2)],
                                       faults=[Fault("callback_error", window=2, token=2)])
    assert list(live.failed_windows) == [2]
    failed = live.window(2)
    assert failed.failed and failed.committed == failed.predictions[:2]  # the callback fails on its 2nd token
    assert view_of(live) == view_of(record_from_document(doc)) == view_of(record_from_autosave(autosave))


def test_token_outcomes_come_from_the_engines_commit_events(tmp_path):
    live, _doc, _ = run_scripted(tmp_path, SCRIPT)
    commits = [e for e in live.events if e.kind == "commit"]
    assert [t.outcome for t in live.tokens[:-1]] == [e.detail for e in commits[:-1]]
    # the first token from the prefill; window 1: follow(2) -> two accepted and the bonus;
    # window 2: its 1st token accepted, 999 corrected; then a plain step.
    assert [t.outcome for t in live.tokens[:6]] == [FROM_PREFILL, ACCEPTED, ACCEPTED, BONUS, ACCEPTED, CORRECTION]
    assert live.tokens[0].window is None and live.plain_steps == 3  # the first token is no plain step
    assert live.tokens[6].outcome == PLAIN and live.tokens[6].window is None
    assert live.tokens[7].outcome == CORRECTION and live.tokens[7].window == 3  # the plain step is no window
    assert live.tokens[-1].outcome == END


def _without_events(tmp_path, autosave):
    """The autosave as a writer from before lines carried events would have written it."""
    import json

    old = tmp_path / "old.jsonl"
    lines = [json.loads(line) for line in autosave.read_text().splitlines()]
    for rec in lines:
        rec.pop("events", None)
    old.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return old


def test_an_autosave_from_before_lines_carried_events_shows_its_tokens_and_no_events(tmp_path):
    _live, _doc, autosave = run_scripted(tmp_path, SCRIPT)
    s = record_from_autosave(_without_events(tmp_path, autosave))
    assert s.events == []
    assert [t.token for t in s.tokens] == [t.token for t in _live.tokens]
    # every window's and plain step's token keeps its outcome; the first token (the prefill's) is
    # checked by the next test: its "step" line alone does not say it came from the prefill
    assert [(t.token, t.outcome) for t in s.tokens[1:]] == [(t.token, t.outcome) for t in _live.tokens[1:]]


def test_an_autosave_without_events_reads_the_first_token_as_the_prefills_not_a_plain_step(tmp_path):
    live, _doc, autosave = run_scripted(tmp_path, SCRIPT)
    s = record_from_autosave(_without_events(tmp_path, autosave))
    assert (s.tokens[0].token, s.tokens[0].outcome) == (live.tokens[0].token, FROM_PREFILL)
    assert s.plain_steps == live.plain_steps == 3


def test_lock_operations_count_only_between_the_runs_header_and_end(tmp_path):
    live, doc, _ = run_scripted(tmp_path, SCRIPT)
    n = len(live.lock_ops)
    assert 0 < len(doc["lock_operations"]) <= n  # the document keeps those up to the last event
    assert {op["kind"] for op in doc["lock_operations"]} >= {"prefill", "verify"}
    live.apply(live.lock_ops[0])  # after the end: another run's, or a measurement's
    assert len(live.lock_ops) == n


def test_a_record_drained_from_the_stream_in_batches_equals_one_applied_directly(tmp_path):
    direct, _doc, _ = run_scripted(tmp_path, SCRIPT)
    stream = RecordStream()
    model = tmp_path / "fake.gguf"
    rt = DescribedRuntime(model, eog=(999,))
    run = SessionRun(RuntimeScheduler(rt), RunRequest("abc", GenerationSettings(max_new_tokens=10, draft_max=16),
                                                      "list"),
                     stream.push, make_source=lambda req: ListSource(list(SCRIPT)))
    gen = run.prepare()
    run.start()
    batched = SessionRecord()
    for _ in run.steps():
        batched.extend(stream.drain())  # one batch per decode step, as the window's redraw tick
    run.end(gen.finish_reason)
    batched.extend(stream.drain())
    strip = lambda v: {**v, "events": [e[:1] + e[2:] for e in v["events"]]}  # noqa: E731 - times differ
    assert strip(view_of(batched)) == strip(view_of(direct))
    assert isinstance(batched.end, RunEnd) and batched.end.output_text == batched.output_text


def test_an_unknown_source_refuses_the_run_before_anything_is_recorded(tmp_path):
    rt = DescribedRuntime(tmp_path / "x.gguf")
    record = SessionRecord()
    run = SessionRun(RuntimeScheduler(rt), RunRequest("abc", GenerationSettings(), "nope"), record.apply)
    run.tokenize()
    with pytest.raises(RunRefused, match="unknown proposal source 'nope'") as err:
        run.make_source()
    assert err.value.what == "source" and record.version == 0


def test_an_empty_prompt_is_refused_as_such(tmp_path):
    rt = DescribedRuntime(tmp_path / "x.gguf")
    run = SessionRun(RuntimeScheduler(rt), RunRequest("", GenerationSettings(), "none"), lambda item: None)
    with pytest.raises(RunRefused) as err:
        run.tokenize()
    assert err.value.what == "empty_prompt"


# -- row outcomes on tiny token lists ----------------------------------------------------------
def test_token_outcome_names_accepted_correction_bonus_and_plain():
    assert token_outcome(0, 5, (5, 6)) == ACCEPTED
    assert token_outcome(1, 7, (5, 6)) == CORRECTION
    assert token_outcome(2, 9, (5, 6)) == BONUS
    assert token_outcome(0, 9, None) == PLAIN


def test_rows_past_a_first_mismatch_are_branch_conditioned():
    assert row_outcomes((5, 6, 7), (5, 9, 7, 8), committed=2) == [ACCEPTED, CORRECTION, BRANCH, BRANCH]


def test_rows_a_stopped_window_did_not_commit_are_not_committed():
    assert row_outcomes((5, 6), (5, 6, 7), committed=1) == [ACCEPTED, NOT_COMMITTED, NOT_COMMITTED]


def test_the_mismatch_row_itself_is_not_a_branch_when_its_correction_was_not_committed():
    """Stopped after the accepted row: the row that mismatched would have been the correction (not
    committed); only the rows after it are branch-conditioned (issue 42: ``>`` made ``>=`` survived)."""
    assert row_outcomes((5, 6, 7), (5, 9, 7, 8), committed=1) == [ACCEPTED, NOT_COMMITTED, BRANCH, BRANCH]


def test_a_held_row_shows_its_outcome_and_later_rows_wait():
    assert row_outcomes((5, 6), (5, 6, 7), committed=0, held_row=0) == [ACCEPTED, NOT_COMMITTED_YET,
                                                                         NOT_COMMITTED_YET]


def test_rows_of_a_failed_verification_are_not_verified():
    assert row_outcomes((5, 6), (), committed=0) == [NOT_VERIFIED] * 3


def test_a_run_cut_short_reads_back_with_how_it_ended_from_its_autosave(tmp_path):
    live, doc, autosave = run_scripted(tmp_path, SCRIPT, faults=[Fault("cancel", window=2)], resume=False)
    assert live.finish_reason is None and live.ended_as == "error"  # the engine never finished it
    from_autosave = record_from_autosave(autosave)
    assert from_autosave.finish_reason is None and from_autosave.ended_as == "error"
    assert view_of(live) == view_of(record_from_document(doc)) == view_of(from_autosave)


def test_a_failed_run_ended_unclean_leaves_its_autosave_unfinished(tmp_path):
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF")
    rt = DescribedRuntime(model)
    autosave = tmp_path / "run.jsonl"
    run = SessionRun(RuntimeScheduler(rt), RunRequest("abc", GenerationSettings(max_new_tokens=8), "list",
                                                      faults=FaultPlan([Fault("callback_error", window=1, token=1)])),
                     SessionRecord().apply, make_source=lambda req: ListSource([follow(2)]),
                     open_autosave=lambda header: AutosaveWriter(autosave, header))
    gen = run.prepare()
    run.start()
    with pytest.raises(Exception, match="injected"):
        run.step()
    run.end("error", clean=gen.finished)  # as spec-inspector run does for a run it did not finish
    s = record_from_autosave(autosave)
    assert s.unfinished and s.ended_as is None and len(s.failed_windows) == 1


def test_a_run_error_sets_the_kv_length_its_repair_left_and_joins_the_errors():
    from inspector.session.run_records import RunError

    s = SessionRecord()
    s.kv_length = 12
    s.apply(RunError("trim failed", kv_length=None, canonical_position=10, retired=True))
    assert s.kv_length is None and s.errors == ["trim failed"]
    assert not RunError("x", kv_length=10, canonical_position=10, retired=True).repaired
    assert RunError("x", kv_length=10, canonical_position=10).repaired


def test_a_snapshot_does_not_change_when_the_run_goes_on(tmp_path):
    live, _doc, _ = run_scripted(tmp_path, SCRIPT)
    snap = live.snapshot()
    n = len(snap.events)
    live.apply(live.events[0])
    assert len(snap.events) == n and len(live.events) == n + 1


def test_a_run_the_user_stopped_says_so_in_its_document_and_when_reopened(tmp_path):
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF")
    record = SessionRecord()
    run = SessionRun(RuntimeScheduler(DescribedRuntime(model)),
                     RunRequest("abc", GenerationSettings(max_new_tokens=50, draft_max=16), "list"),
                     record.apply, make_source=lambda req: ListSource([follow(2)] * 20))
    run.prepare()
    run.start()
    run.step()
    run.end("stopped")  # Stop pressed: the engine never finished the run
    doc = record_document(record)
    validate_document(doc)
    assert doc["output"]["finish_reason"] is None and doc["output"]["ended_as"] == "stopped"
    assert record_from_document(doc).ended_as == "stopped"


def test_time_held_before_a_commit_is_no_decode_time():
    import time as _time

    from inspector.engine import Generation, GenerationObserver

    class Holds(GenerationObserver):
        def before_commit(self, window, row, token, position):
            _time.sleep(0.02)

    # the first token (4) is held in start(); then one decode step: a window of 3 accepted + the bonus
    g = Generation(RuntimeScheduler(FakeRuntime()), ListSource([follow(3)]), [1, 2, 3],
                   GenerationSettings(max_new_tokens=5, draft_max=8), observer=Holds())
    g.run()
    assert g.generated_count == 5 and g.decode_step == 1 and g.receipts[0].canonical_prediction_count == 4
    assert g.decode_elapsed_us < 20_000, f"observed {g.decode_elapsed_us} us for 4 held commits of 20 ms each"


def test_a_plain_step_cancelled_before_its_commit_is_not_counted():
    from inspector.engine import Generation
    from inspector.engine.errors import RequestCancelled

    g = Generation(RuntimeScheduler(FakeRuntime()), None, [1, 2, 3], GenerationSettings(max_new_tokens=4),
                   faults=FaultPlan([Fault("cancel")]))
    g.start()  # the first token comes from the prefill: no plain step, and no fault fires on it
    assert g.plain_steps == 0 and g.generated_count == 1
    with pytest.raises(RequestCancelled):
        g.step()
    assert g.plain_steps == 0 and g.generated_count == 1
    g.resume()
    g.run()
    assert g.plain_steps == 3 == g.generated_count - 1


def test_the_record_names_the_tokens_changed_in_place_since_a_version(tmp_path):
    """Views keep their own redraw cursor: the record only says which token changed after a
    version (the end mark, the divergence mark); appended tokens are no change."""
    live, doc, _ = run_scripted(tmp_path, SCRIPT)
    kinds = [e.kind for e in live.events]
    assert kinds[-1] == "finish"
    s = SessionRecord()
    for ev in live.events[:-1]:
        s.apply(ev)
    before_end = s.version
    assert s.token_changes_since(-1) is None  # tokens were only appended
    s.apply(live.events[-1])
    last = len(doc["output"]["token_ids"]) - 1
    assert s.tokens[last].outcome == END
    assert s.token_changes_since(before_end) == last
    assert s.token_changes_since(s.version) is None
    v = s.version
    s.set_baseline({"identical": False, "divergence": {"index": 3}})
    assert s.version > v and s.token_changes_since(v) == 3
    v = s.version
    s.set_baseline({"identical": False, "divergence": {"index": 5}})
    assert s.token_changes_since(v) == 3  # the mark moved off token 3, onto 5
    assert s.token_changes_since(before_end) == 3 and s.snapshot().token_changes_since(v) == 3


def test_the_drive_loop_yields_after_every_step_and_a_steps_error_ends_it_until_resumed(tmp_path):
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF fake weights")
    rt = DescribedRuntime(model, eog=(999,))
    request = RunRequest("abc", GenerationSettings(max_new_tokens=10, draft_max=16), "list",
                         faults=FaultPlan([Fault("callback_error", window=1, token=1)]))
    run = SessionRun(RuntimeScheduler(rt), request, SessionRecord().apply,
                     make_source=lambda req: ListSource([[7, 8, 9], [1, 2], [3]]))
    gen = run.prepare()
    run.start()
    seen = []
    with pytest.raises(EngineError):
        for g in run.steps():
            seen.append(g.decode_step)
    assert not gen.finished and seen == []  # the first window's injected error ended the loop
    gen.resume()
    for g in run.steps():
        assert g is gen
        seen.append(g.decode_step)
    run.end(gen.finish_reason)
    assert gen.finished and gen.generated_count == 10
    assert seen == list(range(seen[0], seen[0] + len(seen))), seen  # one yield per step, in order
