"""Wording shared by the views: counts with their noun in the right number."""

from __future__ import annotations

RAW_BOX = "raw (no chat template)"
"""The run setup's box that sends the prompt as typed (the command line's ``--raw``)."""
NO_TEMPLATE = (f"the model has no chat template: tick “{RAW_BOX}” to send the prompt as typed, or choose a model "
               "that has one, then Run")
"""A run refused because the model has no chat template, in the window's words."""


def count_noun(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` and its noun: ``count_noun(1, "window")`` -> ``"1 window"``,
    ``count_noun(2, "window")`` -> ``"2 windows"``, ``count_noun(0, "window")`` -> ``"0 windows"``.

    ``plural`` defaults to ``singular + "s"``; pass it for irregular nouns
    (``count_noun(2, "discard reason", "discard reasons")``, ``count_noun(3, "batch", "batches")``).
    Only exactly 1 takes the singular.
    """
    return f"{n} {singular if n == 1 else (plural if plural is not None else singular + 's')}"
