"""What the analysis actions remember in QSettings: each model's measured cost model (per model file and CPU
thread count) and the Compare window's configurations, conversation and llama-server choice.

Pure functions over a ``QSettings`` (and the ``CompareView`` whose choices they read or set); a value that
does not parse is treated as absent.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from inspector.bench.compare_result import CompareConfig
from inspector.gui.engine_thread.analysis import CostMeasured
from inspector.llama.cost_model import CostModel
from inspector.llama.model_file import weight_types_of
from inspector.prompts import TURNS_EXAMPLES

SETTINGS_GROUP = "cost_models"
"""QSettings group of the cached cost models, one JSON value per model file and CPU thread count."""


def cost_key(model_path: str, n_threads: int) -> str:
    """The cache key of a cost model: model file and CPU threads (settings keys cannot hold paths)."""
    return hashlib.sha1(f"{Path(model_path).resolve()}|{n_threads}".encode()).hexdigest()[:16]


def store_cost(settings, key: str, m: CostMeasured) -> None:
    """Remember the measured cost model ``m`` under ``key`` (``cost_key``), written to disk now."""
    settings.setValue(f"{SETTINGS_GROUP}/{key}", json.dumps({
        "row_ms": list(m.model.row_ms), "model_path": m.model_path, "n_threads": m.n_threads,
        "prompt_tokens": m.prompt_tokens}))
    settings.sync()


def stored_cost(settings, key: str) -> CostMeasured | None:
    """The cost model remembered under ``key``, or None (none, or a value that does not parse)."""
    raw = settings.value(f"{SETTINGS_GROUP}/{key}")
    try:
        d = json.loads(raw) if isinstance(raw, str) else None
        if not d or not d["row_ms"] or min(d["row_ms"]) <= 0:
            return None
        return CostMeasured(CostModel(tuple(float(x) for x in d["row_ms"])), str(d["model_path"]),
                            int(d["n_threads"]), int(d.get("prompt_tokens", 0)), weight_types_of(d["model_path"]))
    except (TypeError, ValueError, KeyError):
        return None


def save_compare(settings, view, configs, conversation=None) -> None:
    """Remember a comparison's ``configs`` (``CompareConfig``), its conversation (``(name, turns)`` or None)
    and ``view``'s llama-server choice (``save_server_choice``)."""
    settings.setValue("compare/configs", json.dumps([c.to_json() for c in configs]))
    settings.setValue("compare/conversation", "" if conversation is None else conversation[0])
    save_server_choice(settings, view)


def save_server_choice(settings, view) -> None:
    """Remember "also through llama-server" and its path or URL (as typed or chosen) of ``view`` (None: nothing)."""
    if view is not None:
        settings.setValue("compare/llama_server", view.server_target.text().strip())
        settings.setValue("compare/with_llama_server", view.with_server.isChecked())


def restore_compare(settings, view) -> None:
    """Set ``view`` (a ``CompareView``) to the remembered configurations, llama-server choice and conversation (a
    conversation file since removed is not offered)."""
    raw = settings.value("compare/configs")
    target = settings.value("compare/llama_server")
    if isinstance(target, str):
        view.server_target.setText(target)
    view.with_server.setChecked(str(settings.value("compare/with_llama_server")).lower() == "true")
    try:
        items = json.loads(raw) if isinstance(raw, str) else None
        if items:
            view.set_configs([CompareConfig(str(d["label"]), str(d["source"]), int(d["draft_max"]),
                                            dict(d.get("options") or {})) for d in items])
    except (TypeError, ValueError, KeyError):
        pass
    chosen = settings.value("compare/conversation")
    if isinstance(chosen, str) and chosen and (chosen in TURNS_EXAMPLES or os.path.isfile(chosen)):
        view.choose_conversation(chosen)
