"""The inspector does what llama-server does (issue 23): the same tokens, the same windows.

Each test runs the same prompt token ids through our engine and through a real llama-server built
from the llama.cpp our llama-cpp-python vendors (``llama_server_binary``: built once, cached outside
the clone), on the same machine, and compares the two. Nothing here names the model's words, so
the tests hold on any CPU: whatever text this CPU's arithmetic gives, both programs must give it.
"""

from __future__ import annotations

import json

import pytest

from inspector import asset_path
from inspector.bench.compare import run_compare
from inspector.bench.compare_result import CompareConfig
from inspector.bench.server_compare import compare_with_llama_server
from inspector.bench.server_process import free_port
from inspector.engine import Generation, GenerationSettings
from inspector.llama.quantize import make_draft
from inspector.llama.server_parity import server_counted_accepted
from inspector.prompts import EXAMPLES, example_prompt
from inspector.session.run import RunRequest, SessionRun
from inspector.sources.server_flags import server_arguments

from test_cli import cli, one_clear_line
from test_gui_support import RUN_TIMEOUT_MS, make_window

pytestmark = pytest.mark.slow

N_PREDICT = 64
SERVER_THREADS = 1
"""llama-server's own small thread count: two llama.cpp processes never compute at once here (ours
waits for the server's answer), and a thread count does not change llama.cpp's CPU arithmetic."""
NO_DEADLINE_MS = 600_000.0
"""Our proposal deadline for these runs: on a busy machine a late draft would be discarded, a rule
llama-server does not have (it waits for its proposer)."""
NOT_A_COPY = ("Tell me a short story about a lighthouse keeper who finds a message in a bottle, "
              "and what she decides to do about it.")


def _plain(scheduler, tokens, n=N_PREDICT) -> list[int]:
    g = Generation(scheduler, None, tokens, GenerationSettings(max_new_tokens=n))
    try:
        g.run()
    finally:
        g.close()
    return g.generated


def test_plain_greedy_output_equals_llama_servers_on_every_example_and_on_prompts_that_are_not_copies(
        scheduler, runtime, chat_tokens, start_llama_server):
    server = start_llama_server(threads=SERVER_THREADS)
    prompts = {name: chat_tokens(example_prompt(name)) for name in EXAMPLES}
    prompts["story (chat)"] = chat_tokens(NOT_A_COPY)
    prompts["story (raw)"] = runtime.prompt_tokens(NOT_A_COPY, raw=True)
    prompts["copy-with-corrections (raw)"] = runtime.prompt_tokens(example_prompt("copy-with-corrections"), raw=True)
    parted = {}
    for name, tokens in prompts.items():
        ours = _plain(scheduler, tokens)
        theirs = list(server.client.complete(tokens, N_PREDICT).tokens)
        assert ours, f"{name}: our plain run generated nothing"
        if ours != theirs:
            i = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            parted[name] = f"part at generated token {i} of {len(ours)}/{len(theirs)}"
    assert not parted, f"plain greedy output differs from llama-server's: {parted}"


def _configs(draft_path) -> list[CompareConfig]:
    """Every llama.cpp proposer with a proposal cap equal to the type's own maximum (so our draft max
    limits nothing llama-server's type would not)."""
    return [
        CompareConfig("plain", "none", 0),
        CompareConfig("ngram-simple", "ngram-simple", 16, {"size_n": 3, "size_m": 16}),
        CompareConfig("ngram-simple defaults", "ngram-simple", 48),
        CompareConfig("ngram-map-k", "ngram-map-k", 16, {"size_n": 3, "size_m": 16}),
        CompareConfig("ngram-map-k4v", "ngram-map-k4v", 16, {"size_n": 3, "size_m": 16}),
        CompareConfig("ngram-mod", "ngram-mod", 16, {"n_match": 8, "n_min": 4, "n_max": 16}),
        CompareConfig("ngram-cache", "ngram-cache", 8),
        CompareConfig("draft Q4_0", "draft", 8, {"draft_model": str(draft_path)}),
    ]


@pytest.fixture(scope="module")
def draft_path(model_path, tmp_path_factory):
    return make_draft(model_path, "Q4_0", tmp_path_factory.mktemp("drafts"))


@pytest.mark.parametrize("example", ["copy-exact", "copy-with-corrections"])
def test_every_llama_cpp_proposer_drafts_and_accepts_what_llama_server_does(
        example, scheduler, runtime, chat_tokens, llama_server_binary, model_path, draft_path):
    tokens = chat_tokens(example_prompt(example))
    settings = GenerationSettings(max_new_tokens=N_PREDICT, proposal_deadline_ms=NO_DEADLINE_MS)
    result = run_compare(scheduler, tokens, _configs(draft_path), settings, keep_runs=True)
    assert not [r.error for r in result.rows if r.error]
    rows = compare_with_llama_server(str(llama_server_binary), result, model=model_path, prompt_tokens=tokens,
                                     n_predict=N_PREDICT, threads=SERVER_THREADS, n_ctx=runtime.n_ctx,
                                     scheduler=scheduler)
    assert [r.error for r in rows if r.error] == []
    spec = [r for r in rows if r.label != "plain"]
    assert sum(r.ours_drafted for r in spec) > 0, "no configuration proposed anything: the test shows nothing"
    wrong = {r.label: (f"ours drafted/accepted {r.ours_drafted}/{r.ours_accepted} per position "
                       f"{r.ours_accepted_per_position}, llama-server {r.drafted}/{r.accepted} "
                       f"{r.accepted_per_position}; output {r.describe_output()}")
             for r in rows if not (r.same_output and r.same_windows)}
    assert not wrong, wrong


def test_ngram_mods_pool_carries_across_two_requests_as_in_llama_server(scheduler, runtime, chat_tokens,
                                                                         start_llama_server):
    options: dict = {}  # llama-server's defaults: n_match 24, n_min 48, n_max 64
    server = start_llama_server(args=server_arguments("ngram-mod", options, draft_max=64), threads=SERVER_THREADS)
    tokens = chat_tokens(example_prompt("open-ended"))  # nothing to copy: the first request drafts little
    memory: dict = {}
    ours, theirs = [], []
    for _ in range(2):
        run = SessionRun(scheduler, RunRequest("", GenerationSettings(max_new_tokens=2 * N_PREDICT, draft_max=64,
                                                                  proposal_deadline_ms=NO_DEADLINE_MS),
                                               "ngram-mod", dict(options), prompt_token_ids=tuple(tokens),
                                               source_memory=memory), lambda record: None)
        run.tokenize()
        run.make_source()
        g = run.open()
        try:
            run.start()
            for _ in run.steps():
                pass
        finally:
            run.end(g.finish_reason or "error")
            run.close_source()
            g.close()
        ours.append((sum(r.proposal_token_count for r in g.receipts),
                     sum(server_counted_accepted(r, runtime.is_eog) for r in g.receipts), g.generated))
        done = server.client.complete(tokens, 2 * N_PREDICT)
        theirs.append((done.draft_n, done.draft_n_accepted, list(done.tokens)))
    assert ours == theirs
    assert ours[1][0] > ours[0][0], "the second request drafted no more than the first: the pool was not kept"


def test_the_exported_flags_of_every_configuration_start_llama_server(start_llama_server, draft_path):
    for c in _configs(draft_path):
        args = [] if c.source == "none" else server_arguments(c.source, c.options, draft_max=c.draft_max)
        server = start_llama_server(args=args, threads=SERVER_THREADS)  # refused flags raise ServerStartError
        assert server.client.complete([1, 2, 3], 2).tokens
        server.stop()


def test_compare_with_llama_server_prints_both_programs_side_by_side_and_exports_them(
        tmp_path, llama_server_binary, model_path):
    out = tmp_path / "c.json"
    p = cli("compare", "--prompt-file", asset_path("prompts/copy-exact.txt"), "--max-tokens", "32",
            "--config", "none", "--config", "ngram-simple:draft_max=16,size_n=3,size_m=16", "--threads", "1",
            "--llama-server", llama_server_binary, "--json", out)
    assert p.returncode == 0, p.stderr
    assert "llama-server (same prompt tokens, greedy):" in p.stdout
    doc = json.loads(out.read_text())
    rows = doc["llama_server"]
    assert [r["label"] for r in rows] == [r["config"]["label"] for r in doc["rows"]]
    assert all(r["same_output"] and r["same_windows"] and r["tokens_per_s"] > 0 for r in rows), rows
    assert rows[1]["flags"][:2] == ["--spec-type", "ngram-simple"]
    assert rows[1]["drafted"] == rows[1]["ours"]["drafted"] > 0


@pytest.mark.parametrize("target, needle", [
    ("/bin/true", "/bin/true is not a llama-server"),
    ("http://127.0.0.1:{port}", "no llama-server answers at http://127.0.0.1:{port}"),
    ("http://[::1", "is not a server URL"),
])
def test_a_target_that_cannot_serve_is_one_line_before_anything_runs(target, needle):
    port = free_port()
    p = cli("compare", "--prompt", "Copy: one two three", "--max-tokens", "4", "--config", "none",
            "--llama-server", target.format(port=port))
    assert p.returncode in (1, 2) and p.stdout == ""  # 2: a path that is no llama-server is a bad argument
    assert needle.format(port=port) in one_clear_line(p.stderr)


def test_a_llama_server_that_will_not_start_costs_each_row_one_line_and_keeps_our_rows(tmp_path):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'version: 0.5.0-dev (build 0, commit 0c1e570)' >&2\n"
                    "[ \"$1\" = --version ] && exit 0\necho 'error: invalid argument: --spec-type' >&2\nexit 1\n")
    fake.chmod(0o755)
    out = tmp_path / "c.json"
    p = cli("compare", "--prompt", "Copy: one two three", "--max-tokens", "4", "--config", "none",
            "--config", "ngram-simple", "--llama-server", fake, "--json", out)
    assert p.returncode == 1 and "Traceback" not in p.stdout + p.stderr
    assert p.stdout.splitlines()[1].startswith("none ")  # our table first, whole
    rows = json.loads(out.read_text())["llama_server"]
    assert [r["error"].count("\n") for r in rows] == [0, 0]
    assert all("invalid argument: --spec-type" in r["error"] for r in rows)


def test_the_compare_window_shows_llama_servers_figures_beside_ours(qtbot, runtime, tmp_path, llama_server_binary):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    model = w.model
    v = model.commands.compare()
    v.set_configs([CompareConfig("plain", "none", 0), CompareConfig("simple", "ngram-simple", 16,
                                                                    {"size_n": 3, "size_m": 16}),
                   CompareConfig("ours", "ngram", 4)])
    v.with_server.setChecked(True)
    v.server_target.setText(str(llama_server_binary))
    with qtbot.waitSignal(model.compareReady, timeout=RUN_TIMEOUT_MS) as blocker:
        assert model.commands.run_compare(v.config_list())
    result, _note = blocker.args
    v.refresh()
    first = v.results.columnCount() - 4
    assert v.results.horizontalHeaderItem(first).text() == "llama-server\ntokens/s"
    assert v.results.horizontalHeader().visualIndex(first) == 2  # beside our decode tokens/s
    plain, simple, ours = result.llama_server
    assert plain.same_output and simple.same_output and simple.same_windows, (plain, simple)
    assert v.results.item(1, first + 1).text() == f"{simple.ours_drafted} / {simple.drafted}"
    assert v.results.item(1, first + 3).text() == "yes"
    assert v.results.item(2, first + 3).text() == "not compared"  # a note, not a run
    assert v.results.item(2, first + 3).toolTip() == "llama-server has no ngram source"
