"""Take a configuration to llama-server: the exact ``llama-server`` arguments of a source's settings (issue 16).

A source that reproduces a llama-server configuration says so in its declaration
(``SourceDescriptor.llama_server``: the ``--spec-type`` value, ``draft-simple`` for a draft model
with ``--model-draft``); each of its options names its llama-server
flag (``Option.server_flag``, else its ``flag``, which for llama.cpp's own proposers is
llama-server's name). So the rule lives in the declarations, and ``server_arguments`` /
``parse_server_arguments`` only read them: the printed arguments parse back to the same
configuration (tested).

The context and sampling flags come from those settings' declarations
(``inspector.engine.llama_settings``: ``Setting.server_flags``, ``server_default``): a flag is given
when its value is not llama-server's default.

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

from inspector.engine import llama_settings
from inspector.engine.llama_settings import N_CTX, N_THREADS, server_flag_args
from inspector.engine.settings import SamplingSettings, sampling_settings
from inspector.llama.context_settings import ContextSettings
from inspector.sources.llama_ngram_cache import N_DRAFT
from inspector.sources.registry import describe_source, source_names

LLAMA_SERVER_FLAGS_FROM = ("llama.cpp 0c1e570's llama-server flag names, the llama.cpp spec-inspector runs "
                           "(common/arg.cpp: --spec-type and the per-type --spec-ngram-* flags, --model-draft with "
                           "--spec-type draft-simple, --spec-draft-n-max/-n-min/-p-min)")
"""Where the flag names come from, as ``spec-inspector flags`` and the docs (run.md) say it."""
SPEC_TYPE = "--spec-type"
SYSTEM_PROMPT_NOTE = ("llama-server takes no system prompt flag (llama.cpp 0c1e570 gives -sys/--system-prompt to "
                      "llama-cli and llama-completion only): send the system prompt as the first entry of each "
                      'request\'s messages (/v1/chat/completions): {"role": "system", "content": ...}')
"""What ``server_notes`` says when the run has a system prompt."""


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


def _number(value) -> str:
    """A number as llama.cpp's flags read it, exactly: whole numbers without a point (``--temp 0``)."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def sampling_server_arguments(sampling: SamplingSettings) -> list[str]:
    """llama-server's flags for ``sampling`` (``SamplingSettings``): each setting whose value differs from
    llama-server's default (``Setting.server_default`` of ``llama_settings.SAMPLING``; our greedy
    temperature 0 is ``--temp 0``, its default 0.8), so always ``--seed N`` (llama-server's seed is random
    by default, ours never is); in declaration order. ``parse_sampling_arguments`` reads them back."""
    return server_flag_args(llama_settings.SAMPLING.values(), sampling, _number)


def context_server_arguments(n_ctx: int | None = None, n_batch: int | None = None,
                             context: ContextSettings | None = None) -> list[str]:
    """llama-server's flags for a context of ``n_ctx`` positions (``-c``: always, its default 0 takes
    the model's training context), logical batch ``n_batch`` (``-b`` when not its 2048) and
    ``context`` (``-ub``, ``-fa``, ``-ctk``, ``-ctv`` when not its defaults:
    ``ContextSettings.server_args``). None: that setting is left out."""
    out: list[str] = []
    for declared, value in ((N_CTX, n_ctx), (llama_settings.CONTEXT["n_batch"], n_batch)):
        if value is not None and value != declared.server_default:
            out += [declared.server_flags[0], str(value)]
    return out + (context.server_args() if context is not None else [])


def server_arguments(source: str, options: Mapping | None = None, *, draft_max: int | None = None,
                     model: str | None = None, sampling: SamplingSettings | None = None, n_ctx: int | None = None,
                     n_batch: int | None = None, context: ContextSettings | None = None,
                     n_threads: int | None = None) -> list[str]:
    """The ``llama-server`` arguments (without the program name) that reproduce ``source`` with
    ``options`` (checked and completed with the source's defaults): ``--spec-type T`` and each
    option's flag with its value; an option taken from the ``draft_max`` setting gets ``draft_max``.
    Empty paths are left out, and so is a -1 default (llama.cpp's "its own default").
    ``model``: adds ``-m MODEL`` first; ``n_threads`` (None or 0: llama.cpp's default) ``-t N``; then
    ``context_server_arguments(n_ctx, n_batch, context)``;
    ``sampling``: ``sampling_server_arguments`` last. ``none`` (plain decoding) gives no speculative flags.
    Raises ``NoServerEquivalent`` for a source llama-server does not have (our ``ngram``, ``suffix``,
    ``scripted``, ``replay``) or options that make trees (``TREE_OPTIONS``), ``UnknownSource`` and the
    source's option errors (``ValueError``)."""
    args = (["-m", str(model)] if model else []) + ([N_THREADS.server_flags[0], str(n_threads)] if n_threads else []) \
        + context_server_arguments(n_ctx, n_batch, context)
    last = sampling_server_arguments(sampling) if sampling is not None else []
    if source == "none":
        return args + last
    d = describe_source(source)
    if d.llama_server is None:
        nearest = nearest_server_equivalent(source, options, draft_max)
        raise NoServerEquivalent(
            f"source {source} has no llama-server equivalent; these do: {', '.join(server_sources())}"
            + (f". Nearest: llama-server {shlex.join(nearest[0])} ({nearest[1]})" if nearest else ""))
    values = d.with_defaults(d.check_options(dict(options or {})))
    trees = [f"{o.name}={values[o.name]}" for o in d.options or ()
             if o.name in TREE_OPTIONS and values.get(o.name) != o.default]
    if trees:
        raise NoServerEquivalent(f"{', '.join(trees)} makes {source} propose token trees; llama-server verifies "
                                 f"chains only (leave {', '.join(t.split('=')[0] for t in trees)} at its default "
                                 f"for the chain llama-server runs)")
    args += [SPEC_TYPE, d.llama_server]
    for o in d.options or ():
        flag = _server_flag(d, o)
        if flag is None:
            continue
        value = draft_max if o.from_setting == "draft_max" and draft_max is not None else values.get(o.name)
        if value is None or value == "" or (value == -1 and o.default == -1):
            continue
        args += [flag, _text(value)]
    return args + last


TREE_OPTIONS = frozenset({"p_split", "tree_nodes", "branches"})
"""Source options that make a source propose token trees (``inspector.engine.tree``), which llama-server
never verifies."""


def nearest_server_equivalent(source: str, options: Mapping | None = None,
                              draft_max: int | None = None) -> tuple[list[str], str] | None:
    """For our ``ngram`` source: the llama-server type closest to it and how it differs, as
    ``(speculative arguments, why)``; None for a source without one. Ours matches the last n tokens for n
    from ``n_max`` down to ``n_min`` and proposes what followed their last earlier occurrence, up to
    draft max; llama-server's ``ngram-simple`` (``common_ngram_simple_draft``, common/ngram-map.cpp
    0c1e570) matches exactly ``size_n`` tokens, the last earlier occurrence too, and drafts ``size_m``:
    so ``size_n`` = our ``n_min`` (it matches wherever our shortest n-gram does) and ``size_m`` = draft max."""
    if source != "ngram":
        return None
    d = describe_source(source)
    values = d.with_defaults(d.check_options(dict(options or {})))
    size_m = draft_max if draft_max else 8
    why = (f"it matches only {values['n_min']}-token n-grams where ngram tries {values['n_max']} down to "
           f"{values['n_min']}, and needs size_n + size_m + 1 tokens before its first draft")
    if values.get("length") == "adaptive":
        why += "; ngram's adaptive length has no counterpart there"
    return ([SPEC_TYPE, "ngram-simple", "--spec-ngram-simple-size-n", str(values["n_min"]),
             "--spec-ngram-simple-size-m", str(size_m)], why)


def server_command(source: str, options: Mapping | None = None, **settings) -> str:
    """``server_arguments(source, options, **settings)`` as one shell line starting with ``llama-server``
    (shell-quoted); raises what ``server_arguments`` raises."""
    return shlex.join(["llama-server", *server_arguments(source, options, **settings)])


def runs_alike_on_server(source: str, options: Mapping | None, draft_max: int) -> bool:
    """llama-server runs ``source`` with ``options`` and ``draft_max`` (tokens) as spec-inspector does: it
    has the type (``server_arguments`` gives its flags: chains only), and the draft max does not cap
    proposals below the type's own maximum (llama-server's n-gram types have no such cap: ``server_notes``).
    False for plain decoding, a source without an equivalent and options the source refuses."""
    if source == "none":
        return False
    try:
        server_arguments(source, options, draft_max=draft_max)
    except (NoServerEquivalent, ValueError):
        return False
    d = describe_source(source)
    own = _own_maximum(source, d.with_defaults(d.check_options(dict(options or {}))))
    return own is None or draft_max >= own


def _own_maximum(source: str, values: Mapping) -> int | None:
    """The most tokens llama-server's type proposes by its own settings (``size_m`` of ngram-simple /
    ngram-map-k*, ``n_max`` of ngram-mod, ngram-cache's fixed ``N_DRAFT``), or None."""
    if source == "ngram-cache":
        return N_DRAFT
    return max((v for k, v in values.items() if k in ("size_m", "n_max") and isinstance(v, int)), default=None)


def server_notes(source: str, options: Mapping | None = None, *, draft_max: int | None = None,
                 system_prompt: str = "") -> list[str]:
    """What the printed arguments do not carry, in words (``spec-inspector flags`` prints them on
    stderr, the window beside the copied line): spec-inspector's own cap on each proposal (draft
    max) when it is shorter than the llama-server type's own maximum, a draft max the type ignores,
    a draft model not given; with a ``system_prompt``, that llama-server takes it in the request's
    messages (``SYSTEM_PROMPT_NOTE``). Empty for plain decoding and a source without an equivalent
    (the system prompt's note aside). Raises what ``server_arguments`` raises for bad options."""
    notes = [SYSTEM_PROMPT_NOTE] if system_prompt else []
    if source == "none":
        return notes
    d = describe_source(source)
    if d.llama_server is None:
        return notes
    values = d.with_defaults(d.check_options(dict(options or {})))
    if "draft_model" in values and not values.get("draft_model"):
        notes.insert(0, "no draft model given: add --model-draft PATH (the draft GGUF) before using these flags")
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
    from that setting (None if absent). Arguments for other llama-server settings are ignored here:
    ``parse_sampling_arguments`` and ``parse_context_arguments`` read the sampling and context flags.
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


def _given(argv, names) -> str | None:
    """The value of the last of ``names`` in ``argv`` (``-f V`` or ``--flag=V``), else None. Read token by
    token: ``-sys`` is not ``-s`` with ``ys``, as argparse would read it."""
    found = None
    argv = list(argv)
    for i, token in enumerate(argv):
        if token in names and i + 1 < len(argv):
            found = argv[i + 1]
        elif "=" in token and token.split("=", 1)[0] in names:
            found = token.split("=", 1)[1]
    return found


def _server_values(argv, declarations) -> dict:
    """name -> value of each of ``declarations`` (``Setting``) in a llama-server argument list (any of its
    ``server_flags``), llama-server's default (``server_default``) when not given. Raises ``ValueError``
    naming the flag for a value its kind does not read."""
    values: dict = {}
    for declared in declarations:
        text = _given(argv, declared.server_flags)
        values[declared.name] = declared.server_default
        if text is not None:
            try:
                values[declared.name] = declared.type(text)
            except ValueError:
                what = {"int": "a whole number", "float": "a number"}.get(declared.kind, "a valid value")
                raise ValueError(f"{declared.server_flags[0]} must be {what}, observed {text!r}") from None
    return values


def parse_sampling_arguments(argv) -> SamplingSettings:
    """The sampling a llama-server argument list sets (each declared sampling setting's ``server_flags``,
    any of its names): llama-server's default for each flag not given (``server_default``; no ``--seed``:
    a random seed is drawn, as llama-server does), read as llama.cpp's tools take them
    (``sampling_settings``: a negative temperature is greedy). Other arguments are ignored. Raises
    ``ValueError`` for a value no rule takes."""
    sampling, _notes = sampling_settings(**_server_values(argv, llama_settings.SAMPLING.values()))
    return sampling


def parse_context_arguments(argv) -> dict:
    """The context a llama-server argument list sets: ``n_ctx`` (None without ``-c``), ``n_batch``
    (llama-server's 2048 without ``-b``) and ``context`` (``ContextSettings``: llama-server's defaults
    for what is not given), each setting by its declared ``server_flags``. Raises ``ValueError`` for a
    value llama.cpp does not take."""
    values = _server_values(argv, (N_CTX, *llama_settings.CONTEXT.values()))
    n_ctx, n_batch = values.pop("n_ctx"), values.pop("n_batch")
    return {"n_ctx": n_ctx, "n_batch": n_batch, "context": ContextSettings(**values)}
