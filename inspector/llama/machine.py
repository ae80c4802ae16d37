"""The machine a run ran on, for its receipts (``model.machine``; schema v4, issue 57): the CPU model, its logical
cores, the operating system, llama-cpp-python's version and what its llama.cpp build uses on this CPU
(``llama_print_system_info``: the instruction sets, OpenMP, the repacked weights). ``spec-inspector diff`` names
them when two runs differ in them: greedy text and speed differ between CPUs and builds.
"""

from __future__ import annotations

import functools
import os
import platform

import llama_cpp


def cpu_model() -> str:
    """The CPU's model name: Linux's ``/proc/cpuinfo`` "model name" (x86) or "Hardware"/"CPU part" lines' first
    (ARM), else ``platform.processor()``, else ``platform.machine()``; "" when nothing says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "Model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or ""


@functools.lru_cache(maxsize=1)
def machine_facts() -> dict:
    """The receipts' ``model.machine`` block (computed once per process): ``cpu``, ``logical_cores``, ``os``,
    ``llama_cpp_python`` (its version), ``llama_cpp_system_info`` (llama.cpp's own line, e.g. "CPU : SSE3 = 1 |
    AVX2 = 1 | ... | OPENMP = 1 | REPACK = 1 |")."""
    info = llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip()
    return {"cpu": cpu_model(), "logical_cores": os.cpu_count() or 0, "os": platform.platform(terse=True),
            "llama_cpp_python": getattr(llama_cpp, "__version__", ""), "llama_cpp_system_info": info}
