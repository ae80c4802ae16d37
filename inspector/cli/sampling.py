"""The sampling flags of ``run``, ``compare`` and ``flags``, with llama.cpp's names and meanings
(``common/arg.cpp`` of llama.cpp 0c1e570): ``--temperature``, ``--top-k``, ``--top-p``, ``--min-p``,
``--seed`` and the penalties ``--repeat-penalty``, ``--repeat-last-n``, ``--presence-penalty``,
``--frequency-penalty``; each checked by the engine's rule (``inspector.engine.settings``)."""

from __future__ import annotations

import argparse

from inspector.cli.ranges import setting, setting_span
from inspector.engine.settings import PENALTY_DEFAULTS, PENALTY_FIELDS, SEED_MAX, SamplingSettings, sampling_settings


def add_sampling_flags(p: argparse.ArgumentParser, title: str = "sampling (default greedy)",
                       server_defaults: bool = False) -> None:
    """Add the sampling flags to ``p`` as one argument group ``title``; ``sampling_from_args`` reads them.
    ``server_defaults``: llama-server's defaults (temperature 0.8, a random seed: ``serve``), not greedy."""
    s = p.add_argument_group(title)
    temp_default, seed_default = (0.8, -1) if server_defaults else (0.0, 0)
    temp_help = "[0.8, llama-server's]" if server_defaults else "[0; llama-server's --temp: 0.8]"
    s.add_argument("--temperature", "--temp", type=setting("temperature", float), default=temp_default,
                   help=f"<= 0 = greedy, as in llama.cpp {temp_help}")
    s.add_argument("--top-k", type=setting("top_k", int), default=40, help="<= 0 = no top-k limit, as in llama.cpp [40]")
    s.add_argument("--top-p", type=setting("top_p", float), default=0.95, help="0..1; 0 or 1 = no top-p stage [0.95]")
    s.add_argument("--min-p", type=setting("min_p", float), default=0.05, help="0..1; 0 or 1 = no min-p stage [0.05]")
    s.add_argument("--seed", "-s", type=setting("seed", int), default=seed_default,
                   help=f"0..{SEED_MAX}; -1 = a random seed (llama.cpp's), drawn and recorded in the receipts "
                        f"[{seed_default}]")
    last_n = PENALTY_DEFAULTS["repeat_last_n"]
    s.add_argument("--repeat-penalty", type=setting("repeat_penalty", float), default=None, metavar="N",
                   help="llama.cpp --repeat-penalty: a positive logit of a token seen in the last --repeat-last-n "
                        f"tokens is divided by N, a negative one multiplied ({setting_span('repeat_penalty')}) "
                        "[1.0 = disabled]")
    s.add_argument("--repeat-last-n", type=setting("repeat_last_n", int), default=None, metavar="N",
                   help="llama.cpp --repeat-last-n: the penalties look at the sequence's last N tokens, prompt "
                        f"included (>= 0) [{last_n}; 0 = disabled]")
    s.add_argument("--presence-penalty", type=setting("presence_penalty", float), default=None, metavar="N",
                   help="llama.cpp --presence-penalty: subtracted from the logit of each token seen in the last "
                        f"--repeat-last-n tokens ({setting_span('presence_penalty')}) [0.0 = disabled]")
    s.add_argument("--frequency-penalty", type=setting("frequency_penalty", float), default=None, metavar="N",
                   help="llama.cpp --frequency-penalty: subtracted once per occurrence in the last --repeat-last-n "
                        f"tokens ({setting_span('frequency_penalty')}) [0.0 = disabled]")


def sampling_from_args(args) -> tuple[SamplingSettings, tuple[str, ...]]:
    """``(SamplingSettings, notes)`` from ``add_sampling_flags``' flags (``sampling_settings``: one note per
    value llama.cpp gives a meaning, e.g. seed -1). Raises ``ValueError`` for a value no rule takes."""
    penalties = {name: getattr(args, name, None) for name in PENALTY_FIELDS}
    return sampling_settings(args.temperature, args.top_k, args.top_p, args.min_p, args.seed, **penalties)
