"""A Compare row says when its source began warm (issue 28 part 4), so a benchmark on repeated prompts or
later conversation turns cannot pass for a cold one. Tiny values, no model."""

from __future__ import annotations

from inspector.bench.compare import TurnsRun
from inspector.bench.compare_result import CompareConfig, CompareResult, CompareRow, format_compare
from inspector.engine.receipt import Summary
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
