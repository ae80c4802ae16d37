"""Source descriptors: what a proposal source declares about its options and itself.

A source declares each option once (``Option``: name, kind, default, range or
choices, help, CLI flag, window label, how to check it) and its capabilities
(``SourceDescriptor.capabilities``). From these declarations the registry checks
options (``SourceDescriptor.check_options``), the CLI builds its flags
(``inspector.cli.sources``) and the window builds its source pages
(``inspector.gui.panel.source_options``). Qt-free and model-free.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable

KINDS = ("int", "float", "choice", "text", "path")
"""Option kinds: ``int`` (whole number), ``float``, ``choice`` (one of ``choices``),
``text`` (any string), ``path`` (a file name: the window offers an Open… button; a leading ``~``
is the user's home folder, ``os.path.expanduser``, as for every path flag)."""

CAPABILITIES = ("close", "settings", "loads_model", "draft_probabilities", "runs_target")
"""Known capabilities of a source (``SourceDescriptor.capabilities``; code outside ``sources/`` asks
these, never a source's name): ``close`` (made sources hold resources that
``registry.close_source`` releases), ``settings`` (made sources have ``settings()``,
a JSON dict recorded in the receipts), ``loads_model`` (the factory loads a model
file of its own and checks it against the target: slow, may refuse the file; the window says
"loading …" meanwhile and waits for a draft being made), ``draft_probabilities`` (made sources
attach the draft's distribution q to each proposal, ``Proposal.draft_probabilities``: the
``rejection`` verification rule uses it, the Statistics tab plots acceptance against q), ``runs_target``
(made sources decode on the target runtime themselves, e.g. the synthetic source's plain run of the
prompt: not model-free, so ``tune`` does not replay them and ``bench --turns`` does not compare them)."""

Converter = Callable[[str, str, Any], Any]
"""``convert(source, key, value) -> value``; raises ``ValueError`` naming the source, the
option, the observed value and the valid range."""


def _number_text(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class Option:
    """One option of a proposal source, declared once.

    ``name``: the factory's keyword (``--source-option NAME=VALUE``, compare
    ``--config SOURCE:NAME=VALUE``). ``kind``: one of ``KINDS``. ``default``: the
    value when the option is not given. ``minimum``/``maximum``: inclusive bounds
    checked for ``int`` and ``float`` (None: unbounded). ``choices``: the values of a
    ``choice`` option, a sequence of names or a mapping name -> what it does (the
    window's tooltips). ``help``: one line, the window's tooltip and the CLI help.

    Front ends: ``label`` (the window; default ``name``); ``flag`` (the dedicated
    ``spec-inspector run`` flag, e.g. ``--ngram-max``; built-in sources only, third-party
    options go through ``--source-option``), ``metavar``, ``file_flag`` (a flag that reads
    a ``text`` value from a UTF-8 file); ``required`` (an empty value refuses the run with
    ``missing``, the window's message); ``control`` (False: no control in the window,
    only ``--source-option``); ``control_max`` (the largest value the window's spin box
    offers when ``maximum`` is None); ``step`` (a ``float`` spin box's step);
    ``placeholder``, ``multiline`` (a ``text`` control of several lines), ``file_filter``
    (a ``path`` option's Open dialog filter); ``from_setting`` (the value is the generation
    setting of that name, e.g. ``draft_max``: no flag or control of its own); ``key``
    (where front ends store the value: the window's settings and panel attribute;
    default: the flag's name with ``_`` for ``-``, else ``SOURCE.NAME``).
    ``convert``: a custom ``Converter`` replacing the kind's check.
    """

    name: str
    kind: str = "text"
    default: Any = None
    help: str = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: Any = ()
    label: str = ""
    flag: str | None = None
    metavar: str | None = None
    file_flag: str | None = None
    required: bool = False
    missing: str = ""
    control: bool = True
    control_max: float | None = None
    step: float | None = None
    placeholder: str = ""
    multiline: bool = False
    file_filter: str = ""
    from_setting: str | None = None
    key: str | None = None
    convert: Converter | None = None
    aliases: tuple[str, ...] = ()
    """llama.cpp's other names for ``flag`` (``common/arg.cpp``, e.g. ``-md`` for ``--draft-model``): the
    ``run`` flag answers to each of them too."""
    writes: bool = False
    """A ``path`` option whose file the source writes as well as reads (a dynamic cache, a memory saved
    back): the command line's path check (``inspector.cli.paths``) keeps every output and every other
    input off it. Every ``path`` option is an input."""
    server_flag: str | None = None
    """The ``llama-server`` flag that sets this option (``inspector.sources.server_flags``); for a source
    whose descriptor names a ``llama_server`` type, its ``flag`` when this is None."""
    compare_column: bool = False
    """The Compare window's configurations table shows this option in a column of its own when it has
    one of that name (``n_max``, ``n_min``, ``length``: the n-gram source's declare it), not in the row's
    "other options" cell."""
    choice_help: tuple[str, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        """Raises ``ValueError`` for an unknown kind, a choice without choices, or a bad name."""
        if not isinstance(self.name, str) or not self.name or "=" in self.name or "," in self.name:
            raise ValueError(f"option name must be a non-empty string without '=' or ',', observed {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: kind must be one of {', '.join(KINDS)}, observed {self.kind!r}")
        choices = self.choices
        if isinstance(choices, Mapping):
            object.__setattr__(self, "choice_help", tuple(str(v) for v in choices.values()))
            choices = tuple(str(k) for k in choices)
        else:
            choices = tuple(str(c) for c in choices)
            object.__setattr__(self, "choice_help", ("",) * len(choices))
        object.__setattr__(self, "choices", choices)
        if self.kind == "choice" and not choices:
            raise ValueError(f"option {self.name}: a choice option needs choices")
        if not self.label:
            object.__setattr__(self, "label", self.name)

    def check(self, source: str, value: Any) -> Any:
        """``value`` (a CLI string or a typed value) converted to the option's type.

        Returns an ``int``, ``float`` or ``str`` (or what ``convert`` returns). Raises
        ``ValueError`` such as ``source ngram option n_min must be a whole number >= 1,
        observed '0'``."""
        if self.kind == "path" and isinstance(value, (str, os.PathLike)) and str(value).startswith("~"):
            value = os.path.expanduser(str(value))  # the one rule of every path the user names
        if self.convert is not None:
            return self.convert(source, self.name, value)
        where = f"source {source} option {self.name}"
        if self.kind == "int":
            try:
                number = int(value) if not isinstance(value, (bool, float)) else None
            except (TypeError, ValueError):
                number = None
            if number is None or not self._within(number):
                raise ValueError(f"{where} must be a whole number{self._range_text()}, observed {value!r}")
            return number
        if self.kind == "float":
            try:
                number = float(value) if not isinstance(value, bool) else None
            except (TypeError, ValueError):
                number = None
            if number is None or math.isnan(number) or not self._within(number):
                raise ValueError(f"{where} must be a number{self._range_text()}, observed {value!r}")
            return number
        if self.kind == "choice":
            if str(value) not in self.choices:
                names = list(self.choices)
                text = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
                raise ValueError(f"{where} must be {text}, observed {value!r}")
            return str(value)
        return "" if value is None else str(value)

    def _within(self, number: float) -> bool:
        return (self.minimum is None or number >= self.minimum) and (self.maximum is None or number <= self.maximum)

    def _range_text(self) -> str:
        lo, hi = self.minimum, self.maximum
        if lo is not None and hi is not None:
            return f" {_number_text(lo)} <= {self.name} <= {_number_text(hi)}"
        if lo is not None:
            return f" >= {_number_text(lo)}"
        if hi is not None:
            return f" <= {_number_text(hi)}"
        return ""

    def store_key(self, source: str) -> str:
        """Where front ends store the value (see ``key``): e.g. ``ngram_max`` for
        ``--ngram-max``, ``my-source.k`` for a third-party option ``k``."""
        if self.key:
            return self.key
        if self.flag:
            return self.flag.lstrip("-").replace("-", "_")
        return f"{source}.{self.name}"


@dataclass(frozen=True)
class SourceDescriptor:
    """What a proposal source declares: its ``options`` (None: not declared, the options
    are passed to the factory unchecked), ``help`` (one line: what it proposes),
    ``capabilities`` (names from ``CAPABILITIES``) and ``check``, a rule across options
    ``check(given, merged)`` (the converted options given, and the same with defaults
    filled in) that raises ``ValueError``."""

    name: str
    options: tuple[Option, ...] | None = ()
    help: str = ""
    capabilities: frozenset = frozenset()
    check: Callable[[dict, dict], None] | None = None
    llama_server: str | None = None
    """The llama-server configuration this source reproduces: its ``--spec-type`` value (a draft model:
    ``draft-simple``, which llama.cpp 0c1e570 needs beside ``--model-draft``: without it the server
    drafts nothing), None when llama-server has no equivalent (``inspector.sources.server_flags``)."""
    reasons: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Why the source may propose nothing: code -> meaning (issue 28). The source answers
    ``inspector.engine.no_proposal.NoProposal(code, detail)``; the window and ``run`` say the meaning."""

    def __post_init__(self) -> None:
        """Raises ``ValueError`` for options that are not ``Option`` or share a name."""
        if self.options is not None:
            opts = tuple(self.options)
            if not all(isinstance(o, Option) for o in opts):
                raise ValueError(f"source {self.name}: options must be Option declarations")
            names = [o.name for o in opts]
            if len(set(names)) != len(names):
                raise ValueError(f"source {self.name}: option names repeat: {', '.join(names)}")
            object.__setattr__(self, "options", opts)
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))

    @property
    def declared(self) -> bool:
        """The source declared its options (possibly none)."""
        return self.options is not None

    @property
    def loads_model(self) -> bool:
        """Capability ``loads_model``: the factory loads a model file of its own (``CAPABILITIES``)."""
        return "loads_model" in self.capabilities

    @property
    def gives_draft_probabilities(self) -> bool:
        """Capability ``draft_probabilities``: proposals carry the draft's q, so the ``rejection`` rule can
        verify them (``CAPABILITIES``)."""
        return "draft_probabilities" in self.capabilities

    @property
    def runs_target(self) -> bool:
        """Capability ``runs_target``: the source decodes on the target runtime itself (``CAPABILITIES``)."""
        return "runs_target" in self.capabilities

    @property
    def has_llama_server_equivalent(self) -> bool:
        """llama-server can run this source (``llama_server`` names its ``--spec-type``)."""
        return self.llama_server is not None

    @property
    def self_contained(self) -> bool:
        """The source needs nothing but the target's tokens: it loads no model (``loads_model``) and has
        no required option (a script, a receipts file), so ``tune`` can replay it on a recording and
        ``bench --turns`` can compare it unattended; nor does it decode on the target itself (``runs_target``)."""
        return not self.loads_model and not self.runs_target and not any(o.required for o in self.options or ())

    def compare_columns(self) -> tuple[str, ...]:
        """The names of the options the Compare window shows in columns of their own (``Option.compare_column``)."""
        return tuple(o.name for o in self.options or () if o.compare_column)

    def option(self, name: str) -> Option | None:
        """The declared option ``name``, or None."""
        return next((o for o in self.options or () if o.name == name), None)

    def defaults(self) -> dict:
        """Option name -> default, for every declared option."""
        return {o.name: o.default for o in self.options or ()}

    def check_options(self, options: Mapping) -> dict:
        """Check and convert ``options`` (name -> value, strings or typed values).

        Returns the converted options, only the names given (an undeclared source:
        ``options`` unchanged). Raises ``ValueError`` naming unknown options
        (``unknown option for source ngram: bogus (expected n_max, ...)``), or the
        source, option, observed value and range of a bad one, or the broken cross rule."""
        if self.options is None:
            return dict(options)
        known = tuple(o.name for o in self.options)
        unknown = sorted(k for k in options if k not in known)
        if unknown:
            if not known:
                raise ValueError(f"source {self.name} takes no options, observed {', '.join(unknown)}")
            raise ValueError(f"unknown option{'s' if len(unknown) > 1 else ''} for source {self.name}: "
                             f"{', '.join(unknown)} (expected {', '.join(known)})")
        out = {k: self.option(k).check(self.name, v) for k, v in options.items()}
        if self.check is not None:
            self.check(out, {**self.defaults(), **out})
        return out

    def with_defaults(self, options: Mapping) -> dict:
        """``check_options(options)`` with the defaults of the options not given
        (an undeclared source: ``options`` unchanged)."""
        out = self.check_options(options)
        if self.options is None:
            return out
        return {**self.defaults(), **out}


def descriptor_from(name: str, declared: Any) -> SourceDescriptor:
    """The descriptor of a factory (or any object) ``declared``: its ``descriptor``
    attribute (a ``SourceDescriptor``, renamed to ``name``), else its ``options`` (a
    sequence of ``Option`` or of dicts of ``Option`` fields) with ``capabilities`` and
    ``help`` (its docstring's first line by default), else an undeclared descriptor.
    Raises ``ValueError`` for a malformed declaration."""
    d = getattr(declared, "descriptor", None)
    if d is not None:
        if not isinstance(d, SourceDescriptor):
            raise ValueError(f"source {name}: descriptor must be a SourceDescriptor, observed {type(d).__name__}")
        return d if d.name == name else replace(d, name=name)
    options = getattr(declared, "options", None)
    if options is None or callable(options):
        return SourceDescriptor(name, None, help=_first_line(declared))
    if isinstance(options, (str, bytes, Mapping)):
        raise ValueError(f"source {name}: options must be a sequence of Option, observed {type(options).__name__}")
    try:
        opts = tuple(o if isinstance(o, Option) else Option(**o) for o in options)
    except TypeError as exc:
        raise ValueError(f"source {name}: bad option declaration ({exc})") from None
    return SourceDescriptor(name, opts, help=str(getattr(declared, "help", "") or _first_line(declared)),
                            capabilities=frozenset(getattr(declared, "capabilities", ()) or ()),
                            reasons=dict(getattr(declared, "reasons", None) or {}))


def _first_line(obj: Any) -> str:
    doc = getattr(obj, "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def split_option(item: str) -> tuple[str, str]:
    """One source option written ``KEY=VALUE`` -> ``(key, value)``, both stripped (the value keeps any
    ``=`` after the first). The one rule for ``--source-option``, ``compare --config`` and the Compare
    window's options cell. Raises ``ValueError`` naming ``item`` when it has no ``=`` or no key."""
    key, eq, value = item.partition("=")
    if not eq or not key.strip():
        raise ValueError(f"{item.strip()!r} is not key=value")
    return key.strip(), value.strip()


def parse_options(text: str) -> dict[str, str]:
    """``"key=value, key=value"`` -> ``{key: value}`` (strings; empty parts skipped; ``split_option``
    per part). Raises ``ValueError`` naming the first bad part."""
    return dict(split_option(part) for part in text.split(",") if part.strip())

