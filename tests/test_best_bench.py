"""``bench --llama-server --best`` (issue 41 part 3): per workload each of our sources and each of
llama-server's speculative types at the tuner's best settings, both winners, and the copy oracle.

No speed is asserted (tests hold on any machine): the figures must come from the runs they name, the
tuned settings must be ones llama-server runs, and the oracle must bound every prediction.
"""

from __future__ import annotations

import json
from statistics import median

import pytest

from inspector.bench.best import BEST_DRAFT_MAXES, OURS, SERVER, BestWorkload, Contender, format_best, server_grid
from inspector.bench.compare_result import CompareConfig
from inspector.bench.tune import TuneRow
from inspector.cli.bench_best import BEST_WORKLOADS, best_workloads
from inspector.prompts import EXAMPLES, TURNS_EXAMPLES
from inspector.sources.server_flags import runs_alike_on_server, server_sources

from test_cli import cli, one_clear_line


def test_best_runs_every_example_and_both_conversations_unless_tasks_name_some():
    assert best_workloads(",".join(EXAMPLES)) == [*EXAMPLES, *TURNS_EXAMPLES] == list(BEST_WORKLOADS)
    assert best_workloads("agent-edits, copy-exact") == ["agent-edits", "copy-exact"]


def test_an_unknown_workload_is_named():
    with pytest.raises(ValueError, match="unknown task nope"):
        best_workloads("copy-exact,nope")


def test_llama_server_runs_a_configuration_alike_only_when_our_draft_max_caps_nothing_it_would_propose():
    assert runs_alike_on_server("ngram-simple", {"size_n": 3, "size_m": 12}, 12)
    assert not runs_alike_on_server("ngram-simple", {"size_n": 3, "size_m": 48}, 12)
    assert runs_alike_on_server("ngram-mod", {"n_match": 8, "n_min": 4, "n_max": 16}, 16)
    assert not runs_alike_on_server("ngram-mod", {"n_match": 8, "n_min": 4}, 16)  # its own n_max: 64
    assert not runs_alike_on_server("ngram-cache", {"branches": 3}, 16)  # a tree
    assert not runs_alike_on_server("suffix", {}, 16) and not runs_alike_on_server("none", {}, 0)


def test_the_server_grid_sets_each_types_own_maximum_to_the_draft_max():
    for source in ("ngram-simple", "ngram-map-k4v", "ngram-mod"):
        configs = server_grid(source)
        assert {dm for _s, _o, dm in configs} == set(BEST_DRAFT_MAXES)
        own = "n_max" if source == "ngram-mod" else "size_m"
        assert all(o[own] == dm for _s, o, dm in configs)
    assert {dm for _s, _o, dm in server_grid("ngram-cache")} == {d for d in BEST_DRAFT_MAXES if d >= 8}


def row(speedup: float, draft_max: int = 8) -> TuneRow:
    return TuneRow("x", {}, draft_max, 1, 1, 1, 0, 0.0, 1.0, 1.0, speedup)


def contender(side: str, source: str, tps: list[float]) -> Contender:
    return Contender(side, CompareConfig(source, source, 0 if source == "none" else 8), tps=tps)


def test_each_sides_winner_is_its_fastest_configuration_and_speedups_are_over_its_own_plain():
    w = BestWorkload("copy-exact", 1, 64, 2.0, row(1.6),
                     [contender(OURS, "none", [100.0, 90.0, 110.0]), contender(OURS, "suffix", [150.0, 160.0]),
                      contender(OURS, "ngram", [140.0])],
                     [contender(SERVER, "none", [120.0]), contender(SERVER, "ngram-mod", [144.0])])
    assert w.winner(OURS).config.source == "suffix" and w.winner(SERVER).config.source == "ngram-mod"
    assert w.speedup(w.winner(OURS)) == pytest.approx(155.0 / 100.0)
    assert w.speedup(w.winner(SERVER)) == pytest.approx(144.0 / 120.0)
    text = format_best([w])
    assert "ahead of llama-server's best on 1 of 1" in text  # 155 > 144 tokens/s
    assert "1.08" in text.splitlines()[1]  # ours/srv = 155 / 144


def test_a_failed_configuration_never_wins():
    w = BestWorkload("open-ended", 1, 64, 2.0, row(1.1),
                     [contender(OURS, "none", [100.0])],
                     [contender(SERVER, "none", [100.0]), contender(SERVER, "ngram-mod", [300.0])])
    w.server[1].error = "llama-server exited"
    assert w.winner(SERVER).config.source == "none"
    assert "error: llama-server exited" in format_best([w])


def test_best_against_llama_server_tunes_both_sides_measures_both_and_bounds_them_by_the_oracle(
        tmp_path, llama_server_binary):
    out = tmp_path / "best.json"
    p = cli("bench", "--llama-server", llama_server_binary, "--best", "--tasks", "copy-exact,agent-edits",
            "--repeats", "1", "--max-tokens", "16", "--threads", "1", "--json", out, timeout=900)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert [w["workload"] for w in doc["workloads"]] == ["copy-exact", "agent-edits"]
    for w in doc["workloads"]:
        ours, theirs = w["ours"], w["llama_server"]
        assert ours[0]["source"] == "none" and theirs[0]["source"] == "none" and theirs[0]["flags"] == []
        assert {"ngram", "suffix"} <= {c["source"] for c in ours}
        for c in ours + theirs:
            assert c["error"] is None and len(c["tps"]) == 1 and c["tps"][0] > 0, c
        for c in theirs[1:]:  # llama-server's types at settings it runs: chains, its own flags
            assert c["source"] in server_sources()
            assert c["flags"][:2] == ["--spec-type", c["source"]]
            own = [c["flags"][i + 1] for i, f in enumerate(c["flags"]) if f.endswith(("-size-m", "-n-max"))]
            assert all(int(v) <= c["draft_max"] for v in own), c  # our draft max caps nothing llama-server proposes
            mine = next(o for o in ours if o["source"] == c["source"])  # ours may also take trees: never worse
            assert mine["predicted_speedup"] >= c["predicted_speedup"]
        for c in ours[1:]:
            assert c["predicted_speedup"] <= w["oracle_speedup"] * (1 + 1e-9), c
        best = max(ours, key=lambda c: c["median_tps"])
        assert w["ours_winner"] == best["label"]
        assert w["ours_speedup"] == pytest.approx(median(best["tps"]) / median(ours[0]["tps"]))
    assert doc["workloads"][1]["turns"] == 4
    # One request, the same prompt token ids: llama-server's plain decoding generates ours. (Not asserted on the
    # conversation: llama-server prefills only each turn's new tokens, and other batch shapes can flip a near-tie.)
    assert doc["workloads"][0]["llama_server"][0]["same_output"], "llama-server's plain decoding differs from ours"
    assert "ours ahead of llama-server's best on" in p.stdout and "copy oracle" in p.stdout


def test_best_refuses_a_running_servers_url_before_anything_runs():
    p = cli("bench", "--llama-server", "http://127.0.0.1:9", "--best", "--tasks", "copy-exact")
    assert p.returncode == 2 and p.stdout == ""
    assert "starts its own llama-server" in one_clear_line(p.stderr)


def test_a_workload_lost_at_equal_speedups_is_said_to_be_decided_by_plain_decoding():
    w = BestWorkload("copy-exact", 1, 64, 2.0, row(1.9),
                     [contender(OURS, "none", [90.0]), contender(OURS, "ngram", [180.0])],
                     [contender(SERVER, "none", [100.0]), contender(SERVER, "ngram-map-k", [200.0])])
    assert w.plain_ratio() == pytest.approx(0.9)
    text = format_best([w])
    assert "decided by plain decoding" in text and "copy-exact" in text.split("decided by plain decoding")[1]
    assert "decided by the sources" not in text


def test_a_workload_lost_on_speedup_is_said_to_be_decided_by_the_sources():
    w = BestWorkload("agent-edits", 4, 256, 2.0, row(1.9),
                     [contender(OURS, "none", [100.0]), contender(OURS, "suffix", [120.0])],
                     [contender(SERVER, "none", [100.0]), contender(SERVER, "ngram-mod", [150.0])])
    assert "decided by the sources" in format_best([w])
