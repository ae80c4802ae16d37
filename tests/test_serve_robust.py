"""``spec-inspector serve`` against misbehaving clients and stops (issue 52): a receipts folder that cannot be
written is refused at start, the folder's bound removes only serve's own documents, slow clients neither
hold the server nor turn other requests away, a stop is said as a stop (to the client and in the record),
a stop while a request finishes leaves no traceback and keeps the record, NaN and lone surrogates are one
line naming the field. Loopback only; every generation short, every load bounded in count and time."""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import httpx
import pytest

from inspector.receipts import load_document
from inspector.serve.errors import ApiError
from inspector.serve.job import Job, JobPrompt
from inspector.serve.params import ServeDefaults, parse_request
from inspector.serve.receipts_dir import RESCAN_WRITES, ReceiptsDir
from inspector.serve.server import InspectorServer, ServeError

from serve_helpers import serve_options, wait_done
from test_cli import cli, one_clear_line

GREEDY = {"temperature": 0}


def _slow_tokens(server, seconds: float) -> None:
    """Make the slot hand over each batch of tokens ``seconds`` late (a long generation without the CPU)."""
    slot = server.slots.slots[0]
    original = slot._send

    def late(*args):
        time.sleep(seconds)
        return original(*args)

    slot._send = late


# -- 1. the receipts folder is checked at start -----------------------------------------------------------

def test_an_unwritable_receipts_folder_or_session_path_is_refused_at_start_in_one_line(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    under = a_file / "served"
    p = cli("serve", "--receipts-dir", under, timeout=60)
    assert p.returncode == 2, p.stderr
    line = one_clear_line(p.stderr)
    assert str(under) in line and "--receipts-dir" in line and "loading" not in p.stderr
    p = cli("serve", "--receipts-dir", a_file, timeout=60)
    assert p.returncode == 2, p.stderr
    line = one_clear_line(p.stderr)
    assert str(a_file) in line and "is a file" in line
    p = cli("serve", "--receipts-dir", tmp_path / "ok", "--session", a_file / "session.json", timeout=60)
    assert p.returncode == 2, p.stderr
    assert "--session" in one_clear_line(p.stderr)


def test_the_server_refuses_to_start_on_a_receipts_folder_under_a_file(scheduler, runtime, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    server = InspectorServer(scheduler, str(runtime.model_path),
                             serve_options(tmp_path, receipts=ReceiptsDir(a_file / "served")))
    with pytest.raises(ServeError, match="cannot write") as e:
        server.start()
    assert str(a_file / "served") in str(e.value) and "\n" not in str(e.value)
    assert not server.running


# -- 2. the bound removes only serve's own documents ------------------------------------------------------

def _served_doc(path, request_id: int, mtime: float) -> None:
    path.write_text(json.dumps({"kind": "request", "served": {"request_id": request_id}}, indent=1))
    os.utime(path, (mtime, mtime))


def test_the_folder_bound_removes_only_documents_serve_wrote(tmp_path):
    folder = tmp_path / "served"
    folder.mkdir()
    now = time.time()
    mine = folder / "req-mine.json"  # the user's own, the oldest file of all
    mine.write_text(json.dumps({"kind": "request", "served": {"request_id": 1}}))
    os.utime(mine, (now - 1000, now - 1000))
    lookalike = folder / "req-20240101-000000-000009.json"  # serve's name, not serve's document
    lookalike.write_text('{"notes": "mine"}')
    os.utime(lookalike, (now - 900, now - 900))
    earlier = folder / "req-20240101-000000-000001.json"  # an earlier run of serve: counted and removable
    _served_doc(earlier, 1, now - 800)
    rd = ReceiptsDir(folder, keep=2)
    for i in range(1, 3):
        _served_doc(rd.path_of(i), i, now - 10 + i)
    rd.bound_after(rd.path_of(2))
    assert mine.exists() and lookalike.exists(), "a document serve did not write was removed"
    assert not earlier.exists(), "an earlier run's document was not counted"
    assert rd.path_of(1).exists() and rd.path_of(2).exists()
    assert [p.name for p in rd.files(this_run_only=True)] == [rd.path_of(1).name, rd.path_of(2).name]


def test_the_folder_is_listed_once_per_hundred_writes_and_a_file_added_meanwhile_counts_at_the_next(
        tmp_path, monkeypatch):
    folder = tmp_path / "served"
    folder.mkdir()
    now = time.time()
    for i in range(1, 6):  # an earlier run's documents
        _served_doc(folder / f"req-20240101-000000-{i:06d}.json", i, now - 1000 + i)
    rd = ReceiptsDir(folder, keep=5)
    listings = []
    real_files = rd.files
    monkeypatch.setattr(rd, "files", lambda *a, **k: listings.append(1) or real_files(*a, **k))
    for i in range(1, RESCAN_WRITES + 2):
        _served_doc(rd.path_of(i), i, now - 500 + i)
        rd.bound_after(rd.path_of(i))
        if i == 10:  # another program's document, newer than every one of ours
            _served_doc(folder / "req-20240101-000000-999999.json", 999999, now)
    assert len(listings) == 2, "the folder was not listed exactly at the first write and RESCAN_WRITES writes later"
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == 5, names
    assert "req-20240101-000000-999999.json" in names, "the other program's newest document was removed"
    assert rd.path_of(RESCAN_WRITES + 1).name in names


# -- 3. slow clients ------------------------------------------------------------------------------------------

class SlowClients:
    """``n`` connections sending a request's headers (``part`` "headers") or its body ("body") one byte a
    second (bounded: at most 30 bytes each; ``close`` ends them)."""

    def __init__(self, address: str, n: int, part: str = "headers") -> None:
        host, port = address.removeprefix("http://").rsplit(":", 1)
        start = b"G" if part == "headers" else (b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                                 b"application/json\r\nContent-Length: 400\r\n\r\n{")
        self.rest = b"ET /health HTTP/1.1\r\nHost: x\r\n" if part == "headers" else b'"prompt": "' + b"a" * 19
        self.socks = []
        for _ in range(n):
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(start)
            self.socks.append(s)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)
        self.thread.start()

    def _trickle(self) -> None:
        for byte in self.rest:
            if self.stop.wait(1.0):
                return
            for s in self.socks:
                try:
                    s.sendall(bytes([byte]))
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for s in self.socks:
            s.close()


def _completion_s(server) -> float:
    t0 = time.monotonic()
    r = httpx.post(server.address + "/completion", json={"prompt": "Hello", "n_predict": 4, **GREEDY}, timeout=120)
    assert r.status_code == 200, r.text
    return time.monotonic() - t0


@pytest.fixture
def one_thread(scheduler, runtime):
    """The shared runtime on one CPU thread for the test (llama.cpp's spinning threads on a machine whose
    cores are busy made a 4-token completion take 0.3 s or 17 s at random), then back."""
    before = runtime.n_threads
    scheduler.execute("stats", -1, lambda r: r.set_threads(1))
    yield
    scheduler.execute("stats", -1, lambda r: r.set_threads(before))


@pytest.mark.parametrize("part", ["headers", "body"])
def test_slow_clients_hold_no_worker_health_and_a_completion_answer_in_seconds(serve, part, capfd, one_thread):
    server = serve()
    alone_s = _completion_s(server)  # the same completion with no slow client (the machine's speed now)
    slow = SlowClients(server.address, 100, part)
    try:
        time.sleep(1.5)  # every slow connection is open and has sent a few bytes
        t0 = time.monotonic()
        h = httpx.get(server.address + "/health", timeout=10)
        health_s = time.monotonic() - t0
        assert h.status_code == 200, h.text
        completion_s = _completion_s(server)
        assert health_s < 3 and completion_s < max(5, 3 * alone_s), (health_s, completion_s, alone_s)
        t0 = time.monotonic()
        server.stop()  # with the slow connections still open
        stop_s = time.monotonic() - t0
        assert stop_s < 5, stop_s
    finally:
        slow.close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception" not in err, err
    with capfd.disabled():
        print(f"\n{part}: /health {health_s * 1000:.0f} ms, completion {completion_s * 1000:.0f} ms with 100 slow "
              f"sockets ({alone_s * 1000:.0f} ms without); stop {stop_s * 1000:.0f} ms")


def test_a_connection_whose_headers_do_not_arrive_in_time_is_closed_with_408(serve):
    server = serve(header_timeout_s=1.0, body_timeout_s=1.0)
    host, port = server.address.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"GET /hea")
        t0 = time.monotonic()
        got = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        assert time.monotonic() - t0 < 4
    assert got.startswith(b"HTTP/1.1 408"), got
    with socket.create_connection((host, int(port)), timeout=5) as s:  # a body that never ends
        s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"prompt\": ")
        t0 = time.monotonic()
        while s.recv(4096):
            pass
        assert time.monotonic() - t0 < 4
    assert httpx.get(server.address + "/health", timeout=5).status_code == 200
    assert not server.slots.snapshot_rows()


# -- 4. a stop is said as a stop -----------------------------------------------------------------------------

def test_a_stop_during_a_stream_tells_the_client_the_server_is_stopping_and_records_it(serve):
    server = serve()
    _slow_tokens(server, 0.3)
    events, stopper, waiting = [], None, {}

    def queued():
        waiting["reply"] = httpx.post(server.address + "/completion", timeout=60,
                                      json={"prompt": "Hello", "n_predict": 4, **GREEDY})

    behind = threading.Thread(target=queued)
    with httpx.stream("POST", server.address + "/completion", timeout=60,
                      json={"prompt": "Count: one, two,", "n_predict": 16, "stream": True, **GREEDY}) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if len(events) == 1:
                    behind.start()
                    t = time.monotonic() + 10
                    while server.slots.waiting < 1 and time.monotonic() < t:
                        time.sleep(0.02)
                    stopper = threading.Thread(target=server.stop)
                    stopper.start()
    stopper.join(30)
    behind.join(30)
    reply = waiting["reply"]  # the request waiting behind it: refused as stopped, not as a failure
    assert reply.status_code == 503 and reply.json()["error"]["message"] == "the server is stopping", reply.text
    assert server.slots.snapshot_rows()[1].error == "the server stopped"
    err = events[-1].get("error")
    assert err is not None, events[-1]
    assert err["type"] == "unavailable_error" and err["code"] == 503
    assert err["message"] == "the server is stopping"
    row = server.slots.snapshot_rows()[0]
    assert row.ended_as == "cancelled" and row.error == "the server stopped"
    doc = load_document(row.receipts_path)
    assert doc["served"]["ended_as"] == "cancelled" and doc["served"]["error"] == "the server stopped"


# -- 5. a stop while a request finishes -------------------------------------------------------------------------

def test_a_stop_after_the_client_left_keeps_the_record_and_raises_nothing_on_the_engine_thread(serve, monkeypatch):
    uncaught = []
    monkeypatch.setattr(threading, "excepthook", lambda args: uncaught.append(args.exc_value))
    server = serve()
    _slow_tokens(server, 0.6)  # the slot hands tokens over after the event loop has closed
    with httpx.stream("POST", server.address + "/completion", timeout=60,
                      json={"prompt": "Count: one, two,", "n_predict": 16, "stream": True, **GREEDY}) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                break  # the client goes away mid-request
    server.stop()
    rows = wait_done(server, 1, 30)
    assert not uncaught, uncaught
    assert rows[0].receipts_path, server.slots.receipts.error
    assert load_document(rows[0].receipts_path)["served"]["ended_as"] == "cancelled"


def test_a_delivery_that_fails_never_ends_the_engine_thread_nor_loses_the_record(serve, runtime):
    server = serve()
    p = parse_request({"prompt": "Hello", "n_predict": 4, **GREEDY}, "completion", server.state.defaults)

    def closed(item):
        raise RuntimeError("Event loop is closed")

    tokens = runtime.tokenize("Hello", add_special=True)
    server.slots.submit(Job("/completion", p, JobPrompt(tokens, "Hello"), closed))
    rows = wait_done(server, 1, 30)
    assert rows[0].receipts_path and load_document(rows[0].receipts_path)["served"]["request_id"] == 1
    r = httpx.post(server.address + "/completion", json={"prompt": "Hello", "n_predict": 4, **GREEDY}, timeout=30)
    assert r.status_code == 200 and r.json()["tokens_predicted"] >= 1


# -- 6. NaN and lone surrogates ---------------------------------------------------------------------------------

def _refused(body, endpoint="completion") -> str:
    with pytest.raises(ApiError) as e:
        parse_request(body, endpoint, ServeDefaults())
    assert e.value.status == 400
    return e.value.message


def test_nan_and_lone_surrogates_are_one_line_naming_the_field():
    assert _refused(json.loads('{"prompt": "x", "temperature": NaN}')) == \
        "Field 'temperature': must be a finite number, observed NaN"
    assert _refused(json.loads('{"prompt": "x", "top_p": -Infinity}')) == \
        "Field 'top_p': must be a finite number, observed -Infinity"
    assert _refused(json.loads('{"prompt": "\\ud800"}')) == \
        "Field 'prompt': invalid Unicode: a lone surrogate \\ud800 at character 0"
    assert _refused(json.loads('{"messages": [{"role": "user", "content": "ab\\udfff"}]}'), "chat") == \
        "Field 'messages[0].content': invalid Unicode: a lone surrogate \\udfff at character 2"
    assert "stop[0]" in _refused(json.loads('{"prompt": "x", "stop": ["\\ud83d"]}'))


def test_nan_and_lone_surrogates_over_http_are_400_naming_the_field(serve):
    server = serve()
    a = server.address
    h = {"Content-Type": "application/json"}
    cases = {
        b'{"prompt": "hi", "temperature": NaN}': "Field 'temperature': must be a finite number, observed NaN",
        b'{"prompt": "\\ud800"}': "Field 'prompt': invalid Unicode: a lone surrogate \\ud800 at character 0",
    }
    for body, message in cases.items():
        r = httpx.post(a + "/completion", content=body, headers=h)
        assert r.status_code == 400 and r.json()["error"]["message"] == message, r.text
    r = httpx.post(a + "/v1/chat/completions", headers=h,
                   content=b'{"messages": [{"role": "user", "content": "hi \\ud800"}]}')
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == \
        "Field 'messages[0].content': invalid Unicode: a lone surrogate \\ud800 at character 3"
    r = httpx.post(a + "/tokenize", headers=h, content=b'{"content": "\\udc00"}')
    assert r.status_code == 400 and "Field 'content'" in r.json()["error"]["message"], r.text
    assert not server.slots.snapshot_rows()


def test_a_request_not_streamed_gets_its_tokens_with_its_result_and_a_streamed_one_as_they_come(serve, runtime):
    server = serve(source="none", source_options={})
    tokens = runtime.tokenize("Hello", add_special=True)
    seen = {}
    for stream in (False, True):
        p = parse_request({"prompt": "Hello", "n_predict": 8, "stream": stream, **GREEDY}, "completion",
                          server.state.defaults)
        got = seen[stream] = []
        server.slots.submit(Job("/completion", p, JobPrompt(tokens, "Hello"),
                                lambda item, got=got: got.append((time.perf_counter(), type(item).__name__))))
        wait_done(server, 1 + stream, 30)
    held, streamed = seen[False], seen[True]
    assert [k for _, k in held][-1] == "JobResult" and [k for _, k in streamed][-1] == "JobResult"
    assert len(held) == len(streamed) >= 3  # the same tokens and the result both ways
    assert held[-1][0] - held[0][0] < 0.005  # handed over together, at the end
    assert streamed[-1][0] - streamed[0][0] > held[-1][0] - held[0][0]  # one per decode step
