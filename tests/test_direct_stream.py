"""Token chunks written by the slot's thread (issue 53, ``inspector.serve.direct_stream``): the stream a client
reads is the one the loop's path writes, byte for byte apart from ids and times; the slot's thread wrote the
tokens; a client that does not read moves the stream back to the loop without losing a byte; HTTP/1.0 and
several prompts take the loop's path."""

from __future__ import annotations

import json
import socket
import httpx

from inspector.serve.direct_stream import DIRECT, LOOP, PARKED, DirectStream, Raw, frame

GREEDY = {"temperature": 0, "cache_prompt": False}


def _contents(lines) -> list:
    out = []
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk = json.loads(line[6:])
            out.append(chunk.get("content", None) if "content" in chunk else
                       [c.get("delta", c.get("text")) for c in chunk.get("choices", [])])
    return out


def test_a_chunk_is_framed_as_h11_frames_it():
    assert frame(b"abc") == b"3\r\nabc\r\n"
    assert frame(b"x" * 26) == b"1a\r\n" + b"x" * 26 + b"\r\n"


def test_the_slot_thread_writes_the_tokens_and_the_client_reads_what_the_loop_would_write(serve, runtime):
    server = serve(source="none", source_options={})
    a = server.address
    never_end = [[t, False] for t in range(runtime.n_vocab) if runtime.is_eog(t)]  # 24 tokens, whatever the model
    body = {"prompt": "Write a short poem about the sea.", "n_predict": 24, "stream": True, "logit_bias": never_end,
            **GREEDY}
    with httpx.stream("POST", a + "/completion", json=body, timeout=60) as r:
        direct_lines = list(r.iter_lines())
    job = server.slots.slots[0].last_job
    assert job.direct is not None and job.direct.direct_chunks >= 10, "the slot's thread wrote no token"
    host, port = a.split("//")[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as s:  # the same request over HTTP/1.0
        payload = json.dumps(body).encode()
        s.sendall(b"POST /completion HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload))
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    lines = raw.split(b"\r\n\r\n", 1)[1].decode().splitlines()
    assert server.slots.slots[0].last_job.direct is None  # HTTP/1.0: no chunks to write by hand
    assert _contents(direct_lines) == _contents(lines) and len(_contents(lines)) >= 10


def test_a_stream_reads_the_same_tokens_as_the_answer_not_streamed(serve, runtime):
    server = serve(source="none", source_options={})
    a = server.address
    never_end = [[t, False] for t in range(runtime.n_vocab) if runtime.is_eog(t)]
    body = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 24,
            "logit_bias": never_end, **GREEDY}
    whole = httpx.post(a + "/v1/chat/completions", json=body, timeout=60).json()["choices"][0]["message"]["content"]
    text = []
    with httpx.stream("POST", a + "/v1/chat/completions", json={**body, "stream": True}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                for c in json.loads(line[6:])["choices"]:
                    text.append(c["delta"].get("content") or "")
    assert server.slots.slots[0].last_job.direct.direct_chunks >= 5
    assert "".join(text) == whole


class _Transport:
    """A transport over one end of a socket pair (what ``DirectStream`` asks of uvloop's)."""

    def __init__(self, sock):
        self.sock, self.written = sock, []

    def get_extra_info(self, name):
        return self.sock if name == "socket" else None

    def is_closing(self):
        return False

    def get_write_buffer_size(self):
        return 0

    def write(self, data):
        self.written.append(data)


class _Render:
    def chunk(self, item):
        return [{"data": item}]


def test_a_client_that_does_not_read_moves_the_stream_back_to_the_loop_with_the_rest_of_the_chunk():
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    transport = _Transport(ours)
    d = DirectStream(transport, _Render())
    assert d.offer("early") == "early" and d.state == PARKED  # the loop writes until it has caught up
    d.start()
    assert d.state == PARKED
    d.consumed_one()
    assert d.state == DIRECT
    sent_whole, rest = 0, None
    for i in range(10_000):  # nobody reads ``theirs``: the socket's buffer fills
        got = d.offer("x" * 1000)
        if got is not None:
            rest = got
            break
        sent_whole += 1
    assert isinstance(rest, Raw) and d.state == LOOP and sent_whole >= 1
    assert d.offer("later") == "later"  # the loop's path from now on
    theirs.setblocking(False)
    received = b""
    try:
        while chunk := theirs.recv(1 << 20):
            received += chunk
    except BlockingIOError:
        pass
    whole = frame(b"data: " + b"x" * 1000 + b"\n\n")
    assert received + rest.data == whole * (sent_whole + 1)  # every byte once, in order
    d.finish()
    ours.close()
    theirs.close()


def _direct(render=None, sndbuf=None):
    ours, theirs = socket.socketpair()
    if sndbuf:
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    transport = _Transport(ours)
    d = DirectStream(transport, render or _Render())
    d.start()
    assert d.state == DIRECT
    return d, transport, ours, theirs


def test_a_chunk_that_fails_to_render_goes_to_the_loop_which_meets_the_failure_as_before():
    class Broken:
        def chunk(self, item):
            raise ValueError("cannot render")

    d, transport, ours, theirs = _direct(Broken())
    assert d.offer("token") == "token" and d.state == LOOP and d.posted == 1
    assert d.offer("next") == "next"  # the loop's path from now on
    d.finish()
    ours.close()
    theirs.close()


def test_a_ping_never_lands_inside_a_chunk_whose_rest_waits_for_the_loop():
    d, transport, ours, theirs = _direct(sndbuf=4096)
    rest = None
    for _ in range(10_000):
        rest = d.offer("x" * 1000)
        if rest is not None:
            break
    assert isinstance(rest, Raw) and d.state == LOOP
    assert d.ping(b":\n\n") is True and transport.written == []  # dropped: the rest of the chunk goes first
    d.write_raw(rest)
    assert transport.written == [rest.data]
    assert d.ping(b":\n\n") is False  # nothing pending: the loop sends it
    d.finish()
    ours.close()
    theirs.close()


def test_a_client_that_left_stops_the_slot_writing_without_an_error():
    d, transport, ours, theirs = _direct()
    theirs.close()
    for _ in range(3):  # the first send may still succeed; then EPIPE or ECONNRESET, and no error here
        if d.state == "done":
            break
        assert d.offer("token") is None
    assert d.state == "done"
    assert d.offer("later") == "later"  # to the loop, which finds the client gone and cancels
    d.finish()
    ours.close()
