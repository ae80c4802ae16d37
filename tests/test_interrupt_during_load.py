"""Issue 37, 10: Ctrl-C or SIGHUP while the model loads, or while the command line still imports,
ends the command with one line and 128 + the signal's number (it used to be swallowed inside
llama.cpp's log callback, "Exception ignored on calling ctypes callback function", and the run went
on to exit 0; in the imports it was a KeyboardInterrupt traceback).

Real processes and signals, the real bundled model. To hit the load, the child's llama.cpp log
(Python logging, ``inspector.llama.cpp``) gets a handler that, at the load's first lines, leaves a
marker file and holds for a while inside llama.cpp's callback: the test signals then. No timing."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

RUN = ["run", "--prompt", "Count to ten.", "--max-tokens", "8", "--threads", "1"]

HOLD_IN_LOAD = """
import logging, pathlib, runpy, sys, time
marker = pathlib.Path(sys.argv.pop(1))
class Hold(logging.Handler):
    def emit(self, record):
        if "Dumping metadata" in record.getMessage() and not marker.exists():
            marker.touch()
            end = time.monotonic() + 3
            while time.monotonic() < end:  # inside llama.cpp's log callback, mid-load
                time.sleep(0.05)
log = logging.getLogger("inspector.llama.cpp")
log.setLevel(logging.DEBUG)
log.propagate = False
log.addHandler(Hold())
runpy.run_module("inspector", run_name="__main__")
"""


def finish(child):
    try:
        return child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()


def assert_one_interrupted_line(err, name):
    assert "Traceback" not in err and "Exception ignored" not in err and "KeyboardInterrupt" not in err, err
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith(("loading ", "import time:"))]
    assert lines == [f"spec-inspector: error: interrupted ({name}); nothing was written"], err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_a_signal_while_the_model_loads_ends_the_command(tmp_path, sig):
    marker = tmp_path / "in-load"
    child = subprocess.Popen([sys.executable, "-c", HOLD_IN_LOAD, str(marker), *RUN],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300  # a hang guard, not a timing
    while not marker.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    child.send_signal(sig)
    out, err = finish(child)
    assert child.returncode == 128 + sig, err
    assert out == ""  # nothing generated: the load was cancelled
    assert_one_interrupted_line(err, sig.name)


def test_ctrl_c_while_the_command_imports_is_one_line():
    # -X importtime writes a line per finished import: numpy's means the package is mid-import.
    child = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "inspector", *RUN],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in child.stderr:
        seen.append(line)
        if "numpy" in line:
            break
    child.send_signal(signal.SIGINT)
    out, err = finish(child)
    assert child.returncode == 130, "".join(seen) + err
    assert_one_interrupted_line(err, "SIGINT")
