"""Measured cost models kept between runs, per model file and thread count.

``spec-inspector bench`` and ``compare --cost-model`` store what they measure;
``run`` (and the registry's n-gram factory) load it so the adaptive proposal
length uses the measured c(k) table instead of the linear default. The file
is ``$XDG_CACHE_HOME/spec-inspector/cost-models.json`` (default ~/.cache), or
``$SPEC_INSPECTOR_COST_CACHE`` when set (the tests point it elsewhere).
A cost model is keyed by the model's path, size and modification time, the
number of CPU threads and where the layers run (``placement``: llama.cpp's offload
flags, e.g. ``-ngl 99 --rpc 127.0.0.1:50052``), because c(k) depends on all of them.
The window's Cost model tab stores its measurements here too.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from inspector.llama.cost_model import CostModel


def cache_file() -> Path:
    override = os.environ.get("SPEC_INSPECTOR_COST_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spec-inspector" / "cost-models.json"


def placement(runtime) -> str:
    """Where ``runtime``'s layers run, as llama.cpp flags ("" = llama.cpp's defaults, this machine)."""
    offload = getattr(runtime, "offload", None)
    return " ".join(offload.flags()) if offload is not None and not offload.default else ""


def _key(model_path: str | os.PathLike, n_threads: int, where: str = "") -> str:
    p = Path(model_path).resolve()
    try:
        st = p.stat()
        stamp = f"{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        stamp = "?"
    return f"{p}|{stamp}|threads={int(n_threads)}" + (f"|{where}" if where else "")


def _read() -> dict:
    try:
        data = json.loads(cache_file().read_text("utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def load_cost_model(model_path: str | os.PathLike, n_threads: int, where: str = "") -> CostModel | None:
    """The cost model stored for this model file, thread count and placement (``placement``), or None."""
    entry = _read().get(_key(model_path, n_threads, where))
    if not isinstance(entry, dict) or entry.get("c1_timed") != C1_TIMED:
        return None  # measured before c(1) was timed after plain steps: 25-40% high on the bundled model
    try:
        row_ms = tuple(float(v) for v in entry["row_ms"])
    except (TypeError, KeyError, ValueError):
        return None
    if not row_ms or any(v <= 0 for v in row_ms):
        return None
    cm = CostModel(row_ms)
    return None if cm.disturbed() else cm


C1_TIMED = "after plain steps"
"""How the stored c(1) was timed (``measure_cost_model``: after ``PLAIN_LEAD_STEPS`` one-row decodes). Entries
without it were timed right after the widest batch and are not loaded: their c(1) was 25-40% high on the
bundled model, so every speedup they predicted was too."""

MIN_ROWS_STORED = 8
"""Cost models measured over fewer batch sizes (quick checks) are not stored."""


def store_cost_model(model_path: str | os.PathLike, n_threads: int, cost_model: CostModel,
                     where: str = "") -> Path | None:
    """Store ``cost_model`` for this model file and thread count; returns the file,
    or None when it is too small to keep (fewer than ``MIN_ROWS_STORED`` batch
    sizes), looks disturbed (``CostModel.disturbed``), or cannot be written (the
    cache is a convenience, never an error)."""
    if len(cost_model.row_ms) < MIN_ROWS_STORED or cost_model.disturbed():
        return None
    data = _read()
    data[_key(model_path, n_threads, where)] = {"row_ms": list(cost_model.row_ms), "c1_timed": C1_TIMED,
                                                "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    f = cache_file()
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1), "utf-8")
        os.replace(tmp, f)
    except OSError:
        return None
    return f


def stored_row_costs(runtime) -> tuple[float, ...] | None:
    """The stored c(k) (ms per batch of k rows) for ``runtime``'s model file and thread
    count, or None: what ``SourceContext.row_costs`` carries to the n-gram source."""
    path = getattr(runtime, "model_path", None)
    cm = load_cost_model(path, runtime.n_threads, placement(runtime)) if path else None
    return tuple(cm.row_ms) if cm is not None else None

