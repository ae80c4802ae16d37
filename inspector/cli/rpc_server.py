"""The ``rpc-server`` command (issue 14; its lines, issue 25): llama.cpp's RPC server for this
machine's devices, checked before it starts.

llama.cpp's ``rpc-server`` (``tools/rpc/rpc-server.cpp`` and ``ggml-rpc/transport.cpp`` of the
llama.cpp that llama-cpp-python 0.3.36 vendors) binds ``inet_addr(host)``: a numeric IPv4 address
only, and only warns for a host other than 127.0.0.1. Its protocol has no authentication, so here
an address beyond loopback needs ``--expose``. Before "serving on" is printed: the host is an IPv4
address, of this machine, the port is free, and the devices exist. The server runs in a thread
that never takes the interrupt signals, so SIGINT/SIGTERM/SIGHUP reach the main thread, which ends
the process with one "stopped" line and 128 + the signal's number.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import signal
import socket
import sys
import threading

from inspector.cli.interrupt import INTERRUPT_SIGNALS, Interrupted
from inspector.cli.ranges import THREADS
from inspector.engine.llama_settings import THREADS_MAX
from inspector.llama.devices import DEFAULT_RPC_PORT, SECURITY_WARNING, RpcUnavailable, rpc_server_devices, serve_rpc

PROG = "spec-inspector rpc-server"
EXPOSE_HELP = ("allow --host beyond loopback (0.0.0.0 or an address of a network interface). This exposes "
               "this machine's devices (CPU/GPU memory and compute) to everyone who can reach the port: "
               "llama.cpp's RPC protocol has no authentication and is not secure; use only on a private network")


class BindRefused(Exception):
    """``--host``/``--port`` cannot be served: one line, and the exit status (2: the address is not
    usable as given, 1: the port is taken now)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def add_command(sub) -> None:
    """Add the ``rpc-server`` command to the subcommands ``sub``."""
    rs = sub.add_parser("rpc-server", help="serve this machine's CPU (or GPU) to other machines over llama.cpp's RPC",
                        description="Run llama.cpp's RPC server (the ggml RPC backend's own server, as llama.cpp's "
                                    "rpc-server tool does) so another machine can offload layers here with "
                                    "--rpc HOST:PORT. The protocol has no authentication: it binds 127.0.0.1 "
                                    "unless --host names another address and --expose confirms it.")
    rs.add_argument("--host", "-H", default="127.0.0.1",
                    help="numeric IPv4 address to bind to, as llama.cpp's rpc-server; beyond 127.x.x.x "
                         "only with --expose [127.0.0.1]")
    rs.add_argument("--expose", action="store_true", help=EXPOSE_HELP)
    rs.add_argument("--port", "-p", type=int, default=DEFAULT_RPC_PORT, help=f"port, 1..65535 [{DEFAULT_RPC_PORT}]")
    rs.add_argument("--threads", "-t", type=THREADS, default=None, metavar="N",
                    help=f"CPU threads for the CPU device (0..{THREADS_MAX}, ggml's limit) [0 = half the cores, as "
                         "llama.cpp]")
    rs.add_argument("--device", "-d", default="", metavar="DEV1,DEV2",
                    help="devices to serve (names from spec-inspector devices) [the GPUs, else the CPU]")
    rs.add_argument("--cache", "-c", action="store_true",
                    help="keep received tensors in llama.cpp's local file cache ($LLAMA_CACHE/rpc)")


def check_bind(host: str, port: int, expose: bool) -> ipaddress.IPv4Address:
    """The address ``host`` if llama.cpp's RPC server can bind ``host:port`` now. Raises
    ``BindRefused``: not a numeric IPv4 address (llama.cpp's ``inet_addr`` rule), beyond loopback
    without ``expose``, not an address of this machine, the port in use or privileged."""
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        address = None
    if address is None or address.is_multicast or address == ipaddress.IPv4Address("255.255.255.255"):
        raise BindRefused(f"--host {host} is not a valid IPv4 address to bind to (llama.cpp's RPC server takes a "
                          f"numeric IPv4 address of this machine, e.g. 127.0.0.1, or 0.0.0.0 with --expose)")
    if not address.is_loopback and not expose:
        raise BindRefused(f"--host {host} binds beyond this machine ({'every network interface' if address.is_unspecified else 'a network interface'}) "
                          f"and llama.cpp's RPC has no authentication: anyone who reaches port {port} can use this "
                          f"machine's devices; add --expose to confirm, or keep --host 127.0.0.1")
    if not 0 < port < 65536:
        raise BindRefused(f"--port must be 1..65535, observed {port}")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as llama.cpp's create_server
        s.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise BindRefused(f"{host}:{port} is in use (another RPC server?); choose another --port", 1) from None
        if exc.errno == errno.EADDRNOTAVAIL:
            mine = ", ".join(local_ipv4_addresses()) or "none found"
            raise BindRefused(f"--host {host} is not an address of this machine (its IPv4 addresses: {mine}; "
                              f"0.0.0.0 with --expose binds them all)") from None
        if exc.errno == errno.EACCES:
            raise BindRefused(f"--port {port} needs privileges here (ports below 1024); choose --port 1024..65535") from None
        raise BindRefused(f"cannot bind {host}:{port}: {exc.strerror or exc}", 1) from None
    finally:
        s.close()
    return address


def local_ipv4_addresses() -> list[str]:
    """This machine's IPv4 addresses, loopback first (Linux: each interface's address by
    ``SIOCGIFADDR``; elsewhere the host name's addresses and the address of the default route).
    Never raises; an empty list when none can be found."""
    found: list[str] = []
    try:
        import fcntl
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _, name in socket.if_nameindex():
                try:
                    req = struct.pack("256s", name.encode()[:15])
                    found.append(socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24]))  # SIOCGIFADDR
                except OSError:  # an interface without an IPv4 address
                    pass
    except (ImportError, OSError, AttributeError):
        pass
    if not found:
        try:
            found += socket.gethostbyname_ex(socket.gethostname())[2]
        except OSError:
            pass
        primary = _default_route_address()
        if primary:
            found.append(primary)
    unique = list(dict.fromkeys(found))
    return sorted(unique, key=lambda a: not ipaddress.IPv4Address(a).is_loopback)


def _default_route_address() -> str | None:
    """The address this machine sends from to the outside (a UDP ``connect`` sends no packet)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: never routed further, only looked up
            return s.getsockname()[0]
    except OSError:
        return None


def client_address(address: ipaddress.IPv4Address) -> str:
    """The address a client gives ``--rpc`` for a server bound to ``address``: the address itself,
    or for 0.0.0.0 this machine's address on its default route (else its first non-loopback
    address, else 127.0.0.1)."""
    if not address.is_unspecified:
        return str(address)
    outside = [a for a in local_ipv4_addresses() if not ipaddress.IPv4Address(a).is_loopback]
    primary = _default_route_address()
    if primary and primary in outside:
        return primary
    return outside[0] if outside else "127.0.0.1"


def cmd_rpc_server(args) -> int:
    """Serve until a signal: exit 128 + its number (130 for Ctrl-C) after one "stopped" line.
    Exit 2 with one line for a host, port or device that cannot be served as given; exit 1 when
    the port is taken, this llama.cpp has no RPC, or llama.cpp's server gives up by itself."""
    try:
        address = check_bind(args.host, args.port, args.expose)
    except BindRefused as exc:
        return _error(str(exc), exc.status)
    names = tuple(d.strip() for d in args.device.split(",") if d.strip())
    try:
        devices = rpc_server_devices(names)
    except RpcUnavailable as exc:
        return _error(str(exc), 1)
    except ValueError as exc:
        return _error(f"--device {args.device}: {exc}", 2)
    where = "this machine only" if address.is_loopback else f"EXPOSED beyond this machine: {SECURITY_WARNING}"
    print(f"{PROG}: serving on {args.host}:{args.port} (llama.cpp RPC, {where}). "
          f"Clients: --rpc {client_address(address)}:{args.port}. Ctrl+C stops it.", file=sys.stderr, flush=True)
    failure: list[BaseException] = []

    def serve() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPT_SIGNALS)  # signals go to the main thread
        try:
            serve_rpc(args.host, args.port, args.threads, args.cache, devices)
        except Exception as exc:  # noqa: BLE001 - reported by the main thread as one line
            failure.append(exc)

    server = threading.Thread(target=serve, name="llama.cpp RPC server", daemon=True)
    try:
        server.start()
        while server.is_alive():
            server.join(0.5)
    except Interrupted as exc:
        print(f"{PROG}: stopped ({exc.name})", file=sys.stderr, flush=True)
        sys.stdout.flush()
        # llama.cpp's server thread may be mid-request: leave without the interpreter's and the C
        # library's exit handlers, which would free the backends under it.
        os._exit(exc.status)
    reason = f": {failure[0]}" if failure else " (see llama.cpp's line above)"
    return _error(f"llama.cpp's RPC server at {args.host}:{args.port} stopped by itself{reason}", 1)


def _error(message: str, status: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return status
