"""A streamed reply's token chunks written to the client's socket by the slot's own thread (issue 53).

Handing each token to the HTTP thread costs more than the token's bytes: the slot's thread wakes the event loop
(a system call), the loop takes the GIL and runs the reply's coroutines, Starlette's middlewares and h11 while
llama.cpp's threads decode the next token on the same cores. Measured with one client on 2 cores: 23 ms of the
HTTP thread's CPU and 4-8 ms more of the slot's per 64-token streamed request, against 4 ms for the same request
not streamed, and ~7% fewer requests served in the same time (llama-server's HTTP threads: ~2.4 ms per request).

``DirectStream`` lets the slot's thread, which holds the GIL between two decodes anyway, render a token's chunk
and ``send`` it (non-blocking) on its own duplicate of the connection's socket, as HTTP/1.1 chunks (the framing
h11 writes: size in hex, CRLF, data, CRLF). It starts ``PARKED``: the event loop writes (the headers and first
events, and every item the slot posted before the switch); it turns ``DIRECT`` only when the loop has written every
item the slot posted and the transport holds nothing unsent, so the bytes stay in order. A send the kernel takes
only in part (a client that does not read) ends direct writing for good (``LOOP``): the rest of that chunk goes
to the loop as ``Raw`` bytes, written before anything else, and every later token takes the loop's path with its
send timeout. ``DONE`` after the result (the loop writes the last events) or when the stream ends; a socket error
(the client left) stops writing and the loop's disconnect handling cancels the request.

Used for single-prompt streams over HTTP/1.1 when the server's protocol (``inspector.serve.http_guard``) puts the
connection's transport in the request scope; any other stream takes the loop's path.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass

from inspector.serve.event_stream import encode_event

TRANSPORT_KEY = "spec-inspector.transport"
"""The request scope's ``extensions`` key holding the connection's asyncio transport (``http_guard``)."""
PARKED, DIRECT, LOOP, DONE = "parked", "direct", "loop", "done"
_NO_SIGNAL = getattr(socket, "MSG_NOSIGNAL", 0)
"""Linux's flag against SIGPIPE (absent on macOS, where CPython ignores SIGPIPE anyway: EPIPE then)."""
_GONE = (BrokenPipeError, ConnectionResetError)
"""Send errors that mean the client left."""


@dataclass(frozen=True)
class Raw:
    """Bytes of a chunk the socket took only in part: the loop writes them to the transport as they are."""

    data: bytes


def frame(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk (h11's ``ChunkedWriter``: size in hex, CRLF, data, CRLF)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def transport_of(scope: dict):
    """The connection's transport when direct writing can work for this request (HTTP/1.1, a transport in the
    scope whose socket has a descriptor), else None."""
    if scope.get("http_version") != "1.1":
        return None
    transport = (scope.get("extensions") or {}).get(TRANSPORT_KEY)
    if transport is None or transport.is_closing():
        return None
    sock = transport.get_extra_info("socket")
    return transport if sock is not None and hasattr(sock, "fileno") and sock.fileno() >= 0 else None


class DirectStream:
    """One streamed request's token chunks (module docstring). ``render``: its ``Renderer`` (``chunk(TokenOut)``
    -> events), called by whichever side writes; ``transport``: the connection's (from ``transport_of``).
    Raises ``OSError`` when the socket cannot be duplicated."""

    def __init__(self, transport, render) -> None:
        self._transport = transport
        self._render = render
        fd = os.dup(transport.get_extra_info("socket").fileno())
        try:
            self._sock = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            raise
        self._sock.setblocking(False)
        self._lock = threading.Lock()
        self.state = PARKED
        self.posted = 0
        """Items the slot handed to the loop (slot's thread)."""
        self.consumed = 0
        """Items the loop wrote (loop's thread)."""
        self.direct_chunks = 0
        """Chunks the slot's thread sent itself (tests, benchmarks)."""
        self.last_write = time.monotonic()
        """When the slot's thread last sent (``time.monotonic``): the keep-alive ping counts it as traffic."""

    # -- the slot's thread ------------------------------------------------------------------------------------
    def offer(self, item):
        """A token's item from the slot's thread: None when its chunk was written here; else what to deliver to
        the loop instead (the item itself, or the ``Raw`` rest of a chunk the socket took in part)."""
        with self._lock:
            if self.state != DIRECT:
                self.posted += 1
                return item
            try:
                data = b"".join(encode_event(e) for e in self._render.chunk(item))
            except Exception:  # a rendering failure is the loop's to meet, as on the loop's path
                self.state = LOOP
                self.posted += 1
                return item
            if not data:
                return None
            rest = self._send(data)
            self.direct_chunks += 1
            if not rest:
                return None
            self.posted += 1  # a client that does not read: the loop's path (and its send timeout) from now on
            return Raw(rest)

    def _send(self, data: bytes) -> bytes | None:
        """Send ``data`` as one chunk (holding the lock): the bytes the socket did not take (b"": all went;
        then the state is ``LOOP``), or None when the client left (``DONE``: the loop sees it and cancels)."""
        out = frame(data)
        try:
            sent = self._sock.send(out, _NO_SIGNAL)
        except BlockingIOError:
            sent = 0
        except _GONE:
            self.state = DONE
            return None
        except OSError:  # nothing went out: the loop writes it
            sent = 0
        self.last_write = time.monotonic()
        if sent < len(out):
            self.state = LOOP
        return out[sent:]

    # -- the loop's thread --------------------------------------------------------------------------------------
    def consumed_one(self) -> None:
        """The loop wrote one posted item; switch to direct writing when nothing is left behind."""
        with self._lock:
            self.consumed += 1
            self._try_direct()

    def start(self) -> None:
        """The loop wrote the stream's first events: switch to direct writing when nothing is left behind."""
        with self._lock:
            self._try_direct()

    def _try_direct(self) -> None:
        if (self.state == PARKED and self.consumed == self.posted and not self._transport.is_closing()
                and self._transport.get_write_buffer_size() == 0):
            self.state = DIRECT

    def write_raw(self, item: Raw) -> None:
        """Write the rest of a chunk the socket took in part, before anything else (loop's thread)."""
        if not self._transport.is_closing():
            self._transport.write(item.data)
        self.consumed_one()

    def ping(self, data: bytes) -> bool:
        """Send the keep-alive ``data`` here when the slot's thread writes (True); False: the loop sends it.
        A ping is dropped (True) while the rest of a chunk the socket took in part waits in the queue: it
        must not land inside that chunk."""
        with self._lock:
            if self.state == LOOP and self.consumed < self.posted:
                return True
            if self.state != DIRECT:
                return False
            rest = self._send(data)
            if rest:  # the rest first, by the loop (this is its thread); it writes from now on
                self._transport.write(rest)
            return True

    def quiet_since(self) -> float:
        """``time.monotonic()`` of the slot's last send."""
        return self.last_write

    def finish(self) -> None:
        """The request's result came: the loop writes the rest; the duplicate socket is closed. Idempotent."""
        with self._lock:
            self.state = DONE
            self._render = None  # no cycle through the job: its objects go when the request does
            if self._sock.fileno() >= 0:
                self._sock.close()
