"""llama-server as the reference: its build, its process and its HTTP client (inspector.bench.server_*).

The first half needs no llama-server (refusals, a fake binary, a plain HTTP server, the metrics
parser, a cancelled build with a stand-in pip); the last tests run the real binary, built once from llama.cpp 0c1e570 on first use
(fixture ``llama_server_binary``)."""

from __future__ import annotations

import fcntl
import http.server
import os
import sys
import threading
import time

import pytest

from inspector.bench.server_build import (NotALlamaServer, ServerBuildCancelled, ServerBuildError, build_llama_server,
                                          cached_server_path, find_llama_server, server_version)
from inspector.bench.server_compare import version_note
from inspector.llama.server_parity import LLAMA_CPP_COMMIT
from inspector.bench.server_process import (LlamaServerProcess, ServerDeadlines, ServerStartError, complaint_line,
                                            free_port)
from inspector.bench.server_client import LlamaServerClient, parse_completion, parse_metrics
from inspector.bench.server_http import ServerUnreachable, WrongServer


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text, f"not one line: {text!r}"
    return text


# --- server_version and where the binary lives ---------------------------------------------------

def test_server_version_refuses_what_is_not_a_llama_server(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    script = tmp_path / "noshebang"
    script.write_text("echo hi\n")
    script.chmod(0o755)
    cases = {
        "/bin/true": "not a llama-server",
        str(text): "not executable",
        str(tmp_path / "missing"): "does not exist",
        str(tmp_path): "folder",
        str(script): "cannot be run",
    }
    for path, expected in cases.items():
        with pytest.raises(NotALlamaServer) as err:
            server_version(path)
        message = _one_line(err.value)
        assert path in message and expected in message, message


def test_server_version_refuses_a_program_whose_version_is_not_llama_cpps():
    with pytest.raises(NotALlamaServer) as err:
        server_version("/bin/ls")
    assert "expected 'version: V (build N, commit C)'" in _one_line(err.value)


def test_server_version_reads_llama_cpps_version_lines_from_stderr(tmp_path):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'version: 0.5.0-dev (build 0, commit 0c1e570)' >&2\n"
                    "echo 'built with GNU 12.2.0 for Linux x86_64' >&2\n")
    fake.chmod(0o755)
    v = server_version(fake)
    assert (v.build_number, v.commit, v.version, v.built_with) == (0, "0c1e570", "0.5.0-dev", "GNU 12.2.0 for Linux x86_64")


def test_the_cache_folder_and_the_server_override_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_INSPECTOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPEC_INSPECTOR_LLAMA_SERVER", raising=False)
    assert cached_server_path() == tmp_path / "cache" / "llama-server-0.3.36-0c1e570" / "bin" / "llama-server"
    assert find_llama_server() is None
    cached_server_path().parent.mkdir(parents=True)
    cached_server_path().write_text("")
    assert find_llama_server() == cached_server_path()
    monkeypatch.setenv("SPEC_INSPECTOR_LLAMA_SERVER", "/opt/llama/llama-server")
    assert str(find_llama_server()) == "/opt/llama/llama-server"


# --- the HTTP client against what is not a llama-server -------------------------------------------

def test_nothing_listening_is_unreachable_in_one_line():
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(ServerUnreachable) as err:
        LlamaServerClient(url).check_reachable()
    assert not isinstance(err.value, WrongServer)
    assert _one_line(err.value) == f"no llama-server answers at {url}: connection refused"
    assert time.monotonic() - t0 < 5


class _Plain(http.server.BaseHTTPRequestHandler):
    """404 plain text everywhere, except, when ``health_ok``, ``/health`` (llama-server's JSON) and
    ``/props`` (200 plain text)."""

    health_ok = False

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == "/health" and self.health_ok:
            body, status, ctype = b'{"status": "ok"}', 200, "application/json"
        elif self.path == "/props" and self.health_ok:
            body, status, ctype = b"hello\n", 200, "text/plain"
        else:
            body, status, ctype = b"File not found\n", 404, "text/plain"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def plain_http_server():
    servers = []

    def start(health_ok: bool) -> str:
        handler = type("Handler", (_Plain,), {"health_ok": health_ok})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_an_http_server_answering_404_is_not_a_llama_server(plain_http_server):
    url = plain_http_server(health_ok=False)
    with pytest.raises(WrongServer) as err:
        LlamaServerClient(url).check_reachable()
    message = _one_line(err.value)
    assert message.startswith(f"{url} answered but is not a llama-server: GET /health gave HTTP 404"), message


def test_a_server_whose_props_are_not_json_is_not_a_llama_server(plain_http_server):
    url = plain_http_server(health_ok=True)
    with pytest.raises(WrongServer) as err:
        LlamaServerClient(url).check_reachable()
    message = _one_line(err.value)
    assert message == (f"{url} answered but is not a llama-server: GET /props gave HTTP 200 (text/plain: 'hello'), "
                       "expected JSON with build_info"), message


# --- parsing ---------------------------------------------------------------------------------------

METRICS_SAMPLE = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 37
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 1e+06
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 48
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 40
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 6
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 151.25
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 5
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="10"} 1
"""


def test_the_metrics_parser_reads_llama_servers_speculation_counters():
    m = parse_metrics(METRICS_SAMPLE)
    assert (m.drafts, m.draft_tokens, m.accepted_tokens) == (6, 48, 40)
    assert m.accepted_per_position == {0: 6, 1: 5, 10: 1}
    assert m.values["tokens_predicted_total"] == 1e6 and m.values["predicted_tokens_seconds"] == 151.25
    empty = parse_metrics("llamacpp:prompt_tokens_total 0\n")
    assert (empty.drafts, empty.draft_tokens, empty.accepted_tokens, empty.accepted_per_position) == (0, 0, 0, {})


def test_a_completion_reply_without_drafts_counts_zero_drafts():
    done = parse_completion({"content": " a b", "tokens": [260, 261], "stop_type": "limit", "truncated": False,
                             "timings": {"prompt_n": 5, "predicted_n": 2, "predicted_ms": 10.0,
                                         "predicted_per_second": 200.0}})
    assert (done.tokens, done.text, done.draft_n, done.draft_n_accepted, done.stop_type) == ((260, 261), " a b", 0, 0,
                                                                                             "limit")
    with pytest.raises(ValueError):
        parse_completion({"content": "x"})


def test_the_complaint_is_the_rejected_argument_line():
    log = ("0.00.010.000 I srv main: something\n"
           'error while handling argument "--draft-max": the argument has been removed. use --spec-draft-n-max\n'
           "\nusage:\n--draft, --draft-n, --draft-max N\n")
    assert complaint_line(log) == ('error while handling argument "--draft-max": the argument has been removed. '
                                   "use --spec-draft-n-max")
    assert complaint_line("0.01.000.000 E srv load_model: failed to load model 'x'\nbye\n") == \
        "srv load_model: failed to load model 'x'"
    assert complaint_line("") == "(no output)"


# --- the process, with fake binaries ----------------------------------------------------------------

def _fake_binary(tmp_path, body: str):
    fake = tmp_path / "fake-llama-server"
    fake.write_text("#!/bin/sh\n" + body)
    fake.chmod(0o755)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    return fake, model


def test_a_server_that_rejects_its_arguments_is_a_start_error_naming_the_line(tmp_path):
    fake, model = _fake_binary(tmp_path, 'echo "error: invalid argument: --bogus" >&2\nexit 1\n')
    t0 = time.monotonic()
    with pytest.raises(ServerStartError) as err:
        LlamaServerProcess(fake, model, args=["--bogus"])
    message = _one_line(err.value)
    assert "error: invalid argument: --bogus" in message and "code 1" in message, message
    assert time.monotonic() - t0 < 10


def test_a_server_that_never_answers_times_out_in_one_line_and_is_stopped(tmp_path):
    pid_file = tmp_path / "pid"
    fake, model = _fake_binary(tmp_path, f'echo $$ > {pid_file}\necho "loading forever"\nexec sleep 60\n')
    with pytest.raises(ServerStartError) as err:
        LlamaServerProcess(fake, model, deadlines=ServerDeadlines(start_s=1.5))
    message = _one_line(err.value)
    assert "not ready within 1.5 s" in message and "loading forever" in message, message
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_missing_model_is_a_start_error_before_anything_runs(tmp_path):
    fake, _model = _fake_binary(tmp_path, "exit 0\n")
    with pytest.raises(ServerStartError, match="no model file at"):
        LlamaServerProcess(fake, tmp_path / "absent.gguf")


# --- cancelling a build (issue 36: the window's Cancel build), with a stand-in pip -----------------

def _alive(pid: int) -> bool:
    """The process exists and is no zombie (a container's init may not reap orphans)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


@pytest.fixture
def empty_build_cache(tmp_path, monkeypatch):
    """An empty cache folder of our own (never the real one, where a build may be going) and no
    ``$SPEC_INSPECTOR_LLAMA_SERVER``."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPEC_INSPECTOR_CACHE", str(cache))
    monkeypatch.delenv("SPEC_INSPECTOR_LLAMA_SERVER", raising=False)
    return cache


def _build_in_thread(cancel):
    out = {"said": []}

    def go():
        try:
            out["path"] = build_llama_server(out["said"].append, cancel)
        except BaseException as exc:  # noqa: BLE001 (the test reads it)
            out["error"] = exc

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, out


def test_a_cancelled_build_kills_its_processes_and_leaves_the_cache_clean(empty_build_cache, tmp_path, monkeypatch):
    """The download step stands in for every step (``python -m pip download``, here a script that
    starts two long children, as make starts compilers): Cancel kills them all, removes the build's
    temporary folder, frees the lock, and the next build starts over."""
    pids = tmp_path / "pids"
    slow = tmp_path / "python"
    slow.write_text(f"#!/bin/sh\necho starting\nsleep 300 & echo $! >> {pids}\nsleep 300 & echo $! >> {pids}\n"
                    "wait\n")
    slow.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(slow))
    cancel = threading.Event()
    thread, out = _build_in_thread(cancel)
    deadline = time.monotonic() + 20
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 2 and all(_alive(p) for p in children)
    assert list(empty_build_cache.glob(".llama-server-*-tmp-*"))  # the build's folder while it goes
    t0 = time.monotonic()
    cancel.set()
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - t0 < 5
    assert isinstance(out.get("error"), ServerBuildCancelled), out
    assert _one_line(out["error"]) == "llama-server build cancelled during its download step"
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in children), "the step's children outlived the cancel"
    assert not list(empty_build_cache.glob(".llama-server-*-tmp-*")) and not cached_server_path().exists()
    with open(empty_build_cache / "llama-server-0.3.36-0c1e570.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released
        fcntl.flock(lock, fcntl.LOCK_UN)
    # The next build starts over from the download (which fails at once here).
    failing = tmp_path / "failing-python"
    failing.write_text("#!/bin/sh\necho 'ERROR: no network' >&2\nexit 1\n")
    failing.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(failing))
    with pytest.raises(ServerBuildError) as err:
        build_llama_server(None, threading.Event())
    assert not isinstance(err.value, ServerBuildCancelled)
    assert "download step failed (exit code 1): ERROR: no network" in _one_line(err.value)
    assert not list(empty_build_cache.glob(".llama-server-*-tmp-*"))


def test_cancel_while_waiting_for_another_processs_build(empty_build_cache):
    """Another process holds the build lock: the build waits (and says so) until cancelled."""
    empty_build_cache.mkdir(parents=True)
    with open(empty_build_cache / "llama-server-0.3.36-0c1e570.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        cancel = threading.Event()
        thread, out = _build_in_thread(cancel)
        deadline = time.monotonic() + 10
        while not out["said"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out["said"] and out["said"][0].startswith("waiting for another process's llama-server build")
        cancel.set()
        thread.join(5)
        assert not thread.is_alive() and isinstance(out.get("error"), ServerBuildCancelled)


def test_a_build_finds_the_binary_already_built(empty_build_cache):
    """Already built: the binary is used at once (nothing runs, no lock taken)."""
    target = cached_server_path()
    target.parent.mkdir(parents=True)
    target.write_text("#!/bin/sh\n")
    assert build_llama_server(None, threading.Event()) == target
    assert not (empty_build_cache / "llama-server-0.3.36-0c1e570.lock").exists()


# --- the real llama-server (built once on first use) --------------------------------------------------

def test_the_built_llama_server_reports_llama_cpp_0c1e570(llama_server_binary):
    assert server_version(llama_server_binary).commit == LLAMA_CPP_COMMIT


def test_a_started_llama_server_answers_health_props_completion_and_metrics(start_llama_server):
    server = start_llama_server()
    client = server.client
    client.check_reachable()
    assert client.health() == 200
    assert client.build_info().endswith(f"-{LLAMA_CPP_COMMIT}")
    done = client.complete([1, 9690, 28, 957, 314, 3479, 30], 8)
    assert 1 <= len(done.tokens) <= 8 and (len(done.tokens) == 8 or done.stop_type == "eos"), done
    assert done.predicted_per_second > 0 and done.predicted_n == len(done.tokens)
    assert done.draft_n == 0
    m = client.metrics()
    assert (m.drafts, m.draft_tokens, m.accepted_tokens) == (0, 0, 0)
    assert m.values["tokens_predicted_total"] >= len(done.tokens)
    server.stop()
    server.stop()
    assert not server.running()
    with pytest.raises(ServerUnreachable, match="connection refused"):
        client.check_reachable()
    assert "model" in server.log_text()


def test_starting_llama_server_with_a_removed_flag_names_the_flag(start_llama_server):
    with pytest.raises(ServerStartError) as err:
        start_llama_server(args=["--draft-max", "4"])
    message = _one_line(err.value)
    assert "--draft-max" in message and "removed" in message, message


def test_a_llama_server_of_another_llama_cpp_commit_is_named_in_one_line(tmp_path):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'version: 0.6.0 (build 7100, commit deadbee)' >&2\n")
    fake.chmod(0o755)
    note = version_note(fake)
    assert "deadbee" in note and LLAMA_CPP_COMMIT in note and "\n" not in note
    same = tmp_path / "same"
    same.write_text(f"#!/bin/sh\necho 'version: 0.5.0-dev (build 0, commit {LLAMA_CPP_COMMIT})' >&2\n")
    same.chmod(0o755)
    assert version_note(same) == ""
