"""Repeat, presence and frequency penalties (issue 26): llama.cpp's rule on tiny rows, the same
arithmetic as llama.cpp's own penalties sampler, and on the real model a speculative run with
penalties gives plain decoding's tokens and llama-server's."""

from __future__ import annotations

import ctypes
from collections import Counter

import llama_cpp
import numpy as np
import pytest

from inspector.bench.server_process import penalty_fields
from inspector.engine import Generation, GenerationSettings
from inspector.engine.penalties import penalize_row, penalize_rows
from inspector.engine.proposal import Proposal
from inspector.engine.settings import SamplingSettings
from inspector.prompts import example_prompt
from inspector.sources.ngram import NgramSource

N = 48
PENALTIES = SamplingSettings(repeat_penalty=1.3, repeat_last_n=64, presence_penalty=0.4, frequency_penalty=0.2)


def test_a_positive_logit_is_divided_and_a_negative_or_zero_one_multiplied_by_the_repeat_penalty():
    row = np.array([2.0, -2.0, 0.0, 1.0], dtype=np.float32)
    penalize_row(row, Counter({0: 1, 1: 1, 2: 1}), SamplingSettings(repeat_penalty=2.0))
    assert row.tolist() == [1.0, -4.0, 0.0, 1.0]


def test_frequency_counts_every_occurrence_and_presence_counts_once():
    row = np.array([5.0, 5.0, 5.0], dtype=np.float32)
    penalize_row(row, Counter({0: 3, 1: 1}), SamplingSettings(presence_penalty=1.0, frequency_penalty=0.5))
    assert row.tolist() == [5.0 - 1.5 - 1.0, 5.0 - 0.5 - 1.0, 5.0]


def test_each_row_sees_the_last_n_tokens_up_to_and_including_its_own_position():
    sequence = [0, 1, 2, 3, 4]
    rows = np.zeros((3, 6), dtype=np.float32)
    penalize_rows(rows, sequence, 2, SamplingSettings(repeat_last_n=2, presence_penalty=1.0))
    assert [np.nonzero(r)[0].tolist() for r in rows] == [[1, 2], [2, 3], [3, 4]]


def test_repeat_last_n_zero_or_neutral_values_leave_the_rows_untouched():
    for s in (SamplingSettings(repeat_penalty=2.0, repeat_last_n=0), SamplingSettings()):
        rows = np.ones((2, 4), dtype=np.float32)
        penalize_rows(rows, [0, 1, 2], 1, s)
        assert rows.tolist() == np.ones((2, 4)).tolist()
        assert not s.penalized


def test_a_sequence_shorter_than_the_rows_is_refused_with_both_lengths():
    with pytest.raises(ValueError, match="position 3, observed 3 tokens"):
        penalize_rows(np.zeros((2, 4), dtype=np.float32), [0, 1, 2], 2, PENALTIES)


def _llama_cpp_penalties(logits: np.ndarray, history, s: SamplingSettings) -> np.ndarray:
    """llama.cpp's own penalties sampler applied to ``logits`` after accepting ``history``."""
    smpl = llama_cpp.llama_sampler_init_penalties(logits.shape[0], s.repeat_last_n, s.repeat_penalty,
                                                  s.frequency_penalty, s.presence_penalty)
    try:
        for t in history:
            llama_cpp.llama_sampler_accept(smpl, t)
        data = (llama_cpp.llama_token_data * logits.shape[0])(
            *[llama_cpp.llama_token_data(i, float(x), 0.0) for i, x in enumerate(logits)])
        arr = llama_cpp.llama_token_data_array(ctypes.cast(data, llama_cpp.llama_token_data_p), logits.shape[0],
                                               -1, False)
        llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
        return np.array([d.logit for d in data], dtype=np.float32)
    finally:
        llama_cpp.llama_sampler_free(smpl)


@pytest.mark.parametrize("s", [PENALTIES, SamplingSettings(repeat_penalty=0.7, repeat_last_n=5, frequency_penalty=-0.3),
                               SamplingSettings(repeat_penalty=1.1, repeat_last_n=500, presence_penalty=2.5)])
def test_rows_are_penalized_bit_for_bit_as_llama_cpps_penalties_sampler_does(s):
    rng = np.random.default_rng(7)
    sequence = rng.integers(0, 40, size=30).tolist()
    rows = rng.normal(0, 3, size=(6, 40)).astype(np.float32)
    expected = [_llama_cpp_penalties(rows[i].copy(), sequence[:24 + i + 1], s) for i in range(6)]
    penalize_rows(rows, sequence, 24, s)
    assert [r.tobytes() for r in rows] == [e.tobytes() for e in expected]


# -- the real model ---------------------------------------------------------------------------------

def _run(scheduler, source, tokens, sampling, n=N) -> Generation:
    g = Generation(scheduler, source, tokens, GenerationSettings(max_new_tokens=n, sampling=sampling))
    try:
        g.run()
    finally:
        g.close()
    return g


def test_greedy_speculation_with_penalties_gives_plain_decodings_tokens_and_they_are_not_the_unpenalized_ones(
        scheduler, chat_tokens):
    tokens = chat_tokens(example_prompt("copy-exact"))
    plain = _run(scheduler, None, tokens, PENALTIES).generated
    spec = _run(scheduler, NgramSource(), tokens, PENALTIES)
    assert sum(r.proposal_token_count for r in spec.receipts) > 0, "nothing was proposed: the test shows nothing"
    assert spec.generated == plain
    assert _run(scheduler, None, tokens, SamplingSettings()).generated != plain, \
        "the penalties changed nothing on a copy prompt: they were not applied"


class _WrongThird:
    """Proposes the next five tokens of a known output with the third one wrong: every window accepts
    two rows, commits a correction, and its later rows are penalized with a token never committed."""

    name = "wrong-third"

    def __init__(self, output, prompt_count):
        self.output, self.prompt_count = list(output), prompt_count

    def propose(self, request):
        k = len(request.tokens) - self.prompt_count
        ids = self.output[k:k + 5]
        if len(ids) < 5:
            return None
        ids[2] = (ids[2] + 1) % 1000
        return Proposal(b"wrong-third", ids)

    def report(self, receipt):
        pass

    def discard(self, decision_id, reason):
        pass


def test_a_rejected_windows_later_rows_see_the_proposal_and_the_next_window_sees_only_what_was_committed(
        scheduler, chat_tokens):
    tokens = chat_tokens(example_prompt("copy-with-corrections"))
    plain = _run(scheduler, None, tokens, PENALTIES).generated
    spec = _run(scheduler, _WrongThird(plain, len(tokens)), tokens, PENALTIES)
    rejected = [r for r in spec.receipts if r.accepted_proposal_tokens == 2 and r.verification_rows == 6]
    assert len(rejected) >= 3, "too few windows rejected at their third row: the test shows little"
    assert spec.generated == plain


def test_the_first_token_is_the_argmax_of_the_prompts_last_row_after_llama_cpps_own_penalties(
        scheduler, runtime, chat_tokens):
    tokens = chat_tokens(example_prompt("copy-exact"))

    def raw_last_row(rt):
        sid = rt.open_session(None)
        try:
            rt.prefill_predict(sid, tokens, 0)
            return np.array(rt.row_logits(-1))
        finally:
            rt.drop_session(sid)

    row = scheduler.execute("test", -1, raw_last_row).value
    expected = int(np.argmax(_llama_cpp_penalties(row, tokens, PENALTIES)))
    assert _run(scheduler, None, tokens, PENALTIES, n=1).generated == [expected]


@pytest.mark.slow
def test_greedy_output_with_penalties_equals_llama_servers_with_the_same_penalties(
        scheduler, chat_tokens, start_llama_server):
    server = start_llama_server(threads=1)
    parted = {}
    for example in ("copy-exact", "open-ended"):
        tokens = chat_tokens(example_prompt(example))
        for s in (PENALTIES, SamplingSettings(repeat_penalty=0.8, repeat_last_n=16, frequency_penalty=-0.2)):
            ours = _run(scheduler, NgramSource(), tokens, s).generated
            theirs = list(server.client.complete(tokens, N, penalty_fields(s)).tokens)
            if ours != theirs:
                parted[(example, s.repeat_penalty)] = (len(ours), len(theirs))
    assert not parted, f"our output with penalties differs from llama-server's: {parted}"
