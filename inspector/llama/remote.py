"""``RemoteRuntime``: a ``LlamaRuntime`` in a child process, for runtimes that llama.cpp may kill.

llama.cpp's RPC client aborts the whole process when a server cannot be reached or goes
away (LLAMA_CPP_NOTES "Devices, offload, RPC": exit 134 from ``ggml-rpc.cpp``). So an
RPC-backed runtime lives in a child process (``multiprocessing`` spawn) and this proxy
forwards each runtime call over a pipe; the engine, the scheduler lock, the session record
and the window stay in this process, unchanged. When the child dies, the call in flight and
every later one raise ``RuntimeLost`` (an ``EngineError``) naming the RPC servers and
llama.cpp's last line, so the engine ends the run as a failed window: every receipt before
it is kept and a new run can load a new child.

Cancellation reaches a decode in flight through a shared byte the child's llama.cpp abort
callback reads (the same ``strlen`` callback as in-process: ``LlamaRuntime.abort.read_flag``).
Values that depend only on the model (token pieces, end-of-generation tests) are cached here.
"""

from __future__ import annotations

import ctypes
import importlib
import math
import multiprocessing
import os
import re
import signal
import tempfile
import threading
from multiprocessing import shared_memory
from pathlib import Path

from inspector.engine.errors import EngineError, RuntimeLost  # noqa: F401  (RuntimeLost: re-exported)
from inspector.engine.runtime_protocol import RUNTIME_FACTS, RUNTIME_METHODS
from inspector.engine.text import token_label
from inspector.llama.devices import RPC_TIMEOUT_S, RpcUnavailable, add_rpc_servers, list_devices

RPC_HELLO_TIMEOUT_S = 30.0
"""Longest wait for the RPC servers to answer llama.cpp's hello (seconds): something that accepts the
connection but is not llama.cpp's RPC server never answers."""
STARTUP_TIMEOUT_S = 600.0
"""Longest wait for the model to load in the child (seconds, between two progress steps)."""


def _remote_error(module: str, name: str, message: str, attrs: dict) -> BaseException:
    """Rebuild an exception raised in the child (``__init__`` signatures differ, so not by pickle)."""
    try:
        cls = getattr(importlib.import_module(module), name)
        if not (isinstance(cls, type) and issubclass(cls, BaseException)):
            raise TypeError
    except Exception:
        cls = EngineError
    exc = cls.__new__(cls)
    BaseException.__init__(exc, message)
    try:
        exc.__dict__.update(attrs)
    except Exception:
        pass
    return exc


def _child(conn, model_path: str, options: dict, flag_name: str, stderr_path: str) -> None:
    """The child: load the runtime, then answer calls until told to close or the pipe ends."""
    fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)  # llama.cpp's abort message lands in the file the parent reads
    os.environ["GGML_NO_BACKTRACE"] = "1"  # an abort would attach gdb for a backtrace: seconds, and noise
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the parent's to handle (it ends the child)
    import llama_cpp  # noqa: F401  (loads the libraries before the runtime module sets its log level)

    from inspector.llama.runtime import LlamaRuntime  # in the child only, after llama_cpp above

    flag_mem = shared_memory.SharedMemory(name=flag_name)
    try:
        offload = options.get("offload")
        if offload is not None and offload.rpc:  # first, so the parent can time the servers' answer alone
            add_rpc_servers(offload.rpc)
            conn.send(("registered", None))
        rt = LlamaRuntime(model_path, progress=lambda v: conn.send(("progress", v)), **options)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, never lost
        conn.send(("err", type(exc).__module__, type(exc).__qualname__, str(exc), _attrs(exc)))
        flag_mem.close()
        return
    # Cancellation: llama.cpp's abort callback reads the shared byte instead of the runtime's own.
    flag = (ctypes.c_char * 2).from_buffer(flag_mem.buf)
    rt.abort.read_flag(flag)
    methods = [n for n in RUNTIME_METHODS if callable(getattr(rt, n, None))]  # the protocol's: all of them
    conn.send(("ready", {a: getattr(rt, a) for a in RUNTIME_FACTS}, methods))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        kind, name, args, kwargs = msg
        if kind == "close":
            break
        d0, p0 = rt.decode_ns, rt.predict_ns
        try:
            if kind == "apply":  # a module-level function (pickled by name) run on the real runtime
                value = name(rt, *args, **kwargs)
            else:
                value = getattr(rt, name)
                if kind == "call":
                    value = value(*args, **kwargs)
            conn.send(("ok", value, rt.decode_ns - d0, rt.predict_ns - p0))
        except BaseException as exc:  # noqa: BLE001
            conn.send(("err", type(exc).__module__, type(exc).__qualname__, str(exc), _attrs(exc)))
    rt.abort.read_flag(None)  # the last view of the shared byte: SharedMemory.close refuses while one exists
    del flag
    rt.close()
    flag_mem.close()


def _attrs(exc: BaseException) -> dict:
    out = {}
    for k, v in getattr(exc, "__dict__", {}).items():
        if isinstance(v, (int, float, str, bool, tuple, type(None))):
            out[k] = v
    return out


class RemoteRuntime:
    """A ``LlamaRuntime`` running in a child process: the ``Runtime`` protocol's methods forwarded to it and its
    facts copied once (``inspector.engine.runtime_protocol``).

    ``model_path`` and ``runtime_options`` (``n_ctx``, ``n_threads``, ``offload``, ...) go to
    ``LlamaRuntime`` in the child; ``progress`` gets the load progress (0.0..1.0) here. Raises
    what ``LlamaRuntime`` raises (``ModelFileError``, ``RpcUnavailable``) or ``RuntimeLost``
    when the child dies while loading (llama.cpp aborted: e.g. a server that is not llama.cpp's
    RPC server) and ``RpcUnavailable`` when the servers do not answer llama.cpp's hello within
    ``RPC_HELLO_TIMEOUT_S``. Every call later may raise ``RuntimeLost``; ``alive`` says whether it
    can still answer. A call with no answer for ``call_timeout_s`` seconds per batch of up to
    ``n_batch`` rows it decodes (a prefill of N tokens: ceil(N / n_batch) times that) ends the child:
    ``RuntimeLost`` with ``silent_s``, as for a server that went away.
    """

    def __init__(self, model_path, *, progress=None, call_timeout_s: float | None = None,
                 **runtime_options) -> None:
        offload = runtime_options.get("offload")
        self.call_timeout_s = call_timeout_s or getattr(offload, "rpc_timeout_s", None) or RPC_TIMEOUT_S
        """Longest wait for one call per batch of rows (seconds; default ``offload.rpc_timeout_s``, else
        ``RPC_TIMEOUT_S``): llama.cpp's client waits forever on a server that stops answering without
        closing its connection (frozen, or a network that drops packets)."""
        self._endpoints = tuple(getattr(offload, "rpc", ()) or ())
        self._lock = threading.RLock()
        self._abort_lock = threading.Lock()
        """Guards ``_inflight_sid`` with the flag byte: an abort requested as a decode ends must not
        stay set for the next call (as ``inspector.llama.abort.AbortSwitch`` does in-process)."""
        self._flag = shared_memory.SharedMemory(create=True, size=2)
        self._flag.buf[0] = 0
        self._inflight_sid: int | None = None
        fd, self._stderr_path = tempfile.mkstemp(prefix="spec-inspector-runtime-", suffix=".log")
        os.close(fd)
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        self._proc = ctx.Process(target=_child, daemon=True, name="spec-inspector-runtime",
                                 args=(child_conn, str(model_path), runtime_options, self._flag.name,
                                       self._stderr_path))
        self._proc.start()
        child_conn.close()
        self._lost: RuntimeLost | None = None
        self.decode_ns = 0
        self.predict_ns = 0
        self._pieces: dict = {}
        self._eog: dict = {}
        self._methods: frozenset = frozenset()
        try:
            self._start(progress)
        except BaseException:
            self._stop()
            raise

    def _start(self, progress) -> None:
        """Wait for the child: the RPC servers' answer (``RPC_HELLO_TIMEOUT_S``), then the model."""
        if self._endpoints:
            try:
                msg = self._receive(RPC_HELLO_TIMEOUT_S)
            except RuntimeLost as exc:
                if getattr(self, "_hung_s", None):
                    raise RpcUnavailable(",".join(self._endpoints), f"no answer to llama.cpp's RPC hello within "
                                         f"{RPC_HELLO_TIMEOUT_S:g} s: is it llama.cpp's RPC server (protocol "
                                         f"7.x, spec-inspector rpc-server)?") from None
                raise exc from None
            if msg[0] == "err":
                raise _remote_error(*msg[1:])
        while True:
            msg = self._receive(STARTUP_TIMEOUT_S)
            if msg[0] == "progress":
                if progress is not None:
                    try:
                        progress(float(msg[1]))
                    except Exception:
                        pass
                continue
            if msg[0] == "err":
                raise _remote_error(*msg[1:])
            for k, v in msg[1].items():
                setattr(self, k, v)
            self._methods = frozenset(msg[2])
            break

    # -- the pipe -----------------------------------------------------------------------------
    def _receive(self, timeout_s: float):
        """The child's next message; ``RuntimeLost`` when it died or said nothing for ``timeout_s``
        (a server that hangs without closing its connection: the child is then ended)."""
        try:
            if not self._conn.poll(timeout_s):
                self._proc.kill()
                self._hung_s = timeout_s
                raise EOFError
            return self._conn.recv()
        except (EOFError, OSError, ConnectionError):
            raise self._died() from None

    def _died(self) -> RuntimeLost:
        if self._lost is None:
            self._proc.join(timeout=5)
            code = self._proc.exitcode
            if code is None:
                self._proc.kill()
                self._proc.join(timeout=5)
            self._lost = RuntimeLost(self._endpoints, code, _last_line(self._stderr_path),
                                     silent_s=getattr(self, "_hung_s", None))
        return self._lost

    def _call(self, kind: str, name: str, *args, **kwargs):
        with self._lock:
            if self._lost is not None:
                raise self._lost
            try:
                self._conn.send((kind, name, args, kwargs))
            except (OSError, ValueError, ConnectionError):
                raise self._died() from None
            msg = self._receive(self._wait_for(args))
        if msg[0] == "err":
            raise _remote_error(*msg[1:])
        _ok, value, d_ns, p_ns = msg
        self.decode_ns += d_ns
        self.predict_ns += p_ns
        return value

    def _wait_for(self, args) -> float:
        """``call_timeout_s`` per batch of up to ``n_batch`` rows in the call's longest sequence argument."""
        rows = max((len(a) for a in args if isinstance(a, (list, tuple))), default=0)
        return self.call_timeout_s * max(1, math.ceil(rows / max(1, int(getattr(self, "n_batch", 0) or 1))))

    @property
    def alive(self) -> bool:
        """The child still answers (False after ``RuntimeLost`` or ``close``)."""
        return self._lost is None and self._proc is not None and self._proc.is_alive()

    # -- the runtime's methods ------------------------------------------------------------------
    def __getattr__(self, name: str):
        """Any other method of the ``Runtime`` protocol (``RUNTIME_METHODS``), forwarded to the child (data
        attributes other than ``RUNTIME_FACTS`` do not exist here: ``vocab``, ``ctx`` and ``model`` are pointers
        in the child's memory)."""
        if name.startswith("_") or name not in self.__dict__.get("_methods", ()):
            raise AttributeError(f"RemoteRuntime has no {name!r} (a pointer in the child, or no such method)")

        def method(*args, **kwargs):
            return self._call("call", name, *args, **kwargs)

        method.__name__ = name
        return method

    def apply(self, fn, *args, **kwargs):
        """``fn(runtime, *args, **kwargs)`` run in the child on the real ``LlamaRuntime`` (``fn``: a
        module-level function, pickled by name; its result must pickle). For code that needs the
        runtime's llama.cpp pointers, e.g. ``inspector.sources.compat.vocab_facts``."""
        return self._call("apply", fn, *args, **kwargs)

    def decode_rows(self, sid, tokens, position, abort=None):
        """``LlamaRuntime.decode_rows`` in the child; ``abort`` (an Event) reaches it through the shared byte."""
        return self._decode("decode_rows", sid, tokens, position, abort)

    def decode_logits(self, sid, tokens, position, abort=None):
        """``LlamaRuntime.decode_logits`` in the child (the logits come back as a numpy copy)."""
        return self._decode("decode_logits", sid, tokens, position, abort)

    def decode_tree(self, sid, tokens, parents, position, abort=None):
        """``LlamaRuntime.decode_tree`` in the child (``keep_branch`` follows as a plain call)."""
        return self._decode("decode_tree", sid, tokens, position, abort, tuple(parents))

    def _decode(self, name, sid, tokens, position, abort, *extra):
        with self._lock:
            with self._abort_lock:
                self._inflight_sid = sid if abort is not None else None
                self._flag.buf[0] = 1 if abort is not None and abort.is_set() else 0
            try:
                if extra:  # decode_tree(sid, tokens, parents, position)
                    return self._call("call", name, sid, tuple(tokens), *extra, position)
                return self._call("call", name, sid, tuple(tokens), position)
            finally:
                with self._abort_lock:
                    self._inflight_sid = None
                    self._flag.buf[0] = 0

    def request_abort(self, sid: int) -> None:
        """Abort the decode in flight if it belongs to session ``sid`` (any thread; never blocks on a call)."""
        with self._abort_lock:
            if self._inflight_sid == sid and self._lost is None:
                self._flag.buf[0] = 1

    @property
    def rollback(self):
        """``LlamaRuntime.rollback`` (probed in the child)."""
        return self._call("get", "rollback")

    def set_threads(self, n_threads: int) -> None:
        """``LlamaRuntime.set_threads`` in the child; ``n_threads`` follows."""
        self._call("call", "set_threads", n_threads)
        self.n_threads = max(1, int(n_threads))

    def token_piece(self, token: int, special: bool = False) -> bytes:
        """The token's bytes (cached here: they depend only on the model)."""
        key = (token, special)
        b = self._pieces.get(key)
        if b is None:
            b = self._pieces[key] = self._call("call", "token_piece", token, special)
        return b

    def token_text(self, token: int) -> str:
        """Display text of one token (as ``LlamaRuntime.token_text``)."""
        return token_label(self.token_piece(token, True))

    def detokenize(self, tokens) -> str:
        """Join the tokens' bytes and decode once (as ``LlamaRuntime.detokenize``)."""
        return b"".join(self.token_piece(t) for t in tokens).decode("utf-8", errors="replace")

    def is_eog(self, token: int) -> bool:
        """End-of-generation test (cached here)."""
        v = self._eog.get(token)
        if v is None:
            v = self._eog[token] = bool(self._call("call", "is_eog", token))
        return v

    def describe(self) -> dict:
        """``LlamaRuntime.describe`` with ``converted_from`` (set here) and ``process``."""
        d = {**self._call("call", "describe"), "process": "child (llama.cpp's RPC client aborts on a lost server)"}
        if getattr(self, "converted_from", None):
            d["converted_from"] = str(self.converted_from)
            d["converted_from_weights"] = getattr(self, "converted_from_weights", "")
        return d

    def close(self) -> None:
        """End the child (idempotent)."""
        if getattr(self, "_proc", None) is None:
            return
        with self._lock:
            if self._lost is None and self._proc.is_alive():
                try:
                    self._conn.send(("close", "", (), {}))
                except (OSError, ValueError):
                    pass
            self._stop()

    def _stop(self) -> None:
        if self._proc is None:
            return
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout=5)
        self._conn.close()
        self._flag.close()
        try:
            self._flag.unlink()
        except FileNotFoundError:
            pass
        Path(self._stderr_path).unlink(missing_ok=True)
        self._proc = None
        if self._lost is None:
            self._lost = RuntimeLost(self._endpoints, None, "closed")

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


def _last_line(path: str) -> str:
    """llama.cpp's last meaningful stderr line (an ``ggml-rpc.cpp:566: ...`` abort), or ""."""
    try:
        lines = [l.strip() for l in Path(path).read_text("utf-8", errors="replace").splitlines() if l.strip()]
    except OSError:
        return ""
    for l in reversed(lines):
        if "ggml" in l or "error" in l.lower() or "failed" in l.lower():
            return re.sub(r"\S*/(ggml-[\w.-]+\.cpp:\d+)", r"\1", l)[:300]  # the build folder's path: noise
    return lines[-1][:300] if lines else ""


def _devices_child(conn, endpoints) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["GGML_NO_BACKTRACE"] = "1"
    try:
        add_rpc_servers(endpoints)
        conn.send(("ok", list_devices()))
    except BaseException as exc:  # noqa: BLE001
        conn.send(("err", type(exc).__module__, type(exc).__qualname__, str(exc), _attrs(exc)))


def devices_with_rpc(endpoints, timeout_s: float = RPC_HELLO_TIMEOUT_S):
    """``list_devices()`` after adding the RPC servers ``endpoints``, computed in a child process
    (llama.cpp's RPC client may abort its process; registering here would also offload every
    later model to the servers). Raises ``RpcUnavailable`` (not reachable, no answer within
    ``timeout_s`` seconds) and ``RuntimeLost`` (llama.cpp aborted the child)."""
    ctx = multiprocessing.get_context("spawn")
    conn, child_conn = ctx.Pipe()
    proc = ctx.Process(target=_devices_child, args=(child_conn, tuple(endpoints)), daemon=True)
    proc.start()
    child_conn.close()
    try:
        if not conn.poll(timeout_s):
            raise RpcUnavailable(",".join(endpoints), f"no answer to llama.cpp's RPC hello within {timeout_s:g} s")
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            proc.join(timeout=5)
            raise RuntimeLost(endpoints, proc.exitcode, "") from None
        if msg[0] == "err":
            raise _remote_error(*msg[1:])
        return msg[1]
    finally:
        proc.kill()
        proc.join(timeout=5)
        conn.close()
