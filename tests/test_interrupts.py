"""Issue 25, family 1: an interrupted run (SIGINT, SIGTERM) keeps the receipts of every complete window.

Real processes, real signals, the real bundled model. The child runs the ``hold`` source of
``test_crash_safety`` (every decode step a window; after N windows its next query never returns),
so the run is mid-way, with N complete windows, when the test signals it. No timing, and never
the model's words: the test waits for the autosave to hold N receipts, however long that takes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from inspector.receipts import load_document
from test_crash_safety import COUNTING, WINDOWS, complete_records, hold_source_package


def hold_env(tmp_path):
    env = hold_source_package(tmp_path)
    env["HOLD_MARKER"] = str(tmp_path / "holding")
    return env


def start_hold_run(tmp_path, *extra, command=("--raw", "--prompt", COUNTING)):
    return subprocess.Popen(
        [sys.executable, "-m", "inspector", "run", *command, "--max-tokens", "2000",
         "--n-ctx", "4096", "--threads", "1", "--source", "hold", "--source-option", f"windows={WINDOWS}",
         "--quiet", *map(str, extra)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=hold_env(tmp_path), text=True)


def wait_until_holding(child, tmp_path):
    """Wait until the hold source holds: WINDOWS complete windows, the run mid-way."""
    deadline = time.monotonic() + 600  # a hang guard, not a timing
    while not (tmp_path / "holding").exists():
        assert child.poll() is None, child.stderr.read()
        assert time.monotonic() < deadline, "the child did not reach its hold in 600 s"
        time.sleep(0.05)


def finish(child):
    try:
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    return out, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_run_writes_the_complete_windows_marked_interrupted(tmp_path, sig):
    receipts, autosave = tmp_path / "out" / "r.json", tmp_path / "run.jsonl"
    child = start_hold_run(tmp_path, "--receipts", receipts, "--autosave", autosave)
    wait_until_holding(child, tmp_path)
    child.send_signal(sig)
    out, err = finish(child)
    assert child.returncode == 128 + sig, err
    assert "Traceback" not in err
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith("loading ")]
    assert len(lines) == 1, err
    assert "interrupted" in lines[0] and str(receipts) in lines[0] and str(autosave) in lines[0]
    doc = load_document(receipts)
    assert [w["window_index"] for w in doc["windows"]] == list(range(1, WINDOWS + 1))
    assert doc["output"]["ended_as"] == "interrupted"
    assert doc["output"]["finish_reason"] is None
    assert doc["summary"]["windows"] == WINDOWS
    # The autosave keeps reading as unfinished (no end line).
    assert not any(r.get("kind") == "end" for r in complete_records(autosave))


def test_an_interrupt_without_receipts_says_nothing_was_written_and_where_the_autosave_is(tmp_path):
    autosave = tmp_path / "run.jsonl"
    child = start_hold_run(tmp_path, "--autosave", autosave)
    wait_until_holding(child, tmp_path)
    child.send_signal(signal.SIGINT)
    out, err = finish(child)
    assert child.returncode == 130
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith("loading ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(autosave) in lines[0] and "--receipts" in lines[0]


def test_ctrl_c_during_start_up_is_one_line(tmp_path):
    child = start_hold_run(tmp_path, "--receipts", tmp_path / "r.json")
    first = child.stderr.readline()  # "loading MODEL ...": the model loads now
    assert first.startswith("loading "), first
    child.send_signal(signal.SIGINT)
    out, err = finish(child)
    assert child.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and "interrupted" in lines[0], err


def test_an_interrupted_conversation_keeps_its_turns_so_far(tmp_path):
    turns = tmp_path / "turns.txt"
    turns.write_text(f"{COUNTING}\n---\nAgain.\n")
    receipts = tmp_path / "c.json"
    child = start_hold_run(tmp_path, "--receipts", receipts, command=("--turns", turns))
    wait_until_holding(child, tmp_path)
    child.send_signal(signal.SIGTERM)
    out, err = finish(child)
    assert child.returncode == 143, err
    assert "Traceback" not in err
    assert str(receipts) in err
    doc = load_document(receipts)
    assert doc["kind"] == "conversation" and len(doc["turns"]) == 1
    assert [w["window_index"] for w in doc["turns"][0]["windows"]] == list(range(1, WINDOWS + 1))
    assert doc["turns"][0]["output"]["ended_as"] == "interrupted"
    assert "interrupted" in doc["conversation"]["stopped_at"]
