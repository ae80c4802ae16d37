"""``compare`` repeats every configuration in rounds and reports medians (issue 41): the first run of a
sequence was ~10% faster on this machine, so runs of one configuration one after the other favoured
whichever ran first."""

from __future__ import annotations

from statistics import median

import pytest

from inspector.bench.compare import parse_config, run_compare
from inspector.bench.compare_result import format_compare
from inspector.engine import GenerationSettings

from test_cli import cli


def test_every_configuration_runs_once_per_round_and_its_speed_is_the_median(scheduler, chat_tokens):
    calls = []
    configs = [parse_config("none"), parse_config("ngram:draft_max=4"),
               parse_config("draft:draft_model=/nonexistent/d.gguf")]
    result = run_compare(scheduler, chat_tokens("Count from one to ten."), configs,
                         GenerationSettings(max_new_tokens=8), progress=lambda i, n, label: calls.append((i, label)),
                         repeats=3)
    plain, ngram, broken = result.rows
    names = [c.label for c in configs]
    # Rounds: plain, ngram, then the draft (whose source cannot be made: its row has the error, run once).
    assert [label for _i, label in calls] == [
        f"{names[0]} (round 1/3)", f"{names[1]} (round 1/3)", f"{names[2]} (round 1/3)",
        f"{names[0]} (round 2/3)", f"{names[1]} (round 2/3)",
        f"{names[0]} (round 3/3)", f"{names[1]} (round 3/3)"]
    for row in (plain, ngram):
        assert len(row.decode_tokens_per_s_runs) == 3 and all(v > 0 for v in row.decode_tokens_per_s_runs)
        assert row.summary.decode_tokens_per_s == median(row.decode_tokens_per_s_runs)
    assert ngram.speedup_vs_plain == pytest.approx(median(ngram.decode_tokens_per_s_runs)
                                                   / median(plain.decode_tokens_per_s_runs))
    assert broken.error and broken.decode_tokens_per_s_runs == ()
    assert result.repeats == 3 and result.to_json()["repeats"] == 3
    assert result.to_json()["rows"][1]["decode_tokens_per_s_runs"] == list(ngram.decode_tokens_per_s_runs)
    assert "medians of 3 runs per configuration" in format_compare(result)


def test_one_round_keeps_the_runs_own_speed_and_says_nothing_of_medians(scheduler, chat_tokens):
    result = run_compare(scheduler, chat_tokens("Say hi."), [parse_config("none")], GenerationSettings(max_new_tokens=3))
    (row,) = result.rows
    assert row.decode_tokens_per_s_runs == (row.summary.decode_tokens_per_s,)
    assert result.repeats == 1 and "medians" not in format_compare(result)
    with pytest.raises(ValueError, match="at least 1"):
        run_compare(scheduler, chat_tokens("Say hi."), [parse_config("none")], GenerationSettings(), repeats=0)


def test_the_command_repeats_three_times_unless_told_and_says_so():
    p = cli("compare", "--prompt", "Say hi.", "--config", "none", "--max-tokens", "2", "--threads", "1")
    assert p.returncode == 0, p.stderr
    assert "(round 3/3)" in p.stderr and "medians of 3 runs per configuration" in p.stdout
    one = cli("compare", "--prompt", "Say hi.", "--config", "none", "--max-tokens", "2", "--threads", "1",
              "--repeats", "1")
    assert one.returncode == 0 and "round" not in one.stderr and "medians" not in one.stdout
