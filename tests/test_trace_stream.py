"""Issue 37, 16: ``trace`` reads the receipts file piece by piece and writes the trace as it goes, so
its memory does not grow with the file (a 200 MB file took 4 GB); the trace is the one the whole
document gives, and a damaged file is still one line. Real processes, real files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from inspector.receipts import load_document
from inspector.receipts.trace import chrome_trace

from test_bad_inputs_37 import V1, cli, one_line


def copies_of_v1(path: Path, copies: int) -> Path:
    """The v1 document's windows, events and lock operations ``copies`` times over (each copy later on
    the clock, its windows numbered on), a valid document."""
    doc = json.loads(V1.read_text("utf-8"))
    wins, evs, ops = doc["windows"], doc["events"], doc.get("lock_operations", [])
    span = max(e["t_us"] for e in evs) + 1
    doc["windows"] = [{**w, "window_index": w["window_index"] + c * len(wins)} for c in range(copies) for w in wins]
    doc["events"] = [{**e, "t_us": e["t_us"] + c * span, "seq": e["seq"] + c * len(evs),
                      **({"window": e["window"] + c * len(wins)} if e.get("window") is not None else {})}
                     for c in range(copies) for e in evs]
    doc["lock_operations"] = [{**o, "started_us": o["started_us"] + c * span} for c in range(copies) for o in ops]
    doc["summary"]["windows"] = len(doc["windows"])
    path.write_text(json.dumps(doc))
    return path


PEAK = """
import atexit, runpy, sys
atexit.register(lambda: sys.stderr.write(next(l for l in open("/proc/self/status") if l.startswith("VmHWM"))))
runpy.run_module("inspector", run_name="__main__")
"""
"""``python -m inspector`` that says its peak resident memory as it exits (its own: the process's
``ru_maxrss`` would keep a large parent's from before ``exec``)."""


def peak_rss_of_trace(receipts: Path, out: Path) -> int:
    """The ``trace`` command's peak resident memory (bytes)."""
    p = subprocess.run([sys.executable, "-c", PEAK, "trace", str(receipts), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return int(p.stderr.split("VmHWM:")[1].split()[0]) * 1024


def test_the_trace_of_a_20_mb_file_takes_little_more_memory_than_a_small_ones(tmp_path):
    big = copies_of_v1(tmp_path / "big.json", 1800)
    size = big.stat().st_size
    assert size > 20e6
    small = peak_rss_of_trace(V1, tmp_path / "small-trace.json")
    grown = peak_rss_of_trace(big, tmp_path / "trace.json") - small
    assert grown < size, f"trace of a {size / 1e6:.0f} MB file took {grown / 1e6:.0f} MB more than of a small one"
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert sum(e["name"] == "verify" for e in trace["traceEvents"]) == trace["metadata"]["windows"] == 5 * 1800


def test_the_streamed_trace_is_the_one_of_the_whole_document(tmp_path):
    f = copies_of_v1(tmp_path / "r.json", 3)
    assert cli("trace", f, "-o", tmp_path / "t.json").returncode == 0
    assert (tmp_path / "t.json").read_text() == json.dumps(chrome_trace(load_document(f)))


def test_a_damaged_window_deep_in_the_file_is_one_line_and_no_trace(tmp_path):
    f = copies_of_v1(tmp_path / "r.json", 50)
    doc = json.loads(f.read_text())
    doc["windows"][200]["trimmed_rows"] += 1
    f.write_text(json.dumps(doc))
    line = one_line(cli("trace", f, "-o", tmp_path / "t.json"), 1)
    assert "inconsistent at windows/200" in line
    assert not (tmp_path / "t.json").exists() and not list(tmp_path.glob(".t.json*"))
