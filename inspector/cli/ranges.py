"""The command line's value types and their ranges (issue 25): every count the receipts schema bounds
(``$defs/count`` in ``assets/receipts.schema.json``: llama.cpp keeps tokens, positions and windows
in 32 bits) is bounded when the command line is read, so no run fails after its work is done."""

from __future__ import annotations

import argparse
import math

from inspector.engine.faults import Fault
from inspector.engine.llama_settings import COUNT_MAX, THREADS_MAX
from inspector.engine.settings import check_stop, interpret_setting


def whole_number(low: int, high: int = COUNT_MAX, name: str = "N"):
    """An argparse type for a whole number ``low <= N <= high``; the message says the range."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a whole number {low}..{high}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a whole number {low}..{high}, got {value}")
        return value

    parse.__name__ = name  # argparse names the type in some messages
    return parse


positive = whole_number(1, name="positive")
"""1..2147483647."""

THREADS = whole_number(0, THREADS_MAX, name="threads")
"""``rpc-server --threads``: 0 (half the cores, as llama.cpp's rpc-server) .. ``THREADS_MAX``; the model-loading
commands' ``-t`` is the declared ``N_THREADS`` (``inspector.cli.context.add_threads_flag``)."""


def check_count(value: int, what: str, low: int = 0, high: int = COUNT_MAX) -> int:
    """``value`` when ``low <= value <= high``; else ``argparse.ArgumentTypeError`` naming ``what``
    and the range (for values an engine rule has already parsed, e.g. ``--draft-max``)."""
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{what} must be {low}..{high}, got {value}")
    return value


MAX_DEVICES = 16
"""llama.cpp's ``llama_max_devices()``: device indexes 0..15, at most 16 tensor-split shares."""


def finite_shares(text: str, max_devices: int = MAX_DEVICES) -> tuple[float, ...]:
    """``--tensor-split A,B,...``: finite, non-negative shares (all 0: llama.cpp's default split), at most
    ``max_devices`` of them (llama.cpp's device limit). Raises ``argparse.ArgumentTypeError``."""
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or any(not math.isfinite(v) or v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected finite non-negative shares, got {text!r}")
    if len(values) > max_devices:
        raise argparse.ArgumentTypeError(f"expected at most {max_devices} shares, got {len(values)}")
    return values


def draft_max(text: str):
    """``--draft-max``: ``auto`` (None: the run service picks it from the stored cost model,
    ``inspector.llama.cost_model.auto_draft_max``) or a count checked with the engine's rule."""
    if text.strip().lower() == "auto":
        return None
    try:
        int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, got {text!r}") from None
    return check_count(setting("draft_max", int)(text), "--draft-max")


def setting(name: str, convert):
    """An argparse type that parses with ``convert`` and checks the value with the
    engine's rule for the setting ``name`` (``inspector.engine.settings.interpret_setting``:
    values llama.cpp gives a meaning, such as temperature -1 or seed -1, pass and are
    interpreted when the settings are made). Returns the value as typed."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            what = "a whole number" if convert is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        try:
            interpret_setting(name, value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    parse.__name__ = name  # argparse names the type in some messages
    return parse


def stop_string(text: str) -> str:
    """``--stop``: a non-empty stop string (the engine's rule, ``check_stop``)."""
    try:
        return check_stop((text,))[0]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a stop string must be non-empty, observed {text!r} (an empty one would match everywhere)") from None


def fault(text: str):
    """``--inject KIND[@WINDOW[:TOKEN]]``: a ``Fault`` (``inspector.engine.faults.Fault.parse``)."""
    try:
        return Fault.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
