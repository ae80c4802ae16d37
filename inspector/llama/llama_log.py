"""llama.cpp's log: sent to Python logging (debug level) rather than stderr, and captured while a model
loads or a context is created, for what llama.cpp decided there (where the layers went, the cache
types and flash attention it settled on, why it refused)."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import re
from typing import Iterator

import llama_cpp

_llama_log = logging.getLogger("inspector.llama.cpp")

_capture: list[str] | None = None
"""While a model loads or a context is created: llama.cpp's log lines."""


@llama_cpp.llama_log_callback
def _log_to_python(level: int, text: bytes, _user_data) -> None:
    """llama.cpp's log lines go to Python logging (debug level), not to stderr."""
    capture = _capture
    if capture is not None:
        capture.append(text.decode("utf-8", errors="replace"))
    if _llama_log.isEnabledFor(logging.DEBUG):
        _llama_log.debug(text.decode("utf-8", errors="replace").rstrip())


def install() -> None:
    """Route llama.cpp's log through ``_log_to_python`` (idempotent)."""
    llama_cpp.llama_log_set(_log_to_python, ctypes.c_void_p(0))


@contextlib.contextmanager
def captured() -> Iterator[list[str]]:
    """The log lines llama.cpp writes inside the ``with`` block (one caller at a time: loads run under
    the runtime's lock or in one thread)."""
    global _capture
    lines: list[str] = []
    _capture = lines
    try:
        yield lines
    finally:
        _capture = None


_ASSIGNED = re.compile(r"layer\s+\d+ assigned to device (\S+?),")


def where_layers_went(log_lines, labels: dict[str, str]) -> str:
    """"30/30 layers on RPC0[127.0.0.1:50052]" or "all layers on the CPU", from llama.cpp's
    "layer N assigned to device D" load lines (the output layer is counted by llama.cpp's
    "offloaded" line, not here). ``labels``: device name -> the label to print."""
    devices = [m.group(1) for m in map(_ASSIGNED.search, log_lines) if m]
    off = [d for d in devices if d != "CPU"]
    if not off:
        return "all layers on the CPU"
    where = ", ".join(labels.get(d, d) for d in dict.fromkeys(off))
    return f"{len(off)}/{len(devices)} layers on {where}"


_ERROR_WORDS = re.compile(r"requires|does not|not support|unsupported|failed", re.IGNORECASE)


def refusal(log_lines) -> str:
    """llama.cpp's own reason for refusing a context, e.g. "quantized V cache requires flash_attn to be
    enabled" (its last error-like line without the function name), or "" when it gave none."""
    for line in reversed(log_lines):
        text = line.strip()
        if _ERROR_WORDS.search(text):
            return text.split(": ", 1)[1] if ": " in text else text
    return ""
