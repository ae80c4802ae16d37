"""Where the model runs: llama.cpp's devices, its offload settings, and its RPC backend.

Follows llama.cpp as vendored by llama-cpp-python 0.3.36 (RPC protocol 7.0.0):
``common/arg.cpp`` (``--n-gpu-layers``/``-ngl``, ``--split-mode``, ``--main-gpu``,
``--tensor-split``, ``--rpc``: ``add_rpc_devices`` adds each server with the RPC registry's
``ggml_backend_rpc_add_server`` and registers it, so llama.cpp's default device choice
offloads to it) and ``tools/rpc/rpc-server.cpp`` (``rpc-server``: host 127.0.0.1, port
50052, half the hardware threads, non-CPU devices first else the CPU, ``-c`` for the file
cache under ``$LLAMA_CACHE`` or ``~/.cache/llama.cpp/rpc``, the warning for another host,
then ``ggml_backend_rpc_start_server``). We call the same ggml functions through ctypes;
no protocol of our own.

llama.cpp's RPC client aborts the process on a connection it cannot make or lose
(LLAMA_CPP_NOTES "Devices, offload, RPC"), so ``check_endpoint`` answers first, and an
RPC-backed runtime lives in a child process (``inspector.llama.remote``).
"""

from __future__ import annotations

import math

import ctypes
import os
import socket
from dataclasses import asdict, dataclass, field

DEFAULT_RPC_PORT = 50052
"""llama.cpp's ``rpc-server`` default port."""
RPC_TIMEOUT_S = 120.0
"""Default longest wait for the RPC servers' answer to one model call, per batch of up to ``n_batch``
rows (seconds; ``--rpc-timeout``): llama.cpp's client would wait forever on a frozen server."""
SPLIT_MODES = {"none": 0, "layer": 1, "row": 2}
"""``--split-mode`` names -> ``llama_split_mode`` values."""
DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "IGPU", 3: "ACCEL", 4: "META"}
"""``ggml_backend_dev_type`` values -> names."""
REBUILD_HINT = ('this llama-cpp-python was built without llama.cpp\'s RPC backend; rebuild it with: '
                'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_RPC=on" pip install --no-cache-dir --force-reinstall '
                '--no-deps llama-cpp-python==0.3.36')
"""What ``--rpc`` says when the installed llama.cpp has no RPC (``--no-cache-dir``: pip's cached wheel
is keyed by version, not by CMake options)."""
SECURITY_WARNING = ("llama.cpp's RPC protocol has no authentication and is not secure: never expose the "
                    "RPC server to an open network")


class RpcUnavailable(Exception):
    """An RPC endpoint cannot be used: ``endpoint`` ("HOST:PORT") and ``reason`` (one line)."""

    def __init__(self, endpoint: str, reason: str) -> None:
        super().__init__(f"RPC server {endpoint}: {reason}" if endpoint else reason)
        self.endpoint = endpoint
        self.reason = reason


@dataclass(frozen=True)
class Offload:
    """llama.cpp's offload settings, with its flag names (``common/arg.cpp``).

    ``n_gpu_layers``: layers on the GPU/RPC devices (``-ngl``; None: llama.cpp's default,
    which is all layers in 0.3.36). ``split_mode``: ``none``/``layer``/``row`` (None: llama.cpp's,
    ``layer``). ``main_gpu``: the device index for ``split_mode`` none. ``tensor_split``: the share
    of each device (None: by free memory). ``rpc``: RPC servers, ``HOST:PORT`` each.
    ``rpc_timeout_s``: ours, not llama.cpp's (whose RPC client waits forever): the longest wait for
    the servers' answer to one model call per batch of up to ``n_batch`` rows (None:
    ``RPC_TIMEOUT_S``); not a setting of the model, so not in ``to_json``, ``flags`` or equality.
    Raises ``ValueError`` for a bad value, naming the flag.
    """

    n_gpu_layers: int | None = None
    split_mode: str | None = None
    main_gpu: int | None = None
    tensor_split: tuple[float, ...] | None = None
    rpc: tuple[str, ...] = field(default_factory=tuple)
    rpc_timeout_s: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.n_gpu_layers is not None and self.n_gpu_layers < -1:
            raise ValueError(f"--n-gpu-layers must be -1 (all) or >= 0, observed {self.n_gpu_layers}")
        if self.split_mode is not None and self.split_mode not in SPLIT_MODES:
            raise ValueError(f"--split-mode must be one of {', '.join(SPLIT_MODES)}, observed {self.split_mode!r}")
        if self.main_gpu is not None and self.main_gpu < 0:
            raise ValueError(f"--main-gpu must be >= 0, observed {self.main_gpu}")
        if self.tensor_split is not None and (not self.tensor_split or any(not math.isfinite(v) or v < 0
                                                                          for v in self.tensor_split)):
            raise ValueError(f"--tensor-split needs non-negative shares, observed {self.tensor_split}")
        object.__setattr__(self, "rpc", tuple(parse_endpoint(e) for e in self.rpc))
        if self.rpc_timeout_s is not None and not (math.isfinite(self.rpc_timeout_s) and self.rpc_timeout_s > 0):
            raise ValueError(f"--rpc-timeout must be a number of seconds > 0, observed {self.rpc_timeout_s}")

    @property
    def default(self) -> bool:
        """Nothing set: llama.cpp's defaults everywhere."""
        return self == Offload()

    def to_json(self) -> dict:
        """The settings that were given (receipts' ``model.offload``)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()
                if v not in (None, ()) and k != "rpc_timeout_s"}

    def flags(self) -> list[str]:
        """The llama.cpp flags that reproduce these settings (``-ngl 99 --rpc 127.0.0.1:50052``)."""
        out: list[str] = []
        if self.n_gpu_layers is not None:
            out += ["-ngl", str(self.n_gpu_layers)]
        if self.split_mode is not None:
            out += ["--split-mode", self.split_mode]
        if self.main_gpu is not None:
            out += ["--main-gpu", str(self.main_gpu)]
        if self.tensor_split is not None:
            out += ["--tensor-split", ",".join(f"{v:g}" for v in self.tensor_split)]
        if self.rpc:
            out += ["--rpc", ",".join(self.rpc)]
        return out


def parse_endpoint(text: str) -> str:
    """``HOST:PORT`` checked (port 1..65535; HOST an IPv4 address or a host name: llama.cpp's RPC client
    splits the text at its first colon and looks the host up with ``gethostbyname``, IPv4 only, so an
    IPv6 address cannot reach a server). Raises ``ValueError``."""
    host, sep, port = str(text).strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"RPC server {text!r}: expected HOST:PORT, e.g. 127.0.0.1:{DEFAULT_RPC_PORT}")
    if ":" in host or "[" in host or "]" in host:
        raise ValueError(f"RPC server {text!r}: llama.cpp's RPC client connects over IPv4 only (it splits HOST:PORT "
                         f"at the first colon and looks the host up with gethostbyname): give an IPv4 address or a "
                         f"host name, e.g. 127.0.0.1:{DEFAULT_RPC_PORT}")
    if not 0 < int(port) < 65536:
        raise ValueError(f"RPC server {text!r}: the port must be 1..65535, observed {port}")
    return f"{host}:{int(port)}"


def parse_endpoints(text: str) -> tuple[str, ...]:
    """``--rpc HOST:PORT[,HOST:PORT...]``. Raises ``ValueError``."""
    items = [t for t in str(text).split(",") if t.strip()]
    if not items:
        raise ValueError("--rpc needs HOST:PORT[,HOST:PORT...]")
    return tuple(parse_endpoint(t) for t in items)


def check_endpoint(endpoint: str, timeout_s: float = 3.0) -> None:
    """Raise ``RpcUnavailable`` unless something accepts a TCP connection at ``endpoint`` within
    ``timeout_s`` seconds: llama.cpp's client would abort the process instead."""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except socket.timeout:
        raise RpcUnavailable(endpoint, f"no answer within {timeout_s:g} s") from None
    except socket.gaierror as exc:
        raise RpcUnavailable(endpoint, f"the host {host!r} is not known ({exc.strerror or exc})") from None
    except OSError as exc:
        raise RpcUnavailable(endpoint, f"cannot connect ({exc.strerror or exc}); is "
                                       f"`spec-inspector rpc-server` (or llama.cpp's rpc-server) running there?") from None


# -- ggml through ctypes ---------------------------------------------------------------------------

def _ggml():
    """libggml with the signatures used here (loaded by llama-cpp-python)."""
    import llama_cpp._ggml as g  # llama.cpp loads only when devices are read: the flags parse without it

    lib = g.libggml
    if getattr(lib, "_inspector_ready", False):
        return lib
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    for name, args, res in (
        ("ggml_backend_dev_count", [], sz), ("ggml_backend_dev_get", [sz], vp),
        ("ggml_backend_dev_name", [vp], ctypes.c_char_p), ("ggml_backend_dev_description", [vp], ctypes.c_char_p),
        ("ggml_backend_dev_type", [vp], ctypes.c_int),
        ("ggml_backend_dev_memory", [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)], None),
        ("ggml_backend_reg_by_name", [ctypes.c_char_p], vp),
        ("ggml_backend_reg_get_proc_address", [vp, ctypes.c_char_p], vp),
        ("ggml_backend_register", [vp], None),
        ("ggml_backend_reg_dev_count", [vp], sz), ("ggml_backend_reg_dev_get", [vp, sz], vp),
        ("ggml_backend_dev_by_type", [ctypes.c_int], vp), ("ggml_backend_dev_by_name", [ctypes.c_char_p], vp),
    ):
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = res
    lib._inspector_ready = True
    return lib


@dataclass(frozen=True)
class Device:
    """A ggml backend device: ``name`` (CPU, CUDA0, RPC0, ...), ``description`` (for RPC the
    endpoint), ``type`` (CPU/GPU/IGPU/ACCEL), memory in bytes."""

    name: str
    description: str
    type: str
    free_bytes: int
    total_bytes: int

    def to_json(self) -> dict:
        return asdict(self)

    def label(self) -> str:
        """``RPC0[127.0.0.1:50052]``, ``CPU``: the name llama.cpp's logs use."""
        return f"{self.name}[{self.description}]" if self.name.startswith("RPC") else self.name


def _device(lib, dev) -> Device:
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    return Device((lib.ggml_backend_dev_name(dev) or b"").decode(), (lib.ggml_backend_dev_description(dev) or b"").decode(),
                  DEVICE_TYPES.get(int(lib.ggml_backend_dev_type(dev)), "?"), int(free.value), int(total.value))


def list_devices() -> list[Device]:
    """Every device llama.cpp sees now (RPC servers added with ``add_rpc_servers`` included)."""
    from inspector.llama.native import init_backend  # loads llama.cpp: only when devices are read

    init_backend()
    lib = _ggml()
    return [_device(lib, lib.ggml_backend_dev_get(i)) for i in range(int(lib.ggml_backend_dev_count()))]


def device_array(devices):
    """A NULL-terminated ``ggml_backend_dev_t`` array of ``devices`` (``Device`` names) for
    ``llama_model_params.devices``: the devices the model's layers go to (llama.cpp's default list
    does not include RPC servers registered after the backends were loaded)."""
    lib = _ggml()
    ptrs = [lib.ggml_backend_dev_by_name(d.name.encode()) for d in devices]
    if not all(ptrs):
        raise RpcUnavailable("", f"llama.cpp does not know device {[d.name for d, p in zip(devices, ptrs) if not p]}")
    return (ctypes.c_void_p * (len(ptrs) + 1))(*ptrs, None)


def rpc_supported() -> bool:
    """This llama.cpp has the RPC backend (``llama_supports_rpc``)."""
    import llama_cpp  # loaded only when asked: the flags parse without it

    try:
        return bool(llama_cpp.llama_supports_rpc())
    except AttributeError:  # pragma: no cover - older bindings
        return False


def _rpc_proc(name: str):
    lib = _ggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    addr = lib.ggml_backend_reg_get_proc_address(reg, name.encode()) if reg else None
    if not addr:
        raise RpcUnavailable("", REBUILD_HINT)
    return addr


def add_rpc_servers(endpoints) -> list[Device]:
    """Register each RPC server with llama.cpp (``add_rpc_devices`` of ``common/arg.cpp``) after
    ``check_endpoint``; returns their devices. llama.cpp's default device choice then offloads
    ``n_gpu_layers`` to them. Raises ``RpcUnavailable`` (no RPC in this build, nobody listening).
    A server that accepts the connection but is not llama.cpp's RPC server (or another protocol
    version) makes llama.cpp abort the process: call this in a child process."""
    if not rpc_supported():
        raise RpcUnavailable("", REBUILD_HINT)
    from inspector.llama.native import init_backend  # loads llama.cpp: only when the RPC backend is used

    init_backend()
    lib = _ggml()
    add = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(_rpc_proc("ggml_backend_rpc_add_server"))
    out: list[Device] = []
    for endpoint in endpoints:
        if endpoint not in _registered:  # once per process: llama.cpp keeps the registry
            check_endpoint(endpoint)
            reg = add(endpoint.encode())
            if not reg:
                raise RpcUnavailable(endpoint, "llama.cpp could not add it")
            lib.ggml_backend_register(reg)
            _registered[endpoint] = [_device(lib, lib.ggml_backend_reg_dev_get(reg, i))
                                     for i in range(int(lib.ggml_backend_reg_dev_count(reg)))]
        out += _registered[endpoint]
    return out


_registered: dict[str, list[Device]] = {}
"""RPC servers added to llama.cpp in this process -> their devices."""


def local_gpus() -> list[Device]:
    """This machine's GPUs as llama.cpp sees them (GPU and IGPU devices, RPC servers excluded)."""
    return [d for d in list_devices() if d.type in ("GPU", "IGPU") and not d.name.startswith("RPC")]


def rpc_server_devices(device_names=()) -> list:
    """The devices ``rpc-server`` serves (llama.cpp's rules: the named devices, else every
    non-CPU/ACCEL device, else the CPU), as ``ggml_backend_dev_t`` handles for ``serve_rpc``.
    Raises ``RpcUnavailable`` (no RPC in this build), ``ValueError`` (an unknown device name:
    ``unknown device NOPE: available CPU``)."""
    if not rpc_supported():
        raise RpcUnavailable("", REBUILD_HINT)
    from inspector.llama.native import init_backend  # loads llama.cpp: only when the RPC backend is used

    init_backend()
    lib = _ggml()
    all_devices = [lib.ggml_backend_dev_get(i) for i in range(int(lib.ggml_backend_dev_count()))]
    by_name = {_device(lib, d).name: d for d in all_devices}
    if device_names:
        missing = [n for n in device_names if n not in by_name]
        if missing:
            raise ValueError(f"unknown device {', '.join(missing)}: available {', '.join(by_name)}")
        return [by_name[n] for n in device_names]
    chosen = [d for d in all_devices if _device(lib, d).type not in ("CPU", "ACCEL")]
    return chosen or [lib.ggml_backend_dev_by_type(0)]


def serve_rpc(host: str = "127.0.0.1", port: int = DEFAULT_RPC_PORT, threads: int | None = None,
              cache: bool = False, devices=None) -> None:
    """Serve ``devices`` (from ``rpc_server_devices``; None: its default choice) over llama.cpp's
    RPC protocol at ``host`` (a numeric IPv4 address, as llama.cpp's ``inet_addr``) and ``port``.
    Blocks while it serves; returns only when llama.cpp's server gives up (it cannot bind, or
    ``accept`` failed), having printed its own reason. ``threads``: CPU threads (default half the
    cores, as llama.cpp). ``cache``: llama.cpp's local file cache of tensors (``$LLAMA_CACHE/rpc``
    or ``~/.cache/llama.cpp/rpc``). Raises ``RpcUnavailable`` (no RPC in this build)."""
    chosen = rpc_server_devices() if devices is None else list(devices)
    cache_dir = None
    if cache:
        base = os.environ.get("LLAMA_CACHE") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llama.cpp")
        cache_dir = os.path.join(base, "rpc")
        os.makedirs(cache_dir, exist_ok=True)
    n_threads = threads or max(1, (os.cpu_count() or 2) // 2)
    start = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t,
                             ctypes.POINTER(ctypes.c_void_p))(_rpc_proc("ggml_backend_rpc_start_server"))
    arr = (ctypes.c_void_p * len(chosen))(*chosen)
    start(f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None, n_threads, len(chosen), arr)
