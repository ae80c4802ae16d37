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
from typing import Sequence

from inspector.llama.cost_model import CostModel, cost_model_at


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


def load_cost_model(model_path: str | os.PathLike, n_threads: int, where: str = "",
                    context: int | None = None) -> CostModel | None:
    """The cost model stored for this model file, thread count and placement (``placement``), or None.

    ``context``: the KV positions the run's windows see (its prompt and about half its output); with
    curves stored at several context lengths (``store_context_costs``: ``bench --context-lengths``) the
    model at that length (``cost_model_at``: between two stored lengths, linear per batch size; beyond
    them, the nearest one's), else the one curve stored. Every decoded row attends to every cached
    position, so c(k) at 6,000 positions is 3-4x the c(k) at 512 on the bundled model and its shape
    differs: a long prompt's windows should be chosen from its own curve."""
    curves = _stored_curves(model_path, n_threads, where)
    if not curves:
        return None
    if context is None:
        base = next((cm for length, cm, one in curves if one), None)
        return base if base is not None else curves[0][1]
    return cost_model_at([(length, cm) for length, cm, _ in curves], context)


def _stored_curves(model_path, n_threads: int, where: str) -> list[tuple[int, CostModel, bool]]:
    """The curves stored for this model, thread count and placement as ``(context length, cost model, is
    the one curve of store_cost_model)``, shortest length first; none when the entry predates
    ``C1_TIMED``. Curves that are not lists of positive numbers or look disturbed are left out."""
    entry = _read().get(_key(model_path, n_threads, where))
    if not isinstance(entry, dict) or entry.get("c1_timed") != C1_TIMED:
        return []  # measured before c(1) was timed after plain steps: 25-40% high on the bundled model
    curves = []
    base = _curve(entry.get("row_ms"))
    if base is not None:
        measured_at = entry.get("context")
        curves.append((measured_at if isinstance(measured_at, int) and measured_at > 0 else DEFAULT_MEASURED_CONTEXT,
                       base, True))
    by_context = entry.get("by_context")
    for length, row_ms in (by_context.items() if isinstance(by_context, dict) else ()):
        cm = _curve(row_ms)
        if cm is not None and str(length).isdigit() and int(length) > 0:
            curves.append((int(length), cm, False))
    return sorted(curves, key=lambda c: c[0])


def stored_context_lengths(model_path: str | os.PathLike, n_threads: int, where: str = "") -> list[int]:
    """The context lengths (KV positions) the stored curves of this model were measured after, ascending
    (the one curve's length included); empty when none is stored."""
    return sorted({length for length, _, _ in _stored_curves(model_path, n_threads, where)})


def _curve(row_ms) -> CostModel | None:
    """A stored c(k) list as a cost model, or None when it is not one or looks disturbed."""
    try:
        costs = tuple(float(v) for v in row_ms)
    except (TypeError, ValueError):
        return None
    if not costs or any(v <= 0 for v in costs):
        return None
    cm = CostModel(costs)
    return None if cm.disturbed() else cm


DEFAULT_MEASURED_CONTEXT = 64
"""KV positions a stored curve without a ``context`` was measured after: bench and compare measure after
the first 64 tokens of a bundled example's prompt."""


C1_TIMED = "after plain steps"
"""How the stored c(1) was timed (``measure_cost_model``: after ``PLAIN_LEAD_STEPS`` one-row decodes). Entries
without it were timed right after the widest batch and are not loaded: their c(1) was 25-40% high on the
bundled model, so every speedup they predicted was too."""

MIN_ROWS_STORED = 8
"""Cost models measured over fewer batch sizes (quick checks) are not stored."""


def store_cost_model(model_path: str | os.PathLike, n_threads: int, cost_model: CostModel,
                     where: str = "", context: int | None = None) -> Path | None:
    """Store ``cost_model`` for this model file and thread count (measured after ``context`` positions,
    ``DEFAULT_MEASURED_CONTEXT`` when not given); returns the file, or None when it is too small to keep
    (fewer than ``MIN_ROWS_STORED`` batch sizes), looks disturbed (``CostModel.disturbed``), or cannot
    be written (the cache is a convenience, never an error). Curves stored by context length
    (``store_context_costs``) are kept."""
    if len(cost_model.row_ms) < MIN_ROWS_STORED or cost_model.disturbed():
        return None
    data = _read()
    key = _key(model_path, n_threads, where)
    old = data.get(key) if isinstance(data.get(key), dict) and data[key].get("c1_timed") == C1_TIMED else {}
    data[key] = {**old, "row_ms": list(cost_model.row_ms), "c1_timed": C1_TIMED,
                 "context": int(context or DEFAULT_MEASURED_CONTEXT),
                 "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    return _write(data)


def store_context_costs(model_path: str | os.PathLike, n_threads: int,
                        curves: Sequence[tuple[int, CostModel]], where: str = "") -> Path | None:
    """Store c(k) measured after each context length (``(positions, cost model)`` pairs, e.g. from
    ``inspector.bench.context_costs.cost_by_context``) beside the model's one curve, replacing curves of
    the same lengths; ``load_cost_model(..., context=N)`` reads them. Curves that are too small or look
    disturbed are left out. Returns the file, or None when nothing was stored."""
    kept = {str(int(n)): list(cm.row_ms) for n, cm in curves
            if len(cm.row_ms) >= MIN_ROWS_STORED and not cm.disturbed()}
    if not kept:
        return None
    data = _read()
    key = _key(model_path, n_threads, where)
    entry = data.get(key) if isinstance(data.get(key), dict) and data[key].get("c1_timed") == C1_TIMED else {}
    by_context = entry.get("by_context") if isinstance(entry.get("by_context"), dict) else {}
    data[key] = {**entry, "c1_timed": C1_TIMED, "by_context": {**by_context, **kept},
                 "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    return _write(data)


def _write(data: dict) -> Path | None:
    f = cache_file()
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1), "utf-8")
        os.replace(tmp, f)
    except OSError:
        return None
    return f


def stored_row_costs(runtime, context: int | None = None) -> tuple[float, ...] | None:
    """The stored c(k) (ms per batch of k rows) for ``runtime``'s model file and thread
    count, at ``context`` KV positions when given (``load_cost_model``), or None: what
    ``SourceContext.row_costs`` carries to the n-gram source."""
    path = getattr(runtime, "model_path", None)
    cm = load_cost_model(path, runtime.n_threads, placement(runtime), context) if path else None
    return tuple(cm.row_ms) if cm is not None else None
