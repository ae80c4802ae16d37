"""``bench --concurrency`` (N clients at once against our ``serve -np N`` and llama-server's) and ``serve
--spec-max-active`` (drafts off while more slots generate).

No speed is asserted (tests hold on any machine): the table must have a row per level, configuration and
server, every figure must come from the runs it names, the ratios must be positive, and the gate must
cut the drafts (counted from the replies' timings, never the words).
"""

from __future__ import annotations

import json
import threading

import httpx

from inspector.bench.concurrency_bench import (LLAMA_SERVER, OURS_BATCHED, OURS_LOCKED, Cell, ConcurrencyResult,
                                               LevelRun, contenders, format_concurrency_bench, parse_levels,
                                               percentile, source_configs)
from inspector.engine.no_proposal import BUSY_SLOTS, NoProposal
from inspector.prompts import example_prompt
from inspector.serve.spec_gate import SpecGate

from test_cli import cli, one_clear_line

GATED = "ours batched, spec-max-active 1"


def test_bench_concurrency_has_a_row_per_level_source_and_server_with_positive_ratios(tmp_path, llama_server_binary):
    out = tmp_path / "conc.json"
    p = cli("bench", "--concurrency", "1,2", "--repeats", "1", "--max-tokens", "8", "--threads", "1",
            "--tasks", "copy-exact", "--spec-max-active", "1", "--llama-server", llama_server_binary,
            "--json", out, timeout=900)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["levels"] == [1, 2] and doc["contenders"] == [OURS_BATCHED, OURS_LOCKED, GATED, LLAMA_SERVER]
    cells = {(c["level"], c["source"], c["contender"]): c for c in doc["cells"]}
    expected = {(n, s, c) for n in (1, 2) for s in ("none", "ngram-simple")
                for c in (OURS_BATCHED, OURS_LOCKED, LLAMA_SERVER)} | {(n, "ngram-simple", GATED) for n in (1, 2)}
    assert set(cells) == expected  # the gate only where something drafts
    for (n, source, who), c in cells.items():
        assert c["error"] is None, c
        (run,) = c["runs"]
        assert len(run["latencies_s"]) == n  # each client sent the one example once
        assert run["tokens"] > 0 and run["tokens_per_s"] > 0 and c["tokens_per_s"] == run["tokens_per_s"]
        assert 0 < c["latency_median_ms"] <= c["latency_p95_ms"]
        theirs = cells[(n, source, LLAMA_SERVER)]["tokens_per_s"]
        if who == LLAMA_SERVER:
            assert c["ratio"] is None
        else:
            assert c["ratio"] > 0 and abs(c["ratio"] - run["tokens_per_s"] / theirs) < 1e-9
    assert set(doc["stops_paying"]) == {"ngram-simple"}
    assert set(doc["stops_paying"]["ngram-simple"]) == set(doc["contenders"])
    assert all(v in (None, 1, 2) for v in doc["stops_paying"]["ngram-simple"].values())
    rows = [ln for ln in p.stdout.splitlines() if ln[:7].strip() in ("1", "2")]
    assert len(rows) == len(expected)
    assert any(ln.startswith("  ngram-simple: ours batched ") for ln in p.stdout.splitlines())


def _concurrent_drafts(address: str, prompt: str, n: int = 2) -> list[int]:
    """``draft_n`` of ``n`` greedy ``/completion`` requests sent at once (0 when a reply drafted nothing)."""
    replies: list[dict] = [{}] * n
    barrier = threading.Barrier(n)

    def send(i: int) -> None:
        barrier.wait()
        replies[i] = httpx.post(address + "/completion", json={"prompt": prompt, "n_predict": 32, "temperature": 0},
                                timeout=300).json()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [int(r["timings"].get("draft_n", 0)) for r in replies]


def test_spec_max_active_1_makes_fewer_drafts_with_two_requests_at_once(serve, runtime):
    prompt = runtime.chat_prompt(example_prompt("copy-exact"))
    free = serve(n_parallel=2, kv_unified=True)
    ungated = _concurrent_drafts(free.address, prompt)
    free.stop()
    gated_server = serve(n_parallel=2, kv_unified=True, spec_max_active=1)
    gated = _concurrent_drafts(gated_server.address, prompt)
    assert sum(ungated) > 0, ungated
    assert sum(gated) < sum(ungated), (gated, ungated)


class _Source:
    name = "fake"

    def __init__(self) -> None:
        self.asked = 0

    def propose(self, request):
        self.asked += 1
        return None

    def settings(self) -> dict:
        return {"k": 1}


def test_the_gate_asks_the_source_only_while_at_most_m_slots_generate_and_is_the_source_otherwise():
    busy = [1]
    inner = _Source()
    gate = SpecGate(inner, lambda: busy[0], 1)
    assert gate.propose(object()) is None and inner.asked == 1
    busy[0] = 2
    answer = gate.propose(object())
    assert isinstance(answer, NoProposal) and answer.reason == BUSY_SLOTS and inner.asked == 1 and gate.gated == 1
    assert gate.name == "fake" and gate.settings() == {"k": 1}


def test_levels_sources_and_the_nearest_rank_p95():
    assert parse_levels("4,1,2,2") == (1, 2, 4)
    for bad in ("0", "9", "1,x", ""):
        try:
            parse_levels(bad)
        except ValueError as exc:
            assert "1..8" in str(exc)
        else:
            raise AssertionError(bad)
    assert [c.source for c in source_configs(["ngram-mod", "none", "ngram-mod"])] == ["none", "ngram-mod"]
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.95) == 4.0 and percentile(list(range(1, 101)), 0.95) == 95


def test_speculation_stops_paying_at_the_first_level_where_it_is_no_faster_than_plain():
    configs = source_configs(["ngram-simple"])
    order = contenders(1)
    result = ConcurrencyResult((1, 2, 4), configs, order, {})
    speeds = {  # aggregate tok/s: level -> (plain, speculative) for every contender
        OURS_BATCHED: {1: (10, 20), 2: (18, 19), 4: (30, 25)},
        OURS_LOCKED: {1: (10, 12), 2: (12, 12), 4: (12, 11)},
        GATED: {1: (None, 20), 2: (None, 17.5), 4: (None, 31)},
        LLAMA_SERVER: {1: (11, 21), 2: (20, 25), 4: (35, 40)},
    }
    for label, by_level in speeds.items():
        for level, (plain, spec) in by_level.items():
            for source, tps in (("none", plain), ("ngram-simple", spec)):
                if tps is not None:
                    result.cells[(level, source, label)] = Cell(level, source, label, [LevelRun(1.0, tps, [0.5])])
    said = {c.label: result.stops_paying("ngram-simple", c) for c in order}
    assert said == {OURS_BATCHED: 4, OURS_LOCKED: 2, GATED: 2, LLAMA_SERVER: None}
    text = format_concurrency_bench(result, examples=["copy-exact"], n_predict=8, repeats=1, threads=1)
    assert text.splitlines()[-1] == ("  ngram-simple: ours batched 4 clients; ours locked 2 clients; "
                                     f"{GATED} 2 clients; llama-server never (up to 4 clients)")


def test_bad_concurrency_levels_and_sources_are_one_line_errors_before_the_model_loads():
    for args in (("--concurrency", "0"), ("--concurrency", "100"), ("--concurrency", "--sources", "draft"),
                 ("--concurrency", "--config", "none")):
        p = cli("bench", *args)
        assert p.returncode == 2, (args, p.stderr)
        line = one_clear_line(p.stderr)
        assert "loading" not in p.stderr and line.startswith("spec-inspector"), line
