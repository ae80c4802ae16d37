"""Take a configuration to llama-server: the exact ``llama-server`` arguments of a source's settings (issue 16).

A source that reproduces a llama-server configuration says so in its declaration
(``SourceDescriptor.llama_server``: the ``--spec-type`` value, ``draft-simple`` for a draft model
with ``--model-draft``); each of its options names its llama-server
flag (``Option.server_flag``, else its ``flag``, which for llama.cpp's own proposers is
llama-server's name). So the rule lives in the declarations, and ``server_arguments`` /
``parse_server_arguments`` only read them: the printed arguments parse back to the same
configuration (tested).

Flag names: llama.cpp's ``common/arg.cpp`` at 0c1e570, the commit our llama-cpp-python vendors and
the llama-server of the tests (``--spec-type`` with ``ngram-simple``, ``ngram-map-k``,
``ngram-map-k4v``, ``ngram-mod``, ``ngram-cache``, ``draft-simple``; the
per-type ``--spec-ngram-<type>-*`` flags; ``--lookup-cache-static/-dynamic``; ``--model-draft``,
``--spec-draft-n-max``, ``--spec-draft-n-min``, ``--spec-draft-p-min``, ``--gpu-layers-draft``),
read from ggml-org/llama.cpp (``common/arg.cpp``, ``common/common.h``) and llama-server's help.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Mapping

from inspector.sources.registry import describe_source, source_names

LLAMA_SERVER_FLAGS_FROM = ("llama.cpp 0c1e570's llama-server flag names, the llama.cpp spec-inspector runs "
                           "(common/arg.cpp: --spec-type and the per-type --spec-ngram-* flags, --model-draft with "
                           "--spec-type draft-simple, --spec-draft-n-max/-n-min/-p-min)")
"""Where the flag names come from, as ``spec-inspector flags`` and the README say it."""
SPEC_TYPE = "--spec-type"


class NoServerEquivalent(ValueError):
    """The source has no llama-server counterpart; the message names the sources that have one."""


def server_sources() -> list[str]:
    """Names of the sources that reproduce a llama-server configuration, in registry order."""
    out = []
    for name in source_names():
        try:
            if describe_source(name).llama_server is not None:
                out.append(name)
        except ValueError:  # pragma: no cover - a broken third-party declaration
            continue
    return out


def _server_flag(descriptor, option) -> str | None:
    return option.server_flag or (option.flag if descriptor.llama_server else None)


def _text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def server_arguments(source: str, options: Mapping | None = None, *, draft_max: int | None = None,
                     model: str | None = None) -> list[str]:
    """The ``llama-server`` arguments (without the program name) that reproduce ``source`` with
    ``options`` (checked and completed with the source's defaults): ``--spec-type T`` and each
    option's flag with its value; an option taken from the ``draft_max`` setting gets ``draft_max``.
    Empty paths are left out, and so is a -1 default (llama.cpp's "its own default").
    ``model``: adds ``-m MODEL`` first. ``none`` (plain decoding) gives no speculative flags.
    Raises ``NoServerEquivalent`` for a source llama-server does not have (our ``ngram``, ``suffix``,
    ``scripted``, ``replay``), ``UnknownSource`` and the source's option errors (``ValueError``)."""
    args = ["-m", str(model)] if model else []
    if source == "none":
        return args
    d = describe_source(source)
    if d.llama_server is None:
        raise NoServerEquivalent(
            f"source {source} has no llama-server equivalent; these do: {', '.join(server_sources())}")
    values = d.with_defaults(d.check_options(dict(options or {})))
    args += [SPEC_TYPE, d.llama_server]
    for o in d.options or ():
        flag = _server_flag(d, o)
        if flag is None:
            continue
        value = draft_max if o.from_setting == "draft_max" and draft_max is not None else values.get(o.name)
        if value is None or value == "" or (value == -1 and o.default == -1):
            continue
        args += [flag, _text(value)]
    return args


def server_command(source: str, options: Mapping | None = None, *, draft_max: int | None = None,
                   model: str | None = None) -> str:
    """``server_arguments`` as one shell line starting with ``llama-server`` (shell-quoted)."""
    return shlex.join(["llama-server", *server_arguments(source, options, draft_max=draft_max, model=model)])


def _own_maximum(source: str, values: Mapping) -> int | None:
    """The most tokens llama-server's type proposes by its own settings (``size_m`` of ngram-simple /
    ngram-map-k*, ``n_max`` of ngram-mod, ngram-cache's fixed ``N_DRAFT``), or None."""
    if source == "ngram-cache":
        from inspector.sources.llama_ngram_cache import N_DRAFT

        return N_DRAFT
    return max((v for k, v in values.items() if k in ("size_m", "n_max") and isinstance(v, int)), default=None)


def server_notes(source: str, options: Mapping | None = None, *, draft_max: int | None = None) -> list[str]:
    """What the printed arguments do not carry, in words (``spec-inspector flags`` prints them on
    stderr, the window beside the copied line): spec-inspector's own cap on each proposal (draft
    max) when it is shorter than the llama-server type's own maximum, a draft max the type ignores,
    a draft model not given. Empty for plain decoding and a source without an equivalent. Raises
    what ``server_arguments`` raises for bad options."""
    if source == "none":
        return []
    d = describe_source(source)
    if d.llama_server is None:
        return []
    values = d.with_defaults(d.check_options(dict(options or {})))
    notes = []
    if "draft_model" in values and not values.get("draft_model"):
        notes.append("no draft model given: add --model-draft PATH (the draft GGUF) before using these flags")
    own = _own_maximum(source, values)
    if own is not None and draft_max is not None and draft_max < own:
        notes.append(f"spec-inspector also caps each proposal at draft max {draft_max}; llama-server's "
                     f"{d.llama_server} proposes up to {own} tokens. Give draft_max={own} to compare like with like.")
    elif own is not None and draft_max is not None and draft_max > own and source == "ngram-cache":
        notes.append(f"draft max {draft_max} changes nothing here: ngram-cache drafts at most {own} tokens "
                     "(llama.cpp's n_draft, as in spec-inspector), and no flag sets it")
    return notes


def parse_server_arguments(argv) -> tuple[str, dict, int | None]:
    """The configuration a llama-server argument list sets: ``(source, options, draft_max)``, options
    checked by the source's declaration (defaults not added), ``draft_max`` from the option taken
    from that setting (None if absent). Arguments for other llama-server settings are ignored.
    No ``--spec-type`` and no draft model: ``("none", {}, None)``. Raises ``ValueError`` for a
    ``--spec-type`` no source reproduces, or a bad value."""
    if argv and argv[0] == "llama-server":
        argv = argv[1:]
    by_type = {describe_source(n).llama_server: n for n in server_sources()}
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(SPEC_TYPE)
    flags: dict[str, tuple[str, str]] = {}
    for name in server_sources():
        d = describe_source(name)
        for o in d.options or ():
            flag = _server_flag(d, o)
            if flag is not None and flag not in flags:
                flags[flag] = (name, o.name)
                p.add_argument(flag, dest=flag)
    ns, _rest = p.parse_known_args(list(argv))
    given = vars(ns)
    spec = given.pop("spec_type", None)
    if spec is not None:
        if spec not in by_type:
            raise ValueError(f"--spec-type {spec} is not one spec-inspector reproduces; these are: "
                             f"{', '.join(t for t in by_type if t)}")
        source = by_type[spec]
    else:  # no --spec-type: llama-server 0c1e570 drafts nothing, even with --model-draft
        return "none", {}, None
    d = describe_source(source)
    raw = {flags[f][1]: v for f, v in given.items() if v is not None and flags[f][0] == source}
    draft_max = None
    for o in d.options or ():
        if o.from_setting == "draft_max" and o.name in raw:
            draft_max = int(raw.pop(o.name))
    return source, d.check_options(raw), draft_max
