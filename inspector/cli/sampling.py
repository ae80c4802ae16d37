"""The sampling flags of ``run``, ``compare``, ``serve`` and ``flags``, made from their declarations
(``inspector.engine.llama_settings.SAMPLING``: llama.cpp's names and meanings, ``common/arg.cpp`` of
llama.cpp 0c1e570): ``--temperature``, ``--top-k``, ``--top-p``, ``--min-p``, ``--seed`` and the
penalties ``--repeat-penalty``, ``--repeat-last-n``, ``--presence-penalty``, ``--frequency-penalty``;
each checked by the engine's rule (``inspector.engine.settings``)."""

from __future__ import annotations

import argparse

from inspector.cli.context import add_setting_flag
from inspector.engine import llama_settings
from inspector.engine.settings import SamplingSettings, sampling_settings


def add_sampling_flags(p: argparse.ArgumentParser, title: str = "sampling (default greedy)",
                       server_defaults: bool = False) -> None:
    """Add a flag for each declared sampling setting to ``p`` as one argument group ``title``;
    ``sampling_from_args`` reads them. ``server_defaults``: llama-server's defaults (temperature 0.8, a
    random seed: ``serve``), not greedy."""
    s = p.add_argument_group(title)
    for declared in llama_settings.SAMPLING.values():
        add_setting_flag(s, declared, serve=server_defaults)


def sampling_from_args(args) -> tuple[SamplingSettings, tuple[str, ...]]:
    """``(SamplingSettings, notes)`` from ``add_sampling_flags``' flags (``sampling_settings``: one note per
    value llama.cpp gives a meaning, e.g. seed -1). Raises ``ValueError`` for a value no rule takes."""
    return sampling_settings(**{name: getattr(args, name, None) for name in llama_settings.SAMPLING})
