"""No thread pool of ours spins beside llama.cpp's threads (issue 24): numpy's BLAS is capped at one
thread in every process that imports the package, llama.cpp's OpenMP pool is left as it was."""

from __future__ import annotations

import subprocess
import sys

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
    code = ("import inspector.cli, threadpoolctl; "
            "print(max(p['num_threads'] for p in threadpoolctl.threadpool_info() if p['user_api'] == 'blas'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
