"""llama.cpp's context settings in the runtime: ``ContextSettings``, the typed object made from their
declarations (``inspector.engine.llama_settings.CONTEXT``: ``-ub`` physical batch, ``-fa`` flash attention,
``-ctk``/``-ctv`` K and V cache types; llama.cpp 0c1e570 ``common/arg.cpp``, llama-server's defaults from
``common/common.h``), how they are set on a context, which combination llama.cpp refuses, how llama.cpp
settled them (its log), and the settings as a dict with the logical batch (``-b``): the window's and
QSettings' form, read back from a runtime's ``llama_cpp`` block (a receipts file's model). No Qt here.
"""

from __future__ import annotations

import re

from inspector.engine.llama_settings import (CONTEXT, UNQUANTIZED, context_object_settings, server_flag_args,
                                            settings_class)
from inspector.llama.model_file import ModelFileError


class ContextRules:
    """The methods of ``ContextSettings`` (its fields come from the declarations)."""

    def __post_init__(self) -> None:
        """Check each field with its declaration (``Setting.check``); raises ``ValueError`` (one line)."""
        for s in context_object_settings():
            s.check(getattr(self, s.name))

    def refusal(self) -> str:
        """Why llama.cpp would refuse this combination (its rule in ``llama_init_from_model``), or ""."""
        if self.type_v not in UNQUANTIZED and self.flash_attn == "off":
            return (f"a quantized V cache (-ctv {self.type_v}) needs flash attention, observed -fa off "
                    "(expected -fa on or auto, or -ctv f16)")
        return ""

    def apply(self, cparams) -> None:
        """Set these on llama.cpp's ``llama_context_params`` (each declaration's ``cparam``, a choice as
        its code); ``n_ubatch`` is capped at its ``n_batch``, as llama.cpp does (``llama_context``'s
        constructor, src/llama-context.cpp)."""
        for s in context_object_settings():
            if s.cparam is not None:
                setattr(cparams, s.cparam, s.code(getattr(self, s.name)))
        cparams.n_ubatch = min(cparams.n_batch, cparams.n_ubatch)

    def server_args(self) -> list[str]:
        """llama-server's flags for the settings that are not its defaults (none for the defaults)."""
        return server_flag_args(context_object_settings(), self)

    def args(self) -> list[str]:
        """Every setting as llama.cpp's (and our CLI's) flags, defaults too, e.g. ``["-ub", "512", "-fa",
        "auto", "-ctk", "f16", "-ctv", "f16"]``."""
        return [part for s in context_object_settings() for part in (s.flags[0], str(getattr(self, s.name)))]

    def flags(self) -> str:
        """Every setting as llama.cpp's flags, e.g. ``-ub 512 -fa auto -ctk f16 -ctv f16``."""
        return " ".join(self.args())

    def values(self) -> dict:
        """The fields by name (the declarations' names)."""
        return {s.name: getattr(self, s.name) for s in context_object_settings()}


ContextSettings = settings_class("ContextSettings", context_object_settings(), ContextRules, __name__, """
    llama.cpp's context settings that change the arithmetic: a frozen dataclass with one field per
    ``CONTEXT`` declaration that is not ``sized`` (``n_ubatch``: rows per compute pass, >= 1, llama.cpp
    caps it at the logical batch; ``flash_attn``: ``on``, ``off`` or ``auto``; ``type_k``, ``type_v``: a
    ``KV_CACHE_TYPES`` name). The defaults are llama-server's. Raises ``ValueError`` (one line) for a
    value llama.cpp does not take.""")

CONTEXT_KEYS = tuple(CONTEXT)
"""The settings' keys: the logical batch and ``ContextSettings``' fields; ``context_values``' and
QSettings' names."""
DEFAULT_CONTEXT = {s.name: s.default for s in CONTEXT.values()}
"""What the window loads a model with when nothing else is set (``run``'s defaults)."""

_KV_LINE = re.compile(r"K \((\w+)\):.*V \((\w+)\):")


def settled(log_lines, asked: ContextSettings) -> ContextSettings:
    """``asked`` as llama.cpp settled it when it created the context, read from its log: flash attention
    ``auto`` becomes ``on`` or ``off`` ("Flash Attention enabled" / "... set to disabled"), and the cache
    types from its "llama_kv_cache: size = ... K (f16): ..., V (f16): ..." line. What the log does not
    say stays as ``asked``."""
    fa, k, v = asked.flash_attn, asked.type_k, asked.type_v
    for line in log_lines:
        if "enabling flash_attn" in line or "Flash Attention enabled" in line:
            fa = "on"
        elif "Flash Attention not supported" in line:
            fa = "off"
        m = _KV_LINE.search(line)
        if m:
            k, v = m.group(1), m.group(2)
    return ContextSettings(**{**asked.values(), "flash_attn": fa, "type_k": k, "type_v": v})


class ContextRefused(ModelFileError):
    """llama.cpp refuses a context with these settings (or would): the message says which and why."""


def context_values(n_batch: int, context: ContextSettings) -> dict:
    """The logical batch and ``context`` as one dict of ``CONTEXT_KEYS`` (the window's and QSettings' form)."""
    return {"n_batch": n_batch, **context.values()}


def context_from_values(values: dict | None) -> tuple[int, ContextSettings]:
    """``(n_batch, ContextSettings)`` from a dict of ``CONTEXT_KEYS`` (absent: ``DEFAULT_CONTEXT``; None:
    the defaults). Raises ``ValueError`` for a value llama.cpp does not take."""
    v = {**DEFAULT_CONTEXT, **(values or {})}
    return int(v["n_batch"]), ContextSettings(**{k: v[k] for k in CONTEXT_KEYS if k != "n_batch"})


def loaded_context(llama_cpp: dict | None) -> dict | None:
    """The context settings a runtime was made with, from its ``llama_cpp`` block (``describe()``, a
    receipts file's model; each setting by its receipts field, the declaration's name; a file written
    before a setting was recorded: its default): flash attention as asked (``auto`` stays ``auto``).
    None without a block."""
    if not isinstance(llama_cpp, dict):
        return None
    out = {k: llama_cpp.get(k, DEFAULT_CONTEXT[k]) for k in CONTEXT_KEYS}
    out["flash_attn"] = llama_cpp.get("flash_attn_asked", out["flash_attn"])
    return out


def effective_context(options: dict, n_ctx: int) -> dict:
    """``options`` as llama.cpp applies them to a context of ``n_ctx`` positions: the logical batch at
    most ``n_ctx``, the physical batch at most the logical one (what a runtime's block records)."""
    out = {**DEFAULT_CONTEXT, **options}
    out["n_batch"] = min(int(out["n_batch"]), int(n_ctx))
    out["n_ubatch"] = min(int(out["n_ubatch"]), out["n_batch"])
    return out
