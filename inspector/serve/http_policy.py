"""What every request of ``spec-inspector serve`` passes before its route: CORS and the API key.

Followed from llama.cpp 0c1e570 ``tools/server/server-http.cpp`` (the pre-routing handler) and
``common/arg.cpp`` (``--cors-origins``, ``--cors-methods``, ``--cors-headers``,
``--cors-credentials``; defaults in ``common/common.h``):

- **CORS**, on every reply: with credentials allowed and origins ``*`` (the defaults) the request's
  ``Origin`` is echoed in ``Access-Control-Allow-Origin`` (empty when the request has none); with
  ``localhost`` it is echoed only when its host is ``localhost``, ``127.0.0.1`` or ``::1``; any other
  value is sent as it is. An ``OPTIONS`` request (a browser's preflight) is answered 200 with an empty
  body and the allowed credentials, methods and headers **before** the key is checked: browsers send
  no ``Authorization`` on a preflight.
- **The API key** (``--api-key``): every path but ``/health`` and ``/v1/health`` needs it. The key is
  read from ``Authorization`` (or, when that header is absent or empty, ``X-Api-Key``: Anthropic's
  clients), a leading ``"Bearer "`` (exactly that spelling) removed, and compared with the key in
  constant time (``hmac.compare_digest``; llama-server compares with ``==``). ``Authorization: KEY``
  without the prefix is accepted, ``bearer KEY`` is not, as in llama-server. A wrong key gets
  llama-server's 401 ``authentication_error``.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from urllib.parse import urlsplit

from inspector.serve.errors import AUTHENTICATION, ApiError

PUBLIC = ("/health", "/v1/health")
"""Routes that answer without the API key (llama-server's public endpoints)."""
LOCALHOSTS = ("localhost", "127.0.0.1", "::1")
"""Hosts ``--cors-origins localhost`` lets through (``origin_is_localhost``)."""


@dataclass(frozen=True)
class CorsPolicy:
    """llama-server's CORS settings (``--cors-origins``, ``--cors-methods``, ``--cors-headers``,
    ``--cors-credentials``), with its defaults."""

    origins: str = "*"
    methods: str = "GET, POST, DELETE, OPTIONS"
    headers: str = "*"
    credentials: bool = True

    def allow_origin(self, origin: str | None) -> str | None:
        """The ``Access-Control-Allow-Origin`` value for a request whose ``Origin`` header is ``origin``
        (None: it has none), or None when the header is left out."""
        if self.credentials and self.origins == "*":
            return origin or ""
        if self.origins == "localhost":
            return origin if origin and origin_is_localhost(origin) else None
        return self.origins

    def preflight_headers(self) -> dict[str, str]:
        """The headers an ``OPTIONS`` reply adds."""
        return {"Access-Control-Allow-Credentials": "true" if self.credentials else "false",
                "Access-Control-Allow-Methods": self.methods, "Access-Control-Allow-Headers": self.headers}


def origin_is_localhost(origin: str) -> bool:
    """True when the host of the URL ``origin`` is localhost, 127.0.0.1 or ::1 (any port)."""
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host in LOCALHOSTS


def given_key(headers: dict[bytes, bytes]) -> bytes:
    """The API key a request gives (raw header bytes, lower-case names): ``Authorization``, else
    ``X-Api-Key``, without a leading ``Bearer `` (exactly so spelled)."""
    value = headers.get(b"authorization", b"") or headers.get(b"x-api-key", b"")
    return value[7:] if value.startswith(b"Bearer ") else value


class HttpPolicy:
    """ASGI middleware around the routes: CORS on every reply, preflights answered, the key checked.
    ``key``: the API key (None: no key)."""

    def __init__(self, app, cors: CorsPolicy, key: str | None) -> None:
        self.app = app
        self.cors = cors
        self.key = key.encode() if key else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin")
        allow = self.cors.allow_origin(origin.decode("latin-1") if origin is not None else None)
        extra = [] if allow is None else [(b"access-control-allow-origin", allow.encode("latin-1"))]
        if scope["method"] == "OPTIONS":
            extra += [(k.lower().encode(), v.encode()) for k, v in self.cors.preflight_headers().items()]
            await _reply(send, 200, b"", b"text/html", extra)
            return
        if self.key is not None and scope["path"] not in PUBLIC and \
                not hmac.compare_digest(given_key(headers), self.key):
            body = json.dumps(ApiError("Invalid API Key", AUTHENTICATION).body()).encode()
            await _reply(send, 401, body, b"application/json; charset=utf-8", extra)
            return
        if not extra:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_cors)


async def _reply(send, status: int, body: bytes, content_type: bytes, extra: list) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})
