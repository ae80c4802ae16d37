"""Is another process taking the CPU from llama.cpp? Measured from the run itself (issue 36, 6).

Two llama.cpp processes on a 2-core machine slow each other 10-30x; a user sees verify times of
seconds and 5 tok/s where 52 were expected, and nothing says why. Two measurements of the run answer it:

- **other processes' CPU share**: over the run, the machine's busy CPU time (Linux ``/proc/stat``:
  every state but idle and iowait) minus this process's own (``os.times``), as a share of the
  run's wall time x the cores: ``CpuClock`` readings at the start and the end (no work on the decode
  path);
- **plain steps against the cost model**: the run's median plain step (its ``step`` lock holds)
  against the stored cost model's c(1) for this model and thread count, measured on a quiet machine.

``contention_note`` turns them into one line with the likely fix (close the other process, or fewer
threads) and the measured figures; "" when neither shows contention.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from statistics import median

from inspector.llama.cost_cache import load_cost_model

OTHERS_SHARE_LIMIT = 0.25
"""Other processes' share of the machine's CPU above which the run is called contended."""
STEP_RATIO_LIMIT = 2.0
"""Median plain step / the cost model's c(1) above which the run is called contended."""
PROC_STAT = "/proc/stat"


@dataclass(frozen=True)
class CpuClock:
    """One reading: wall seconds (monotonic), this process's CPU seconds (every thread, user + system),
    the machine's busy CPU seconds (None where ``/proc/stat`` is not readable)."""

    wall_s: float
    own_cpu_s: float
    busy_s: float | None


def machine_busy_seconds(path: str = PROC_STAT) -> float | None:
    """CPU seconds every core spent in any state but idle and iowait since boot (``/proc/stat``'s
    ``cpu`` line, in clock ticks), or None when it cannot be read."""
    try:
        with open(path, encoding="ascii") as f:
            fields = f.readline().split()
        ticks = [int(v) for v in fields[1:]]
        idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
        return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def cpu_clock() -> CpuClock:
    """Read the clocks now (a few microseconds: at a run's start and end, never per step)."""
    t = os.times()
    return CpuClock(time.monotonic(), t.user + t.system, machine_busy_seconds())


def others_cpu_share(start: CpuClock, end: CpuClock, cores: int | None = None) -> float | None:
    """Other processes' share (0..1) of the machine's CPU between two readings: (busy - own) CPU seconds
    / (wall seconds x ``cores``, default every core); None without ``/proc/stat`` or under 0.2 s."""
    wall = end.wall_s - start.wall_s
    if start.busy_s is None or end.busy_s is None or wall < 0.2:
        return None
    others = (end.busy_s - start.busy_s) - (end.own_cpu_s - start.own_cpu_s)
    return min(1.0, max(0.0, others / (wall * (cores or os.cpu_count() or 1))))


def median_plain_step_ms(lock_ops) -> float | None:
    """The median time holding the lock for a plain step (ms) over ``lock_ops`` (``LockOperation``), or
    None without one."""
    holds = [op.hold_us for op in lock_ops if op.kind == "step"]
    return median(holds) / 1000.0 if holds else None


def contention_note(others_share: float | None, step_ms: float | None, c1_ms: float | None,
                    n_threads: int, cores: int | None = None) -> str:
    """One line when the run was contended (other processes took over ``OTHERS_SHARE_LIMIT`` of the CPU,
    or the median plain step ``step_ms`` ran over ``STEP_RATIO_LIMIT`` x the cost model's ``c1_ms``),
    naming the figures and the likely fix; "" otherwise."""
    cores = cores or os.cpu_count() or 1
    busy = others_share is not None and others_share >= OTHERS_SHARE_LIMIT
    slow = step_ms is not None and c1_ms is not None and c1_ms > 0 and step_ms >= STEP_RATIO_LIMIT * c1_ms
    if not (busy or slow):
        return ""
    seen = []
    if busy:
        seen.append(f"other processes used {100 * others_share:.0f}% of this machine's {cores} cores during the run")
    if slow:
        seen.append(f"plain steps took {step_ms / c1_ms:.1f}x the cost model's ({step_ms:.1f} ms against c(1) "
                    f"{c1_ms:.1f} ms measured on a quiet machine)")
    fix = "close the other process" + (f", or run with fewer threads (-t {max(1, cores - 1)}; now {n_threads})"
                                       if n_threads > 1 else "")
    return f"Contention: {'; '.join(seen)}. Likely fix: {fix}."


def run_contention_note(record, model_path, n_threads: int, where: str = "") -> str:
    """``contention_note`` for a finished live run: its ``SessionRecord`` (``end.others_cpu_share``, the
    main session's plain steps in ``lock_ops``) against the cost model stored for ``model_path``,
    ``n_threads`` and ``where`` (``cost_cache.placement``); "" when not contended or unknown."""
    end = record.end
    if end is None:
        return ""
    steps = [op for op in record.lock_ops if op.session_id == record.main_session_id]
    costs = load_cost_model(model_path, n_threads, where) if model_path else None
    return contention_note(end.others_cpu_share, median_plain_step_ms(steps),
                           costs.cost(1) if costs is not None else None, n_threads)
