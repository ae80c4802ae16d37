"""A streamed reply as Server-Sent Events, written the way llama-server writes it and at little cost per token.

llama.cpp 0c1e570 ``tools/server/server-context.cpp`` (``handle_completions_impl``, its ``set_next``) sends each
result as soon as the slot has it (``data: JSON`` and a blank line; the Anthropic and Responses APIs also an
``event: NAME`` line, ``format_anthropic_sse`` / ``format_oai_resp_sse``) and, when nothing came for
``sse_ping_interval`` seconds (``--sse-ping-interval``, 30 by default, -1: never), a comment ``:`` so that clients
that give up on a silent connection (undici) keep it. ``EventStream`` does the same on Starlette's
``StreamingResponse`` (whose task group ends the stream when the client disconnects); a client that stops reading
for ``send_timeout_s`` has its stream closed (the generator's ``finally`` cancels the request).

Why not sse-starlette (used until issue 53): per event it opened an anyio cancel scope, encoded a
``ServerSentEvent`` and went through its own task group's bookkeeping. Measured with one client on 2 cores, the
HTTP thread's CPU per 64-token request fell from 30 to 22 ms with this class; that thread runs while llama.cpp's
threads decode the next token, on the same cores.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import AsyncIterator

from starlette.responses import StreamingResponse
from starlette.types import Send

log = logging.getLogger(__name__)

PING = b":\n\n"
"""llama-server's keep-alive comment (``server-context.cpp``: ``output = ":\\n\\n"``)."""


def encode_event(event: dict) -> bytes:
    """One event as its bytes: ``event: NAME`` when the event has a name, a ``data:`` line per line of its
    ``data`` (a JSON text has one), then the blank line that ends it. ``event``: ``{"data": str}`` with an
    optional ``"event": str`` (``inspector.serve.replies.sse``)."""
    data = event["data"]
    head = f"event: {event['event']}\n" if "event" in event else ""
    if "\n" in data or "\r" in data:
        body = "".join(f"data: {line}\n" for line in data.splitlines())
    else:
        body = f"data: {data}\n"
    return (head + body + "\n").encode("utf-8")


class Pinger:
    """Puts ``PING`` into a stream's ``queue`` when nothing was written for ``ping_s`` seconds (<= 0: never):
    one timer per stream, re-armed from the last write (``seen``), so a token costs no timer. ``also``: a
    callable giving the ``time.monotonic()`` of writes made elsewhere (``DirectStream.quiet_since``), or None.
    ``close`` when the stream ends."""

    def __init__(self, queue: asyncio.Queue, ping_s: float, loop: asyncio.AbstractEventLoop, also=None) -> None:
        self.queue, self.ping_s, self.loop, self.also = queue, ping_s, loop, also
        self.last = time.monotonic()
        self._handle = loop.call_later(ping_s, self._tick) if ping_s > 0 else None

    def seen(self) -> None:
        """Something was written now."""
        self.last = time.monotonic()

    def _tick(self) -> None:
        last = self.last if self.also is None else max(self.last, self.also())
        quiet = time.monotonic() - last
        if quiet >= self.ping_s * 0.999:
            self.queue.put_nowait(PING)
            self.last = time.monotonic()
            quiet = 0.0
        self._handle = self.loop.call_later(self.ping_s - quiet, self._tick)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class EventStream(StreamingResponse):
    """``text/event-stream`` from ``events``, an async iterator of bytes (``encode_event``, ``PING``): each item
    written as it comes, one ASGI message each. ``send_timeout_s``: seconds one write may wait for a client
    that does not read; past it the events' iterator is closed, one line is logged and the response ends
    unfinished (uvicorn closes the connection)."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], send_timeout_s: float) -> None:
        super().__init__(events, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        self.send_timeout_s = send_timeout_s

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        events = self.body_iterator
        try:
            async for chunk in events:
                async with asyncio.timeout(self.send_timeout_s):
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except TimeoutError:
            log.info("serve: closed a stream whose client read nothing for %g s", self.send_timeout_s)
            return
        finally:  # a disconnect, a timeout: the iterator's cleanup (the request's cancel) runs now
            await events.aclose()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
