"""The what-if tuner's pure parts walked by hand (issue 42): the replay on tiny recordings with a
scripted source and a scripted clock, the predicted time, the grid, the recordings and the tables.
The cap rule is the engine's: min(remaining - 1, n_batch - 1, draft_max, free positions - 1)."""

from __future__ import annotations

import threading
from types import SimpleNamespace as NS

import pytest

from inspector.bench import tune as T
from inspector.bench.tune import (NotReplayable, Recording, TuneRow, Verified, cold_replay_note, costs_from_record,
                                  costs_from_times, fitted_costs, format_tune, format_verified, grid,
                                  measured_points, points_from_record, predict, recording_from_document,
                                  recording_from_record, recording_from_values, replay, tune)
from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal
from inspector.llama.cost_model import CostModel


class Clock:
    """``time`` for the tuner: each perf_counter_ns call is 1,000 ns after the last, so every timed
    call (begin, propose, report) takes exactly 1 µs."""

    def __init__(self):
        self.now = 0

    def perf_counter_ns(self):
        self.now += 1000
        return self.now


class Source:
    """Hands out ``answers`` in order (a tuple of ids, None or a NoProposal); records requests, begin
    and reports."""

    def __init__(self, answers, with_begin=True):
        self.answers = list(answers)
        self.requests, self.reports, self.begun, self.deadlines = [], [], [], []
        if with_begin:
            self.begin = lambda prompt: self.begun.append(prompt)
        self.closed = False

    def propose(self, request):
        self.requests.append((tuple(request.tokens), request.prompt_token_count, request.decode_step,
                              request.max_proposal_tokens))
        self.deadlines.append(request.deadline_s)
        a = self.answers.pop(0) if self.answers else None
        return Proposal(b"\x0a\x0b", tuple(a)) if isinstance(a, tuple) else a

    def report(self, receipt):
        self.reports.append(receipt)

    def close(self):
        self.closed = True


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(T, "time", c)
    return c


def test_replay_walk_plain_step_window_too_long_proposal_and_a_cap_of_zero(clock):
    """Prompt 1 2 3, output 1 2 3 1 2 3 1 2, max 8 tokens, draft max 4.
    Step 0 (generated 1, base 3): cap min(6, 63, 4, 252) = 4; no proposal: plain step (2).
    Step 1 (generated 2, base 4): cap 4; 3 1 2 against rows 3 1 2 3: all accepted, commits 4 (3 1 2 3).
    Step 2 (generated 6, base 8): cap min(1, 63, 4, 247) = 1; 5 6 is longer than the cap: plain step (1).
    Step 3 (generated 7): cap min(0, ...) = 0: not asked; plain step (2). 3 plain steps."""
    rec = Recording((1, 2, 3), (1, 2, 3, 1, 2, 3, 1, 2), 8, 64, 256)
    src = Source([NoProposal("no_match"), (3, 1, 2), (5, 6), (9,)])
    windows, plain, ms = replay(src, rec, 4)
    assert [(w.decode_step, w.proposal, w.accepted, w.committed) for w in windows] == [(1, (3, 1, 2), 3, 4)]
    assert plain == 3
    assert src.begun == [(1, 2, 3)]
    assert src.requests == [((1, 2, 3, 1), 3, 0, 4), ((1, 2, 3, 1, 2), 3, 1, 4), ((1, 2, 3, 1, 2, 3, 1, 2, 3), 3, 2, 1)]
    [r] = src.reports
    assert (r.decision_id, r.accepted_proposal_tokens, r.proposal_token_count, r.verification_rows) == ("0a0b", 3, 3, 4)
    assert (r.canonical_prediction_count, r.base_position, r.committed_tokens, r.disposition) == \
        (4, 4, (3, 1, 2, 3), "full_accept")
    assert r.verification_elapsed_us == 0
    assert ms == 0.005  # begin, three proposals and one report: 5 x 1 us


def test_replay_without_begin_times_only_the_proposals_and_reports(clock):
    rec = Recording((1, 2, 3), (1, 2, 3, 1), 8, 64, 256)
    src = Source([(2, 3, 1)], with_begin=False)
    windows, plain, ms = replay(src, rec, 8)
    # cap min(6, 63, 8, 252) = 6; rows 2 3 1 then past the output (-1): accepted 3, commits min(4, 4 - 1) = 3
    assert [(w.decode_step, w.proposal, w.accepted, w.committed) for w in windows] == [(0, (2, 3, 1), 3, 3)]
    assert plain == 0 and ms == 0.002


def test_replay_caps_by_the_batch_and_by_the_free_context():
    rec = Recording((1, 2, 3), (1, 2, 3, 1, 2, 3), 50, 3, 256)  # n_batch 3: at most 2 proposal tokens
    src = Source([None, None, None, None, None])
    replay(src, rec, 8)
    assert [q[3] for q in src.requests] == [2, 2, 2, 2, 2]
    rec = Recording((1, 2, 3), (1, 2, 3, 1), 50, 64, 7)  # n_ctx 7: base 3 leaves 4 positions, 3 tokens
    src = Source([None, None, None])
    _w, plain, _ms = replay(src, rec, 8)
    assert [q[3] for q in src.requests] == [3, 2, 1] and plain == 3  # bases 3, 4, 5: free 4, 3, 2


def test_replay_treats_an_empty_proposal_as_none_and_reports_a_rejection_as_first_mismatch():
    rec = Recording((5,), (6, 7, 8, 9), 10, 64, 256)
    src = Source([(), (7, 0)])
    windows, plain, _ms = replay(src, rec, 8)
    # step 0: the empty proposal counts as none: plain step (7). Step 1, after 6 7: rows output[2:5] = 8 9,
    # and 7 != 8: rejected at once, commits the correction 8
    assert [(w.decode_step, w.proposal, w.accepted, w.committed) for w in windows] == [(1, (7, 0), 0, 1)]
    assert src.reports[0].disposition == "first_mismatch" and src.reports[0].committed_tokens == (8,)
    assert plain == 2  # step 0, then 9 after the window
    # the window's one committed token joins the stream before the next question; caps 8, 7, 6
    assert src.requests == [((5, 6), 1, 0, 8), ((5, 6, 7), 1, 1, 7), ((5, 6, 7, 8), 1, 2, 6)]
    assert src.deadlines == [float("inf")] * 3  # a replay has no deadline


def test_replay_takes_a_one_token_proposal_and_never_matches_a_proposal_token_past_the_output():
    src = Source([(3,)])
    windows, plain, _ms = replay(src, Recording((1,), (2, 3, 4), 10, 64, 256), 8)
    assert [(w.proposal, w.accepted, w.committed) for w in windows] == [((3,), 1, 2)] and plain == 0
    # output 5 6: the proposal 6 1 meets row 6 then no row (past the output): 1 accepted, 1 committed
    src = Source([(6, 1)])
    windows, plain, _ms = replay(src, Recording((1,), (5, 6), 10, 64, 256), 8)
    assert [(w.proposal, w.accepted, w.committed) for w in windows] == [((6, 1), 1, 1)] and plain == 0


def test_replay_stops_a_window_at_an_end_of_generation_token():
    rec = Recording((1,), (7, 8, 9), 10, 64, 256, is_eog=lambda t: t == 9)
    src = Source([(8, 9, 4)])
    windows, plain, _ms = replay(src, rec, 8)
    assert [(w.proposal, w.accepted, w.committed) for w in windows] == [((8, 9, 4), 2, 2)] and plain == 0
    assert src.reports[0].committed_tokens == (8, 9) and src.reports[0].disposition == "full_accept"


def test_predict_prices_windows_at_c_k_plain_steps_at_c1_and_adds_the_proposal_time(clock, monkeypatch):
    """Output 1 2 3 1 2 3 1 2: window 0 (cap 3) proposes 2 3 1, commits 4; then nothing is proposed at
    generated 5 (cap 2) and 6 (cap 1), and at 7 the cap is 0: 3 plain steps. Asked 3 times, 1 report:
    0.004 ms. decode = c(4) + 3 c(1) + 0.004 = 13 + 30 + 0.004 ms; plain decoding: 7 c(1) = 70 ms."""
    made = []

    def make_source(name, ctx, options):
        src = Source([(2, 3, 1)], with_begin=False)
        made.append((name, ctx, options, src))
        return src

    monkeypatch.setattr(T, "make_source", make_source)
    rec = Recording((1, 2, 3), (1, 2, 3, 1, 2, 3, 1, 2), 8, 64, 256)
    row = predict("mine", {"a": 1}, 3, rec, CostModel((10.0, 11.0, 12.0, 13.0)), runtime="rt")
    [(name, ctx, options, src)] = made
    assert (name, options, ctx.runtime, ctx.row_costs, ctx.memory) == ("mine", {"a": 1}, "rt", (10.0, 11.0, 12.0, 13.0), {})
    assert src.closed
    assert (row.source, row.options, row.draft_max, row.windows, row.proposed, row.accepted, row.plain_steps) == \
        ("mine", {"a": 1}, 3, 1, 3, 3, 3)
    assert row.proposal_ms == 0.004 and row.decode_ms == pytest.approx(43.004)
    assert row.tokens_per_s == pytest.approx(8 / 43.004 * 1000) and row.speedup == pytest.approx(70 / 43.004)


def test_predict_of_a_free_run_gives_zero_speed_rather_than_dividing_by_zero(clock, monkeypatch):
    monkeypatch.setattr(T, "make_source", lambda name, ctx, options: NS(propose=lambda r: None))
    monkeypatch.setattr(T, "time", NS(perf_counter_ns=lambda: 0))
    row = predict("x", {}, 4, Recording((1,), (2, 3), 8, 64, 256), CostModel((0.0,)))
    assert (row.windows, row.plain_steps, row.decode_ms, row.tokens_per_s, row.speedup) == (0, 1, 0.0, 0.0, 0.0)
    # half a millisecond for the one plain step: 2 tokens in 0.5 ms, as fast as plain decoding
    row = predict("x", {}, 4, Recording((1,), (2, 3), 8, 64, 256), CostModel((0.5,)))
    assert (row.decode_ms, row.tokens_per_s, row.speedup) == (0.5, 4000.0, 1.0)


def test_tune_row_label_and_mean_accepted_length():
    row = TuneRow("ngram", {"n_max": 4, "n_min": 1}, 8, 4, 20, 10, 3, 0.5, 40.0, 100.0, 1.5)
    assert row.label == "ngram:draft_max=8,n_max=4,n_min=1" and row.mean_accepted_length == 3.5
    bare = TuneRow("ngram-cache", {}, 2, 0, 0, 0, 9, 0.0, 90.0, 100.0, 1.0)
    assert bare.label == "ngram-cache:draft_max=2" and bare.mean_accepted_length is None


def test_replay_walks_a_tree_by_the_recorded_output_and_prices_every_row(clock, monkeypatch):
    # After the prefill's 3 the output goes on 4 5 6. The tree: 9 and 4 under the root, 5 under 4, 10 under 5:
    # the walk takes 4 then 5, no child of 5 is 6: the kept branch 4 5 10, two accepted, 6 the correction.
    tree = Proposal(b"\x01", (9, 4, 5, 10), parents=(0, 0, 2, 3))
    rec = Recording((1, 2), (3, 4, 5, 6, 7, 8, 9, 10), 8, 512, 4096)
    windows, plain, _ = replay(Source([tree]), rec, 8)
    assert [(w.decode_step, w.proposal, w.accepted, w.committed, w.decoded_rows) for w in windows] == \
        [(0, (4, 5, 10), 2, 3, 5)]
    assert plain == 4  # 7 8 9 10: the source has nothing more
    # With penalties the engine verifies a tree's first branch (9 alone: rejected, 4 the correction).
    penalized = Recording((1, 2), (3, 4, 5, 6, 7, 8, 9, 10), 8, 512, 4096, penalized=True)
    windows, _, _ = replay(Source([tree]), penalized, 8)
    assert [(w.proposal, w.accepted, w.committed, w.decoded_rows) for w in windows] == [((9,), 0, 1, 2)]
    assert recording_from_values((1, 2), (3,), {"max_new_tokens": 8, "sampling": {"repeat_penalty": 1.3}}, {},
                                 "length").penalized
    assert not recording_from_values((1, 2), (3,), {"max_new_tokens": 8, "sampling": {"temperature": 0}}, {},
                                     "length").penalized
    monkeypatch.setattr(T, "make_source", lambda *a, **k: Source([Proposal(b"\x01", (9, 4, 5, 10),
                                                                            parents=(0, 0, 2, 3))]))
    row = predict("scripted", {}, 8, rec, CostModel((10.0, 12.0, 14.0, 16.0, 18.0)))
    assert row.decode_ms == pytest.approx(18.0 + 4 * 10.0 + row.proposal_ms)  # c(5) for the tree's 5 rows


def test_the_grid_is_the_cross_product_of_option_values_then_draft_max():
    assert grid(["a", "b"], [2, 4], {"a": {"x": (1, 2), "y": ("p",)}}) == [
        ("a", {"x": 1, "y": "p"}, 2), ("a", {"x": 1, "y": "p"}, 4),
        ("a", {"x": 2, "y": "p"}, 2), ("a", {"x": 2, "y": "p"}, 4),
        ("b", {}, 2), ("b", {}, 4)]


def test_tune_sorts_by_speedup_skips_plain_and_refused_options_and_reports_progress(monkeypatch):
    def fake_predict(s, opts, dm, rec, costs):
        assert (rec, costs) == ("the recording", "the costs")
        if opts.get("bad"):
            raise ValueError("refused")
        return TuneRow(s, opts, dm, 0, 0, 0, 0, 0.0, 1.0, 1.0, opts["speed"])

    monkeypatch.setattr(T, "predict", fake_predict)
    seen = []
    configs = [("a", {"speed": 1.0}, 2), ("none", {}, 0), ("b", {"bad": 1}, 2), ("c", {"speed": 3.0}, 2),
               ("d", {"speed": 2.0}, 2)]
    rows = tune("the recording", "the costs", configs, progress=lambda d, t: seen.append((d, t)))
    assert [(r.source, r.draft_max) for r in rows] == [("c", 2), ("d", 2), ("a", 2)]
    assert seen == [(1, 5), (3, 5), (4, 5), (5, 5)]  # plain ("none") is skipped before any progress
    cancel = threading.Event()
    cancel.set()
    assert tune("the recording", "the costs", configs, cancel=cancel) == []
    configs[0] = ("a", {"speed": 1.0}, 6)
    assert [(r.source, r.draft_max) for r in tune("the recording", "the costs", configs, cancel=threading.Event())] \
        == [("c", 2), ("d", 2), ("a", 6)]


def test_the_tune_table_is_pinned_to_its_columns():
    rows = [TuneRow("ngram", {"n_max": 4}, 8, 4, 20, 10, 3, 0.5, 40.0, 123.45, 1.5),
            TuneRow("suffix", {}, 2, 0, 0, 0, 9, 0.0, 90.0, 100.0, 1.0)]
    assert format_tune(rows).splitlines() == [
        "configuration                                              speedup   tok/s windows  acc/prop   len",
        "ngram:draft_max=8,n_max=4                                    1.50x   123.5       4     10/20  3.50",
        "suffix:draft_max=2                                           1.00x   100.0       0       0/0      "]
    assert len(format_tune(rows, limit=1).splitlines()) == 2
    assert len(format_tune(rows * 10).splitlines()) == 1 + 15  # the best 15 by default
    long = TuneRow("x" * 70, {}, 2, 0, 0, 0, 9, 0.0, 90.0, 100.0, 1.0)
    assert format_tune([long]).splitlines()[1] == "x" * 58 + "   1.00x   100.0       0       0/0      "


def test_the_verified_table_says_what_was_measured_beside_what_was_predicted():
    row = TuneRow("ngram", {}, 8, 4, 20, 10, 3, 0.5, 40.0, 100.0, 1.5)
    ok = Verified(row, 80.0, 1.25, True, True)
    assert ok.error_ratio == 0.8
    assert Verified(row, None, None, True, None).error_ratio is None
    assert Verified(TuneRow("n", {}, 8, 0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0), 5.0, None, True, None).error_ratio is None
    lines = format_verified([ok, Verified(row, 80.0, 1.25, True, False), Verified(row, None, None, False, None),
                             Verified(row, None, None, True, None, error="boom")]).splitlines()
    assert lines == [
        "configuration                                              predicted  measured  ratio  speedup windows",
        "ngram:draft_max=8                                              100.0      80.0   0.80    1.25x same as replayed",
        "ngram:draft_max=8                                              100.0      80.0   0.80    1.25x differ from the replay",
        "ngram:draft_max=8                                              100.0       n/a                 "
        "n/a: the output differed from the recording",
        "ngram:draft_max=8                                              100.0     error                 "
        "n/a: the output differed from the recording"]
    long = Verified(TuneRow("x" * 70, {}, 2, 0, 0, 0, 9, 0.0, 90.0, 100.0, 1.0), None, None, False, None)
    assert format_verified([long]).splitlines()[1] == \
        "x" * 58 + "     100.0       n/a                 n/a: the output differed from the recording"


def test_a_recording_from_values_defaults_its_limits_and_its_end_of_generation_test():
    rec = recording_from_values([1, 2], [5, 6, 7], {"max_new_tokens": "16"}, {}, "eog")
    assert (rec.prompt, rec.output, rec.max_new_tokens, rec.n_batch, rec.n_ctx) == ((1, 2), (5, 6, 7), 16, 512, 2048)
    assert rec.is_eog(7) and not rec.is_eog(6)
    rec = recording_from_values([1], [5, 7], {"max_new_tokens": 8, "sampling": {"temperature": 0}},
                                {"n_batch": 32, "n_ctx": 100}, "length")
    assert (rec.n_batch, rec.n_ctx) == (32, 100) and not rec.is_eog(7)
    rec = recording_from_values([1], [5], {"max_new_tokens": 8}, None, None, is_eog=lambda t: t == 3)
    assert rec.is_eog(3) and (rec.n_batch, rec.n_ctx) == (512, 2048)
    assert recording_from_values([1], [5], {"max_new_tokens": 8}, {"n_batch": 0, "n_ctx": None}, "eog").n_ctx == 2048


def test_a_recording_is_refused_with_its_reason_in_words():
    with pytest.raises(NotReplayable) as e:
        recording_from_values([1], [5], {"max_new_tokens": 8, "sampling": {"temperature": 0.1}}, {}, "length")
    assert str(e.value) == ("the run sampled at temperature > 0: its output depends on the proposals, so other "
                            "settings cannot be replayed over it (record a greedy run)")
    with pytest.raises(NotReplayable) as e:
        recording_from_values([1], [], {"max_new_tokens": 8}, {}, "length")
    assert str(e.value) == "the run generated no token"
    with pytest.raises(NotReplayable) as e:
        recording_from_values([1], [5], {"max_new_tokens": 8}, {}, "stop")
    assert str(e.value) == ("a stop string ended the run: its text decides where, which a replay does not see "
                            "(record without --stop)")


def test_a_recording_from_a_document_reads_prompt_output_settings_model_and_finish_reason():
    doc = {"prompt": {"token_ids": [1, 2]}, "output": {"token_ids": [3, 4], "finish_reason": "eog"},
           "settings": {"max_new_tokens": 9}, "model": {"n_batch": 16, "n_ctx": 64}}
    rec = recording_from_document(doc)
    assert rec == Recording((1, 2), (3, 4), 9, 16, 64) and rec.is_eog(4)
    del doc["model"]
    given = recording_from_document(doc, is_eog=lambda t: t == 3)
    assert given.n_batch == 512 and given.is_eog(3) and not given.is_eog(4)  # the given test, not the default


def _record(**kw):
    base = dict(header=None, origin=None, document=None, document_path=None, generated_token_ids=[5, 6],
                settings={"max_new_tokens": 4}, finish_reason="eog")
    base.update(kw)
    return NS(**base)


def test_a_recording_from_a_session_record_comes_from_its_header_or_its_document():
    live = _record(header=NS(prompt_token_ids=[1, 2], model={"n_batch": 8, "n_ctx": 32}))
    rec = recording_from_record(live)
    assert rec == Recording((1, 2), (5, 6), 4, 8, 32) and rec.is_eog(6)
    doc = {"prompt": {"token_ids": [9]}, "model": {"n_ctx": 50}}
    assert recording_from_record(_record(origin="document", document=doc)) == Recording((9,), (5, 6), 4, 512, 50)
    assert recording_from_record(_record(origin="document", document={"prompt": {"token_ids": [9]}})).n_ctx == 2048
    given = recording_from_record(_record(header=NS(prompt_token_ids=[1], model=None), finish_reason="length"),
                                  is_eog=lambda t: t == 5)
    assert given.is_eog(5) and not given.is_eog(6) and given.n_batch == 512
    with pytest.raises(NotReplayable) as e:
        recording_from_record(_record(origin="autosave"))
    assert str(e.value) == "an autosave keeps no prompt token ids: open the run's receipts document"
    with pytest.raises(NotReplayable) as e:
        recording_from_record(_record())
    assert str(e.value) == "no run yet: run a prompt (greedy) first, or open a receipts file"


def test_a_recording_from_a_document_record_reads_the_file_when_the_record_kept_only_its_path(monkeypatch):
    monkeypatch.setattr(T, "load_document", lambda path: {"prompt": {"token_ids": [path]}})
    assert recording_from_record(_record(origin="document", document_path=7)).prompt == (7,)


def test_c_k_from_a_recordings_times_is_the_median_per_row_count_interpolated_between():
    # c(1) median of 8, 10, 30 ms = 10; c(4) = median(40, 44) = 42; c(2), c(3) on the line from 10 to 42
    c = costs_from_times([8_000, 30_000, 10_000], [(4, 40_000), (4, 44_000)])
    assert c.row_ms == (10.0, 10.0 + 32 / 3, 10.0 + 64 / 3, 42.0)
    assert costs_from_times([5_000], []).row_ms == (5.0,)
    assert costs_from_times([], [(3, 1)]) is None
    assert costs_from_times([2_000], [(2, 3_000), (5, 9_000), (3, 5_000)]).row_ms == (2.0, 3.0, 5.0, 7.0, 9.0)


def test_c_k_interpolates_between_the_nearest_measured_row_counts_even_when_times_do_not_grow():
    # c(1) 10, c(3) 30, c(5) 20: c(2) between c(1) and c(3) = 20; c(4) between c(3) and c(5) = 25
    assert costs_from_times([10_000], [(3, 30_000), (5, 20_000)]).row_ms == (10.0, 20.0, 30.0, 25.0, 20.0)
    # c(1) 10, c(3) 5, c(5) 20: c(2) = 7.5; c(4) = 12.5
    assert costs_from_times([10_000], [(3, 5_000), (5, 20_000)]).row_ms == (10.0, 7.5, 5.0, 12.5, 20.0)


def test_c_k_from_a_document_without_lock_operations_or_windows():
    assert T.costs_from_document({}) is None
    assert T.costs_from_document({"windows": [{"verification_rows": 2, "verification_elapsed_us": 1}]}) is None
    assert T.costs_from_document({"lock_operations": [{"kind": "step", "hold_us": 3_000}]}).row_ms == (3.0,)


def test_measured_points_are_the_median_per_row_count_with_or_without_plain_steps():
    assert measured_points([], [(3, 6_000), (3, 8_000), (2, 1_000)]) == [(2, 1.0), (3, 7.0)]
    assert measured_points([1_000, 3_000], []) == [(1, 2.0)]


def test_fitted_costs_skip_sizes_the_stored_curve_prices_at_zero_and_keep_it_without_any_point():
    stored = CostModel((0.0, 10.0, 20.0))
    assert fitted_costs(stored, [(1, 5.0), (2, 30.0)]).row_ms == (0.0, 30.0, 60.0)  # only 30/10 counts
    assert fitted_costs(CostModel((0.5, 1.0)), [(1, 1.0), (2, 2.0)]).row_ms == (1.0, 2.0)  # sub-ms costs count
    assert fitted_costs(stored, []).row_ms == (0.0, 10.0, 20.0)
    assert fitted_costs(CostModel((10.0, 20.0)), [(1, 10.0), (2, 30.0), (2, 60.0)]).row_ms == (15.0, 30.0)


def test_a_records_times_count_only_its_main_sessions_plain_steps():
    rec = NS(main_session_id=1, lock_ops=[NS(kind="step", session_id=1, hold_us=4_000),
                                          NS(kind="step", session_id=2, hold_us=100_000),
                                          NS(kind="verify", session_id=1, hold_us=100_000)],
             receipts=[NS(verification_rows=3, decoded_rows=3, verification_elapsed_us=10_000)])
    assert costs_from_record(rec).row_ms == (4.0, 7.0, 10.0)
    assert points_from_record(rec) == [(1, 4.0), (3, 10.0)]
    rec.main_session_id = None  # no main session known: every plain step
    assert points_from_record(rec) == [(1, 52.0), (3, 10.0)]


def test_the_cold_replay_note_is_pinned_word_for_word():
    assert cold_replay_note("9 tokens", None) == ("the recorded run's source started warm (9 tokens); every replay "
                                                  "starts cold, so its figures compare with a cold run")
    assert cold_replay_note(None, 2) == (
        "turn 2 of a conversation: every replay starts cold, so a source that remembers earlier requests (suffix, "
        "ngram-mod, ngram-map-k, ngram-cache) is predicted without what the earlier turns taught it; the prompt "
        "itself holds the earlier turns for the others")
    assert cold_replay_note(None, 1) is None and cold_replay_note("", None) is None


def _verify_setup(monkeypatch, speeds, plains, outputs=None, receipts=None, errors=None):
    """``run_compare`` faked: repeat i measures plain at ``plains[i]`` and the row at ``speeds[i]`` tokens/s;
    the row's run generated ``outputs[i]`` (default the recording's) and, when kept, has ``receipts``."""
    calls, made = [], []
    rec = Recording((1, 2, 3), (1, 2, 3, 1, 2, 3, 1, 2), 8, 64, 256)

    def run_compare(scheduler, prompt, configs, settings, keep_runs):
        assert scheduler is not None
        i = len(calls)
        calls.append((prompt, [(c.label, c.source, c.draft_max, c.options) for c in configs], settings.max_new_tokens,
                      keep_runs))
        out = (outputs or [rec.output] * len(speeds))[i]
        rows = [NS(generated_tokens=list(rec.output), summary=NS(decode_tokens_per_s=plains[i]), error=None),
                NS(generated_tokens=list(out), summary=NS(decode_tokens_per_s=speeds[i]),
                   error=(errors or [None] * len(speeds))[i])]
        runs = [None, NS(receipts=receipts or []) if keep_runs else None]
        return NS(rows=rows, runs=runs)

    def make_source(name, ctx, options):
        made.append((name, ctx.runtime, ctx.row_costs, ctx.memory, options))
        return Source([(2, 3, 1)], with_begin=False)

    monkeypatch.setattr(T, "run_compare", run_compare)
    monkeypatch.setattr(T, "make_source", make_source)
    monkeypatch.setattr(T, "stored_row_costs", lambda runtime: ("costs of", runtime))
    return rec, calls, made


def test_verify_runs_plain_and_each_row_per_repeat_and_takes_medians(monkeypatch):
    receipts = [NS(decode_step=0, proposal_token_ids=(2, 3, 1), accepted_proposal_tokens=3, canonical_prediction_count=4)]
    rec, calls, made = _verify_setup(monkeypatch, [30.0, 10.0, 20.0], [10.0, 10.0, 5.0], receipts=receipts)
    row = TuneRow("mine", {"a": 1}, 3, 1, 3, 3, 3, 0.0, 43.0, 25.0, 1.6)
    [v] = T.verify(NS(runtime="the runtime"), rec, [row], runtime="rt", repeats=3)
    assert calls == [((1, 2, 3), [("plain", "none", 0, {}), ("mine:draft_max=3,a=1", "mine", 3, {"a": 1})], 8, keep)
                     for keep in (True, False, False)]
    # the replay of the first repeat's configuration: one window (0, 2 3 1, 3 accepted, 4 committed)
    assert made == [("mine", "rt", ("costs of", "the runtime"), {}, {"a": 1})]
    assert (v.row, v.same_output, v.same_windows, v.error, v.repeats) == (row, True, True, None, 3)
    assert v.measured_tokens_per_s == 20.0  # median of 30, 10, 20
    assert v.measured_speedup == 3.0  # median of 30/10, 10/10, 20/5
    assert v.error_ratio == 0.8


def test_verify_says_the_windows_differ_when_the_real_ones_do(monkeypatch):
    receipts = [NS(decode_step=0, proposal_token_ids=(2, 3), accepted_proposal_tokens=2, canonical_prediction_count=3)]
    rec, calls, made = _verify_setup(monkeypatch, [30.0], [10.0], receipts=receipts)
    [v] = T.verify(NS(runtime=None), rec, [TuneRow("mine", {}, 3, 1, 3, 3, 3, 0.0, 43.0, 25.0, 1.6)])
    assert v.same_output and v.same_windows is False and v.repeats == 1 and len(calls) == 1


def test_verify_compares_no_windows_when_the_output_differed_and_skips_missing_speeds(monkeypatch):
    rec, calls, made = _verify_setup(monkeypatch, [None, 12.0, 9.0], [0.0, 6.0, None], outputs=[(1, 2)] * 3,
                                     errors=["boom", None, None])
    [v] = T.verify(NS(runtime=None), rec, [TuneRow("mine", {}, 3, 1, 3, 3, 3, 0.0, 43.0, 25.0, 1.6)], repeats=3)
    assert (v.same_output, v.same_windows, v.error) == (False, None, "boom") and made == []
    # speeds 12 and 9 measured (median 10.5); a ratio only where both runs measured one: 12 / 6
    assert (v.measured_tokens_per_s, v.measured_speedup, v.repeats) == (10.5, 2.0, 2)


def test_verify_without_any_measurement_gives_none_and_refuses_fewer_than_one_repeat(monkeypatch):
    rec, calls, made = _verify_setup(monkeypatch, [None], [None])
    [v] = T.verify(NS(runtime=None), rec, [TuneRow("mine", {}, 3, 1, 3, 3, 3, 0.0, 43.0, 25.0, 1.6)])
    assert (v.measured_tokens_per_s, v.measured_speedup, v.repeats) == (None, None, 0)
    with pytest.raises(ValueError) as e:
        T.verify(NS(runtime=None), rec, [], repeats=0)
    assert str(e.value) == "repeats must be at least 1 (observed 0)"
