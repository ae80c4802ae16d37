"""The files of a command line, checked before any work starts (issues 25 and 37).

Every file a command writes (``--receipts``, ``--autosave``, ``compare``/``bench`` ``--json`` and
``--csv``, ``trace -o``, ``serve --session``) must be writable where it is (its folder is created, as
``run --receipts`` always did), must not be a folder or a special file, and must never be one of the
command's inputs or another of its outputs. The inputs are the command's own file flags
(``INPUTS``: ``--prompt-file``, ``--turns``, ``--model``, ``--llama-server`` PATH, the input FILE)
and every file a proposal source is given, wherever it is named: a source's flag (``--replay``,
``--draft-model``, ``--script-file``, ``--lookup-cache-static``, ...), ``--source-option KEY=PATH``
and ``compare``/``bench`` ``--config SOURCE:KEY=PATH``. Which options are files comes from the
sources' declarations (``Option`` kind ``path``; ``writes``: the source also writes it, as the
dynamic lookup cache and the suffix memory, so no other input may be that file either). Real paths
are compared, so a symlink or ``./`` spelling cannot sneak past. A refused path is a usage error
(exit 2) before the model loads, so no run's work is lost to a path found bad at the end.

One rule for ``~``: a path flag's leading ``~`` is the user's home folder (``expand_user_paths``,
``os.path.expanduser``), as the shell does for a word it sees (``--receipts=~/r.json`` or a quoted
``"~/r.json"`` reach the program unexpanded); a source option's path the same
(``inspector.sources.descriptors.Option.check``).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from inspector.cli.sources import flag_dest
from inspector.prompts import turns_path
from inspector.sources import registry
from inspector.sources.descriptors import SourceDescriptor, split_option

OUTPUTS = (("receipts", "--receipts"), ("autosave", "--autosave"), ("json", "--json"), ("csv", "--csv"),
           ("out", "-o/--out"), ("session", "--session"))
"""``(args attribute, option name)`` of every file output (``make-draft --out`` is a folder: not here)."""

INPUTS = (("prompt_file", "--prompt-file"), ("turns", "--turns"), ("model", "--model"),
          ("llama_server", "--llama-server"), ("file", "the input FILE"))
"""``(args attribute, option name)`` of the command's own input files an output must not replace; the
proposal sources' files come from their declarations (``source_files``)."""

SOURCE_COMMANDS = ("run", "compare", "bench", "serve")
"""The commands that make proposal sources, which write the files of ``Option.writes`` options."""

TEXT_PATHS = ("turns", "llama_server")
"""Attributes holding a path as text (a bundled turns name, a URL otherwise): ``~`` is expanded there too."""


def expand_user_paths(args) -> None:
    """Expand a leading ``~`` in every path of a parsed command line ``args``, in place: each ``Path``
    value (every path flag has ``type=Path``), each list of them, and ``TEXT_PATHS``. The one rule, so
    the path the check sees is the path the command writes."""
    for name, value in vars(args).items():
        if isinstance(value, Path):
            setattr(args, name, Path(os.path.expanduser(value)))
        elif isinstance(value, list) and value and all(isinstance(v, Path) for v in value):
            setattr(args, name, [Path(os.path.expanduser(v)) for v in value])
        elif name in TEXT_PATHS and isinstance(value, str) and value.startswith("~"):
            setattr(args, name, os.path.expanduser(value))


class OutputPathError(ValueError):
    """An output path that cannot be written, or that would replace an input; one line naming the option."""


def _real(path) -> str:
    return os.path.realpath(os.path.expanduser(str(path)))


def check_output_path(path, flag: str) -> None:
    """Check that ``path`` (the value of option ``flag``) can be written: not a folder, not a special
    file (FIFO, device, socket), its folder created when missing and writable (a file is made and
    removed there: permission bits alone do not tell, e.g. for root or a read-only mount). Raises
    ``OutputPathError`` with one line saying what was found and what is needed."""
    p = Path(os.path.expanduser(str(path)))
    if str(path) == "" or p.name in ("", ".", ".."):
        raise OutputPathError(f"{flag} {str(path)!r}: expected a file path, observed a folder name")
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise OutputPathError(f"{flag} {p}: a part of {p.parent} is a file, not a folder; expected a path in a "
                              "folder") from None
    except OSError as exc:
        raise OutputPathError(f"{flag} {p}: cannot check it ({exc.strerror or exc}); expected a writable file path") \
            from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise OutputPathError(f"{flag} {p} is a folder; expected a file path (e.g. {p / 'out.json'})")
        if not stat.S_ISREG(st.st_mode):
            raise OutputPathError(f"{flag} {p} is a special file (FIFO, device or socket); expected a regular file")
    folder = p.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputPathError(f"{flag} {p}: {folder} is a file, not a folder; expected a path in a folder") from None
    except NotADirectoryError:
        raise OutputPathError(f"{flag} {p}: a part of {folder} is a file, not a folder; expected a path in a "
                              "folder") from None
    except OSError as exc:
        raise OutputPathError(f"{flag} {p}: cannot create the folder {folder} ({exc.strerror or exc})") from None
    if not folder.is_dir():
        raise OutputPathError(f"{flag} {p}: {folder} is not a folder; expected a path in a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".spec-inspector-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputPathError(f"{flag} {p}: the folder {folder} is not writable ({exc.strerror or exc}); "
                              "expected a folder this user can write in") from None


def _described(name: str) -> SourceDescriptor | None:
    """Source ``name``'s declaration, or None when it is unknown or undeclared (its own check says so later)."""
    try:
        d = registry.describe_source(name)
    except Exception:  # an unknown name, a plugin that fails to load: refused by the command, with its message
        return None
    return d if d.options is not None else None


def _option_files(d: SourceDescriptor, items, label) -> list[tuple[str, str, bool]]:
    """``(path, option name, written)`` of the ``path`` options among ``items`` (``KEY=VALUE`` strings)."""
    found = []
    for item in items:
        try:
            key, value = split_option(item)
        except ValueError:  # malformed: the command refuses it with its own message
            continue
        o = d.option(key)
        if o is not None and o.kind == "path" and value:
            found.append((value, label(key), o.writes))
    return found


def source_files(args) -> list[tuple[str, str, bool]]:
    """``(path, option name, written)`` of every file the proposal sources of ``args`` are given: the
    built-in sources' flags (``--replay F``, ``--lookup-cache-dynamic F``; a ``file_flag`` such as
    ``--script-file F`` is read), ``--source-option KEY=PATH`` of ``args.source`` (``run``, ``serve``)
    and each ``--config SOURCE:KEY=PATH,...`` (``compare``, ``bench``). ``written``: the declaration's
    ``Option.writes``."""
    found = []
    for d in registry.BUILTIN_DESCRIPTORS.values():
        for o in d.options or ():
            if o.flag and o.kind == "path" and getattr(args, flag_dest(o.flag), None) not in (None, ""):
                found.append((getattr(args, flag_dest(o.flag)), o.flag, o.writes))
            if o.file_flag and getattr(args, flag_dest(o.file_flag), None) not in (None, ""):
                found.append((getattr(args, flag_dest(o.file_flag)), o.file_flag, False))
    source = getattr(args, "source", None)
    if isinstance(source, str) and getattr(args, "source_option", None):
        d = _described(source)
        if d is not None:
            found += _option_files(d, args.source_option, lambda key: f"--source-option {key}")
    configs = getattr(args, "config", None) or []
    for text in [configs] if isinstance(configs, str) else configs:
        name, _, rest = str(text).partition(":")
        d = _described(name.strip())
        if d is not None:
            found += _option_files(d, rest.split(","), lambda key, n=name.strip(): f"--config {n}:{key}")
    return found


def _inputs(args) -> list[tuple[str, str]]:
    """``(real path, option name)`` of the input files ``args`` names (a bundled ``--turns`` name counts
    as its bundled file; a ``--llama-server`` URL is no file), the sources' files included."""
    found = []
    for attr, flag in INPUTS:
        value = getattr(args, attr, None)
        if value in (None, ""):
            continue
        if attr == "turns":
            value = turns_path(value)
        if attr == "llama_server" and "://" in str(value):
            continue
        found.append((_real(value), flag))
    return found + [(_real(value), flag) for value, flag, _written in source_files(args)]


def check_outputs(args) -> None:
    """Check every output path of a parsed command line ``args`` before any work (``check_output_path``),
    that no output is an input or another output, and that no file a source writes is another input
    (real paths). Raises ``OutputPathError``."""
    outputs = [(getattr(args, attr), flag) for attr, flag in OUTPUTS if getattr(args, attr, None) not in (None, "")]
    if getattr(args, "command", None) == "make-draft":  # its --out is a folder
        outputs = [(v, f) for v, f in outputs if f != "-o/--out"]
    inputs = _inputs(args)
    seen: dict[str, str] = {}
    for value, flag in outputs:
        real = _real(value)
        for other, other_flag in inputs:
            if real == other:
                raise OutputPathError(f"{flag} {value} is also {other_flag}: writing it would replace that input; "
                                      "expected a path of its own")
        if real in seen:
            raise OutputPathError(f"{flag} {value} is also {seen[real]}: each output needs a path of its own")
        seen[real] = flag
        check_output_path(value, flag)
    if getattr(args, "command", None) not in SOURCE_COMMANDS:  # e.g. flags: prints, runs no source
        return
    for value, flag, written in source_files(args):
        real = _real(value)
        for other, other_flag in inputs if written else ():
            if real == other and other_flag != flag:  # the same option of two configurations shares its file
                named = f"{flag}={value}" if flag.startswith(("--source-option ", "--config ")) else f"{flag} {value}"
                raise OutputPathError(f"{named} is also {other_flag}: the source writes it, which would replace that "
                                      "input; expected a path of its own")
