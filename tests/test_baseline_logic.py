"""Plain decoding and the divergence report on tiny token lists and the fake runtime (issue 42: the
baseline's pure decisions pinned by hand; the fake target's greedy prediction after t is t + 1)."""

import threading

import pytest

from inspector.engine import Generation, GenerationSettings, RuntimeScheduler
from inspector.engine.baseline import (
    BaselineResult,
    Divergence,
    compare_with_plain,
    find_divergence,
    first_difference,
    plain_generation,
    run_baseline,
    top2_after,
)
from inspector.engine.errors import RequestCancelled
from inspector.engine.settings import SamplingSettings

from fake_runtime import FakeRuntime, ListSource, follow


class Top2Runtime(FakeRuntime):
    """The fake target plus ``row_logits_top2``: after token t, top t + 1 and second t + 2, margin
    0.25 for the prefill's last row (-1) and 0.5 for a one-row decode's row 0."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.opened = []

    def open_session(self, sampling=None):
        self.opened.append(sampling)
        self.calls.append("open")
        return super().open_session(sampling)

    def row_logits_top2(self, row):
        self.calls.append(f"top2 {row}")
        t = self._last_rows[row]
        return t + 1, t + 2, 0.25 if row == -1 else 0.5


def test_first_difference_is_the_first_unequal_index_or_where_the_shorter_stream_ends():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([], []) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([7], [8]) == 0
    assert first_difference([1, 2], [1, 2, 3]) == 2
    assert first_difference([1, 2, 3], [1, 2]) == 2
    assert first_difference([], [4]) == 0


def test_a_divergence_describes_itself_with_both_tokens_and_the_margin_to_four_places():
    d = Divergence(index=3, plain_token=11, speculative_token=12, top_token=11, second_token=12, margin=0.0123456)
    assert d.describe() == ("speculative output diverges from plain decoding at generated token 3: plain 11, "
                            "speculative 12; target top-2 margin there 0.0123 logits (tokens 11, 12)")


def test_a_baseline_result_names_identity_and_the_speedup_of_speculative_over_plain():
    same = BaselineResult((5, 6, 7), 10.0, 25.0, None)
    assert same.identical and same.observed_speedup == 2.5
    assert same.describe() == "identical to plain decoding (3 tokens); speculative/plain decode tokens/s = 2.50x"
    assert BaselineResult((5,), None, 25.0, None).observed_speedup is None
    assert BaselineResult((5,), 0.0, 25.0, None).observed_speedup is None
    assert BaselineResult((5,), 10.0, None, None).observed_speedup is None
    assert BaselineResult((5, 6), 10.0, None, None).describe() == "identical to plain decoding (2 tokens)"
    d = Divergence(1, 6, 9, 6, 9, 0.5)
    other = BaselineResult((5, 6), 4.0, 5.0, d)
    assert not other.identical
    assert other.describe() == ("speculative output diverges from plain decoding at generated token 1: plain 6, "
                                "speculative 9; target top-2 margin there 0.5000 logits (tokens 6, 9); "
                                "speculative/plain decode tokens/s = 1.25x")


def test_a_baseline_results_json_has_the_divergence_and_texts_only_for_tokens_that_exist():
    d = Divergence(2, 6, -1, 6, 9, 0.5)
    r = BaselineResult((4, 5, 6), 4.0, 6.0, d)
    assert r.to_json() == {
        "plain_token_ids": [4, 5, 6], "plain_decode_tokens_per_s": 4.0, "speculative_decode_tokens_per_s": 6.0,
        "observed_speedup": 1.5, "identical": False,
        "divergence": {"index": 2, "plain_token": 6, "speculative_token": -1, "top_token": 6, "second_token": 9,
                       "margin": 0.5},
    }
    texts = r.to_json(lambda t: f"<{t}>")["divergence"]
    assert (texts["plain_text"], texts["speculative_text"]) == ("<6>", "")
    texts = BaselineResult((4,), 4.0, 6.0, Divergence(0, -1, 7, 6, 7, 0.5)).to_json(lambda t: f"<{t}>")["divergence"]
    assert (texts["plain_text"], texts["speculative_text"]) == ("", "<7>")
    texts = BaselineResult((0,), 4.0, 6.0, Divergence(0, 0, 0, 0, 1, 0.5)).to_json(lambda t: f"<{t}>")["divergence"]
    assert (texts["plain_text"], texts["speculative_text"]) == ("<0>", "<0>")  # token id 0 is a token
    same = BaselineResult((4,), None, None, None).to_json(lambda t: "x")
    assert same == {"plain_token_ids": [4], "plain_decode_tokens_per_s": None, "speculative_decode_tokens_per_s": None,
                    "observed_speedup": None, "identical": True, "divergence": None}


def test_top2_after_the_prompt_comes_from_the_last_row_of_one_prefill_on_a_dropped_session():
    rt = Top2Runtime()
    assert top2_after(RuntimeScheduler(rt), [100, 101, 102], 3) == (103, 104, 0.25)
    assert rt.calls == ["open", "decode 3@0", "top2 -1", "drop 0"]
    assert rt.kv == {} and rt.opened == [None]


def test_top2_after_generated_tokens_decodes_the_last_token_alone_after_a_prefill_of_the_rest():
    rt = Top2Runtime()
    assert top2_after(RuntimeScheduler(rt), [100, 101, 102, 103], 3) == (104, 105, 0.5)
    assert rt.calls == ["open", "decode 3@0", "decode 1@3", "top2 0", "drop 0"]
    rt.calls.clear()
    assert top2_after(RuntimeScheduler(rt), [50], 0) == (51, 52, 0.5)  # no prefill before a lone token
    assert rt.calls == ["open", "decode 1@0", "top2 0", "drop 0"]
    rt.calls.clear()
    assert top2_after(RuntimeScheduler(rt), [50]) == (51, 52, 0.5)  # no prompt count given: none of it is prompt
    assert rt.calls == ["open", "decode 1@0", "top2 0", "drop 0"]
    rt.calls.clear()
    assert top2_after(RuntimeScheduler(rt), [50, 51], 0) == (52, 53, 0.5)  # a prefill of one token, then one
    assert rt.calls == ["open", "decode 1@0", "decode 1@1", "top2 0", "drop 0"]


def test_top2_after_runs_as_one_baseline_operation_outside_any_session():
    sched = RuntimeScheduler(Top2Runtime())
    top2_after(sched, [100, 101], 2)
    assert [(op.kind, op.session_id) for op in sched.operations] == [("baseline", -1)]


def test_top2_after_opens_its_session_with_the_runs_penalties_only():
    rt = Top2Runtime()
    sampling = SamplingSettings(temperature=0.8, repeat_penalty=1.3, repeat_last_n=16, presence_penalty=0.2,
                                frequency_penalty=0.1)
    top2_after(RuntimeScheduler(rt), [1, 2], 2, sampling)
    (pen,) = rt.opened
    assert (pen.repeat_penalty, pen.repeat_last_n, pen.presence_penalty, pen.frequency_penalty) == (1.3, 16, 0.2, 0.1)
    assert pen.temperature == SamplingSettings().temperature  # the rest left at the defaults


def test_find_divergence_asks_the_target_after_the_shared_prefix_and_marks_an_ended_stream_minus_one():
    rt = Top2Runtime()
    sched = RuntimeScheduler(rt)
    assert find_divergence(sched, [100, 101], [102, 103], [102, 103]) is None and rt.calls == []
    # differ at index 1: the target is asked after the prompt + plain[:1] = [100, 101, 102]
    assert find_divergence(sched, [100, 101], [102, 103, 104], [102, 999]) == Divergence(1, 103, 999, 103, 104, 0.5)
    assert rt.calls == ["open", "decode 2@0", "decode 1@2", "top2 0", "drop 0"]
    # at index 0 the question is the prompt itself: the prefill's last row
    assert find_divergence(sched, [100, 101], [102], [7]) == Divergence(0, 102, 7, 102, 103, 0.25)
    # the speculative stream ended first
    assert find_divergence(sched, [100, 101], [102, 103], [102]) == Divergence(1, 103, -1, 103, 104, 0.5)
    assert find_divergence(sched, [100, 101], [102], [102, 103]) == Divergence(1, -1, 103, 103, 104, 0.5)


def test_plain_generation_decodes_one_token_per_step_and_drops_its_session():
    rt = Top2Runtime()
    g = plain_generation(RuntimeScheduler(rt), [100, 101, 102], GenerationSettings(max_new_tokens=4))
    assert g.generated == [103, 104, 105, 106] and g.finish_reason == "length"
    assert g.plain_steps == 3 and not g.receipts  # the first token comes from the prefill
    assert rt.kv == {} and rt.calls[-1] == "drop 0"


def test_plain_generation_stops_when_its_cancel_event_is_set_and_still_drops_its_session():
    rt = Top2Runtime()
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(RequestCancelled):
        plain_generation(RuntimeScheduler(rt), [100, 101, 102], GenerationSettings(max_new_tokens=4), cancel)
    assert rt.kv == {}


def test_compare_with_plain_returns_the_plain_tokens_and_the_divergence():
    rt = Top2Runtime()
    sched = RuntimeScheduler(rt)
    plain, d = compare_with_plain(sched, [100, 101], [102, 103, 9], GenerationSettings(max_new_tokens=3))
    assert plain == [102, 103, 104] and d == Divergence(2, 104, 9, 104, 105, 0.5)
    assert compare_with_plain(sched, [100, 101], [102, 103, 104], GenerationSettings(max_new_tokens=3)) == \
        ([102, 103, 104], None)


def _speculative(rt, proposals, max_new):
    g = Generation(RuntimeScheduler(rt), ListSource(proposals), [100, 101, 102],
                   GenerationSettings(max_new_tokens=max_new, draft_max=8))
    g.run()
    return g


def test_run_baseline_compares_a_finished_run_with_plain_decoding_of_its_prompt():
    rt = Top2Runtime()
    g = _speculative(rt, [follow(3)], 6)  # 103 from the prefill, 104-107 from one window, 108 plain
    assert g.generated == [103, 104, 105, 106, 107, 108]
    r = run_baseline(RuntimeScheduler(rt), g)
    assert r.plain_tokens == (103, 104, 105, 106, 107, 108) and r.identical
    assert r.speculative_decode_tokens_per_s == g.summary().decode_tokens_per_s
    assert r.plain_decode_tokens_per_s is not None and r.plain_decode_tokens_per_s > 0
    assert rt.kv_length(g.session_id) == g.canonical_position  # the speculative session untouched


def test_run_baseline_limits_the_plain_run_to_max_new_tokens_and_at_least_one():
    rt = Top2Runtime()
    g = _speculative(rt, [follow(3)], 6)
    assert run_baseline(RuntimeScheduler(rt), g, max_new_tokens=2).plain_tokens == (103, 104)
    r = run_baseline(RuntimeScheduler(rt), g, max_new_tokens=0)
    assert r.plain_tokens == (103,)
    assert r.divergence == Divergence(1, -1, 104, 104, 105, 0.5)  # the plain stream ended after 1 token


def test_run_baseline_reports_where_a_speculative_stream_differs():
    class FlipInBatches(Top2Runtime):
        """In a batch of several rows the prediction after 104 flips to 555 (batch arithmetic)."""

        def decode_rows(self, sid, tokens, position, abort=None):
            out = super().decode_rows(sid, tokens, position, abort)
            return [555 if len(tokens) > 1 and t == 104 else p for t, p in zip(tokens, out)]

    rt = FlipInBatches()
    g = _speculative(rt, [follow(3)], 6)  # window 1 verifies [103, 104, 105, 106]: 104 right, 555 != 105
    assert g.generated == [103, 104, 555, 556, 557, 558]
    r = run_baseline(RuntimeScheduler(rt), g)
    assert r.plain_tokens == (103, 104, 105, 106, 107, 108) and not r.identical
    # the target asked after the prompt + [103, 104], decoding 104 alone: top 105, second 106
    assert r.divergence == Divergence(2, 105, 555, 105, 106, 0.5)


def test_run_baseline_passes_its_cancel_event_to_the_plain_run():
    rt = Top2Runtime()
    g = _speculative(rt, [follow(3)], 4)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(RequestCancelled):
        run_baseline(RuntimeScheduler(rt), g, cancel=cancel)


PENALIZED = SamplingSettings(temperature=0.0, repeat_penalty=1.3, repeat_last_n=16)


def test_find_divergence_asks_the_target_with_the_runs_penalties():
    rt = Top2Runtime()
    find_divergence(RuntimeScheduler(rt), [100], [101, 102], [101, 7], PENALIZED)
    assert rt.opened[-1].repeat_penalty == 1.3 and rt.opened[-1].repeat_last_n == 16


def test_compare_with_plain_and_run_baseline_pass_the_runs_penalties_to_the_divergence_check():
    rt = Top2Runtime()
    _plain, d = compare_with_plain(RuntimeScheduler(rt), [100], [101, 7],
                                   GenerationSettings(max_new_tokens=2, sampling=PENALIZED))
    assert d is not None and rt.opened[-1].repeat_penalty == 1.3

    class FlipInBatches(Top2Runtime):
        def decode_rows(self, sid, tokens, position, abort=None):
            out = super().decode_rows(sid, tokens, position, abort)
            return [555 if len(tokens) > 1 and t == 104 else p for t, p in zip(tokens, out)]

    rt = FlipInBatches()
    g = Generation(RuntimeScheduler(rt), ListSource([follow(3)]), [100, 101, 102],
                   GenerationSettings(max_new_tokens=6, draft_max=8, sampling=PENALIZED))
    g.run()
    assert run_baseline(RuntimeScheduler(rt), g).divergence is not None
    assert rt.opened[-1].repeat_penalty == 1.3 and rt.opened[-1].repeat_last_n == 16
