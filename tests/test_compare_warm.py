"""A Compare row says when its source began warm (issue 28 part 4), so a benchmark on repeated prompts or
later conversation turns cannot pass for a cold one. Tiny values, no model."""

from __future__ import annotations

from inspector.bench.compare import TurnsRun
from inspector.bench.compare_result import CompareConfig, CompareResult, CompareRow, format_compare
from inspector.engine.records import Summary
from inspector.engine.settings import GenerationSettings


def test_a_conversation_says_which_turns_began_warm_and_what_the_last_remembered():
    run = TurnsRun()
    assert run.warm_text() == ""
    run.warm = ["", "", ""]
    assert run.warm_text() == ""
    run.warm = ["", "40 tokens remembered from 1 earlier request"]
    assert run.warm_text() == "turn 2 began warm (40 tokens remembered from 1 earlier request)"
    run.warm = ["", "40 tokens from 1", "95 tokens from 2"]
    assert run.warm_text() == "turns 2-3 began warm (turn 3: 95 tokens from 2)"


def test_the_compare_table_and_json_flag_a_warm_row_and_leave_a_cold_one_alone():
    cold = CompareRow(CompareConfig("plain", "none", 0), Summary(), None, None, None, ())
    warm = CompareRow(CompareConfig("suffix", "suffix", 8), Summary(), None, None, None, (), None,
                      "turns 2-3 began warm (turn 3: 95 tokens from 2)")
    result = CompareResult((cold, warm), 10, GenerationSettings())
    lines = format_compare(result).splitlines()
    assert lines[-1] == ("warm: suffix: turns 2-3 began warm (turn 3: 95 tokens from 2) (its source remembered "
                         "earlier requests: not a cold run)")
    assert not any(line.startswith("warm: plain") for line in lines)
    assert [r["warm"] for r in result.to_json()["rows"]] == ["", "turns 2-3 began warm (turn 3: 95 tokens from 2)"]


def test_plain_margins_count_each_turns_first_token_from_its_prefill():
    from types import SimpleNamespace as N

    from inspector.bench.turns import plain_token_margins

    def ev(kind, token, margin):
        return N(kind=kind, token=token, probabilities=None if margin is None else N(margin=[margin]))

    turn1 = N(events=[ev("prefill", 5, 0.5), ev("commit", 5, None), ev("step", 6, 1.5), ev("commit", 6, None)])
    turn2 = N(events=[ev("prefill", 7, 2.5), ev("commit", 7, None), ev("step", 8, None), ev("step", 9, 3.5)])
    # one margin per generated token (5, 6 | 7, 8, 9), the turn's first from its prefill
    assert plain_token_margins([turn1, turn2]) == [0.5, 1.5, 2.5, None, 3.5]
