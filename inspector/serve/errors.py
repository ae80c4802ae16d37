"""llama-server's error replies: ``{"error": {"code", "message", "type"}}`` with an HTTP status.

Shapes and type names from llama.cpp 0c1e570 ``tools/server/server-common.cpp``
(``format_error_response``: ``invalid_request_error`` 400, ``authentication_error`` 401,
``not_found_error`` 404, ``server_error`` 500, ``permission_error`` 403, ``unavailable_error`` 503,
``not_supported_error`` 501, ``exceed_context_size_error`` 400), as captured in
``LLAMA_SERVER_API.md`` (``errors``).
"""

from __future__ import annotations

INVALID_REQUEST = ("invalid_request_error", 400)
AUTHENTICATION = ("authentication_error", 401)
NOT_FOUND = ("not_found_error", 404)
SERVER = ("server_error", 500)
NOT_SUPPORTED = ("not_supported_error", 501)
UNAVAILABLE = ("unavailable_error", 503)
EXCEED_CONTEXT = ("exceed_context_size_error", 400)
TOO_LARGE = ("invalid_request_error", 413)


class ApiError(Exception):
    """A request refused with llama-server's error JSON. ``kind``: one of the ``(type, status)`` pairs
    above; ``extra``: more fields of the error object (``n_prompt_tokens``, ``n_ctx``);
    ``headers``: HTTP headers of the reply (``Retry-After`` on 503)."""

    def __init__(self, message: str, kind: tuple[str, int] = INVALID_REQUEST, *, headers: dict | None = None,
                 **extra) -> None:
        super().__init__(message)
        self.message = message
        self.type, self.status = kind
        self.extra = extra
        self.headers = headers or {}

    def body(self) -> dict:
        """The reply body: ``{"error": {"code", "message", "type", ...extra}}``."""
        return {"error": {"code": self.status, "message": self.message, "type": self.type, **self.extra}}
