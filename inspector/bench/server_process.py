"""Start a llama-server and talk to it: our reference for comparisons, never on the decode path.

``LlamaServerProcess`` starts ``llama-server -m MODEL --host 127.0.0.1 --port P -t T -tb T
-np 1 -c N_CTX --no-ui --metrics ARGS`` (``--no-ui`` is ``--no-webui``'s canonical name) and
waits for ``GET /health`` to answer 200; ``LlamaServerClient`` sends greedy ``/completion``
requests and reads ``/metrics`` and ``/props``. Every failure is one of this module's
exceptions with a one-line message. Followed at llama.cpp 0c1e570:

- ``common/arg.cpp``: the flags; an unknown flag prints ``error: invalid argument: --X``, a
  removed one ``error while handling argument "--draft-max": the argument has been removed.
  ...``, both to stderr before exit code 1. Defaults read from ``LLAMA_ARG_*`` environment
  variables, so the child gets an environment without them.
- ``tools/server/server-http.cpp``: ``/health`` answers 503 ``{"error": {"message": "Loading
  model"}}`` until the model is loaded, then 200 ``{"status": "ok"}``.
- ``tools/server/server-schema.cpp``: the ``/completion`` fields (``prompt``, ``n_predict``,
  ``temperature``, ``top_k``, ``samplers``, ``cache_prompt``, ``return_tokens``, ``seed``).
- ``tools/server/server-task.cpp`` (``to_json_non_oaicompat``, ``to_metrics``) and
  ``tools/server/server-common.cpp`` (``server_slot_stats::to_json``): the reply's ``content``,
  ``tokens``, ``stop_type`` (eos, word, limit, none), ``truncated``, ``timings`` (``prompt_n``,
  ``predicted_n``, ``predicted_ms``, ``predicted_per_second``, and ``draft_n`` /
  ``draft_n_accepted`` only when something was drafted); the Prometheus names
  ``llamacpp:spec_decode_num_draft_tokens_total``, ``..._num_accepted_tokens_total``,
  ``..._num_drafts_total`` and, once a slot has speculated,
  ``llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="i"}`` (0-based).
- ``tools/server/server-context.cpp``: ``/props``' ``build_info`` (``b<build>-<commit>``);
  ``/metrics`` answers 501 without ``--metrics``.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inspector.engine.settings import SamplingSettings

HOST = "127.0.0.1"
STOP_GRACE_S = 5.0
_PROBE_TIMEOUT_S = 2.0
_METRIC_RE = re.compile(r'^llamacpp:([A-Za-z0-9_]+)(?:\{([^}]*)\})?\s+(\S+)')
_LOG_PREFIX_RE = re.compile(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ")  # common/log.cpp: timestamp and level
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_COMPLAINT_RES = (
    re.compile(r'error while handling argument "[^"]*":.*'),
    re.compile(r"error: invalid argument: .*"),
    re.compile(r".*\b(error|failed|couldn't|cannot|unable|invalid|not found)\b.*", re.IGNORECASE),
)
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_RUNNING: "weakref.WeakSet[LlamaServerProcess]" = weakref.WeakSet()
"""Servers started and not stopped yet: stopped when this process exits (``_stop_all``), so closing
the window during a comparison leaves no llama-server behind (it runs in its own session)."""


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        server.stop()


class ServerError(RuntimeError):
    """Base of this module's errors; every message is one line."""


class ServerStartError(ServerError):
    """llama-server exited before it was ready, or did not become ready in time."""


class ServerUnreachable(ServerError):
    """Nothing usable answers at the URL (refused, timed out, or still loading)."""


class WrongServer(ServerUnreachable):
    """Something answers at the URL, but it is not a llama-server."""


class ServerRequestError(ServerError):
    """A llama-server answered a request with an HTTP error, a reply we cannot read, or not in time."""


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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picked it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def parse_metrics(text: str) -> ServerMetrics:
    """Parse llama-server's Prometheus text (``GET /metrics``). Missing counters count 0.
    Raises ``ValueError`` when a ``llamacpp:`` sample's value is not a number."""
    values: dict[str, float] = {}
    per_pos: dict[int, int] = {}
    for line in text.splitlines():
        found = _METRIC_RE.match(line.strip())
        if not found:
            continue
        name, labels, value = found.group(1), found.group(2), float(found.group(3))
        if name == "spec_decode_num_accepted_tokens_per_pos_total":
            pos = re.search(r'position="(\d+)"', labels or "")
            if pos:
                per_pos[int(pos.group(1))] = int(round(value))
        elif labels is None:
            values[name] = value
    count = lambda name: int(round(values.get(name, 0.0)))  # noqa: E731
    return ServerMetrics(count("spec_decode_num_drafts_total"), count("spec_decode_num_draft_tokens_total"),
                         count("spec_decode_num_accepted_tokens_total"), dict(sorted(per_pos.items())), values)


def parse_completion(reply: Mapping) -> ServerCompletion:
    """A ``/completion`` JSON reply (non-streamed) as a ``ServerCompletion``. Raises
    ``ValueError`` when it has no ``tokens`` list (the request lacked ``return_tokens``)."""
    tokens = reply.get("tokens")
    if not isinstance(tokens, list):
        raise ValueError("the reply has no 'tokens' list (expected with return_tokens: true)")
    t = reply.get("timings") or {}
    return ServerCompletion(
        tuple(int(x) for x in tokens), str(reply.get("content", "")), float(t.get("predicted_per_second", 0.0)),
        float(t.get("predicted_ms", 0.0)), int(t.get("predicted_n", 0)), int(t.get("prompt_n", 0)),
        int(t.get("draft_n", 0)), int(t.get("draft_n_accepted", 0)), str(reply.get("stop_type", "")),
        bool(reply.get("truncated", False)), dict(reply))


def complaint_line(log: str) -> str:
    """The line of a llama-server log that says why it stopped: the rejected-argument line if
    any, else the first error-like line, else the last line (log prefixes stripped)."""
    lines = [_LOG_PREFIX_RE.sub("", _ANSI_RE.sub("", ln)).strip() for ln in log.splitlines()]
    lines = [ln for ln in lines if ln]
    for pattern in _COMPLAINT_RES:
        for ln in lines:
            found = pattern.search(ln)
            if found:
                return (found.group(0) if pattern is not _COMPLAINT_RES[2] else ln)[:300]
    return lines[-1][:300] if lines else "(no output)"


def penalty_fields(sampling: SamplingSettings) -> dict:
    """The ``/completion`` fields that give llama-server ``sampling``'s repeat, presence and frequency
    penalties in a greedy request: the ``penalties`` stage before ``top_k`` (llama-server's order,
    ``common/common.h`` 0c1e570) and the four values under llama-server's names. Empty when the
    penalties change nothing (``SamplingSettings.penalized``)."""
    if not sampling.penalized:
        return {}
    return {"samplers": ["penalties", "top_k"], "repeat_penalty": sampling.repeat_penalty,
            "repeat_last_n": sampling.repeat_last_n, "presence_penalty": sampling.presence_penalty,
            "frequency_penalty": sampling.frequency_penalty}


class LlamaServerClient:
    """HTTP client of one llama-server at ``url`` (e.g. ``http://127.0.0.1:8080``; ``HOST:PORT``
    means http); each request waits at most ``timeout_s`` seconds. Proxy settings are ignored."""

    def __init__(self, url: str, timeout_s: float = 300):
        """Raises ``ServerUnreachable`` for a URL that cannot name a server (a scheme other than
        http/https, no host, a port that is not a number)."""
        self.url = (url if "://" in url else f"http://{url}").rstrip("/")
        self.timeout_s = timeout_s
        try:
            parts = urllib.parse.urlsplit(self.url)
            parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
        except ValueError as e:
            raise ServerUnreachable(f"{url} is not a server URL ({e}): expected http://HOST:PORT") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerUnreachable(f"{url} is not a server URL: expected http://HOST:PORT")

    def complete(self, prompt_tokens: Sequence[int], n_predict: int,
                 fields: Mapping[str, object] | None = None) -> ServerCompletion:
        """Greedy ``POST /completion`` of ``prompt_tokens`` (token ids) for at most ``n_predict``
        tokens (top-k 1, temperature 0, no prompt cache, seed 0); ``fields`` are added to (or
        override) the request. Raises ``ServerUnreachable`` and ``ServerRequestError``."""
        body = {"prompt": [int(t) for t in prompt_tokens], "n_predict": int(n_predict), "temperature": 0,
                "top_k": 1, "samplers": ["top_k"], "cache_prompt": False, "return_tokens": True, "seed": 0,
                **dict(fields or {})}
        reply = self._json("POST", "/completion", body)
        try:
            return parse_completion(reply)
        except ValueError as e:
            raise ServerRequestError(f"POST {self.url}/completion: {e}") from None

    def metrics(self) -> ServerMetrics:
        """``GET /metrics`` parsed (``parse_metrics``). Raises ``ServerRequestError`` (e.g. HTTP
        501 when the server runs without ``--metrics``) and ``ServerUnreachable``."""
        status, _ctype, data = self._request("GET", "/metrics")
        if status != 200:
            raise ServerRequestError(f"GET {self.url}/metrics: HTTP {status}: {_error_text(data)}")
        try:
            return parse_metrics(data.decode("utf-8", "replace"))
        except ValueError as e:
            raise ServerRequestError(f"GET {self.url}/metrics: unreadable Prometheus text ({e})") from None

    def props(self) -> dict:
        """``GET /props``: the server's settings as a dict (``build_info``,
        ``default_generation_settings``, ``total_slots``, ...)."""
        reply = self._json("GET", "/props")
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
        """The HTTP status of ``GET /health`` (200 ready, 503 loading). Raises ``ServerUnreachable``."""
        return self._request("GET", "/health", timeout_s=min(self.timeout_s, _PROBE_TIMEOUT_S * 5))[0]

    def check_reachable(self) -> None:
        """Make sure a ready llama-server answers at the URL. Raises ``ServerUnreachable`` ("no
        llama-server answers at URL: connection refused", or still loading), ``WrongServer``
        ("URL answered but is not a llama-server: ...") or ``ServerRequestError`` (wants an API key)."""
        try:
            status, ctype, data = self._request("GET", "/health", timeout_s=min(self.timeout_s, _PROBE_TIMEOUT_S * 5))
        except ServerRequestError as e:
            raise WrongServer(f"{self.url} answered but is not a llama-server: {e}") from None
        if status == 503 and "Loading model" in data.decode("utf-8", "replace"):
            raise ServerUnreachable(f"the llama-server at {self.url} is still loading its model (HTTP 503 on /health)")
        reply = _loads(data)
        if status != 200 or not isinstance(reply, dict) or reply.get("status") != "ok":
            raise WrongServer(f"{self.url} answered but is not a llama-server: GET /health gave HTTP {status} "
                              f"{_describe(ctype, data)}, expected 200 with {{\"status\": \"ok\"}}")
        status, ctype, data = self._request("GET", "/props", timeout_s=min(self.timeout_s, _PROBE_TIMEOUT_S * 5))
        if status == 401:
            raise ServerRequestError(f"the llama-server at {self.url} wants an API key (HTTP 401 on /props)")
        reply = _loads(data)
        if status != 200 or not isinstance(reply, dict) or not isinstance(reply.get("build_info"), str):
            raise WrongServer(f"{self.url} answered but is not a llama-server: GET /props gave HTTP {status} "
                              f"{_describe(ctype, data)}, expected JSON with build_info")

    def _json(self, method: str, path: str, body: object | None = None):
        status, ctype, data = self._request(method, path, body)
        if status != 200:
            raise ServerRequestError(f"{method} {self.url}{path}: HTTP {status}: {_error_text(data)}")
        reply = _loads(data)
        if reply is None:
            raise WrongServer(f"{self.url} answered but is not a llama-server: {method} {path} gave "
                              f"{_describe(ctype, data)}, expected JSON")
        return reply

    def _request(self, method: str, path: str, body: object | None = None,
                 timeout_s: float | None = None) -> tuple[int, str, bytes]:
        url = self.url + path
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data is not None else {})
        wait = self.timeout_s if timeout_s is None else timeout_s
        try:
            with _NO_PROXY.open(req, timeout=wait) as resp:
                return resp.status, resp.headers.get("Content-Type", ""), resp.read()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.headers.get("Content-Type", "") if e.headers else "", e.read()
        except urllib.error.URLError as e:
            reason = e.reason
            if isinstance(reason, ConnectionRefusedError):
                raise ServerUnreachable(f"no llama-server answers at {self.url}: connection refused") from None
            if isinstance(reason, (TimeoutError, socket.timeout)):
                raise ServerUnreachable(f"no llama-server answers at {self.url}: no answer within {wait:g} s") from None
            raise ServerUnreachable(f"no llama-server answers at {self.url}: {getattr(reason, 'strerror', None) or reason}") from None
        except (TimeoutError, socket.timeout):
            raise ServerRequestError(f"{method} {url}: no reply within {wait:g} s") from None
        except ConnectionError as e:
            raise ServerRequestError(f"{method} {url}: the connection closed without a reply ({type(e).__name__})") from None
        except http.client.HTTPException as e:
            raise WrongServer(f"{self.url} answered but is not a llama-server: {method} {path} got no HTTP reply "
                              f"({type(e).__name__})") from None


class LlamaServerProcess:
    """A llama-server child process on 127.0.0.1 serving ``model`` with one slot; a context
    manager (``stop()`` on exit). ``args`` are appended to the command line; ``threads`` sets
    ``-t`` and ``-tb``; ``n_ctx`` is ``-c``; ``context`` (``inspector.llama.context_settings.ContextSettings``)
    adds ``-ub``, ``-fa``, ``-ctk``, ``-ctv`` for each that is not llama-server's default. Waits up to ``timeout_s`` seconds for ``/health``.
    Raises ``ServerStartError`` (one line: what llama-server complained about, or the timeout)."""

    def __init__(self, binary: Path | str, model: Path | str, *, args: Sequence[str] = (), threads: int = 1,
                 n_ctx: int = 1024, timeout_s: float = 120, context=None):
        self.binary = Path(binary).expanduser().absolute()  # "./llama-server" is this folder's, not PATH's
        self.model = Path(model)
        self._proc: subprocess.Popen | None = None
        self._log_dir = Path(tempfile.mkdtemp(prefix="llama-server-"))
        self.log_path = self._log_dir / "llama-server.log"
        self._log_cache: str | None = None
        if not self.model.is_file():
            self.stop()
            raise ServerStartError(f"cannot start llama-server: no model file at {self.model}")
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.client = LlamaServerClient(self.url)
        self.argv = [str(self.binary), "-m", str(self.model), "--host", HOST, "--port", str(self.port),
                     "-t", str(threads), "-tb", str(threads), "-np", "1", "-c", str(n_ctx),
                     "--no-ui", "--metrics", *(context.server_args() if context is not None else ()),
                     *[str(a) for a in args]]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
        _RUNNING.add(self)
        try:
            with open(self.log_path, "wb") as log:
                self._proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as e:
            self.stop()
            raise ServerStartError(f"cannot start llama-server {self.binary}: {e.strerror or e}") from None
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        probe = LlamaServerClient(self.url, timeout_s=_PROBE_TIMEOUT_S)
        last = "no answer yet"
        while True:
            rc = self._proc.poll()
            if rc is not None:
                raise ServerStartError(f"llama-server exited (code {rc}) before it was ready: "
                                       f"{complaint_line(self.log_text())}")
            try:
                status = probe.health()
                if status == 200:
                    return
                last = f"HTTP {status} on /health"
            except ServerError as e:  # refused, reset or a read timeout while it loads: try again
                last = str(e)
            if time.monotonic() > deadline:
                raise ServerStartError(f"llama-server at {self.url} was not ready within {timeout_s:g} s ({last}); "
                                       f"its last log line: {complaint_line(self.log_text())}")
            time.sleep(0.1)

    def running(self) -> bool:
        """Whether the child process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def log_text(self) -> str:
        """Everything llama-server printed so far (stdout and stderr), also after ``stop()``."""
        if self._log_cache is not None:
            return self._log_cache
        try:
            return self.log_path.read_text("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Terminate the server, kill it after STOP_GRACE_S (5) seconds; keep its log text and
        remove the temporary log folder. Idempotent."""
        proc, self._proc = self._proc, None
        _RUNNING.discard(self)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log_cache is None:
            self._log_cache = self.log_text()
            shutil.rmtree(self._log_dir, ignore_errors=True)

    def __enter__(self) -> LlamaServerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self):
        if getattr(self, "_proc", None) is not None:
            self.stop()


def _loads(data: bytes):
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def _describe(ctype: str, data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip().replace("\n", " ")
    kind = ctype.split(";")[0].strip() or "no content type"
    return f"({kind}: {text[:80]!r})" if text else f"({kind}, empty body)"


def _error_text(data: bytes) -> str:
    reply = _loads(data)
    if isinstance(reply, dict) and isinstance(reply.get("error"), dict):
        return str(reply["error"].get("message", reply["error"]))[:300].replace("\n", " ")
    text = data.decode("utf-8", "replace").strip().replace("\n", " ")
    return text[:300] or "(empty body)"
