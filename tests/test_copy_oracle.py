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
    assert oracle_plan([0, 5, 4, 3, 2, 1], lambda k: 1.0 + 0.1 * (k - 1))[1] == (4, 5)  # 4 + 1 = the 5 left
    assert oracle_plan([0, 5, 4, 3, 2, 1], lambda k: float(k)) == [(0, 1)] * 6


def brute_force_ms(longest, cost, caps) -> float:
    """The least verify time over every schedule (accepted L, proposed P >= L at each window), by trying
    every schedule in turn (each one's total summed from its start)."""
    n = len(longest)
    best = float("inf")

    def walk(g: int, spent: float) -> None:
        nonlocal best
        if g >= n:
            best = min(best, spent)
            return
        for length in range(longest[g] + 1):
            for proposed in range(length, max(caps[g], length) + 1):
                walk(min(n, g + length + 1), spent + cost(proposed + 1))

    walk(0, 0.0)
    return best


def planned_ms(plan, cost) -> float:
    g, ms = 0, 0.0
    while g < len(plan):
        length, rows = plan[g]
        assert rows >= length + 1
        ms += cost(rows)
        g += length + 1
    return ms


@pytest.mark.parametrize("seed", range(6))
def test_the_plan_finishes_in_the_least_verify_time_of_every_schedule(seed):
    rng = random.Random(seed)
    longest = [rng.randrange(0, 4) for _ in range(6)]
    caps = [m + rng.randrange(0, 5) for m in longest]
    jumpy = lambda k: [1.0, 1.3, 1.5, 2.9, 3.0, 3.05, 5.0, 2.8][k - 1]  # noqa: E731 - greedy by rate fails; dips at 8
    plan = oracle_plan(longest, jumpy, caps)
    assert all(0 <= p <= m and rows <= c + 1 for (p, rows), m, c in zip(plan, longest, caps))
    assert planned_ms(plan, jumpy) == pytest.approx(brute_force_ms(longest, jumpy, caps))


def test_where_c_k_dips_the_oracle_pads_its_window_with_rejected_tokens_and_commits_the_same():
    rec = Recording((5, 6, 7, 8, 9), (5, 6, 7, 8, 9, 1, 2), max_new_tokens=7, n_batch=512, n_ctx=512)
    dips = lambda k: {1: 1.0, 2: 1.9, 3: 2.0, 4: 2.1, 5: 2.2, 6: 1.5}.get(k, 9.0)  # noqa: E731 - 6 rows cheapest
    windows, _plain, _ms = replay(CopyOracle(rec, dips, 5), rec, draft_max=5)
    assert (windows[0].proposal[:4], windows[0].accepted, windows[0].decoded_rows) == ((6, 7, 8, 9), 4, 6)
    assert windows[0].committed == 5


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
