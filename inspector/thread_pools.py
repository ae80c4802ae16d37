"""No thread pool of ours competes with llama.cpp's threads (issue 24).

numpy's BLAS (OpenBLAS) starts its own pool of as many threads as cores at its first matrix
call (the probability figures' row sums are one) and those threads spin after each call, on the
cores llama.cpp's threads decode on: verification ran 1.4x slower here (LLAMA_CPP_NOTES "Threads
that fight llama.cpp's"). ``limit_thread_pools`` caps every BLAS pool loaded in this process at one
thread, with threadpoolctl (the well-kept library for native thread pools); the
package calls it when it is imported, so every entry point (command line, window, bench, the
RPC child process, tests) runs with it. Our numpy work is small per call: one thread loses
nothing there. OpenMP is left alone: llama.cpp's own threads are an OpenMP pool.
"""

from __future__ import annotations

import numpy  # noqa: F401  (loads numpy's BLAS, so its pool can be limited now)
from threadpoolctl import threadpool_info, threadpool_limits

LIMIT = 1
"""Threads per BLAS pool."""


def limit_thread_pools() -> None:
    """Cap the BLAS thread pools loaded so far at ``LIMIT`` threads (process wide, kept). A BLAS
    loaded later (scipy's own) needs another call."""
    threadpool_limits(limits=LIMIT, user_api="blas")


def thread_pools() -> list[dict]:
    """threadpoolctl's description of the native pools loaded now (``num_threads``, ``internal_api``,
    ``filepath``, ...), for checks."""
    return threadpool_info()
