"""Crash safety (issue 6): a run killed mid-way leaves an autosave that opens with every complete window."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

from inspector.receipts.autosave import read_autosave

COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,"


def complete_records(path) -> list[dict]:
    out = []
    for line in path.read_bytes().split(b"\n"):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def test_a_run_killed_mid_way_leaves_an_autosave_that_view_and_the_window_open(tmp_path):
    autosave = tmp_path / "run.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-m", "inspector", "run", "--raw", "--prompt", COUNTING, "--max-tokens", "2000",
         "--n-ctx", "4096", "--ngram-length", "fixed", "--quiet", "--autosave", str(autosave)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if autosave.exists() and sum(r.get("kind") == "receipt" for r in complete_records(autosave)) >= 3:
                break
            assert child.poll() is None, child.stderr.read().decode()
            time.sleep(0.05)
        else:
            raise AssertionError("the child wrote no 3 receipts in 180 s")
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    records = complete_records(autosave)
    windows = [r["receipt"]["window_index"] for r in records if r.get("kind") == "receipt"]
    assert len(windows) >= 3 and windows == list(range(1, len(windows) + 1))
    assert not any(r.get("kind") == "end" for r in records)

    # The headless viewer shows every complete window and says the run did not finish.
    run = read_autosave(autosave)
    assert not run.clean and len(run.receipts) == len(windows)
    assert run.summary().windows == len(windows)
    p = subprocess.run([sys.executable, "-m", "inspector", "view", str(autosave)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "unfinished" in p.stdout and f"windows:              {len(windows)} " in p.stdout
    assert run.text and run.text in p.stdout

    # A torn last line (killed while writing) is skipped, the rest still opens.
    with autosave.open("ab") as fh:
        fh.write(b'{"kind": "receipt", "receipt": {"window_ind')
    torn = read_autosave(autosave)
    assert len(torn.receipts) == len(windows) and torn.bad_lines == 1

    # The window opens the same file with the same windows.
    from inspector.gui.session_model import SessionData

    session = SessionData.from_autosave(autosave)
    assert [r.window_index for r in session.receipts] == windows


def test_view_of_a_jsonl_that_is_not_an_autosave_says_so(tmp_path):
    f = tmp_path / "other.jsonl"
    f.write_text('{"a": 1}\nnot json\n')
    p = subprocess.run([sys.executable, "-m", "inspector", "view", str(f)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "not an autosave file" in p.stderr and "Traceback" not in p.stderr
