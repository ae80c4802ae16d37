"""Issue 37, items 7 and 12: the llama-server HTTP client against servers that misbehave.

Every server here is real: a thread on 127.0.0.1 with a raw socket, answering as written per path
(a trickle of a byte every 0.3 s, a Content-Length of 50 GB, chunks without end, JSON nested
100,000 deep, 5 million token ids for a 16-token request, fields of the wrong type, a reply cut
off, a connection closed without an answer). Each request has a deadline (``timeout_s``, here 2 s,
so each test takes seconds); every failure is one line that says what happened, never a Python
error's text. The last tests run ``spec-inspector compare --llama-server URL`` against such a
server: our rows are printed, the server's row is one line."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from inspector.bench.server_client import SMALL_REPLY_BYTES, LlamaServerClient, parse_metrics
from inspector.bench.server_compare import is_url
from inspector.bench.server_http import ServerError, ServerRequestError, ServerUnreachable, WrongServer

DEADLINE_S = 2.0
HEALTH = b'{"status": "ok"}'
PROPS = b'{"build_info": "b0-0c1e570"}'
INTERNALS = ("Traceback", "AttributeError", "OverflowError", "invalid literal", "RecursionError", "MemoryError",
             "object has no attribute", "Name or service not known", "int()", "TypeError", "KeyError")


def _read_request(conn: socket.socket) -> tuple[str, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return "", b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next((int(l.split(":", 1)[1]) for l in lines if l.lower().startswith("content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return lines[0].split(" ")[1], body


def reply(conn, body: bytes, status: str = "200 OK", ctype: str = "application/json", length: int | None = None):
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: "
            f"{len(body) if length is None else length}\r\nConnection: close\r\n\r\n")
    conn.sendall(head.encode() + body)


class FakeServer:
    """A thread accepting on 127.0.0.1; each connection's request goes to ``routes[path](conn, stop)``
    (a path not listed: 404). ``close`` ends every connection."""

    def __init__(self, routes: dict) -> None:
        self.routes = routes
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.conns: list[socket.socket] = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn) -> None:
        try:
            path, _body = _read_request(conn)
            handler = self.routes.get(path)
            if handler is None:
                reply(conn, b"not found", "404 Not Found", "text/plain")
            else:
                handler(conn, self.stop)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def serve():
    servers = []

    def start(**routes) -> str:
        routes = {"/" + k.replace("_", "/"): v for k, v in routes.items()}
        server = FakeServer({"/health": lambda c, s: reply(c, HEALTH), "/props": lambda c, s: reply(c, PROPS),
                             **routes})
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.close()


def bounded(call, limit_s: float = 10.0):
    """``call()`` in a thread: (the exception it raised, seconds). A call still running after
    ``limit_s`` fails the test (the server's close then lets it end)."""
    out: dict = {}

    def go():
        try:
            out["value"] = call()
        except BaseException as exc:  # noqa: BLE001 (the test reads it)
            out["error"] = exc

    t0 = time.monotonic()
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still waiting after {limit_s} s"
    return out.get("error"), time.monotonic() - t0


def one_line(exc) -> str:
    assert isinstance(exc, ServerError), repr(exc)
    text = str(exc)
    assert text and "\n" not in text, text
    assert not any(word in text for word in INTERNALS), text
    return text


def trickle(prefix: bytes):
    def handler(conn, stop):
        conn.sendall(prefix)
        while not stop.is_set():
            conn.sendall(b"x")
            time.sleep(0.3)
    return handler


def client(url: str) -> LlamaServerClient:
    return LlamaServerClient(url, timeout_s=DEADLINE_S)


# --- item 7: a deadline per request, replies bounded by what the request can produce ---------------

@pytest.mark.parametrize("where", ["status line", "headers", "body"])
def test_a_server_that_trickles_a_byte_at_a_time_is_given_up_at_the_deadline(serve, where):
    prefix = {"status line": b"HTTP/1.1 2", "headers": b"HTTP/1.1 200 OK\r\nX-Slow: ",
              "body": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"}[where]
    url = serve(completion=trickle(prefix))
    error, took = bounded(lambda: client(url).complete([1, 2, 3], 16))
    assert DEADLINE_S - 0.1 < took < DEADLINE_S + 2, took
    assert isinstance(error, ServerRequestError)
    assert one_line(error).startswith(f"POST {url}/completion: no complete reply within 2 s (the request's "
                                      "deadline); "), error


def test_a_server_that_never_answers_health_is_given_up_at_the_deadline_not_called_a_wrong_server(serve):
    url = serve(health=lambda conn, stop: stop.wait(60))
    error, took = bounded(lambda: client(url).check_reachable())
    assert took < DEADLINE_S + 2
    assert not isinstance(error, WrongServer)
    assert one_line(error) == (f"GET {url}/health: no complete reply within 2 s (the request's deadline); "
                               "nothing had come")


def test_a_content_length_of_50_gb_is_refused_before_the_body_is_read(serve):
    def huge(conn, stop):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 50000000000\r\n\r\n")
        while not stop.is_set():
            conn.sendall(b"0" * 65536)

    url = serve(completion=huge)
    error, took = bounded(lambda: client(url).complete([1, 2, 3], 16))
    assert took < 2
    assert one_line(error) == (f"POST {url}/completion: the reply says it is 50,000,000,000 bytes (Content-Length), "
                               "more than the 1,068,032-byte limit for 16 tokens after a 3-token prompt (1 MiB + 1 KiB "
                               "per token)")


def test_endless_chunks_on_props_end_at_the_limit(serve):
    def endless(conn, stop):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
        while not stop.is_set():
            conn.sendall(chunk)

    url = serve(props=endless)
    error, took = bounded(lambda: client(url).check_reachable())
    assert took < 5
    assert one_line(error) == f"GET {url}/props: the reply is more than {SMALL_REPLY_BYTES:,} bytes, the limit"


def test_five_million_token_ids_for_a_16_token_request_are_refused(serve):
    many = json.dumps({"content": "", "tokens": [7] * 5_000_000, "timings": {}}).encode()  # 15 MB
    url = serve(completion=lambda conn, stop: reply(conn, many))
    error, took = bounded(lambda: client(url).complete(list(range(20)), 16))
    assert took < 5
    assert "the reply says it is 15,000,042 bytes (Content-Length), more than the 1,085,440-byte limit for 16 " \
           "tokens after a 20-token prompt" in one_line(error)


def test_more_tokens_than_the_request_allowed_are_refused_even_when_the_reply_is_small(serve):
    body = json.dumps({"content": "", "tokens": list(range(17)), "timings": {}}).encode()
    url = serve(completion=lambda conn, stop: reply(conn, body))
    error, _took = bounded(lambda: client(url).complete([1, 2, 3], 16))
    assert one_line(error) == (f"POST {url}/completion: the reply has 17 tokens, more than the 16 the request "
                               "allowed (n_predict)")


def test_json_nested_100000_deep_is_one_line(serve):
    deep = b"[" * 100_000 + b"]" * 100_000
    url = serve(props=lambda conn, stop: reply(conn, deep), completion=lambda conn, stop: reply(conn, deep))
    error, _took = bounded(lambda: client(url).check_reachable())
    assert isinstance(error, WrongServer)
    assert one_line(error) == (f"{url} answered but is not a llama-server: GET /props gave HTTP 200 (application/json: "
                               "JSON nested too deeply to read, 200,000 bytes), expected JSON with build_info")
    error, _took = bounded(lambda: client(url).complete([1, 2, 3], 16))
    assert "POST /completion gave (application/json: JSON nested too deeply to read" in one_line(error)


# --- item 12: what happened, in words ---------------------------------------------------------------

@pytest.mark.parametrize("completion, expected", [
    ([1, 2], "the reply is a JSON list, expected an object"),
    ({"content": "", "tokens": [1], "timings": [1, 2]}, "the reply's timings is a JSON list, expected an object"),
    ({"content": "", "tokens": [1], "timings": {"predicted_n": "abc"}},
     "the reply's timings.predicted_n is 'abc', expected a whole number 0..2147483647"),
    ({"content": "", "tokens": [1], "timings": {"predicted_n": float("inf")}},
     "the reply's timings.predicted_n is inf, expected a whole number 0..2147483647"),
    ({"content": "", "tokens": [1], "timings": {"predicted_per_second": float("nan")}},
     "the reply's timings.predicted_per_second is nan, expected a finite number >= 0"),
    ({"content": "", "tokens": ["a"], "timings": {}},
     "the reply's tokens[0] is 'a', expected a token id (a whole number 0..2147483647)"),
    ({"content": "", "tokens": [1e300], "timings": {}},
     "the reply's tokens[0] is 1e+300, expected a token id (a whole number 0..2147483647)"),
    ({"content": "", "tokens": [1], "timings": {"draft_n": -4}},
     "the reply's timings.draft_n is -4, expected a whole number 0..2147483647"),
    ({"content": 5, "tokens": [1]}, "the reply's content is 5, expected text"),
])
def test_a_completion_of_the_wrong_shape_names_the_field(serve, completion, expected):
    body = json.dumps(completion).encode()  # Python writes inf and nan as Infinity and NaN, which it reads back
    url = serve(completion=lambda conn, stop: reply(conn, body))
    error, _took = bounded(lambda: client(url).complete([1, 2, 3], 16))
    assert isinstance(error, ServerRequestError)
    assert one_line(error) == f"POST {url}/completion: {expected}"


@pytest.mark.parametrize("metrics, expected", [
    ("llamacpp:spec_decode_num_drafts_total abc\n", "llamacpp:spec_decode_num_drafts_total has the value 'abc', not "
                                                    "a number"),
    ("llamacpp:spec_decode_num_drafts_total NaN\n", "llamacpp:spec_decode_num_drafts_total is nan, expected a count"),
    ("llamacpp:spec_decode_num_draft_tokens_total +Inf\n", "llamacpp:spec_decode_num_draft_tokens_total is inf, "
                                                           "expected a count"),
    ('llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="99999999999"} 1\n',
     "names position '99999999999', beyond any draft (at most 1048576)"),
])
def test_metrics_that_are_not_counts_are_one_line(metrics, expected):
    with pytest.raises(ValueError) as err:
        parse_metrics(metrics)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_server_that_dies_mid_reply_says_so_and_is_not_called_a_wrong_server(serve):
    def cut(conn, stop):
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"status")

    url = serve(health=cut, completion=cut)
    error, _took = bounded(lambda: client(url).check_reachable())
    assert not isinstance(error, WrongServer)
    assert one_line(error) == (f"GET {url}/health: the reply broke off after 8 of 1,000 bytes (the server closed the "
                               "connection)")
    error, _took = bounded(lambda: client(url).complete([1], 4))
    assert one_line(error).startswith(f"POST {url}/completion: the reply broke off after 8 of 1,000 bytes")


def test_a_server_that_closes_without_a_word_says_so_and_is_not_called_a_wrong_server(serve):
    url = serve(health=lambda conn, stop: None)  # the request is read, the connection closed
    error, _took = bounded(lambda: client(url).check_reachable())
    assert not isinstance(error, WrongServer)
    assert one_line(error) == f"GET {url}/health: the server accepted the connection and closed it without an answer"


def test_an_answer_that_is_not_http_is_a_wrong_server(serve):
    url = serve(health=lambda conn, stop: conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n"))
    error, _took = bounded(lambda: client(url).check_reachable())
    assert isinstance(error, WrongServer)
    assert one_line(error).startswith(f"{url} answered but is not a llama-server: GET /health got an answer that is "
                                      "not HTTP (BadStatusLine")


@pytest.mark.parametrize("url", ["http://user:pw@127.0.0.1:8080", "user:pw@127.0.0.1:8080",
                                 "http://key@127.0.0.1:8080"])
def test_a_url_with_a_user_or_password_is_refused_in_words(url):
    assert is_url(url)
    with pytest.raises(ServerUnreachable) as err:
        LlamaServerClient(url)
    assert one_line(err.value) == (f"{url} is not a server URL: it holds a user name or password (USER:PASSWORD@), "
                                   "and llama-server has no login (its --api-key is not a URL part): expected "
                                   "http://HOST:PORT")


def test_an_unknown_host_is_named():
    error, _took = bounded(lambda: client("http://no-such-host.invalid:8080").check_reachable(), 30)
    assert isinstance(error, ServerUnreachable)
    assert one_line_allowing_resolver(error).startswith("no llama-server answers at http://no-such-host.invalid:8080: "
                                                        "the host 'no-such-host.invalid' is not known (")


def one_line_allowing_resolver(exc) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text
    return text


# --- the command line ---------------------------------------------------------------------------------

def compare(url: str, *extra: str):
    return subprocess.run([sys.executable, "-m", "inspector", "compare", "--prompt", "one two three", "--max-tokens",
                           "4", "--config", "none", "--llama-server", url, *extra],
                          capture_output=True, text=True, timeout=120)


def _server_line(p) -> str:
    assert "none" in p.stdout.splitlines()[1], p.stdout  # our row came first
    rows = [l for l in p.stdout.splitlines() if l.startswith("none ") and "error:" in l]
    assert len(rows) == 1, (p.stdout, p.stderr)
    for word in INTERNALS:
        assert word not in p.stdout + p.stderr, (word, p.stdout, p.stderr)
    return rows[0]


@pytest.mark.parametrize("completion, expected", [
    ({"content": "", "tokens": [1], "timings": [1]}, "the reply's timings is a JSON list, expected an object"),
    ({"content": "", "tokens": [1], "timings": {"predicted_n": float("inf")}},
     "the reply's timings.predicted_n is inf"),
    ({"content": "", "tokens": [1], "timings": {"prompt_n": "12x"}}, "the reply's timings.prompt_n is '12x'"),
])
def test_compare_against_a_server_with_a_broken_reply_prints_its_row_as_one_line(serve, completion, expected):
    body = json.dumps(completion).encode()
    metrics = b"llamacpp:spec_decode_num_drafts_total 0\n"
    url = serve(completion=lambda conn, stop: reply(conn, body),
                metrics=lambda conn, stop: reply(conn, metrics, ctype="text/plain"))
    p = compare(url)
    assert p.returncode == 1, p.stderr
    assert expected in _server_line(p)


def test_compare_against_a_trickling_server_ends_at_its_stated_timeout(serve):
    url = serve(completion=trickle(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"),
                metrics=lambda conn, stop: reply(conn, b"", "501 Not Implemented"))
    t0 = time.monotonic()
    p = compare(url, "--llama-server-timeout", "2")
    assert p.returncode == 1, p.stderr
    assert "no complete reply within 2 s (the request's deadline)" in _server_line(p)
    assert time.monotonic() - t0 < 60
