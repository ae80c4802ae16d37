"""``spec-inspector run``'s proposal-source flags, generated from the source declarations.

Each built-in source's options with a ``flag`` (``inspector.sources.registry.
BUILTIN_DESCRIPTORS``) become flags in an argument group of their own:
``--ngram-max``, ``--ngram-min``, ``--ngram-length``, ``--script``/``--script-file``,
``--draft-model``, ``--draft-min``, ``--p-min``, ``--replay``. ``--draft-max`` is a
generation setting (the draft's ``draft_max`` option is taken from it). Third-party
sources take their options through ``--source-option KEY=VALUE``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from inspector.bounded_read import BoundedReadError, read_bounded_text
from inspector.sources.descriptors import Option, SourceDescriptor, split_option
from inspector.sources import registry


class SourceFlagError(ValueError):
    """A source flag the run cannot use: a required one missing, an unreadable file, a
    malformed ``--source-option``, or values that break the source's rules. One line."""


def flag_dest(flag: str) -> str:
    """Where argparse stores a source flag's value: its name with ``_`` (``--ngram-max`` -> ``ngram_max``)."""
    return flag.lstrip("-").replace("-", "_")


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _flag_type(source: str, option: Option):
    """An argparse type that converts with the option's own check (its range in the message)."""
    if option.kind == "path":  # argparse converts a string default too: "" must stay "no file", not Path(".")
        return lambda text: Path(text) if text else ""
    if option.kind in ("text", "choice"):
        return str

    def parse(text: str):
        try:
            return option.check(source, text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = option.name  # argparse names the type in some messages
    return parse


def _help(option: Option) -> str:
    text = option.help
    if option.choice_help and any(option.choice_help):
        text += ": " + "; ".join(f"{c}: {h}" for c, h in zip(option.choices, option.choice_help))
    if option.kind in ("int", "float") and (option.minimum is not None or option.maximum is not None):
        lo = "" if option.minimum is None else _shown(option.minimum)
        hi = "" if option.maximum is None else _shown(option.maximum)
        text += f" ({lo}..{hi})"
    if not option.required:
        text += f" [{_shown(option.default)}]"
    return text.replace("%", "%%")


class _SourceFlag(argparse.Action):
    """Stores a source flag's value and records the flag as given (``args.source_flags_given``), so
    a flag of another source than ``--source`` is refused even at its default value."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        given = list(getattr(namespace, "source_flags_given", None) or [])
        setattr(namespace, "source_flags_given", given + [self.option_strings[0]])


def _owners(descriptors: dict[str, SourceDescriptor], test) -> list[str]:
    """Names of the sources with an option for which ``test(option)`` holds."""
    return [n for n, d in descriptors.items() if any(test(o) for o in d.options or ())]


def check_other_sources_options(args) -> None:
    """Raise ``SourceFlagError`` for a flag or ``--source-option KEY`` that belongs to another source
    than ``args.source`` (it would be ignored, or refused only after the model loads):
    ``--spec-ngram-mod-n-min is an option of source ngram-mod, not of --source ngram ...``."""
    name = args.source
    descriptors = _builtin_descriptors()
    d = descriptors.get(name)
    own_flags = {f for o in ((d.options or ()) if d is not None else ()) for f in (o.flag, o.file_flag) if f}
    for flag in getattr(args, "source_flags_given", None) or ():
        if flag in own_flags:
            continue
        owners = _owners(descriptors, lambda o: flag in (o.flag, o.file_flag))
        raise SourceFlagError(f"{flag} is an option of source {' / '.join(owners) or '(another)'}, not of "
                              f"--source {name}: drop it, or use --source {owners[0] if owners else '...'}")
    if d is None or d.options is None:  # an undeclared third-party source takes any key
        return
    known = {o.name for o in d.options}
    for item in args.source_option:
        try:
            key, _value = split_option(item)
        except ValueError:  # a malformed item: source_options_from_args says KEY=VALUE
            continue
        if key in known:
            continue
        owners = _owners({n: x for n, x in descriptors.items() if n != name}, lambda o: o.name == key)
        if owners:
            raise SourceFlagError(f"--source-option {key} is an option of source {' / '.join(owners)}, not of "
                                  f"--source {name} (its options: {', '.join(sorted(known)) or 'none'})")
        raise SourceFlagError(f"--source-option {key}: unknown option for --source {name} "
                              f"(its options: {', '.join(sorted(known)) or 'none'})")


def _builtin_descriptors() -> dict[str, SourceDescriptor]:
    return registry.BUILTIN_DESCRIPTORS  # read when called: tests declare their own


def add_source_flags(parser: argparse.ArgumentParser) -> None:
    """Add every built-in source's flagged options to ``parser`` (the ``run`` subparser),
    one argument group per source. Defaults are the declared ones (None for a required
    option, so a missing one can be named); the flag's destination is its name with ``_``
    (``--ngram-max`` -> ``args.ngram_max``)."""
    for d in _builtin_descriptors().values():
        flagged = [o for o in d.options or () if o.flag]
        if not flagged:
            continue
        others = [o for o in d.options if not o.flag and not o.from_setting]
        description = "; ".join(f"--source-option {o.name}=...: {o.help}" for o in others) or None
        group = parser.add_argument_group(f"{d.name} source (--source {d.name})",
                                          description and description.replace("%", "%%"))
        for o in flagged:
            kwargs = {"type": _flag_type(d.name, o), "default": None if o.required else o.default,
                      "help": _help(o), "action": _SourceFlag}
            if o.choices:
                kwargs["choices"] = list(o.choices)
            if o.metavar or o.kind in ("int", "float"):
                kwargs["metavar"] = o.metavar or {"int": "N", "float": "X"}[o.kind]
            group.add_argument(o.flag, *o.aliases, **kwargs)
            if o.file_flag:
                group.add_argument(o.file_flag, type=Path, metavar="F", action=_SourceFlag,
                                   help=f"read the {o.name} text from this file (UTF-8)")


MAX_TEXT_FILE_BYTES = 16 * 1024 * 1024
"""Most bytes of a text file a flag names (a prompt, a script): far beyond any context."""


def read_text_file(path: Path, what: str) -> str:
    """The UTF-8 text of ``path`` (at most ``MAX_TEXT_FILE_BYTES`` read, whatever size it reports);
    raises ``SourceFlagError`` naming ``what`` and the problem (no such file, a directory, a FIFO or
    device, too large, unreadable). Used for every file a CLI flag names."""
    try:
        return read_bounded_text(path, MAX_TEXT_FILE_BYTES, what)
    except BoundedReadError as exc:
        raise SourceFlagError(str(exc)) from None
    except FileNotFoundError:
        raise SourceFlagError(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise SourceFlagError(f"{what} {path}: is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceFlagError(f"{what} {path}: cannot read it ({exc})") from None


def source_options_from_args(args) -> dict:
    """Keyword options for ``args.source``'s factory: its flags (a ``file_flag``'s file
    read), options taken from a generation setting (``--draft-max``), then every
    ``--source-option KEY=VALUE`` (strings, checked when the source is made).

    The flag values are checked together with the source's rules (e.g. ``n_min`` <=
    ``n_max``) before anything loads. Raises ``SourceFlagError``: ``--source draft needs
    --draft-model PATH``, ``--source scripted needs --script TEXT or --script-file F``,
    ``script file F: no such file``, ``--source-option 'x': expected KEY=VALUE``, a flag or
    ``--source-option`` key of another source (``check_other_sources_options``), ..."""
    name = args.source
    check_other_sources_options(args)
    opts: dict = {}
    d = _builtin_descriptors().get(name)
    for o in (d.options if d is not None else ()):
        if o.from_setting:
            if getattr(args, o.from_setting, None) is not None:
                opts[o.name] = getattr(args, o.from_setting)
            continue
        if not o.flag:
            continue
        value = getattr(args, flag_dest(o.flag), None)
        if value is None and o.file_flag and getattr(args, flag_dest(o.file_flag), None) is not None:
            value = read_text_file(getattr(args, flag_dest(o.file_flag)), f"{o.name} file")
        if value is None:
            if o.required:
                raise SourceFlagError(f"--source {name} needs {o.flag} {o.metavar or 'VALUE'}"
                                      + (f" or {o.file_flag} F" if o.file_flag else ""))
            continue
        opts[o.name] = str(value) if isinstance(value, Path) else value
    if d is not None:
        try:
            d.check_options(opts)
        except ValueError as exc:
            raise SourceFlagError(str(exc)) from None
    given = set(getattr(args, "source_flags_given", None) or ())  # a flag and a --source-option for one option
    set_by = {o.name: o.flag for o in (d.options if d is not None else ()) if o.flag in given}
    set_by.update({o.name: "--" + o.from_setting.replace("_", "-") for o in (d.options if d is not None else ())
                   if o.from_setting and getattr(args, o.from_setting, None) is not None})
    for item in args.source_option:
        try:
            key, value = split_option(item)
        except ValueError:
            raise SourceFlagError(f"--source-option {item!r}: expected KEY=VALUE") from None
        if key in set_by:
            raise SourceFlagError(f"--source-option {key}={value} and {set_by[key]} both set option {key} of "
                                  f"--source {name}: give one of them")
        set_by[key] = f"--source-option {key}={value}"
        opts[key] = value
    return opts
