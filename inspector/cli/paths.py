"""Output paths of the command line, checked before any work starts (issue 25).

Every file a command writes (``--receipts``, ``--autosave``, ``compare``/``bench`` ``--json`` and
``--csv``, ``trace -o``) must be writable where it is (its folder is created, as ``run --receipts``
always did), must not be a folder or a special file, and must never be one of the command's inputs
(``--prompt-file``, ``--replay``, ``--turns``, ``--model``, ...) or another of its outputs: real
paths are compared, so a symlink or ``./`` spelling cannot sneak past. A refused path is a usage
error (exit 2) before the model loads, so no run's work is lost to a path found bad at the end.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from inspector.prompts import turns_path

OUTPUTS = (("receipts", "--receipts"), ("autosave", "--autosave"), ("json", "--json"), ("csv", "--csv"),
           ("out", "-o/--out"), ("session", "--session"))
"""``(args attribute, option name)`` of every file output (``make-draft --out`` is a folder: not here)."""

INPUTS = (("prompt_file", "--prompt-file"), ("turns", "--turns"), ("replay", "--replay"),
          ("script_file", "--script-file"), ("model", "--model"), ("draft_model", "--draft-model"),
          ("file", "the input FILE"))
"""``(args attribute, option name)`` of every input file an output must not replace."""


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


def _inputs(args) -> list[tuple[str, str]]:
    """``(real path, option name)`` of the input files ``args`` names (a bundled ``--turns`` name counts
    as its bundled file)."""
    found = []
    for attr, flag in INPUTS:
        value = getattr(args, attr, None)
        if value in (None, ""):
            continue
        if attr == "turns":
            value = turns_path(value)
        found.append((_real(value), flag))
    return found


def check_outputs(args) -> None:
    """Check every output path of a parsed command line ``args`` before any work (``check_output_path``),
    and that no output is an input or another output (real paths). Raises ``OutputPathError``."""
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
