"""One HTTP exchange with a llama-server, bounded in time and in size (issue 37, item 7).

A server we compare against is not trusted to behave: it may trickle a byte every few seconds
(a socket timeout restarts at every byte, so only an overall deadline ends that), announce a
Content-Length of 50 GB, send chunks without end, or close the connection mid-reply. Each
exchange here has a deadline from connecting to the last byte (a watchdog shuts the socket down
when it passes, whatever ``http.client`` is waiting on) and a byte limit its caller states (a
Content-Length above it is refused before a byte of the body is read; a body is read up to it).
Every failure is one of this module's exceptions with a one-line message that says what happened:
nobody listens, the host name is unknown, the connection was accepted and closed without an
answer, the answer broke off, is not HTTP, is too large, or did not finish in time.

``http.client`` (standard library) does the HTTP; neither it nor httpx has an overall deadline
(httpx's timeouts are per network operation: encode/httpx issue 1450). Proxy settings are not used.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass

REQUEST_DEADLINE_S = 300.0
"""Default deadline of one request, from connecting to the reply's last byte (seconds): a
``/completion`` reply comes whole when the generation ends, so this bounds the generation too."""
PROBE_DEADLINE_S = 10.0
"""Deadline of ``/health``, ``/props`` and ``/metrics`` (at most the request deadline)."""
_READ = 1 << 16


class ServerError(RuntimeError):
    """Base of the llama-server errors; every message is one line."""


class ServerUnreachable(ServerError):
    """Nothing usable answers at the URL (refused, unknown host, timed out, or still loading)."""


class WrongServer(ServerUnreachable):
    """Something answers at the URL, but it is not a llama-server."""


class ServerRequestError(ServerError):
    """A llama-server answered a request with an HTTP error, a reply we cannot read, one too large,
    broken off, or not in time."""


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status, Content-Type and the whole body."""

    status: int
    content_type: str
    body: bytes


class HttpTarget:
    """The server at ``url`` (``HOST:PORT`` means http): checked once, then asked by ``exchange``.
    Raises ``ServerUnreachable`` for a URL that cannot name a server: another scheme than http/https,
    no host, a port that is not a number 0..65535, a user name or password (llama-server has no login;
    ``http.client`` would look the whole ``user:pw@host`` up as a host name), spaces or control
    characters."""

    def __init__(self, url: str) -> None:
        self.given = url
        self.url = (url if "://" in url else f"http://{url}").rstrip("/")
        if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in self.url):
            raise ServerUnreachable(f"{url!r} is not a server URL (it holds a space or a control character): "
                                    "expected http://HOST:PORT")
        try:
            parts = urllib.parse.urlsplit(self.url)
            port = parts.port
        except ValueError as e:
            raise ServerUnreachable(f"{url} is not a server URL ({e}): expected http://HOST:PORT") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerUnreachable(f"{url} is not a server URL: expected http://HOST:PORT")
        if parts.username is not None or parts.password is not None:
            raise ServerUnreachable(f"{url} is not a server URL: it holds a user name or password (USER:PASSWORD@), "
                                    "and llama-server has no login (its --api-key is not a URL part): expected "
                                    "http://HOST:PORT")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = port if port is not None else (443 if self.https else 80)
        self.base_path = parts.path.rstrip("/")

    def exchange(self, method: str, path: str, body: bytes | None, *, deadline_s: float, limit: int,
                 limit_why: str = "") -> Reply:
        """Send ``method path`` with ``body`` (JSON) and return the whole reply, within ``deadline_s``
        seconds and ``limit`` bytes of body (``limit_why`` says where the limit comes from). Raises
        ``ServerUnreachable`` (cannot connect), ``WrongServer`` (the answer is not HTTP) and
        ``ServerRequestError`` (no answer, broken off, too large, too late)."""
        where = f"{method} {self.url}{path}"
        watchdog = _Watchdog(deadline_s)
        got = [0]
        try:
            return self._exchange(method, path, body, deadline_s, limit, limit_why, watchdog, got)
        except ServerError:
            raise
        except Exception as exc:  # noqa: BLE001 - every other failure is said in one line
            # The socket's own timeout is the deadline's remainder: it may fire just before the watchdog.
            if watchdog.expired.is_set() or isinstance(exc, (TimeoutError, socket.timeout)):
                so_far = f"; {got[0]:,} bytes of the reply had come" if got[0] else "; nothing had come"
                raise ServerRequestError(f"{where}: no complete reply within {deadline_s:g} s (the request's "
                                         f"deadline){so_far}") from None
            raise _failure(exc, self, method, path, got[0]) from None
        finally:
            watchdog.stop()

    def _exchange(self, method, path, body, deadline_s, limit, limit_why, watchdog, got) -> Reply:
        where = f"{method} {self.url}{path}"
        start = time.monotonic()
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=deadline_s)
        try:
            try:
                conn.connect()
            except (TimeoutError, socket.timeout):
                raise ServerUnreachable(f"no llama-server answers at {self.url}: no connection within "
                                        f"{deadline_s:g} s") from None
            watchdog.watch(conn.sock)
            conn.sock.settimeout(max(0.01, deadline_s - (time.monotonic() - start)))
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, self.base_path + path, body=body, headers=headers)
            resp = conn.getresponse()
            if resp.length is not None and resp.length > limit:
                raise ServerRequestError(f"{where}: the reply says it is {resp.length:,} bytes (Content-Length), "
                                         f"more than the {limit:,}-byte limit{limit_why}")
            chunks = []
            while True:
                chunk = resp.read1(_READ)
                if not chunk:
                    break
                got[0] += len(chunk)
                if got[0] > limit:
                    raise ServerRequestError(f"{where}: the reply is more than {limit:,} bytes, the limit{limit_why}")
                chunks.append(chunk)
            if watchdog.expired.is_set():  # the shutdown read as an end: the reply may be cut
                raise TimeoutError
            if resp.length:  # read1 ends quietly where the connection closed before Content-Length
                raise http.client.IncompleteRead(b"", resp.length)
            return Reply(resp.status, resp.getheader("Content-Type", "") or "", b"".join(chunks))
        finally:
            conn.close()


class _Watchdog:
    """Shuts a socket down when ``deadline_s`` has passed: a blocked send or receive then returns at once."""

    def __init__(self, deadline_s: float) -> None:
        self.expired = threading.Event()
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(deadline_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
        if self.expired.is_set():
            self._fire()

    def _fire(self) -> None:
        self.expired.set()
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._sock = None


def _failure(exc: BaseException, target: HttpTarget, method: str, path: str, got: int) -> ServerError:
    """The one-line error for what ``http.client`` or the socket raised."""
    url, where = target.url, f"{method} {target.url}{path}"
    if isinstance(exc, ConnectionRefusedError):
        return ServerUnreachable(f"no llama-server answers at {url}: connection refused")
    if isinstance(exc, socket.gaierror):
        return ServerUnreachable(f"no llama-server answers at {url}: the host {target.host!r} is not known "
                                 f"({exc.strerror or exc})")
    if isinstance(exc, http.client.RemoteDisconnected):  # before BadStatusLine: it is one
        return ServerRequestError(f"{where}: the server accepted the connection and closed it without an answer")
    if isinstance(exc, http.client.IncompleteRead):
        expected = f" of {got + exc.expected:,}" if exc.expected else ""
        return ServerRequestError(f"{where}: the reply broke off after {got:,}{expected} bytes (the server closed "
                                  "the connection)")
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        when = f"after {got:,} bytes of the reply" if got else "before a reply"
        return ServerRequestError(f"{where}: the server reset the connection {when}")
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return ServerRequestError(f"{where}: no complete reply in time")
    if isinstance(exc, http.client.HTTPException):  # a status line or headers that are not HTTP
        detail = str(exc).strip().replace("\n", " ")[:80]
        return WrongServer(f"{url} answered but is not a llama-server: {method} {path} got an answer that is not "
                           f"HTTP ({type(exc).__name__}{': ' + repr(detail) if detail else ''})")
    if isinstance(exc, OSError):
        return ServerUnreachable(f"no llama-server answers at {url}: {exc.strerror or exc}")
    return ServerRequestError(f"{where}: {type(exc).__name__}: {str(exc)[:200]}")
