"""``bench --serve``: our serve against a real llama-server over HTTP, the same streamed chat requests.

No speed is asserted (tests hold on any machine): the figures must exist, come from the requests they
name (one per example and repeat on each side), the ratios must be the medians of those pairs, and both
programs must have answered alike.
"""

from __future__ import annotations

import json
from statistics import median

from inspector.bench.serve_bench import ServeBenchRow, StreamedChat, format_serve_bench

from test_cli import cli

SIMPLE = "ngram-simple:draft_max=16,size_n=3,size_m=16"


def test_bench_serve_reports_decode_and_first_token_ratios_per_source_from_both_programs(
        tmp_path, llama_server_binary):
    out = tmp_path / "bench.json"
    p = cli("bench", "--serve", "--llama-server", llama_server_binary, "--tasks", "copy-exact", "--repeats", "1",
            "--config", SIMPLE, "--max-tokens", "8", "--threads", "1", "--json", out, timeout=600)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    (row,) = doc["rows"]
    assert row["label"] == "ngram-simple draft_max 16 size_n=3 size_m=16"
    assert row["flags"][row["flags"].index("--spec-type") + 1] == "ngram-simple"
    assert row["error"] is None
    for side in ("ours_tps", "theirs_tps", "ours_first_token_s", "theirs_first_token_s"):
        assert len(row[side]) == 1 and row[side][0] > 0, (side, row)
    assert row["decode_ratio"] == row["ours_tps"][0] / row["theirs_tps"][0]
    assert row["first_token_ratio"] == row["ours_first_token_s"][0] / row["theirs_first_token_s"][0]
    assert row["same_output"] and row["same_drafts"], row
    lines = p.stdout.splitlines()
    assert lines[0].startswith("serve / llama-server: 1 examples as streamed chat requests, greedy, 8 tokens, 1 threads")
    (table_row,) = [ln for ln in lines if ln.startswith(row["label"][:46])]
    assert table_row.split()[-1] in ("met", "missed")
    assert table_row.split()[-1] == ("met" if row["meets_goal"] else "missed")
    assert lines[-2].startswith("goal: decode >= 0.95x llama-server's and the first token within 10%")


def test_the_goal_line_counts_the_rows_that_meet_both_goals_and_names_a_failed_server():
    fast = ServeBenchRow("none", (), ours_tps=[100.0, 90.0, 120.0], theirs_tps=[100.0, 100.0, 100.0],
                         ours_ttft=[0.10, 0.10, 0.10], theirs_ttft=[0.10, 0.095, 0.2])
    slow_start = ServeBenchRow("simple", ("--spec-type", "ngram-simple"), ours_tps=[100.0], theirs_tps=[100.0],
                               ours_ttft=[0.2], theirs_ttft=[0.1])
    failed = ServeBenchRow("mod", ("--spec-type", "ngram-mod"), ours_tps=[100.0], ours_ttft=[0.1],
                           error="llama-server exited (code 1) before it was ready: invalid argument")
    assert fast.decode_ratio == median([1.0, 0.9, 1.2]) and fast.first_token_ratio == median([1.0, 0.1 / 0.095, 0.5])
    assert (fast.meets_goal, slow_start.meets_goal, failed.meets_goal) == (True, False, None)
    text = format_serve_bench([fast, slow_start, failed], examples=["copy-exact"], max_tokens=8, repeats=3,
                              threads=2)
    assert text.splitlines()[-1].endswith("1 of 3 rows meet it")
    assert "error: llama-server exited (code 1)" in text


def test_a_chat_that_streamed_no_text_has_no_first_token_time_and_counts_no_pair():
    empty = StreamedChat(None, "", {"predicted_per_second": 0.0})
    row = ServeBenchRow("none", ())
    row.add([empty], [StreamedChat(0.1, "x", {"predicted_per_second": 50.0, "draft_n": 3, "draft_n_accepted": 1})])
    assert row.first_token_ratio is None and not row.same_output and not row.same_drafts
