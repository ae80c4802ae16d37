"""Issue 37, item 3: ``run --turns ... --autosave a.jsonl`` keeps a crash-safe log of the conversation:
one file, each turn appended as it happens, which ``view`` opens turn by turn (real processes; a child
killed with SIGKILL in the middle of its second turn)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from test_crash_safety import complete_records


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "inspector", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def test_every_turn_is_appended_to_one_autosave_that_view_opens_turn_by_turn(tmp_path):
    turns, autosave = tmp_path / "t.txt", tmp_path / "a.jsonl"
    turns.write_text("Count from 1 to 20.\n---\nAgain, please.\n")
    p = cli("run", "--turns", turns, "--max-tokens", "4", "--threads", "1", "--quiet", "--autosave", autosave)
    assert p.returncode == 0, p.stderr
    assert f"autosave: {autosave} (turn 2)" in p.stdout
    headers = [r for r in complete_records(autosave) if r.get("kind") == "header"]
    assert [h["conversation"]["turn"] for h in headers] == [1, 2]
    assert [h["conversation"]["user_text"] for h in headers] == ["Count from 1 to 20.", "Again, please."]
    ends = [r for r in complete_records(autosave) if r.get("kind") == "end"]
    assert len(ends) == 2  # each turn closed cleanly

    v = cli("view", autosave)
    assert v.returncode == 0, v.stderr
    assert "conversation, 2 turn(s)" in v.stdout
    assert "turn 1: prompt" in v.stdout and "turn 2: prompt" in v.stdout and "unfinished" not in v.stdout
    v2 = cli("view", autosave, "--turn", "2", "--windows")
    assert v2.returncode == 0, v2.stderr
    assert "turn:     2 of 2 · Again, please." in v2.stdout and "finished: length" in v2.stdout
    assert cli("view", autosave, "--turn", "3").returncode == 1


HOLD = textwrap.dedent('''
    import os
    import threading

    from inspector.engine.proposal import Proposal


    class Hold:
        """Proposes the last token; the second source made (turn 2) holds at its second query until killed."""
        name = "hold"

        def __init__(self, holds):
            self.holds, self.queries = holds, 0

        def propose(self, request):
            self.queries += 1
            if self.holds and self.queries == 2:
                open(os.environ["HOLD_MARKER"], "w").close()
                threading.Event().wait()
            return Proposal(b"hold:%d" % request.decode_step, (request.tokens[-1],))

        def report(self, receipt):
            pass

        def discard(self, decision_id, reason):
            pass


    def make(ctx, **options):
        made = ctx.memory.setdefault("hold", [])  # one memory across the turns
        made.append(1)
        return Hold(len(made) == 2)
''')


def test_a_conversation_killed_in_its_second_turn_keeps_the_first_whole_and_the_second_so_far(tmp_path):
    site = tmp_path / "site"
    (site / "hold_turn").mkdir(parents=True)
    (site / "hold_turn" / "__init__.py").write_text(HOLD)
    dist = site / "hold_turn-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hold-turn\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[spec_inspector.sources]\nhold = hold_turn:make\n")
    marker, turns, autosave = tmp_path / "holding", tmp_path / "t.txt", tmp_path / "a.jsonl"
    turns.write_text("Count from 1 to 20.\n---\nAgain, please.\n---\nOnce more.\n")
    env = {**os.environ, "HOLD_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)}
    child = subprocess.Popen([sys.executable, "-m", "inspector", "run", "--turns", str(turns), "--source", "hold",
                              "--max-tokens", "4", "--threads", "1", "--quiet", "--autosave", str(autosave)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 300  # a hang guard: the child holds once turn 2 has begun
        while not marker.exists():
            assert child.poll() is None, child.stderr.read().decode()
            assert time.monotonic() < deadline, "turn 2 never began"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
        child.stderr.close()
    from inspector.session.record_from_file import records_from_autosave  # what the window opens

    first, second = records_from_autosave(autosave)
    assert not first.unfinished and first.conversation["turn"] == 1 and len(first.receipts) >= 1
    assert second.unfinished and second.conversation["turn"] == 2 and len(second.receipts) == 1
    v = cli("view", autosave)
    assert v.returncode == 0, v.stderr
    assert "conversation, 2 turn(s) of 3" in v.stdout
    lines = [line for line in v.stdout.splitlines() if line.startswith("turn ")]
    assert [line.split(":")[0] for line in lines] == ["turn 1", "turn 2"]
    assert "ended unfinished" not in lines[0] and "ended unfinished" in lines[1]
