"""Misbehaving clients bounded: a deadline for a request's headers and body, and a request limit that
counts requests, not connections.

uvicorn 0.55's h11 protocol (``uvicorn/protocols/http/h11_impl.py``) has a keep-alive timeout but no
deadline for the request itself: a connection that sends its headers one byte a second (or nothing) is
held for ever, and its ``limit_concurrency`` counts every open connection (``len(connections) >=
limit``), so 100 such connections turned every other request, ``/health`` included, into 503.
``guarded_protocol`` is uvicorn's ``H11Protocol`` with one deadline per request: the headers must arrive
within ``HEADER_TIMEOUT_S`` of the connection (or of the request's first byte on a kept-alive one), the
body within ``BODY_TIMEOUT_S`` of the headers; past it the connection is closed (headers: with a 408
reply). uvicorn's own limit is turned off (``limit_concurrency=None``) and ``limit_requests`` refuses
with llama-server's 503 only when that many requests are being handled; ``/health`` always answers.
The request's scope also carries the connection's transport (``extensions``, ``direct_stream.TRANSPORT_KEY``)
for the streams the slot's thread writes itself (``inspector.serve.direct_stream``).
"""

from __future__ import annotations

import asyncio
import json
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from inspector.serve.direct_stream import TRANSPORT_KEY
from inspector.serve.errors import UNAVAILABLE, ApiError

log = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 15.0
"""Seconds a request's headers may take to arrive (from the connection, or from the first byte of a
later request on a kept-alive connection)."""
BODY_TIMEOUT_S = 60.0
"""Seconds a request's body may take after its headers (16 MB, the default limit, at ~280 KB/s)."""


def _timeout_reply(seconds: float) -> bytes:
    body = json.dumps({"error": {"code": 408, "message": f"the request headers did not arrive within {seconds:g} s",
                                 "type": "invalid_request_error"}}).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on receiving each request (headers, then body)."""

    header_timeout_s = HEADER_TIMEOUT_S
    body_timeout_s = BODY_TIMEOUT_S

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = ""

    def _arm(self, phase: str, seconds: float) -> None:
        self._disarm()
        self._phase = phase
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = ""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm("headers", self.header_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and self.conn.their_state is h11.IDLE:  # a new request begins
            self._arm("headers", self.header_timeout_s)
        super().data_received(data)
        scope = getattr(self, "scope", None)
        if scope is not None:  # before its handler runs (a task started at the loop's next turn)
            scope.setdefault("extensions", {})[TRANSPORT_KEY] = self.transport
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def _follow(self) -> None:
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            if self._phase != "body":
                self._arm("body", self.body_timeout_s)
        elif state is not h11.IDLE:  # the request is in (DONE), or the connection is ending
            self._disarm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """The server stops: a request still arriving is dropped now (its handler sees the client gone),
        so the stop never waits for a slow body nor cancels its handler mid-read."""
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._disarm()
            self.transport.close()
            return
        super().shutdown()

    def _expired(self) -> None:
        phase, self._deadline, self._phase = self._phase, None, ""
        if self.transport.is_closing():
            return
        client = "%s:%d" % self.client if self.client else "a client"
        if phase == "headers":
            log.info("serve: closed the connection of %s: its request headers did not arrive within %g s",
                     client, self.header_timeout_s)
            self.transport.write(_timeout_reply(self.header_timeout_s))
        else:
            log.info("serve: closed the connection of %s: its request body did not arrive within %g s",
                     client, self.body_timeout_s)
        self.transport.close()


def guarded_protocol(header_timeout_s: float = HEADER_TIMEOUT_S,
                     body_timeout_s: float = BODY_TIMEOUT_S) -> type[GuardedH11Protocol]:
    """A ``GuardedH11Protocol`` with these deadlines (seconds), for ``uvicorn.Config(http=...)``."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,),
                {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s})


def _has_body(scope) -> bool:
    for name, value in scope.get("headers") or ():
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


def limit_requests(app, limit: int, exempt: tuple[str, ...] = ("/health", "/v1/health")):
    """``app`` answering at most ``limit`` HTTP requests at once; beyond, llama-server's 503
    ``unavailable_error`` with ``Retry-After: 1``. A request counts once it has arrived whole (no body,
    or its body's last part read) until it is answered: open, idle or still-arriving connections never
    count (their deadlines bound them). Requests to ``exempt`` paths are always handled (cheap)."""
    active = 0

    async def limited(scope, receive, send):
        nonlocal active
        if scope["type"] != "http" or scope["path"] in exempt:
            await app(scope, receive, send)
            return
        counted = False

        def count() -> None:
            nonlocal active, counted
            if not counted:
                counted = True
                active += 1

        async def receive_counted():
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                count()
            return message

        if active >= limit:
            err = ApiError(f"the server is handling {limit} requests: retry later", UNAVAILABLE)
            body = json.dumps(err.body()).encode()
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        if not _has_body(scope):
            count()
        try:
            await app(scope, receive_counted, send)
        finally:
            if counted:
                active -= 1

    return limited
