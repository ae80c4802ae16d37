"""Start a llama-server and talk to it: our reference for comparisons, never on the decode path.

``LlamaServerProcess`` starts ``llama-server -m MODEL --host 127.0.0.1 --port P -t T -tb T
-np 1 -c N_CTX --no-ui --metrics ARGS`` (``--no-ui`` is ``--no-webui``'s canonical name) and
waits for ``GET /health`` to answer 200; its ``client`` (``inspector.bench.server_client.LlamaServerClient``,
the HTTP client, re-exported here with its errors and replies) sends greedy ``/completion``
requests and reads ``/metrics`` and ``/props``. ``ServeProcess`` starts our own ``spec-inspector serve``
the same way (a child process, ``python -m inspector serve --host 127.0.0.1 --port P ARGS``); both share
``ChildServer`` (the child, its log file, the wait for ``/health``, the stop). Every failure is one of
the ``ServerError`` exceptions with a one-line message. Followed at llama.cpp 0c1e570:

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
import os
import re
import shutil
import site
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from inspector.bench.server_client import LlamaServerClient
from inspector.bench.server_http import REQUEST_DEADLINE_S, ServerError
from inspector.engine.settings import SamplingSettings

HOST = "127.0.0.1"
STOP_GRACE_S = 5.0
_PROBE_TIMEOUT_S = 2.0
_LOG_PREFIX_RE = re.compile(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ")  # common/log.cpp: timestamp and level
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_COMPLAINT_RES = (
    re.compile(r'error while handling argument "[^"]*":.*'),
    re.compile(r"error: invalid argument: .*"),
    re.compile(r".*\b(error|failed|couldn't|cannot|unable|invalid|not found)\b.*", re.IGNORECASE),
)
_RUNNING: "weakref.WeakSet[ChildServer]" = weakref.WeakSet()
"""Servers started and not stopped yet: stopped when this process exits (``_stop_all``), so closing
the window during a comparison leaves no server child behind (it runs in its own session)."""


class ServerStartError(ServerError):
    """llama-server exited before it was ready, or did not become ready in time."""


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        server.stop()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picked it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


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


class ChildServer:
    """A server child process on 127.0.0.1 at a port that was free (``port``, ``url``), answering
    ``GET /health``: the common part of ``LlamaServerProcess`` and ``ServeProcess``; a context manager
    (``stop()`` on exit). ``start`` runs the command line with stdin closed and stdout and stderr into a
    temporary log file (never an unread pipe; ``log_text``), in a session of its own, and waits for
    ``/health`` to answer 200. A server not stopped when this process exits is stopped then. ``name``:
    how the messages call it; ``log_name``: the temporary log folder's prefix and the log file's name."""

    name = "server"

    def __init__(self, log_name: str):
        self._proc: subprocess.Popen | None = None
        self._log_dir = Path(tempfile.mkdtemp(prefix=f"{log_name}-"))
        self.log_path = self._log_dir / f"{log_name}.log"
        self._log_cache: str | None = None
        self.argv: list[str] = []
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"

    def start(self, argv: Sequence[str], *, env: dict | None = None, timeout_s: float = 120) -> None:
        """Start ``argv`` (``env``: its environment, default this process's) and wait up to ``timeout_s``
        seconds for ``/health`` to answer 200. Raises ``ServerStartError`` (one line: it could not start,
        exited first, with ``complaint()``, or the timeout), the child stopped."""
        self.argv = [str(a) for a in argv]
        _RUNNING.add(self)
        try:
            with open(self.log_path, "wb") as log:
                self._proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, env=env, start_new_session=True)
        except OSError as e:
            self.stop()
            raise ServerStartError(f"cannot start {self.name} {self.argv[0]}: {e.strerror or e}") from None
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def complaint(self) -> str:
        """One line of the log that says why the server stopped (``complaint_line``)."""
        return complaint_line(self.log_text())

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        probe = LlamaServerClient(self.url, timeout_s=_PROBE_TIMEOUT_S)
        last = "no answer yet"
        while True:
            rc = self._proc.poll()
            if rc is not None:
                raise ServerStartError(f"{self.name} exited (code {rc}) before it was ready: {self.complaint()}")
            try:
                status = probe.health()
                if status == 200:
                    return
                last = f"HTTP {status} on /health"
            except ServerError as e:  # refused, reset or a read timeout while it loads: try again
                last = str(e)
            if time.monotonic() > deadline:
                raise ServerStartError(f"{self.name} at {self.url} was not ready within {timeout_s:g} s ({last}); "
                                       f"its last log line: {self.complaint()}")
            time.sleep(0.1)

    def running(self) -> bool:
        """Whether the child process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def log_text(self) -> str:
        """Everything the server printed so far (stdout and stderr), also after ``stop()``."""
        if self._log_cache is not None:
            return self._log_cache
        try:
            return self.log_path.read_text("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Terminate the server, kill it after STOP_GRACE_S (5) seconds, wait for it; keep its log text and
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

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self):
        if getattr(self, "_proc", None) is not None:
            self.stop()


@dataclass(frozen=True)
class ServerDeadlines:
    """How long a reference llama-server may take (seconds)."""

    start_s: float = 120
    """To answer ``GET /health`` with 200 after it starts (the model loads first)."""
    request_s: float = REQUEST_DEADLINE_S
    """Each request of its ``client`` (``inspector.bench.server_client.LlamaServerClient``)."""


class LlamaServerProcess(ChildServer):
    """A llama-server child process on 127.0.0.1 serving ``model`` with one slot; a context
    manager (``stop()`` on exit). ``args`` are appended to the command line; ``threads`` sets
    ``-t`` and ``-tb``; ``n_ctx`` is ``-c``; ``context`` (``inspector.llama.context_settings.ContextSettings``)
    adds ``-ub``, ``-fa``, ``-ctk``, ``-ctv`` for each that is not llama-server's default. Waits up to
    ``deadlines.start_s`` seconds for ``/health``; ``client``'s requests end within ``deadlines.request_s``
    each (``ServerDeadlines``; None: its defaults); ``metrics``: start it with ``--metrics``. Raises
    ``ServerStartError`` (one line: what llama-server complained about, or the timeout)."""

    name = "llama-server"

    def __init__(self, binary: Path | str, model: Path | str, *, args: Sequence[str] = (), threads: int = 1,
                 n_ctx: int = 1024, context=None, deadlines: ServerDeadlines | None = None, metrics: bool = True):
        deadlines = deadlines or ServerDeadlines()
        super().__init__("llama-server")
        self.binary = Path(binary).expanduser().absolute()  # "./llama-server" is this folder's, not PATH's
        self.model = Path(model)
        if not self.model.is_file():
            self.stop()
            raise ServerStartError(f"cannot start llama-server: no model file at {self.model}")
        self.client = LlamaServerClient(self.url, timeout_s=deadlines.request_s)
        argv = [str(self.binary), "-m", str(self.model), "--host", HOST, "--port", str(self.port),
                "-t", str(threads), "-tb", str(threads), "-np", "1", "-c", str(n_ctx),
                "--no-ui", *(["--metrics"] if metrics else []),
                *(context.server_args() if context is not None else ()),
                *[str(a) for a in args]]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
        self.start(argv, env=env, timeout_s=deadlines.start_s)


def inspector_command() -> tuple[list[str], dict]:
    """The command line that runs this ``inspector`` package's CLI in a child process, and the child's
    environment: ``sys.executable -P -m inspector`` (``-P``: not the working folder's package) with the
    folder holding this package first on ``PYTHONPATH`` unless it is a site-packages folder (so a source
    checkout's child runs the same code as this process)."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    folders = [*getattr(site, "getsitepackages", lambda: [])(), site.getusersitepackages()]
    installed = {str(Path(p).resolve()) for p in folders}
    if root not in installed:
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return [sys.executable, "-P", "-m", "inspector"], env


def last_lines(log: str, n: int = 3, width: int = 300) -> str:
    """The last ``n`` non-empty lines of ``log`` on one line, joined with `` | `` and cut to their last
    ``width`` characters ("(no output)" when there is none)."""
    lines = [ln.strip() for ln in _ANSI_RE.sub("", log).splitlines() if ln.strip()]
    text = " | ".join(lines[-n:])
    return (text if len(text) <= width else "..." + text[-width:]) or "(no output)"


class ServeProcess(ChildServer):
    """Our ``spec-inspector serve`` as a child process on 127.0.0.1 (``inspector_command``), as llama-server
    runs: ``args`` are serve's flags besides ``--host`` and ``--port`` (the model, slots, source, receipts
    ...). Waits up to ``timeout_s`` seconds for ``/health``; a context manager (``stop()`` on exit: SIGTERM,
    then SIGKILL after ``STOP_GRACE_S``). Raises ``ServerStartError`` (one line with the last lines of its
    output: ``last_lines``)."""

    name = "our serve"

    def __init__(self, args: Sequence[str], *, timeout_s: float = 120):
        super().__init__("spec-inspector-serve")
        command, env = inspector_command()
        self.start([*command, "serve", "--host", HOST, "--port", str(self.port), *[str(a) for a in args]],
                   env=env, timeout_s=timeout_s)

    def complaint(self) -> str:
        """The last lines of what our serve printed, on one line (``last_lines``)."""
        return last_lines(self.log_text())
