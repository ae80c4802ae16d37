"""llama.cpp's RPC backend, both ends (issue 14): a real ``spec-inspector rpc-server`` on
127.0.0.1 (a free port, one thread: two llama.cpp processes share these cores), the model's
layers on it through a child process (``RemoteRuntime``), and what happens when the server
is not there or goes away. Nothing here relies on the model's words: proposals are the
target's own continuation (``Follower``) or single-token n-gram matches, and outputs are
compared with the same run on the local model.

RPC is never registered in this test process: llama.cpp would then offload every later model
of the session to it. Devices are listed by a subprocess, runtimes run in children.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time

import pytest

from inspector.engine import Fault, FaultPlan, GenerationSettings, RuntimeScheduler
from inspector.engine.errors import RuntimeLost
from inspector.llama.devices import Offload, RpcUnavailable, rpc_supported
from inspector.prompts import example_prompt
from inspector.receipts import load_document
from inspector.sources import NgramSource
from figures_helpers import figures_close, probability_blocks
from scenarios import ALTERNATE, Follower, NoEndOfTurn, first_window, run_resuming_after_each_error, assert_same_greedy_output


def test_this_llama_cpp_has_its_rpc_backend():
    """The README's install commands build llama.cpp with GGML_RPC: without it the tests below cannot run."""
    from inspector.llama.devices import REBUILD_HINT

    assert rpc_supported(), REBUILD_HINT


needs_rpc = pytest.mark.skipif(not rpc_supported(), reason="llama.cpp built without GGML_RPC (see README)")

MAX = 24


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    """``spec-inspector rpc-server`` on 127.0.0.1:port with one thread; returns once it accepts. Its
    output goes to a file (a pipe nobody reads would fill with "Accepted client connection" lines)."""
    import tempfile

    log = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen([sys.executable, "-m", "inspector", "rpc-server", "--port", str(port), "--threads", "1"],
                         stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if p.poll() is not None:
            log.seek(0)
            raise AssertionError(f"rpc-server exited with {p.returncode}: {log.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return p
        except OSError:
            time.sleep(0.2)
    p.kill()
    raise AssertionError("rpc-server did not accept connections within 60 s")


@pytest.fixture(scope="module")
def rpc_server():
    port = free_port()
    p = start_server(port)
    yield f"127.0.0.1:{port}"
    p.terminate()
    p.wait(timeout=10)


@pytest.fixture
def own_rpc_server():
    """An RPC server of the test's own: llama.cpp's serves one client at a time, and ``rpc_runtime`` keeps its
    connection to ``rpc_server`` for the module."""
    port = free_port()
    p = start_server(port)
    yield f"127.0.0.1:{port}"
    p.terminate()
    p.wait(timeout=10)


@pytest.fixture(scope="module")
def rpc_runtime(model_path, rpc_server):
    """The bundled model with every layer on the RPC server, in a child process."""
    from inspector.llama.remote import RemoteRuntime

    rt = RemoteRuntime(model_path, offload=Offload(n_gpu_layers=99, rpc=(rpc_server,)), n_ctx=1024,
                       n_batch=256, n_seq_max=2, n_threads=1)
    yield rt
    rt.close()


@needs_rpc
def test_the_rpc_server_warns_and_the_device_list_names_the_cpu_and_the_servers_device(rpc_server):
    p = subprocess.run([sys.executable, "-m", "inspector", "devices", "--rpc", rpc_server],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert any(l.startswith("CPU") for l in lines), p.stdout
    assert any(l.startswith("RPC0") and rpc_server in l for l in lines), p.stdout
    assert "RPC yes" in p.stdout


@needs_rpc
def test_every_layer_goes_to_the_rpc_device_and_the_receipts_name_it(rpc_runtime, rpc_server):
    assert rpc_runtime.layers.endswith(f"layers on RPC0[{rpc_server}]")
    done, total = rpc_runtime.layers.split()[0].split("/")
    assert done == total and int(total) > 0
    d = rpc_runtime.describe()
    assert d["devices"][0]["name"] == "RPC0" and d["devices"][0]["description"] == rpc_server
    assert d["offload"] == {"n_gpu_layers": 99, "rpc": [rpc_server]}


@needs_rpc
def test_greedy_ngram_speculation_over_rpc_keeps_the_invariants_and_the_local_output(
        rpc_runtime, make_generation, chat_tokens, scheduler):
    tokens = chat_tokens(example_prompt("copy-with-corrections"))
    remote = RuntimeScheduler(rpc_runtime)
    g = make_generation(NgramSource(n_min=1), tokens, on=remote, max_new_tokens=MAX)  # KvChecker: every window
    g.run()
    local = make_generation(NgramSource(n_min=1), tokens, max_new_tokens=MAX)
    local.run()
    assert g.receipts, "single-token matches always propose after a templated prompt"
    for r in g.receipts:
        assert r.canonical_position == r.base_position + r.canonical_prediction_count
        assert r.trimmed_rows == r.position_after_verification - r.canonical_position
        assert r.runtime_lock_acquires == 2
        judged = r.accepted_proposal_tokens + 1 if r.disposition == "first_mismatch" else r.verification_rows
        assert r.probabilities is not None and r.probabilities.rows == judged  # made in the child
    assert_same_greedy_output(scheduler, tokens, local.generated, g.generated)


@pytest.mark.parametrize("fault", ["cancel@W:3", "callback_error@W:1", "trim_failure"])
@needs_rpc
def test_each_fault_over_rpc_repairs_before_its_error_and_resume_matches_an_uninterrupted_run(
        fault, rpc_runtime, make_generation, chat_tokens):
    target = RuntimeScheduler(NoEndOfTurn(rpc_runtime))
    tokens = chat_tokens(example_prompt("copy-with-corrections"))
    reference = make_generation(Follower(target, ALTERNATE, prompt=tokens), tokens, on=target, max_new_tokens=MAX)
    reference.run()
    fault = fault.replace("W", str(first_window(reference.receipts, at_least=3)))
    plan = FaultPlan([Fault.parse(fault)])
    g = make_generation(Follower(target, ALTERNATE, prompt=tokens), tokens, on=target, max_new_tokens=MAX,
                        faults=plan)
    errors = run_resuming_after_each_error(g)
    assert plan.fired and len(errors) == 1
    assert g.generated == reference.generated


@needs_rpc
def test_backend_sampling_on_the_rpc_device_gives_the_host_paths_tokens_and_figures(own_rpc_server, tmp_path):
    """-bs with every layer on the RPC server: the figures are computed where the logits are (the server's
    device) and only they cross the connection; tokens and every row's figures as without -bs."""
    rpc_server = own_rpc_server
    docs = []
    for name, extra in (("host.json", ()), ("graph.json", ("-bs",))):
        out = tmp_path / name
        p = subprocess.run([sys.executable, "-m", "inspector", "run", "--example", "copy-with-corrections", "--rpc",
                            rpc_server, "-ngl", "99", "--threads", "1", "--max-tokens", "24", "--receipts", str(out),
                            *extra], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        docs.append(load_document(out))
    host, graph = docs
    assert graph["model"]["llama_cpp"]["backend_sampling"] and "RPC0" in graph["model"]["layers"]
    assert graph["output"]["token_ids"] == host["output"]["token_ids"]
    a, b = probability_blocks(host), probability_blocks(graph)
    assert len(a) == len(b) > 0
    for (pa, x), (pb, y) in zip(a, b):
        assert pa == pb and all(figures_close(x[k], y[k]) for k in x), (pa, x, y)


@needs_rpc
def test_diff_of_an_rpc_run_against_a_local_one_names_where_the_layers_went(own_rpc_server, tmp_path):
    rpc_server = own_rpc_server
    runs = {}
    for name, extra in (("local.json", ()), ("rpc.json", ("--rpc", rpc_server, "-ngl", "99"))):
        out = tmp_path / name
        p = subprocess.run([sys.executable, "-m", "inspector", "run", "--example", "copy-with-corrections",
                            "--threads", "1", "--max-tokens", "24", "--receipts", str(out), *extra],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        runs[name] = out
    p = subprocess.run([sys.executable, "-m", "inspector", "diff", str(runs["local.json"]), str(runs["rpc.json"]),
                        "--json", str(tmp_path / "d.json")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    pair = json.loads((tmp_path / "d.json").read_text())["pairs"][0]
    setup = {s["name"]: (s["a"], s["b"]) for s in pair["setup"]}
    local, remote = (load_document(runs[n]) for n in ("local.json", "rpc.json"))
    assert setup["layers"] == (local["model"]["layers"], remote["model"]["layers"]) and "RPC0" in setup["layers"][1]
    ta, tb = local["output"]["token_ids"], remote["output"]["token_ids"]
    assert pair["outputs_equal"] == (ta == tb)
    if ta != tb:  # another device's arithmetic may flip a near-tie: the diff names where
        first = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
        assert pair["parting"]["index"] == first
    assert "decode tokens/s" in {f["name"] for f in pair["figures"]}


@needs_rpc
def test_an_unreachable_server_is_a_clear_error_within_seconds(model_path):
    from inspector.llama.remote import RemoteRuntime

    port = free_port()
    t = time.monotonic()
    with pytest.raises(RpcUnavailable, match=f"RPC server 127.0.0.1:{port}: cannot connect"):
        RemoteRuntime(model_path, offload=Offload(rpc=(f"127.0.0.1:{port}",)), n_ctx=256, n_threads=1)
    assert time.monotonic() - t < 60  # a child process starts, checks the port and reports
    p = subprocess.run([sys.executable, "-m", "inspector", "run", "--example", "copy-exact", "--rpc",
                        f"127.0.0.1:{port}", "--max-tokens", "4"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert f"RPC server 127.0.0.1:{port}: cannot connect" in p.stderr.strip().splitlines()[-1]


@needs_rpc
def test_a_server_killed_mid_run_ends_the_cli_with_a_clear_line_and_the_receipts_so_far(tmp_path):
    port = free_port()
    server = start_server(port)
    out = tmp_path / "r.json"
    # A raw story prompt: the model goes on writing (no end of turn), long enough to be cut.
    cli = subprocess.Popen([sys.executable, "-u", "-m", "inspector", "run", "--raw", "--prompt",
                            "Once upon a time, in a small village by the sea, there lived", "--ngram-min", "1",
                            "--rpc", f"127.0.0.1:{port}", "-ngl", "99", "--threads", "1", "--max-tokens", "1000",
                            "--receipts", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        printed = ""
        while len(printed) < 60:  # the run is going: text streams as windows commit
            ch = cli.stdout.read(1)
            assert ch, f"the run ended early: {cli.stderr.read()}"
            printed += ch
        server.kill()
        stdout, stderr = cli.communicate(timeout=120)
    finally:
        server.kill()
        cli.kill()
    assert cli.returncode != 0 and "Traceback" not in stderr
    assert re.search(rf"RPC server 127.0.0.1:{port} went away (at window \d+|in a plain step after window \d+) "
                     r"\(llama.cpp: ggml-rpc.cpp:\d+: ", stderr), stderr  # where the run was, and llama.cpp's line
    doc = load_document(out)  # valid, with the windows before the loss
    assert doc["windows"] and doc["model"]["devices"][0]["name"] == "RPC0"
    assert json.loads(out.read_text())["output"]["ended_as"] == "error"
    trace = tmp_path / "t.json"
    p = subprocess.run([sys.executable, "-m", "inspector", "trace", str(out), "-o", str(trace)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    names = [e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"] if e["name"] == "process_name"]
    assert names and f"RPC0[127.0.0.1:{port}]" in names[0]  # the trace says where the layers ran


@needs_rpc
def test_a_lost_runtime_refuses_every_later_call(model_path):
    """The child is killed under a loaded runtime: the next call raises ``RuntimeLost``, not a hang."""
    from inspector.llama.remote import RemoteRuntime

    port = free_port()
    server = start_server(port)
    try:
        rt = RemoteRuntime(model_path, offload=Offload(n_gpu_layers=99, rpc=(f"127.0.0.1:{port}",)), n_ctx=256,
                           n_threads=1)
        sid = rt.open_session(GenerationSettings().sampling)
        server.kill()
        server.wait(timeout=10)
        with pytest.raises(RuntimeLost, match=f"RPC server 127.0.0.1:{port} went away"):
            rt.prefill(sid, [1, 2, 3], 0)
            rt.decode_rows(sid, [4], 3)
        assert not rt.alive
        with pytest.raises(RuntimeLost):
            rt.kv_length(sid)
        rt.close()
    finally:
        server.kill()


@needs_rpc
def test_the_window_runs_over_rpc_and_stays_up_when_the_server_goes_away(qtbot, runtime, tmp_path):
    """The panel's RPC field and -ngl: the run loads the model in a child process with every layer
    on the server; the server is killed mid-run: the run ends with the line naming the server and
    the window, its receipts stay, and the window still works (the next run is refused clearly)."""
    from inspector.session.run_states import IDLE
    from inspector.gui.panel.control_panel import ControlPanel
    from test_gui_support import make_window, part

    port = free_port()
    server = start_server(port)
    try:
        w = make_window(qtbot, runtime, tmp_path, max_tokens=400, ngram_min=1)
        model = w.model
        panel = part(w, ControlPanel)
        panel.rpc_servers.setText(f"127.0.0.1:{port}")
        panel.gpu_layers.setValue(99)
        panel.threads.setValue(1)
        with qtbot.waitSignal(model.runFinished, timeout=300_000):
            assert model.commands.start_run()
            qtbot.waitUntil(lambda: len(model.worker.generation.receipts if model.worker.generation else ()) >= 2,
                            timeout=300_000)
            assert f"RPC0[127.0.0.1:{port}]" in panel.model_status.text()
            server.kill()
        w.refresh_all()
        assert re.search(rf"RPC server 127.0.0.1:{port} went away (at window|in a plain step after window) \d+",
                         model.last_error), model.last_error
        assert "The run ended here" in model.banner_html and "Resume" not in model.banner_html
        assert len(model.session.receipts) >= 2 and model.state == IDLE
        with qtbot.waitSignal(model.runFinished, timeout=120_000):  # the next run: no server, a clear refusal
            assert model.commands.start_run()
        assert "cannot connect" in model.last_error and w.isVisible()
        assert len(model.session.receipts) >= 2  # the refused run kept the session shown before it
        assert panel.model_status.text() == "not loaded" and panel.model_path() == ""  # the dead child dropped
    finally:
        server.kill()


@needs_rpc
def test_a_local_draft_model_proposes_for_a_target_on_the_rpc_server(rpc_runtime, make_generation, chat_tokens,
                                                                     model_path, tmp_path):
    """The draft's vocabulary check reads the target's vocabulary in the target's child process."""
    from inspector.llama.quantize import make_draft
    from inspector.sources.registry import SourceContext, close_source, make_source

    draft_path = make_draft(model_path, "Q8_0", tmp_path)
    settings = GenerationSettings(max_new_tokens=12, draft_max=4)
    source = make_source("draft", SourceContext(rpc_runtime, settings), {"draft_model": str(draft_path)})
    try:
        tokens = chat_tokens(example_prompt("copy-exact"))
        g = make_generation(source, tokens, on=RuntimeScheduler(rpc_runtime), max_new_tokens=12, draft_max=4)
        g.run()
        assert g.receipts and g.generated_count == len(g.generated) > 0
    finally:
        close_source(source)


@needs_rpc
def test_a_server_frozen_mid_run_ends_the_cli_at_its_timeout_with_a_clear_line_and_the_receipts_so_far(tmp_path):
    """Issue 37, item 8: SIGSTOP keeps the server's connection open and its kernel acknowledging, so
    llama.cpp's client would wait forever; after ``--rpc-timeout`` the run ends as for a killed server."""
    import os
    import signal

    port = free_port()
    server = start_server(port)
    out = tmp_path / "r.json"
    cli = subprocess.Popen([sys.executable, "-u", "-m", "inspector", "run", "--raw", "--prompt",
                            "Once upon a time, in a small village by the sea, there lived", "--ngram-min", "1",
                            "--rpc", f"127.0.0.1:{port}", "-ngl", "99", "--threads", "1", "--max-tokens", "1000",
                            "--rpc-timeout", "3", "--receipts", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        printed = ""
        while len(printed) < 60:  # the run is going: text streams as windows commit
            ch = cli.stdout.read(1)
            assert ch, f"the run ended early: {cli.stderr.read()}"
            printed += ch
        os.kill(server.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        stdout, stderr = cli.communicate(timeout=60)
        waited = time.monotonic() - t0
    finally:
        os.kill(server.pid, signal.SIGCONT)
        server.kill()
        cli.kill()
    assert cli.returncode == 3 and "Traceback" not in stderr, stderr  # a generation error, as for a lost server
    assert 3 <= waited < 30, waited
    assert re.search(rf"RPC server 127.0.0.1:{port} stopped answering (at window \d+|in a plain step after window "
                     r"\d+) \(no answer within 3 s; the model's process was ended\)", stderr), stderr
    doc = load_document(out)  # valid, with the windows before the freeze
    assert doc["windows"] and doc["model"]["devices"][0]["name"] == "RPC0"
    assert json.loads(out.read_text())["output"]["ended_as"] == "error"


def test_an_ipv6_rpc_address_is_refused_when_parsed(tmp_path):
    """Issue 37, item 12: llama.cpp's RPC client splits HOST:PORT at the first colon and resolves IPv4 only."""
    from inspector.llama.devices import parse_endpoints

    for text in ("[::1]:50052", "::1:50052", "fe80::1:50052"):
        with pytest.raises(ValueError, match="connects over IPv4 only"):
            parse_endpoints(text)
    p = subprocess.run([sys.executable, "-m", "inspector", "run", "--rpc", "[::1]:50052", "--prompt", "x"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(
        "spec-inspector run: error: argument --rpc: RPC server '[::1]:50052': llama.cpp's RPC client connects over "
        "IPv4 only"), p.stderr
