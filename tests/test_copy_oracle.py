"""The copy oracle (issue 41 part 3): the longest run of the true output copied from the context, proposed
when it pays on c(k). Pure: tiny token lists, cost functions written here."""

from __future__ import annotations

import random

import pytest

from inspector.bench.best import oracle_row
from inspector.bench.oracle import CopyOracle, copied_run_length, oracle_plan
from inspector.bench.tune import MODEL_FREE, Recording, predict, replay
from inspector.llama.cost_model import CostModel


def text(tokens) -> str:
    return "".join(map(chr, tokens))


def test_the_copied_run_is_the_longest_continuation_that_follows_the_current_token_earlier():
    context = text([1, 2, 3, 4, 1, 2])
    assert copied_run_length(context, chr(2), text([3, 4, 9])) == 2
    assert copied_run_length(context, chr(2), text([3, 4, 1, 2])) == 4


def test_no_run_is_copied_when_the_next_token_never_followed_the_current_one():
    context = text([1, 2, 3, 4, 1, 2])
    assert copied_run_length(context, chr(2), text([4, 3])) == 0
    assert copied_run_length(context, chr(7), text([3])) == 0


def test_a_flat_cost_plans_the_whole_run_and_a_linear_one_none():
    assert oracle_plan([0, 5, 4, 3, 2, 1], lambda k: 1.0 + 0.1 * (k - 1))[1] == 4  # 4 proposed + 1 = the 5 left
    assert oracle_plan([0, 5, 4, 3, 2, 1], lambda k: float(k)) == [0] * 6


def brute_force_ms(longest, cost, g=0) -> float:
    """The least verify time from ``g`` over every schedule, by trying them all."""
    n = len(longest)
    if g >= n:
        return 0.0
    return min(cost(length + 1) + brute_force_ms(longest, cost, min(n, g + length + 1))
               for length in range(longest[g] + 1))


def planned_ms(plan, cost) -> float:
    g, ms = 0, 0.0
    while g < len(plan):
        ms += cost(plan[g] + 1)
        g += plan[g] + 1
    return ms


@pytest.mark.parametrize("seed", range(6))
def test_the_plan_finishes_in_the_least_verify_time_of_every_schedule(seed):
    rng = random.Random(seed)
    longest = [rng.randrange(0, 6) for _ in range(12)]
    jumpy = lambda k: [1.0, 1.3, 1.5, 2.9, 3.0, 3.05, 5.0][k - 1]  # noqa: E731 - greedy by rate fails on it
    plan = oracle_plan(longest, jumpy)
    assert all(0 <= p <= m for p, m in zip(plan, longest))
    assert planned_ms(plan, jumpy) == pytest.approx(brute_force_ms(longest, jumpy))


def test_the_oracle_copies_the_repeated_prompt_in_one_window():
    rec = Recording((5, 6, 7, 8, 9), (5, 6, 7, 8, 9, 1), max_new_tokens=6, n_batch=512, n_ctx=512)
    windows, plain, _ms = replay(CopyOracle(rec, lambda k: 1.0 + 0.1 * (k - 1), 8), rec, draft_max=8)
    assert [(w.proposal, w.accepted, w.committed) for w in windows] == [((6, 7, 8, 9), 4, 5)]
    assert plain == 0


def test_the_oracle_respects_the_draft_max():
    rec = Recording((5, 6, 7, 8, 9), (5, 6, 7, 8, 9, 1), max_new_tokens=6, n_batch=512, n_ctx=512)
    windows, _plain, _ms = replay(CopyOracle(rec, lambda k: 1.0 + 0.1 * (k - 1), 2), rec, draft_max=2)
    assert windows and all(len(w.proposal) <= 2 and w.accepted == len(w.proposal) for w in windows)
    assert sum(w.committed for w in windows) == 5  # every token after the prefill's in windows


def copying_recording(seed: int) -> Recording:
    """A prompt of random tokens, then an output that copies stretches of it with edits between."""
    rng = random.Random(seed)
    prompt = [rng.randrange(100, 160) for _ in range(120)]
    output: list[int] = []
    while len(output) < 150:
        start = rng.randrange(0, len(prompt) - 20)
        output += prompt[start:start + rng.randrange(3, 20)]
        output += [rng.randrange(100, 160) for _ in range(rng.randrange(0, 4))]
    return Recording(tuple(prompt), tuple(output[:150]), max_new_tokens=150, n_batch=512, n_ctx=2048)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_lookup_source_verifies_its_output_faster_than_the_oracle(seed):
    rec = copying_recording(seed)
    costs = CostModel(tuple(1.0 + 0.12 * k for k in range(16)))
    bound = oracle_row([rec], costs, draft_max=8)
    assert bound.proposal_ms == 0 and bound.speedup > 1.5
    for source in MODEL_FREE:
        row = predict(source, {}, 8, rec, costs)
        verify_ms = row.decode_ms - row.proposal_ms
        assert bound.decode_ms <= verify_ms * (1 + 1e-9), (source, bound.decode_ms, verify_ms)
