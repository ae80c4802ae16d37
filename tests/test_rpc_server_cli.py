"""``spec-inspector rpc-server``'s lines (issue 25, item 7): a host that is no address says so (not
"in use"), an unknown device is refused before "serving on", binding beyond loopback needs
``--expose`` and the hint names this machine's address (never 0.0.0.0), and Ctrl-C (SIGINT) or
SIGTERM stop the server with one "stopped" line, not an error. Real processes, real signals."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from inspector.llama.devices import rpc_supported

needs_rpc = pytest.mark.skipif(not rpc_supported(), reason="this llama-cpp-python has no RPC backend")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rpc_server(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "inspector", "rpc-server", "--threads", "1", *args],
                          capture_output=True, text=True, timeout=timeout)


def start(*args: str, port: int) -> tuple[subprocess.Popen, object]:
    """A server with its output in a file; returns once 127.0.0.1:port accepts."""
    log = tempfile.TemporaryFile(mode="w+")
    p = subprocess.Popen([sys.executable, "-m", "inspector", "rpc-server", "--threads", "1", "--port", str(port),
                          *args], stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if p.poll() is not None:
            log.seek(0)
            raise AssertionError(f"rpc-server exited with {p.returncode}: {log.read()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return p, log
        except OSError:
            time.sleep(0.2)
    p.kill()
    raise AssertionError("rpc-server did not accept connections within 90 s")


def stop(p: subprocess.Popen, log, signum: int) -> tuple[int, str]:
    p.send_signal(signum)
    try:
        status = p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    log.seek(0)
    return status, log.read()


@pytest.mark.parametrize("host", ["999.1.1.1", "not-a-host", "::1", "255.255.255.255"])
def test_a_host_that_is_not_an_ipv4_address_says_so_not_that_the_port_is_in_use(host):
    p = rpc_server("--host", host, "--port", str(free_port()))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert f"--host {host}" in lines[0] and "not a valid IPv4 address" in lines[0], lines
    assert "in use" not in p.stderr and "serving on" not in p.stderr


def test_an_address_of_another_machine_says_it_is_not_an_address_of_this_machine():
    p = rpc_server("--host", "203.0.113.77", "--expose", "--port", str(free_port()))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "203.0.113.77 is not an address of this machine" in lines[0], lines
    assert "in use" not in p.stderr and "serving on" not in p.stderr


def test_a_port_in_use_still_says_in_use():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        p = rpc_server("--port", str(port))
    assert p.returncode == 1, p.stderr
    assert f"127.0.0.1:{port} is in use" in p.stderr and "serving on" not in p.stderr


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.2", "10.0.0.1"])
def test_binding_beyond_loopback_needs_expose(host):
    p = rpc_server("--host", host, "--port", str(free_port()))
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "--expose" in lines[0] and "no authentication" in lines[0], lines
    assert "serving on" not in p.stderr


def test_the_help_of_expose_says_what_it_exposes():
    p = subprocess.run([sys.executable, "-m", "inspector", "rpc-server", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    assert "--expose" in text and "no authentication" in text


@needs_rpc
def test_an_unknown_device_is_refused_before_serving():
    p = rpc_server("--device", "NOPE", "--port", str(free_port()))
    assert p.returncode == 2, p.stderr
    assert "serving on" not in p.stderr + p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--device NOPE" in lines[0] and "CPU" in lines[0], p.stderr


@needs_rpc
@pytest.mark.parametrize("signum, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_server_with_one_stopped_line_not_an_error(signum, status):
    port = free_port()
    p, log = start(port=port)
    code, out = stop(p, log, signum)
    assert code == status, out
    assert "error" not in out.lower() and "Failed to accept" not in out and "Traceback" not in out, out
    assert f"spec-inspector rpc-server: stopped ({signal.Signals(signum).name})" in out, out


@needs_rpc
def test_a_loopback_server_is_served_without_expose_and_names_itself_for_clients():
    port = free_port()
    p, log = start(port=port)
    code, out = stop(p, log, signal.SIGINT)
    assert f"serving on 127.0.0.1:{port}" in out and f"--rpc 127.0.0.1:{port}" in out, out


@needs_rpc
def test_an_exposed_server_suggests_this_machines_address_not_0_0_0_0():
    port = free_port()
    p, log = start("--host", "0.0.0.0", "--expose", port=port)
    code, out = stop(p, log, signal.SIGINT)
    assert code == 130, out
    assert "--rpc 0.0.0.0" not in out, out
    assert f"serving on 0.0.0.0:{port}" in out and "no authentication" in out, out
    clients = [l for l in out.splitlines() if "--rpc " in l]
    assert clients, out
    suggested = clients[0].split("--rpc ", 1)[1].split(":", 1)[0]
    assert suggested != "0.0.0.0"
    socket.inet_aton(suggested)  # a real IPv4 address
