"""``bench --paired N`` (``inspector.bench.paired_bench``): single requests paired with llama-server's. No speed
is asserted: each pair's ratios come from its two requests, the order is ABBA, and the table reads the
pairs it got."""

from __future__ import annotations

import json

import pytest

from inspector.bench.paired_bench import PairedRow, format_paired_bench, middle, pair_order

from test_cli import cli, one_clear_line


def test_the_pairs_go_abba_so_each_server_is_first_as_often_as_second():
    orders = [pair_order(i) for i in range(8)]
    assert orders[:4] == [("ours", "theirs"), ("theirs", "ours"), ("theirs", "ours"), ("ours", "theirs")]
    assert orders[4:] == orders[:4]
    assert sum(o[0] == "ours" for o in orders) == 4


def test_the_middle_half_and_the_median_of_the_pairs():
    assert middle([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)
    assert middle([1.2]) == (1.2, 1.2, 1.2)
    with pytest.raises(ValueError):
        middle([])


def test_the_table_gives_each_measures_median_and_the_tok_s_ratio_of_the_total():
    row = PairedRow("none", total=[1.0, 1.1, 1.2, 1.3, 1.4], token=[1.0] * 5, first=[0.9, 1.0, 1.1, 1.2, 1.3],
                    ours_ms=[1200.0] * 5, theirs_ms=[1000.0] * 5)
    line = format_paired_bench([row], pairs=5, n_predict=64, threads=2).splitlines()[-1]
    assert line.split()[:2] == ["none", "1.200"] and "[1.100-1.300]" in line
    assert "0.833" in line  # 1 / 1.2
    assert line.split()[-2:] == ["1200", "1000"]


def test_bench_paired_pairs_every_request_with_llama_servers(tmp_path, llama_server_binary):
    out = tmp_path / "paired.json"
    p = cli("bench", "--paired", "2", "--max-tokens", "8", "--threads", "1", "--tasks", "copy-exact",
            "--sources", "", "--llama-server", llama_server_binary, "--json", out, timeout=600)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    (row,) = doc["rows"]
    assert row["source"] == "none" and doc["pairs"] == 2
    for key in ("total_ratios", "per_token_ratios", "first_token_ratios", "ours_ms", "theirs_ms"):
        assert len(row[key]) == 2 and all(v > 0 for v in row[key]), (key, row[key])
    for ratio, ours, theirs in zip(row["total_ratios"], row["ours_ms"], row["theirs_ms"]):
        assert ratio == pytest.approx(ours / theirs, rel=1e-6)
    assert "paired: 2 single" in p.stdout


def test_bad_paired_counts_and_mixed_modes_are_one_line_errors_before_the_model_loads():
    for args in (("--paired", "0"), ("--paired", "x"), ("--paired", "2", "--concurrency", "1")):
        p = cli("bench", *args, timeout=120)
        assert p.returncode == 2, (args, p.stderr)
        line = one_clear_line(p.stderr)
        assert "loading" not in p.stderr and line.startswith("spec-inspector"), line
