"""Crash safety (issue 6): a run killed mid-way leaves an autosave that opens with every complete window."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from inspector.receipts.autosave import read_autosave

COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,"


def complete_records(path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_bytes().split(b"\n"):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


WINDOWS = 3
"""Windows the child verifies before it holds (mid-way) until it is killed."""


def hold_source_package(folder) -> dict:
    """An entry-point proposal source ``hold`` for the child (its environment is returned).

    It proposes the last token at every query, so every decode step is a window, and
    after ``windows`` receipts its next query never returns: the run is mid-way, with
    every window so far written to the autosave, until the test kills the process.
    Its factory also bans end-of-generation on the target (as ``NoEndOfTurn`` in
    scenarios.py), so the run cannot end before that whatever the model answers.
    No timing: the test waits for the receipts, however long the CPU takes.
    """
    pkg = folder / "site"
    (pkg / "hold_source").mkdir(parents=True)
    (pkg / "hold_source" / "__init__.py").write_text(textwrap.dedent('''
        import os
        import threading

        import numpy as np

        from inspector.engine.proposal import Proposal


        class Hold:
            name = "hold"

            def __init__(self, windows):
                self.windows = windows
                self.reported = 0

            def propose(self, request):
                if self.reported >= self.windows:
                    if os.environ.get("HOLD_MARKER"):  # tells a test that the run now holds
                        open(os.environ["HOLD_MARKER"], "w").close()
                    threading.Event().wait()  # mid-way until killed
                return Proposal(b"hold:%d" % request.decode_step, (request.tokens[-1],))

            def report(self, receipt):
                self.reported += 1

            def discard(self, decision_id, reason):
                pass


        def make(ctx, windows="3", **options):
            rt = ctx.runtime
            real = rt.decode_rows
            eog = [t for t in range(rt.n_vocab) if rt.is_eog(t)]

            def no_end_of_turn(sid, tokens, position, abort=None):
                preds = list(real(sid, tokens, position, abort))
                for i, p in enumerate(preds):
                    if rt.is_eog(p):
                        row = np.array(rt.row_logits(i), dtype=np.float32)
                        row[eog] = -np.inf
                        preds[i] = int(np.argmax(row))
                return preds

            rt.decode_rows = no_end_of_turn
            return Hold(int(windows))
    '''))
    dist = pkg / "hold_source-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hold-source\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[spec_inspector.sources]\nhold = hold_source:make\n")
    path = os.pathsep.join(p for p in (str(pkg), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def test_a_run_killed_mid_way_leaves_an_autosave_that_view_and_the_window_open(tmp_path):
    autosave = tmp_path / "run.jsonl"
    env = hold_source_package(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-m", "inspector", "run", "--raw", "--prompt", COUNTING, "--max-tokens", "2000",
         "--n-ctx", "4096", "--source", "hold", "--source-option", f"windows={WINDOWS}", "--quiet",
         "--autosave", str(autosave)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 600  # a hang guard, not a timing: the child holds once it has them
        while sum(r.get("kind") == "receipt" for r in complete_records(autosave)) < WINDOWS:
            assert child.poll() is None, child.stderr.read().decode()
            assert time.monotonic() < deadline, f"the child wrote no {WINDOWS} receipts in 600 s"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    records = complete_records(autosave)
    windows = [r["receipt"]["window_index"] for r in records if r.get("kind") == "receipt"]
    assert windows == list(range(1, WINDOWS + 1))
    assert not any(r.get("kind") == "end" for r in records)

    # The headless viewer shows every complete window and says the run did not finish.
    run = read_autosave(autosave)
    assert not run.clean and len(run.receipts) == len(windows)
    assert run.summary().windows == len(windows)
    p = subprocess.run([sys.executable, "-m", "inspector", "view", str(autosave)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "unfinished" in p.stdout and f"windows:              {len(windows)} " in p.stdout
    assert run.text in p.stdout

    # A torn last line (killed while writing) is skipped, the rest still opens.
    with autosave.open("ab") as fh:
        fh.write(b'{"kind": "receipt", "receipt": {"window_ind')
    torn = read_autosave(autosave)
    assert len(torn.receipts) == len(windows) and torn.bad_lines == 1

    # The window opens the same file with the same windows.
    from inspector.session.record_from_file import record_from_autosave

    session = record_from_autosave(autosave)
    assert [r.window_index for r in session.receipts] == windows


def test_view_of_a_jsonl_that_is_not_an_autosave_says_so(tmp_path):
    f = tmp_path / "other.jsonl"
    f.write_text('{"a": 1}\nnot json\n')
    p = subprocess.run([sys.executable, "-m", "inspector", "view", str(f)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "not an autosave file" in p.stderr and "Traceback" not in p.stderr
