"""``bench --concurrency`` (N clients at once against our ``serve -np N`` and llama-server's) and ``serve
--spec-max-active`` (drafts off while more slots generate).

No speed is asserted (tests hold on any machine): the table must have a row per level, configuration and
server, every figure must come from the runs it names, the ratios must be positive, and the gate must
cut the drafts (counted from the replies' timings, never the words).
"""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import httpx
import pytest

from inspector.bench.compare import check_config_options
from inspector.bench.concurrency_bench import contenders, drive_clients, ours_arguments, parse_levels, source_configs
from inspector.bench.concurrency_result import (LLAMA_SERVER, OURS_BATCHED, OURS_LOCKED, Cell, ConcurrencyResult,
                                                Contender, LevelRun, format_concurrency_bench, percentile)
from inspector.bench.server_process import ServeProcess, ServerStartError, last_lines
from inspector.cli.main import build_parser
from inspector.cli.sources import source_options_from_args
from inspector.engine.no_proposal import BUSY_SLOTS, NoProposal
from inspector.llama.context_settings import ContextSettings
from inspector.prompts import example_prompt
from inspector.receipts import load_document
from inspector.serve.spec_gate import SpecGate
from inspector.sources.registry import describe_source

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


def _concurrent_drafts(address: str, prompt: str, n: int = 2, n_predict: int = 96) -> list[int]:
    """``draft_n`` of ``n`` greedy ``/completion`` requests of ``n_predict`` tokens sent at once (0 when a reply
    drafted nothing). 96 tokens: the two requests' generations overlap even when one arrives tens of
    milliseconds after the other (with 32 tokens, in a loaded suite, one was once served before the other's
    generation began, and the gate had nothing to gate)."""
    replies: list[dict] = [{}] * n
    barrier = threading.Barrier(n)

    def send(i: int) -> None:
        barrier.wait()
        replies[i] = httpx.post(address + "/completion", json={"prompt": prompt, "n_predict": n_predict, "temperature": 0},
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


def _settings(model, **asked) -> SimpleNamespace:
    """What ``ours_arguments`` reads of a loaded runtime, without loading one."""
    return SimpleNamespace(model_path=model, n_threads=3, n_ctx=1536, n_batch=384, n_ubatch=96,
                           asked=ContextSettings(**asked))


def test_our_serve_gets_the_runtimes_settings_and_each_configurations_source_slots_and_schedule(tmp_path):
    settings = _settings(tmp_path / "m.gguf", flash_attn="off", type_k="q8_0")
    cases = [(c, who, n) for c in source_configs(["ngram-simple", "ngram-mod", "ngram-cache"])
             for who in contenders(2) if who.ours for n in (1, 3)]
    assert {c.source for c, _, _ in cases} == {"none", "ngram-simple", "ngram-mod", "ngram-cache"}
    for config, who, n in cases:
        argv = ours_arguments(settings, config, who, n, str(tmp_path / "rec"))
        args = build_parser().parse_args(["serve", *argv])  # argparse exits on a flag serve does not take
        assert (args.model, args.n_threads, args.n_ctx, args.n_batch) == (tmp_path / "m.gguf", 3, 1536, 384), argv
        assert (args.n_ubatch, args.flash_attn, args.type_k, args.type_v) == (96, "off", "q8_0", "f16"), argv
        assert (args.n_parallel, args.kv_unified, args.schedule) == (n, True, who.schedule), argv
        assert args.spec_max_active == who.spec_max_active, argv
        assert (args.source, args.draft_max) == (config.source, config.draft_max), argv
        assert args.receipts_dir == tmp_path / "rec" and not args.no_receipts and args.probabilities, argv
        # the child's source gets the options the configuration checks to (as in-process before), and
        # serve's flag defaults for the rest (the source's own defaults)
        declared = describe_source(config.source).options or ()
        flag_defaults = {o.name: o.default for o in declared if o.flag and not o.required}
        made = describe_source(config.source).check_options(source_options_from_args(args))
        wanted = check_config_options(config.source, dict(config.options), config.draft_max)
        assert made == {**flag_defaults, **wanted}, argv
        assert ("--host" not in argv) and ("--port" not in argv)  # ServeProcess gives them
        assert {"-b", "-ub", "-fa", "-ctk", "-ctv"} <= set(argv)  # even at a default (ours may differ)
    plain, simple = source_configs(["ngram-simple"])
    assert plain.options == {} and "--source-option" not in ours_arguments(settings, plain, Contender("x"), 1, "r")
    assert ours_arguments(settings, simple, Contender("x"), 1, "r").count("--source-option") == len(simple.options) > 0


def test_our_serve_that_exits_at_start_is_a_one_line_start_error_with_its_last_lines(model_path):
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as err:
        ServeProcess(["--model", model_path, "--no-such-flag"], timeout_s=60)
    message = str(err.value)
    assert "\n" not in message and message.startswith("our serve exited (code 2)"), message
    assert "--no-such-flag" in message, message
    assert time.monotonic() - t0 < 60
    assert last_lines("a\n\nb\nc\nd\n", 2) == "c | d" and last_lines("") == "(no output)"
    assert last_lines("x" * 500).endswith("x" * 300) and len(last_lines("x" * 500)) == 303


def test_our_serve_as_a_child_process_serves_two_clients_at_once_and_records_them(model_path, tmp_path):
    settings = SimpleNamespace(model_path=model_path, n_threads=1, n_ctx=1024, n_batch=256, n_ubatch=256,
                               asked=ContextSettings())
    (plain,) = source_configs([])
    folder = tmp_path / "receipts"
    argv = ours_arguments(settings, plain, Contender(OURS_BATCHED), 2, str(folder))
    with ServeProcess(argv, timeout_s=120) as server:
        assert server.running() and server.argv[server.argv.index("serve") - 2:][:2] == ["-m", "inspector"]
        run = drive_clients(server.url, [example_prompt("copy-exact")], 2, 2)
    assert not server.running()
    assert len(run.latencies_s) == 2 and 0 < run.tokens <= 4 and run.wall_s > 0
    docs = [load_document(f) for f in sorted(folder.glob("req-*.json"))]
    assert len(docs) == 3, server.log_text()  # the warm-up and the two clients' requests, recorded by the child
    settings_seen = {(d["settings"]["source"]["name"], d["settings"]["draft_max"], d["settings"].get("probabilities"))
                     for d in docs}
    assert settings_seen == {("none", 0, True)}, settings_seen  # the configuration's, serve's defaults otherwise


def test_each_client_opens_with_its_own_system_message_and_each_round_with_its_own():
    from inspector.bench.concurrency_bench import client_system

    messages = {client_system(i, r) for i in range(8) for r in range(5)}
    assert len(messages) == 40
    # rounds part at once: an earlier round's prompt shares at most the opening words with a later one's
    first, later = client_system(0, 0), client_system(0, 1)
    shared = next(k for k, (a, b) in enumerate(zip(first, later)) if a != b)
    assert shared < 10, (first, later)


def test_ours_batched_and_llama_server_are_neighbours_in_every_round_and_the_order_reverses():
    from inspector.bench.concurrency_bench import round_order

    order = contenders(spec_max_active=1)
    for rep in range(4):
        labels = [c.label for c in round_order(order, rep)]
        assert sorted(labels) == sorted(c.label for c in order)
        assert abs(labels.index(OURS_BATCHED) - labels.index(LLAMA_SERVER)) == 1, labels
        assert labels == [c.label for c in round_order(order, rep + 1)][::-1], labels
    assert [c.label for c in round_order(order[1:], 0)][-1] == LLAMA_SERVER  # without ours batched: still all


def test_a_round_is_one_wave_where_clients_send_different_examples_and_the_rounds_go_through_all():
    from inspector.bench.concurrency_bench import client_prompts

    examples = ["a", "b", "c", "d"]
    for rnd in range(4):
        wave = [client_prompts(examples, i, rnd, per_client=1) for i in range(3)]
        assert all(len(w) == 1 for w in wave)
        assert len({w[0] for w in wave}) == 3, wave  # concurrent requests differ
    firsts = {client_prompts(examples, 0, rnd, per_client=1)[0] for rnd in range(4)}
    assert firsts == set(examples)  # four rounds: client 0 sent every example
    assert client_prompts(examples, 1, 2) == ["d", "a", "b", "c"]  # every prompt, from round + client


def test_a_cells_latencies_pool_every_request_of_every_round_and_its_ratios_give_the_middle_half():
    cell = Cell(2, "none", OURS_BATCHED, runs=[LevelRun(1.0, 10, [0.1, 0.2]), LevelRun(1.0, 10, [0.3, 4.0])],
                ratios=[0.8, 0.9, 1.0, 1.1, 1.2])
    assert cell.latency_median_ms == pytest.approx(250.0)  # the median of 0.1, 0.2, 0.3, 4.0 s
    assert cell.latency_p95_ms == pytest.approx(4000.0)
    assert cell.ratio == 1.0 and cell.ratio_quartiles == (0.9, 1.1)
    result = ConcurrencyResult((2,), source_configs([]), [Contender(OURS_BATCHED)],
                               {(2, "none", OURS_BATCHED): cell})
    table = format_concurrency_bench(result, examples=["a"], n_predict=8, repeats=5, threads=2)
    assert "1.00 [0.90-1.10]" in table, table
