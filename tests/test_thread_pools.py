"""No thread pool of ours spins beside llama.cpp's threads (issue 24): numpy's BLAS is capped at one
thread in every process that imports the package, llama.cpp's OpenMP pool is left as it was."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from inspector.engine import Generation, GenerationSettings
from inspector.thread_pools import thread_pools


def test_after_a_run_with_probabilities_every_blas_pool_has_one_thread_and_llama_cpps_are_untouched(
        scheduler, chat_tokens):
    g = Generation(scheduler, None, chat_tokens("Count from one to five."),
                   GenerationSettings(max_new_tokens=4, probabilities=True))
    try:
        g.run()
    finally:
        g.close()
    assert any(e.probabilities is not None for e in g.events)  # the BLAS row sums ran
    pools = thread_pools()
    blas = [p for p in pools if p["user_api"] == "blas"]
    assert blas and all(p["num_threads"] == 1 for p in blas), blas
    # llama.cpp's OpenMP pool as a process without our package has it (not capped with numpy's).
    code = ("import llama_cpp, threadpoolctl; "
            "print(sorted(p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'openmp'))")
    alone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert alone.returncode == 0, alone.stderr
    assert str(sorted(p["num_threads"] for p in pools if p["user_api"] == "openmp")) == alone.stdout.strip()


def test_a_fresh_process_that_imports_any_entry_point_has_its_blas_capped():
    code = ("import inspector.cli.main, threadpoolctl; "
            "print(max(p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'blas'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


SPIN_CHECK = """
import os, numpy as np
import inspector
{uncap}
from inspector.engine.probabilities import summarise_rows

def cpu_ticks():
    out = {{}}
    for tid in os.listdir("/proc/self/task"):
        fields = open(f"/proc/self/task/{{tid}}/stat").read().rsplit(")", 1)[1].split()
        out[int(tid)] = int(fields[11]) + int(fields[12])  # utime + stime
    return out

x = (np.random.default_rng(0).standard_normal((17, 49152)) * 3).astype(np.float32)
before = cpu_ticks()
for _ in range(300):
    summarise_rows(x, list(range(16)), x.argmax(axis=1).tolist(), kernel={kernel})
after = cpu_ticks()
me = os.getpid()
print(after[me] - before.get(me, 0), sum(v - before.get(t, 0) for t, v in after.items() if t != me))
"""


def _spin_ticks(uncap: str = "", kernel: bool = True) -> tuple[int, int]:
    """(the calling thread's CPU ticks, every other thread's) over 300 summaries of a 17-row window, in a fresh
    process; ``kernel``: the C kernel sums them (False: numpy, whose dot products are BLAS's)."""
    out = subprocess.run([sys.executable, "-c", SPIN_CHECK.format(uncap=uncap, kernel=kernel)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    main, others = (int(v) for v in out.stdout.split())
    return main, others


def test_probability_figures_burn_no_cpu_on_any_thread_but_the_callers():
    """The CPU time of every other thread of the process while 300 17-row summaries run, as a share of
    the calling thread's (a ratio in one process, not a timed threshold): spinning BLAS threads take
    a core from llama.cpp's next decode. Both paths: the C kernel's and numpy's (a build without the kernel)."""
    for kernel in (True, False):
        main, others = _spin_ticks(kernel=kernel)
        assert main > 0
        assert others <= 0.05 * main, f"kernel={kernel}: other threads used {others} ticks beside the caller's {main}"


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: no second BLAS thread to spin")
def test_the_spin_check_sees_a_blas_pool_that_was_not_capped():
    """The check above can fail: with numpy's BLAS let loose on two threads, the other thread burns CPU."""
    main, others = _spin_ticks("from threadpoolctl import threadpool_limits; "
                               "threadpool_limits(limits=2, user_api='blas')", kernel=False)
    assert others > 0.05 * main
