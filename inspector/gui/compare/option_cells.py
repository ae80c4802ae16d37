"""What a Compare configuration row's "other options" cell offers for its source: the declared
options without a column of their own, their defaults and ranges, as the cell's placeholder and
tooltip (``options_hint``). The configurations panel (``inspector.gui.compare.configs``) uses it.
"""

from __future__ import annotations

from inspector.sources.registry import PLAIN
from inspector.sources.registry import describe_source

OPTION_COLUMNS = {"n_max": 3, "n_min": 4, "length": 5}
"""The options with a column of their own (column index; laid out for the n-gram source's): a source's
option of one of these names goes in the column when its declaration marks it ``compare_column``, every
other option in the options cell."""


def describe(source: str):
    """The source's ``SourceDescriptor``, or None when it cannot be read (a broken plugin)."""
    try:
        return describe_source(source)
    except Exception:  # noqa: BLE001 - an entry point that fails to import: no hint, the run reports it
        return None


def column_options(source: str) -> frozenset[str]:
    """The names of ``OPTION_COLUMNS`` whose column ``source`` uses: its options declared
    ``compare_column`` (``SourceDescriptor.compare_columns``); none for a source that cannot be described."""
    d = describe(source)
    return frozenset(n for n in d.compare_columns() if n in OPTION_COLUMNS) if d is not None else frozenset()


def cell_options(source: str) -> list | None:
    """The declared options of ``source`` that belong in the options cell (not set by a column or by
    the generation's draft max); None when the source does not declare its options."""
    d = describe(source)
    if d is None or d.options is None:
        return None
    skip = column_options(source)
    return [o for o in d.options if o.name not in skip and not o.from_setting]


def _default_text(o) -> str:
    if o.default is None or o.default == "":
        return ""
    return f"{o.default:g}" if isinstance(o.default, float) else str(o.default)


def _range_text(o) -> str:
    if o.convert is not None:  # a custom check: its help says what it takes
        return ""
    if o.kind == "choice":
        return "one of " + ", ".join(o.choices)
    if o.kind in ("int", "float"):
        word = "whole number" if o.kind == "int" else "number"
        lo, hi = o.minimum, o.maximum
        if lo is not None and hi is not None:
            return f"{word} {lo:g} to {hi:g}"
        if lo is not None:
            return f"{word} >= {lo:g}"
        return f"{word} <= {hi:g}" if hi is not None else word
    return "file name" if o.kind == "path" else "text"


def options_hint(source: str) -> tuple[str, str]:
    """(placeholder, tooltip) of a row's "other options" cell for ``source``: its declared options
    (those without a column of their own) with their defaults, what each takes and what it does."""
    if source == PLAIN:
        return "plain decoding takes no options", "source none (plain decoding) takes no options"
    opts = cell_options(source)
    if opts is None:
        return ("key=value, … (this source does not declare its options)",
                f"source {source} does not declare its options: they are passed to it as typed")
    if not opts:
        return "no further options", f"source {source}: every option has a column of its own"
    d = describe(source)
    given = [f"{o.name}={_default_text(o)}" for o in opts if _default_text(o)]
    unset = [o.name for o in opts if not _default_text(o)]
    placeholder = "defaults: " + ", ".join(given) if given else ""
    if unset:
        placeholder += ("; " if placeholder else "") + "optional: " + ", ".join(unset)
    lines = [f"{source}: {d.help}" if d.help else source,
             "Options as key=value, separated by commas; empty: the defaults."]
    for o in opts:
        takes = _range_text(o)
        lines.append(f"• {o.name} (default {_default_text(o) or 'not set'}{'; ' + takes if takes else ''}): {o.help}")
    return placeholder, "\n".join(lines)
