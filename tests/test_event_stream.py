"""A streamed reply's events as llama-server writes them (issue 53: sse-starlette replaced by
``inspector.serve.event_stream``): the bytes of an event, the keep-alive comment after
``sse_ping_interval`` seconds of silence, a client that stops reading. Pure asyncio here; the served
stream with a ping is tested against a real server in ``test_a_queued_stream_gets_llama_servers_ping``."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest

from inspector.serve.errors import ApiError
from inspector.serve.event_stream import PING, EventStream, Pinger, encode_event
from inspector.serve.params import DEFAULT_PING_S, ServeDefaults, parse_request


def test_an_event_is_a_data_line_and_a_blank_line():
    assert encode_event({"data": '{"a": 1}'}) == b'data: {"a": 1}\n\n'


def test_a_named_event_writes_its_name_first_as_the_anthropic_api_does():
    assert encode_event({"data": "{}", "event": "message_stop"}) == b"event: message_stop\ndata: {}\n\n"


def test_data_over_several_lines_gets_a_data_field_per_line():
    assert encode_event({"data": "one\ntwo"}) == b"data: one\ndata: two\n\n"


def test_text_is_written_as_utf8():
    assert encode_event({"data": '"é"'}) == 'data: "é"\n\n'.encode("utf-8")


def test_the_ping_is_llama_servers_comment():
    assert PING == b":\n\n"


def test_silence_longer_than_the_interval_puts_a_ping_in_the_queue():
    async def go():
        q: asyncio.Queue = asyncio.Queue()
        pinger = Pinger(q, 0.05, asyncio.get_running_loop())
        try:
            return await asyncio.wait_for(q.get(), 2)
        finally:
            pinger.close()

    assert asyncio.run(go()) == PING


def test_writes_more_often_than_the_interval_get_no_ping():
    async def go():
        q: asyncio.Queue = asyncio.Queue()
        pinger = Pinger(q, 0.2, asyncio.get_running_loop())
        for _ in range(8):
            await asyncio.sleep(0.05)
            pinger.seen()
        pinger.close()
        return q.qsize()

    assert asyncio.run(go()) == 0


def test_writes_made_elsewhere_count_as_traffic():
    async def go():
        q: asyncio.Queue = asyncio.Queue()
        pinger = Pinger(q, 0.2, asyncio.get_running_loop(), also=time.monotonic)  # "written just now", always
        await asyncio.sleep(0.5)
        pinger.close()
        return q.qsize()

    assert asyncio.run(go()) == 0


def test_no_interval_never_pings():
    async def go():
        q: asyncio.Queue = asyncio.Queue()
        pinger = Pinger(q, -1, asyncio.get_running_loop())
        await asyncio.sleep(0.2)
        pinger.close()
        return q.qsize()

    assert asyncio.run(go()) == 0


def test_a_client_that_stops_reading_ends_the_stream_and_its_cleanup_runs():
    cleaned = []

    async def events():
        try:
            for i in range(10):
                yield b"data: %d\n\n" % i
        finally:
            cleaned.append(True)

    sent = []

    async def send(message):
        sent.append(message)
        if len(sent) >= 3:  # the start and one event went out; then the client reads nothing
            await asyncio.sleep(60)

    async def go():
        await EventStream(events(), send_timeout_s=0.1).stream_response(send)

    t = time.monotonic()
    asyncio.run(go())
    assert time.monotonic() - t < 5
    assert cleaned == [True]
    assert sent[0]["type"] == "http.response.start"
    assert all(m.get("more_body", True) for m in sent)  # left unfinished: uvicorn closes the connection


def test_every_event_goes_out_in_order_and_the_body_ends():
    sent = []

    async def events():
        for i in range(3):
            yield b"data: %d\n\n" % i

    async def send(message):
        sent.append(message)

    asyncio.run(EventStream(events(), send_timeout_s=1).stream_response(send))
    assert [m.get("body") for m in sent[1:]] == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n", b""]
    assert sent[-1]["more_body"] is False
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")


def test_a_request_takes_llama_servers_sse_ping_interval_within_its_limits():
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert parse_request(chat, "chat", ServeDefaults()).sse_ping_interval == DEFAULT_PING_S == 30
    assert parse_request(chat, "chat", ServeDefaults(sse_ping_interval=-1)).sse_ping_interval == -1
    assert parse_request({**chat, "sse_ping_interval": 2}, "chat", ServeDefaults()).sse_ping_interval == 2
    with pytest.raises(ApiError):
        parse_request({**chat, "sse_ping_interval": -2}, "chat", ServeDefaults())


def test_a_queued_stream_gets_llama_servers_ping_while_it_waits(serve, runtime):
    server = serve(source="none", source_options={})
    a = server.address
    never_end = [[t, False] for t in range(runtime.n_vocab) if runtime.is_eog(t)]  # llama-server's logit_bias
    body = {"prompt": "Count from one to a thousand:", "temperature": 0, "cache_prompt": False, "logit_bias": never_end}
    probe = httpx.post(a + "/completion", json={**body, "n_predict": 24}, timeout=120).json()
    assert "timings" in probe, probe
    per_token_ms = probe["timings"]["predicted_per_token_ms"]
    n_busy = min(int(3000 / per_token_ms) + 1, runtime.n_ctx - 64)  # about 3 s of decoding on this machine
    busy = threading.Thread(target=lambda: httpx.post(a + "/completion", json={**body, "n_predict": n_busy},
                                                      timeout=120))
    busy.start()
    try:
        deadline = time.monotonic() + 30
        while sum(r.state == "running" for r in server.slots.snapshot_rows()) < 1:
            assert time.monotonic() < deadline, "the long request did not start"
            time.sleep(0.01)
        lines = []
        queued = {"prompt": "Hello", "n_predict": 2, "temperature": 0, "stream": True, "sse_ping_interval": 1}
        with httpx.stream("POST", a + "/completion", json=queued, timeout=120) as r:
            for line in r.iter_lines():
                lines.append(line)
    finally:
        busy.join(120)
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data: "))
    assert ":" in lines[:first_data], f"no ping before the first token while queued: {lines[:first_data + 1]}"
