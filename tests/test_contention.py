"""Contention the run measured is said, with the figures and the likely fix (issue 36, 6).

Pure: the share of other processes from two clock readings, ``/proc/stat``'s busy time, the note's
rules. Real: a run of the bundled model while two other processes spin on this machine's cores says
so (the CLI's stderr and the window's banner); the spinners are bounded in time."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from inspector.session.contention import (CpuClock, contention_note, machine_busy_seconds, median_plain_step_ms,
                                          others_cpu_share)
from inspector.engine.records import LockOperation

SPIN = "import time\nend = time.monotonic() + 60\nwhile time.monotonic() < end: pass\n"


def test_other_processes_share_is_the_machines_busy_time_but_our_own_over_wall_time_and_cores():
    a = CpuClock(wall_s=100.0, own_cpu_s=10.0, busy_s=500.0)
    b = CpuClock(wall_s=102.0, own_cpu_s=12.0, busy_s=504.0)  # 4 busy s in 2 s on 2 cores, 2 of them ours
    assert others_cpu_share(a, b, cores=2) == pytest.approx(0.5)
    assert others_cpu_share(a, CpuClock(102.0, 14.0, 504.0), cores=2) == 0.0
    assert others_cpu_share(a, CpuClock(100.1, 10.1, 500.2), cores=2) is None  # too short to tell
    assert others_cpu_share(CpuClock(0.0, 0.0, None), b, cores=2) is None


def test_busy_seconds_leave_out_idle_and_iowait(tmp_path):
    import os
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal: busy = 100+0+50+0+10+40 = 200 ticks
    stat.write_text("cpu  100 0 50 700 30 0 10 40 0 0\ncpu0 1 2 3\n")
    assert machine_busy_seconds(str(stat)) == pytest.approx(200 / os.sysconf("SC_CLK_TCK"))
    assert machine_busy_seconds(str(tmp_path / "missing")) is None


def test_the_note_names_the_figures_and_the_fix_and_stays_quiet_below_the_limits():
    assert contention_note(0.1, 10.0, 9.0, n_threads=2, cores=2) == ""
    assert contention_note(None, None, None, n_threads=2, cores=2) == ""
    busy = contention_note(0.48, None, None, n_threads=2, cores=2)
    assert busy == ("Contention: other processes used 48% of this machine's 2 cores during the run. "
                    "Likely fix: close the other process, or run with fewer threads (-t 1; now 2).")
    slow = contention_note(None, 31.4, 9.8, n_threads=1, cores=2)
    assert slow == ("Contention: plain steps took 3.2x the cost model's (31.4 ms against c(1) 9.8 ms measured on "
                    "a quiet machine). Likely fix: close the other process.")


def test_the_median_plain_step_is_taken_from_step_holds_only():
    ops = [LockOperation("step", 0, 0, 0, 10_000), LockOperation("verify", 0, 0, 0, 90_000),
           LockOperation("step", 0, 0, 0, 30_000), LockOperation("step", 0, 0, 0, 20_000)]
    assert median_plain_step_ms(ops) == 20.0
    assert median_plain_step_ms(ops[1:2]) is None


@pytest.fixture
def spinners():
    """Two processes spinning on this machine's cores (at most 60 s each; killed after the test)."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(2)]
    time.sleep(0.3)
    yield
    for p in procs:
        p.kill()
        p.wait()


def test_a_run_beside_two_spinning_processes_says_contention_on_the_command_line(spinners, tmp_path):
    r = subprocess.run([sys.executable, "-m", "inspector", "run", "--example", "copy-exact", "-n", "24", "--quiet",
                        "--receipts", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Contention: other processes used" in r.stderr and "Likely fix: close the other process" in r.stderr


def test_a_run_beside_two_spinning_processes_says_contention_in_the_banner(spinners, qtbot, runtime, tmp_path):
    from test_gui_support import make_window

    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    model = w.model
    with qtbot.waitSignal(model.runFinished, timeout=120_000):
        model.commands.run()
    assert model.session.end.others_cpu_share >= 0.25
    assert "<br>Slow: Contention: other processes used" in model.banner_html
    assert "Likely fix: close the other process" in model.banner_tip


def test_a_lock_operation_writes_every_field_it_has():
    import dataclasses

    op = LockOperation("step", 3, 10, 20, 30)
    assert op.to_json() == dataclasses.asdict(op) == {"kind": "step", "session_id": 3, "started_us": 10,
                                                      "wait_us": 20, "hold_us": 30}
