"""``bench --llama-server`` (issue 24): ours against a real llama-server on the same work, with and
without probabilities, the Q8_0 form's speedup and the window against headless, from one run.

No speed is asserted (tests hold on any machine): the figures must exist, come from the runs they
name, and the two programs must have produced the same tokens.
"""

from __future__ import annotations

import json
from statistics import median

import pytest

from inspector.bench.compare_result import CompareConfig
from inspector.bench.server_bench import RUN_ORDER, format_server_bench, measure_run, run_order, BenchRow
from inspector.engine import RuntimeScheduler

from test_cli import cli, one_clear_line

SIMPLE = "ngram-simple:draft_max=16,size_n=3,size_m=16"


def test_bench_against_llama_server_reports_both_programs_ratios_the_q8_speedup_and_the_window(
        tmp_path, llama_server_binary):
    out = tmp_path / "bench.json"
    p = cli("bench", "--llama-server", llama_server_binary, "--tasks", "copy-exact", "--repeats", "1",
            "--config", "none", "--config", SIMPLE, "--max-tokens", "24", "--threads", "1", "--json", out,
            timeout=900)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    rows = doc["rows"]
    assert [r["label"] for r in rows] == ["none", "ngram-simple draft_max 16 size_n=3 size_m=16"]
    for r in rows:
        assert len(r["ours_tps"]) == len(r["ours_tps_without_probabilities"]) == len(r["server_tps"]) == 1
        assert r["server_tps"][0] > 0 and r["ours_tps"][0] > 0
        assert r["ratio"] == median(r["ours_tps"]) / median(r["server_tps"])
        assert r["same_output"] and r["same_drafts"], r
        assert r["error"] is None
    assert rows[0]["flags"] == [] and rows[1]["flags"][:2] == ["--spec-type", "ngram-simple"]
    assert rows[1]["probability_us_per_row"] > 0 and 0 < rows[1]["outside_share"]
    q8 = doc["weight_form_speedup"]
    assert q8["weight_type"] == "Q8_0" and q8["speedup"] == median(q8["ngram_tps"]) / median(q8["plain_tps"])
    gui = doc["window_vs_headless"]
    assert gui["ratio"] == median(g / h for g, h in zip(gui["gui_tps"], gui["headless_tps"]))  # pair by pair
    for needle in ("ours / llama-server with probabilities", "on the Q8_0 form", "window / headless"):
        assert needle in p.stdout


def test_bench_against_a_running_servers_url_is_refused_before_anything_runs():
    p = cli("bench", "--llama-server", "http://127.0.0.1:9", "--tasks", "copy-exact")
    assert p.returncode == 2 and p.stdout == ""
    assert "starts its own llama-server" in one_clear_line(p.stderr)


def test_a_draft_models_decoding_counts_as_llama_cpp_time_not_as_ours(runtime, model_path, chat_tokens):
    """The draft's own decodes are llama.cpp's work: the time outside llama_decode must not include them
    (they took 1.8x the target's decode time in a draft run before they were counted)."""
    config = CompareConfig("draft", "draft", 4, {"draft_model": str(model_path)})
    m = measure_run(RuntimeScheduler(runtime), config, chat_tokens("Count from one to twenty."), 16, True)
    assert m.drafted > 0 and m.decode_us > 0
    assert m.outside_us < m.decode_us, (m.outside_us, m.decode_us)


def test_the_table_names_rows_below_the_goal_and_a_server_that_failed():
    ok = BenchRow("copy-exact", "none", (), ours=[90.0], ours_bare=[95.0], server=[100.0], outside_share=[0.05],
                  outside_us_per_step=[500.0], probability_us_per_row=[300.0])
    failed = BenchRow("copy-exact", "ngram-mod", ("--spec-type", "ngram-mod"), ours=[120.0], ours_bare=[125.0],
                      error="llama-server did not start: invalid argument")
    text = format_server_bench([ok, failed])
    assert "0.90" in text and "1 of 1 below" in text
    assert "error: llama-server did not start" in text


def test_a_rows_ratio_is_the_median_of_each_rounds_ratio_not_a_ratio_of_medians_from_different_rounds():
    drift = BenchRow("open-ended", "none", (), ours=[100.0, 100.0, 200.0], ours_bare=[100.0, 200.0, 200.0],
                     server=[100.0, 200.0, 200.0])  # the machine ran twice as fast from round 2 on; ours lagged once
    assert drift.ratio() == 1.0 and drift.ratio(bare=True) == 1.0  # medians alone: 100 / 200
    slower = BenchRow("open-ended", "none", (), ours=[90.0, 180.0, 95.0], ours_bare=[], server=[100.0, 200.0, 100.0])
    assert slower.ratio() == 0.9 and slower.ratio(bare=True) is None


def test_three_rounds_run_each_program_first_second_and_third_once():
    rounds = [run_order(r) for r in range(3)]
    assert rounds[0] == ("ours", "server", "bare")
    for place in range(3):
        assert sorted(r[place] for r in rounds) == sorted(RUN_ORDER)
    assert run_order(3) == rounds[0]


def test_the_time_inside_llama_decode_is_split_between_plain_steps_and_windows(runtime, scheduler):
    from inspector.prompts import example_prompt

    tokens = runtime.prompt_tokens(example_prompt("copy-exact"))
    plain = measure_run(scheduler, CompareConfig("plain", "none", 0), tokens, 12, True)
    assert plain.window_us == (0.0, 0.0) and plain.outside_share("window") is None
    assert plain.plain_us[0] == pytest.approx(plain.decode_us) and plain.plain_us[1] > 0
    ngram = measure_run(scheduler, CompareConfig("ngram", "ngram", 8), tokens, 32, True)
    assert ngram.window_us[0] > 0 and ngram.outside_share("window") > 0
    assert ngram.plain_us[0] + ngram.window_us[0] == pytest.approx(ngram.decode_us)
