"""The HTTP client of a llama-server: greedy ``/completion`` requests, ``/metrics``, ``/props``,
``/health``, each reply bounded and checked before a figure of it is used (issue 37, items 7 and 12).

Each request goes through ``inspector.bench.server_http`` (a deadline from connecting to the last
byte, a byte limit). The limits follow from what the request can produce: a ``/completion`` of
``n_predict`` tokens for a prompt of P tokens is at most ``COMPLETION_BASE_BYTES`` +
``COMPLETION_BYTES_PER_TOKEN`` x (P + ``n_predict``) bytes (llama-server's reply repeats the prompt's
text, then the generated text and token ids, its settings and timings) and holds at most
``n_predict`` token ids (llama-server's slot stops at its budget, and caps each draft to the tokens
left: ``server-context.cpp`` at 0c1e570); ``/health``, ``/props`` and ``/metrics`` at most
``SMALL_REPLY_BYTES``. Every field read is checked for its type and range: a reply that breaks a
rule is one line naming the field, never a Python error.

Fields and names followed at llama.cpp 0c1e570: ``tools/server/server-task.cpp``
(``to_json_non_oaicompat``: ``content``, ``tokens``, ``stop_type``, ``truncated``, ``timings`` with
``prompt_n``, ``predicted_n``, ``predicted_ms``, ``predicted_per_second`` and ``draft_n`` /
``draft_n_accepted`` only when something was drafted) and ``server-context.cpp`` (the Prometheus
names ``llamacpp:spec_decode_num_draft_tokens_total``, ``..._num_accepted_tokens_total``,
``..._num_drafts_total``, ``..._num_accepted_tokens_per_pos_total{position="i"}``, 0-based).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inspector.bench.server_http import (PROBE_DEADLINE_S, REQUEST_DEADLINE_S, HttpTarget, Reply,
                                         ServerRequestError, ServerUnreachable, WrongServer)

COMPLETION_BASE_BYTES = 1 << 20
"""Bytes of a ``/completion`` reply besides its tokens (settings, timings, names)."""
COMPLETION_BYTES_PER_TOKEN = 1 << 10
"""Bytes per prompt or generated token a ``/completion`` reply may hold (its text, escaped, and its id)."""
SMALL_REPLY_BYTES = 4 << 20
"""Largest ``/health``, ``/props`` or ``/metrics`` reply read."""
MAX_DRAFT_POSITION = 1 << 20
"""Largest draft position a ``/metrics`` per-position counter may name (0-based)."""
TOKEN_ID_MAX = 2**31 - 1
SERVER_LIMITS_HELP = (
    f"with --llama-server: each request to it ends within S seconds, from connecting to the reply's last byte "
    f"(/health, /props, /metrics within {PROBE_DEADLINE_S:g} s at most); a /completion reply holds at most n_predict "
    f"tokens and {COMPLETION_BASE_BYTES // 2**20} MiB + {COMPLETION_BYTES_PER_TOKEN // 2**10} KiB per prompt or "
    f"generated token, /props and /metrics {SMALL_REPLY_BYTES // 2**20} MiB [{REQUEST_DEADLINE_S:g}; 1..86400]")
"""``compare --llama-server-timeout``'s help: the deadline and the size limits."""
_METRIC_RE = re.compile(r'^llamacpp:([A-Za-z0-9_]+)(?:\{([^}]*)\})?\s+(\S+)')


@dataclass(frozen=True)
class ServerCompletion:
    """One ``/completion`` reply. ``tokens`` are the generated ids (an end-of-generation token
    included when it stopped on one); times in ms, speed in generated tokens/s; ``draft_n`` and
    ``draft_n_accepted`` are 0 when nothing was drafted; ``raw`` is the whole JSON reply."""

    tokens: tuple[int, ...]
    text: str
    predicted_per_second: float
    predicted_ms: float
    predicted_n: int
    prompt_n: int
    draft_n: int
    draft_n_accepted: int
    stop_type: str
    truncated: bool
    raw: dict = field(repr=False)


@dataclass(frozen=True)
class ServerMetrics:
    """Speculative-decoding counters from ``/metrics``, totals since the server started:
    ``drafts`` verification steps, ``draft_tokens`` proposed, ``accepted_tokens`` accepted,
    ``accepted_per_position`` {0-based draft position: accepted there} (empty until a slot has
    speculated); ``values`` every unlabeled ``llamacpp:`` metric by name without the prefix."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: dict[int, int]
    values: dict[str, float]


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _count(value, name: str) -> int:
    """A whole number 0..2**31-1 from a reply (a float that is whole counts: JSON has one number type)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not (math.isfinite(value) and value.is_integer())) \
            or not 0 <= value <= TOKEN_ID_MAX:
        raise ValueError(f"the reply's {name} is {_shown(value)}, expected a whole number 0..{TOKEN_ID_MAX}")
    return int(value)


def _amount(value, name: str) -> float:
    """A finite number >= 0 from a reply."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"the reply's {name} is {_shown(value)}, expected a finite number >= 0")
    return float(value)


def parse_metrics(text: str) -> ServerMetrics:
    """Parse llama-server's Prometheus text (``GET /metrics``). Missing counters count 0.
    Raises ``ValueError`` (one line) when a ``llamacpp:`` sample's value is not a number, a counter
    read is not a finite count, or a per-position counter names a position beyond
    ``MAX_DRAFT_POSITION``."""
    values: dict[str, float] = {}
    per_pos: dict[int, int] = {}
    for line in text.splitlines():
        found = _METRIC_RE.match(line.strip())
        if not found:
            continue
        name, labels, raw = found.groups()
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"llamacpp:{name[:60]} has the value {_shown(raw)}, not a number") from None
        if name == "spec_decode_num_accepted_tokens_per_pos_total":
            pos = re.search(r'position="(\d+)"', labels or "")
            if pos:
                if len(pos.group(1)) > 7 or int(pos.group(1)) > MAX_DRAFT_POSITION:
                    raise ValueError(f"llamacpp:{name} names position {_shown(pos.group(1))}, beyond any draft "
                                     f"(at most {MAX_DRAFT_POSITION})")
                per_pos[int(pos.group(1))] = _whole_count(value, f"llamacpp:{name} at position {pos.group(1)}")
        elif labels is None:
            values[name] = value

    def count(name: str) -> int:
        return _whole_count(values.get(name, 0.0), f"llamacpp:{name}")

    return ServerMetrics(count("spec_decode_num_drafts_total"), count("spec_decode_num_draft_tokens_total"),
                         count("spec_decode_num_accepted_tokens_total"), dict(sorted(per_pos.items())), values)


def _whole_count(value: float, name: str) -> int:
    if not math.isfinite(value) or value < 0 or value > 2**53:
        raise ValueError(f"{name} is {value!r}, expected a count (a finite number 0..2**53)")
    return int(round(value))


def parse_completion(reply, max_tokens: int | None = None) -> ServerCompletion:
    """A ``/completion`` JSON reply (non-streamed) as a ``ServerCompletion``. Raises ``ValueError``
    (one line naming the field) when it is not an object, has no ``tokens`` list (the request lacked
    ``return_tokens``), more than ``max_tokens`` of them, an entry that is no token id, or a field of
    the wrong type or range."""
    if not isinstance(reply, Mapping):
        raise ValueError(f"the reply is a JSON {type(reply).__name__}, expected an object")
    tokens = reply.get("tokens")
    if not isinstance(tokens, list):
        raise ValueError("the reply has no 'tokens' list (expected with return_tokens: true)")
    if max_tokens is not None and len(tokens) > max_tokens:
        raise ValueError(f"the reply has {len(tokens):,} tokens, more than the {max_tokens:,} the request allowed "
                         "(n_predict)")
    for i, t in enumerate(tokens):
        if type(t) is not int or not 0 <= t <= TOKEN_ID_MAX:
            raise ValueError(f"the reply's tokens[{i}] is {_shown(t)}, expected a token id (a whole number "
                             f"0..{TOKEN_ID_MAX})")
    t = reply.get("timings")
    if t is None:
        t = {}
    if not isinstance(t, Mapping):
        raise ValueError(f"the reply's timings is a JSON {type(t).__name__}, expected an object")
    content, stop_type, truncated = reply.get("content", ""), reply.get("stop_type", ""), reply.get("truncated", False)
    for name, value, kind in (("content", content, str), ("stop_type", stop_type, str), ("truncated", truncated, bool)):
        if not isinstance(value, kind):
            wanted = "text" if kind is str else "true or false"
            raise ValueError(f"the reply's {name} is {_shown(value)}, expected {wanted}")
    return ServerCompletion(
        tuple(tokens), content, _amount(t.get("predicted_per_second", 0.0), "timings.predicted_per_second"),
        _amount(t.get("predicted_ms", 0.0), "timings.predicted_ms"),
        _count(t.get("predicted_n", 0), "timings.predicted_n"),
        _count(t.get("prompt_n", 0), "timings.prompt_n"), _count(t.get("draft_n", 0), "timings.draft_n"),
        _count(t.get("draft_n_accepted", 0), "timings.draft_n_accepted"), stop_type, truncated, dict(reply))


def completion_limit(n_prompt: int, n_predict: int) -> int:
    """The most bytes a ``/completion`` reply to ``n_prompt`` prompt tokens and ``n_predict`` tokens may hold."""
    return COMPLETION_BASE_BYTES + COMPLETION_BYTES_PER_TOKEN * (max(0, n_prompt) + max(0, n_predict))


class LlamaServerClient:
    """HTTP client of one llama-server at ``url`` (e.g. ``http://127.0.0.1:8080``; ``HOST:PORT``
    means http). Each request ends within ``timeout_s`` seconds, from connecting to its reply's last
    byte (``/health``, ``/props``, ``/metrics``: within ``PROBE_DEADLINE_S`` at most). Proxy settings
    are ignored."""

    def __init__(self, url: str, timeout_s: float = REQUEST_DEADLINE_S):
        """Raises ``ServerUnreachable`` for a URL that cannot name a server (``server_http.HttpTarget``)."""
        self.target = HttpTarget(url)
        self.url = self.target.url
        self.timeout_s = timeout_s

    @property
    def probe_s(self) -> float:
        """The deadline of ``/health``, ``/props`` and ``/metrics``."""
        return min(self.timeout_s, PROBE_DEADLINE_S)

    def complete(self, prompt_tokens: Sequence[int], n_predict: int,
                 fields: Mapping[str, object] | None = None) -> ServerCompletion:
        """Greedy ``POST /completion`` of ``prompt_tokens`` (token ids) for at most ``n_predict``
        tokens (top-k 1, temperature 0, no prompt cache, seed 0); ``fields`` are added to (or
        override) the request. The reply may hold ``completion_limit`` bytes and ``n_predict``
        tokens. Raises ``ServerUnreachable`` and ``ServerRequestError``."""
        prompt = [int(t) for t in prompt_tokens]
        body = {"prompt": prompt, "n_predict": int(n_predict), "temperature": 0, "top_k": 1, "samplers": ["top_k"],
                "cache_prompt": False, "return_tokens": True, "seed": 0, **dict(fields or {})}
        limit = completion_limit(len(prompt), int(n_predict))
        why = (f" for {int(n_predict)} tokens after a {len(prompt)}-token prompt ({COMPLETION_BASE_BYTES // 2**20} MiB "
               f"+ {COMPLETION_BYTES_PER_TOKEN // 2**10} KiB per token)")
        reply = self._json("POST", "/completion", body, self.timeout_s, limit, why)
        try:
            return parse_completion(reply, int(n_predict) if int(n_predict) > 0 else None)
        except ValueError as e:
            raise ServerRequestError(f"POST {self.url}/completion: {e}") from None

    def metrics(self) -> ServerMetrics:
        """``GET /metrics`` parsed (``parse_metrics``). Raises ``ServerRequestError`` (e.g. HTTP
        501 when the server runs without ``--metrics``) and ``ServerUnreachable``."""
        r = self._get("/metrics")
        if r.status != 200:
            raise ServerRequestError(f"GET {self.url}/metrics: HTTP {r.status}: {_error_text(r.body)}")
        try:
            return parse_metrics(r.body.decode("utf-8", "replace"))
        except ValueError as e:
            raise ServerRequestError(f"GET {self.url}/metrics: unreadable Prometheus text ({e})") from None

    def props(self) -> dict:
        """``GET /props``: the server's settings as a dict (``build_info``,
        ``default_generation_settings``, ``total_slots``, ...)."""
        reply = self._json("GET", "/props", None, self.probe_s, SMALL_REPLY_BYTES, "")
        if not isinstance(reply, dict):
            raise WrongServer(f"{self.url} answered but is not a llama-server: GET /props gave JSON "
                              f"{type(reply).__name__}, expected an object")
        return reply

    def build_info(self) -> str:
        """``/props``' ``build_info``, e.g. ``b0-0c1e570`` (build number, commit)."""
        info = self.props().get("build_info")
        if not isinstance(info, str):
            raise WrongServer(f"{self.url} answered but is not a llama-server: /props has no build_info")
        return info

    def health(self) -> int:
        """The HTTP status of ``GET /health`` (200 ready, 503 loading). Raises ``ServerUnreachable``
        and ``ServerRequestError``."""
        return self._get("/health").status

    def check_reachable(self) -> None:
        """Make sure a ready llama-server answers at the URL. Raises ``ServerUnreachable`` ("no
        llama-server answers at URL: connection refused", or still loading), ``WrongServer`` ("URL
        answered but is not a llama-server: ..."), ``ServerRequestError`` (wants an API key; closed
        the connection without an answer; broke off; no answer in time)."""
        r = self._get("/health")
        if r.status == 503 and "Loading model" in r.body.decode("utf-8", "replace"):
            raise ServerUnreachable(f"the llama-server at {self.url} is still loading its model (HTTP 503 on /health)")
        reply, _problem = read_json(r.body)
        if r.status != 200 or not isinstance(reply, dict) or reply.get("status") != "ok":
            raise WrongServer(f"{self.url} answered but is not a llama-server: GET /health gave HTTP {r.status} "
                              f"{_describe(r)}, expected 200 with {{\"status\": \"ok\"}}")
        r = self._get("/props")
        if r.status == 401:
            raise ServerRequestError(f"the llama-server at {self.url} wants an API key (HTTP 401 on /props)")
        reply, problem = read_json(r.body)
        if r.status != 200 or not isinstance(reply, dict) or not isinstance(reply.get("build_info"), str):
            raise WrongServer(f"{self.url} answered but is not a llama-server: GET /props gave HTTP {r.status} "
                              f"{_describe(r, problem)}, expected JSON with build_info")

    def _get(self, path: str) -> Reply:
        return self.target.exchange("GET", path, None, deadline_s=self.probe_s, limit=SMALL_REPLY_BYTES)

    def _json(self, method: str, path: str, body, deadline_s: float, limit: int, why: str):
        data = None if body is None else json.dumps(body).encode("utf-8")
        r = self.target.exchange(method, path, data, deadline_s=deadline_s, limit=limit, limit_why=why)
        if r.status != 200:
            raise ServerRequestError(f"{method} {self.url}{path}: HTTP {r.status}: {_error_text(r.body)}")
        reply, problem = read_json(r.body)
        if problem:
            raise WrongServer(f"{self.url} answered but is not a llama-server: {method} {path} gave "
                              f"{_describe(r, problem)}, expected JSON")
        return reply


def read_json(data: bytes) -> tuple[object, str]:
    """``(value, "")``, or ``(None, what is wrong)``: not UTF-8, not JSON, or nested too deeply for Python."""
    try:
        return json.loads(data.decode("utf-8")), ""
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except RecursionError:
        return None, "JSON nested too deeply to read"
    except json.JSONDecodeError as e:
        return None, f"not JSON: {e.msg} at byte {e.pos}"


def _describe(r: Reply, problem: str = "") -> str:
    text = r.body[:200].decode("utf-8", "replace").strip().replace("\n", " ")
    kind = r.content_type.split(";")[0].strip() or "no content type"
    if problem.startswith("JSON nested"):
        return f"({kind}: {problem}, {len(r.body):,} bytes)"
    return f"({kind}: {text[:80]!r})" if text else f"({kind}, empty body)"


def _error_text(data: bytes) -> str:
    reply, _problem = read_json(data)
    if isinstance(reply, dict) and isinstance(reply.get("error"), dict):
        return str(reply["error"].get("message", reply["error"]))[:300].replace("\n", " ")
    text = data[:600].decode("utf-8", "replace").strip().replace("\n", " ")
    return text[:300] or "(empty body)"
