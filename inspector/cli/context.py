"""Command-line flags for llama.cpp's context settings, made from their declarations
(``inspector.engine.llama_settings.CONTEXT``: llama.cpp's names with their short aliases, from
``common/arg.cpp`` of llama.cpp 0c1e570, and llama-server's defaults): ``-b``/``--batch-size`` (our
``--n-batch``), ``-ub``/``--ubatch-size``, ``-fa``/``--flash-attn``, ``-ctk``/``--cache-type-k``,
``-ctv``/``--cache-type-v``; shared by ``run``, ``compare``, ``bench``, ``serve`` and ``flags``; and
``-c``/``--ctx-size`` (``N_CTX``)."""

from __future__ import annotations

import argparse

from inspector.cli.ranges import setting, whole_number
from inspector.engine.llama_settings import COUNT_MAX
from inspector.engine import llama_settings
from inspector.engine.llama_settings import N_CTX, N_THREADS, OUR_N_BATCH, Setting
from inspector.llama.context_settings import ContextSettings

N_BATCH = OUR_N_BATCH
"""Our logical batch (rows per decode) when not given (``OUR_N_BATCH``); llama-server's is 2048."""


def add_setting_flag(p, s: Setting, serve: bool = False, note: str = "") -> None:
    """Add the flag of the declared setting ``s`` to ``p`` (a parser or an argument group): its names,
    ``dest`` its name, its default (``serve``: llama-server's), its type (a whole number in its range, a
    choice, or a value its ``rule`` checks: ``inspector.cli.ranges.setting``), its help with the default and
    the command's own ``note`` after it."""
    default = s.server_default if serve else s.default
    kwargs: dict = {"dest": s.name, "default": default, "help": s.help_text(serve) + (f"; {note}" if note else "")}
    if s.metavar:
        kwargs["metavar"] = s.metavar
    if s.kind == "choice":
        kwargs["choices"] = list(s.choices)
    elif s.rule is not None:
        kwargs["type"] = setting(s.name, s.type)
    else:
        kwargs["type"] = whole_number(s.minimum if s.minimum is not None else -COUNT_MAX,
                                      s.maximum if s.maximum is not None else COUNT_MAX)
    p.add_argument(*s.flags, **kwargs)


def add_context_flags(p: argparse.ArgumentParser) -> None:
    """Add a flag for each declared context setting but ``-c`` (``CONTEXT``: ``-b``, ``-ub``, ``-fa``,
    ``-ctk``, ``-ctv``) to ``p``."""
    for s in llama_settings.CONTEXT.values():
        add_setting_flag(p, s)


def add_threads_flag(p, note: str = "") -> None:
    """Add ``-t``/``--threads`` (``N_THREADS``: CPU threads, 0 = all cores; ``args.n_threads``) to ``p``, with the
    command's ``note`` after the help."""
    add_setting_flag(p, N_THREADS, note=note)


def add_n_ctx_flag(p) -> None:
    """Add ``-c``/``--ctx-size``/``--n-ctx`` (``N_CTX``, the context size in positions) to ``p``."""
    add_setting_flag(p, N_CTX)


def context_from_args(args) -> ContextSettings:
    """``ContextSettings`` from the flags (``add_context_flags``; a setting a command lacks: its default).
    Raises ``ValueError`` for a value llama.cpp does not take."""
    return ContextSettings(**{s.name: getattr(args, s.name, s.default) for s in llama_settings.CONTEXT.values()
                              if not s.sized})


def context_options(args) -> dict:
    """``LlamaRuntime`` keyword options from the flags: ``n_batch`` and llama.cpp's context settings by name
    (``ContextSettings``' fields); none of them for a command without the flags."""
    if getattr(args, "n_batch", None) is None:
        return {}
    return {"n_batch": args.n_batch, **context_from_args(args).values()}
