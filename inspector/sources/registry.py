"""Which proposal sources exist, what options they take, and how one is made.

Every source is registered one way: a factory that carries its declaration. A factory is called as
``factory(context: SourceContext, **options)`` and returns a ``ProposalSource``
(``inspector.engine.proposal``); it declares its options and capabilities with one of these
attributes (read when it is listed; a plugin's when its entry point is loaded):

- ``descriptor``: a ``SourceDescriptor`` (``inspector.sources.descriptors``: its ``options``,
  ``help``, ``capabilities``, ``reasons``, an optional cross-option ``check``);
- ``options``: a sequence of ``Option`` (or of dicts of ``Option`` fields, for packages that do
  not import ``inspector``), with optional ``capabilities`` (names from
  ``descriptors.CAPABILITIES``), ``reasons`` and ``help`` (else the docstring's first line).

The built-in factories are listed in ``BUILTIN_FACTORIES`` (each defined beside its source, e.g.
``ngram.make_ngram`` with ``ngram.NGRAM``); a package lists its own in the Python entry-point group
``spec_inspector.sources``. From the declarations the CLI makes its flags, ``--source-option`` and
compare ``--config`` are checked, and the window makes a source page (no GUI code); code outside
``sources/`` asks a declaration's capabilities (``SourceDescriptor.loads_model``, ...), never a name.

A declared factory receives checked, converted values (``int``, ``float``, ``str``)
with the defaults of options not given filled in; an unknown option is refused by
name before the factory runs. A factory without declarations still works: it receives the
options as given (strings from ``--source-option key=value``; nothing from the window) and checks
them itself. Third-party options have no dedicated CLI flags: ``--source-option``.

"Unknown proposal source" is decided only in ``resolve_source`` (``UnknownSource``);
``make_source`` makes a source from its name, context and options.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any, Callable, Mapping

from inspector.engine.proposal import ProposalSource
from inspector.sources.descriptors import SourceDescriptor, descriptor_from
from inspector.sources.draft import make_draft
from inspector.sources.llama_ngram_cache import make_ngram_cache
from inspector.sources.llama_ngram_map import make_ngram_map_k, make_ngram_map_k4v, make_ngram_simple
from inspector.sources.llama_ngram_mod import make_ngram_mod
from inspector.sources.ngram import make_ngram
from inspector.sources.replay import make_replay
from inspector.sources.scripted import make_scripted
from inspector.sources.suffix.source import make_suffix
from inspector.sources.synthetic import make_synthetic

ENTRY_POINT_GROUP = "spec_inspector.sources"
PLAIN = "none"
"""The source name of plain one-token decoding (no source is made)."""
log = logging.getLogger(__name__)


@dataclass
class SourceContext:
    """What a source factory may use: the target's runtime (tokenize, token_text,
    n_vocab, n_ctx) and the request's settings.

    ``row_costs``: the verify cost c(k) measured for this runtime (ms per batch of
    k = 1.. rows), or None; the caller looks it up (``inspector.llama.cost_cache.
    stored_row_costs``), so sources never reach up into ``bench``.

    ``memory``: state a source keeps across the requests of one session (the turns of a
    conversation, the runs of one window session): the same dict is handed to every
    factory call of the session. A source keeps its state under its own key, e.g.
    ``ctx.memory.setdefault(("ngram-mod", n), Pool(...))`` (options that shape the state
    belong in the key), and bounds what it keeps.

    ``prompt_tokens``: the request's prompt (token ids) when it is known as the source is made (a
    ``SessionRun`` tokenizes first), else None. ``scheduler``: the ``RuntimeScheduler`` that locks
    ``runtime`` for the request, when the caller has one: a source that decodes on the target itself
    (capability ``runs_target``) goes through it, so no other thread's decode runs beside its own."""

    runtime: Any
    settings: Any = None
    extra: dict = field(default_factory=dict)
    row_costs: tuple[float, ...] | None = None
    memory: dict = field(default_factory=dict)
    prompt_tokens: tuple[int, ...] | None = None
    scheduler: Any = None


SourceFactory = Callable[..., ProposalSource]

BUILTIN_FACTORIES: tuple[SourceFactory, ...] = (
    make_ngram, make_scripted, make_draft, make_replay, make_ngram_simple, make_ngram_map_k, make_ngram_map_k4v,
    make_ngram_mod, make_ngram_cache, make_suffix, make_synthetic)
"""Every built-in source, in the order ``--source`` lists them: each a factory carrying its declaration
(``descriptor``), as a plugin's entry point names one."""

BUILTIN: dict[str, SourceFactory] = {f.descriptor.name: f for f in BUILTIN_FACTORIES}
"""Built-in source name -> its factory."""

BUILTIN_DESCRIPTORS: dict[str, SourceDescriptor] = {name: descriptor_from(name, f) for name, f in BUILTIN.items()}
"""Built-in source name -> its declaration (read from its factory, as a plugin's is)."""

PLAIN_SOURCE = SourceDescriptor(PLAIN, (), help="no proposals: plain one-token decoding")


class UnknownSource(ValueError):
    """A source name that is neither installed nor ``none``. ``name``: the name asked
    for; ``known``: the names that exist (built-in, entry points, then ``none``)."""

    def __init__(self, name: str, known) -> None:
        self.name = name
        self.known = tuple(known)
        super().__init__(f"unknown proposal source {name!r}: expected one of {', '.join(self.known)}")


class EntryPointFactory:
    """The factory of an entry point, imported on first use (``load``)."""

    def __init__(self, ep) -> None:
        self.ep = ep
        self.__doc__ = f"entry point {ep.value}"

    def load(self):
        """The object the entry point names (the plugin's factory); raises what importing it raises."""
        return self.ep.load()

    def __call__(self, ctx: SourceContext, **options) -> ProposalSource:
        return self.load()(ctx, **options)


def available_sources() -> dict[str, SourceFactory]:
    """Name -> factory for every source: built-in first, then entry points
    (a third-party name that clashes with a built-in one is ignored, logged). The entry points are read
    once per import path (``sys.path``): reading them opens every installed package's metadata, ~20 ms
    of Python that ``serve`` would otherwise spend on every request while its other slots decode."""
    found = dict(BUILTIN)
    for ep in _plugin_entry_points(tuple(sys.path)):
        if ep.name in found:
            log.warning("ignoring proposal source %r from %s: the name is taken", ep.name, ep.value)
            continue
        found[ep.name] = EntryPointFactory(ep)
    return found


def refresh_installed_sources() -> None:
    """Forget the entry points read so far: the next ``available_sources`` reads the installed packages again
    (after installing a source package into the running process's environment)."""
    _plugin_entry_points.cache_clear()


@lru_cache(maxsize=4)
def _plugin_entry_points(path: tuple[str, ...]) -> tuple:
    """The ``ENTRY_POINT_GROUP`` entry points installed on import path ``path`` (the key: a package added to
    ``sys.path`` is found)."""
    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def source_names() -> list[str]:
    """Every name ``--source`` takes: the available sources in order, then ``none``."""
    return [*available_sources(), PLAIN]


def resolve_source(name: str) -> SourceFactory | None:
    """The factory of source ``name`` (None for ``none``), without loading anything.

    The one place that decides "unknown proposal source": raises ``UnknownSource``
    (``unknown proposal source 'x': expected one of ngram, scripted, draft, replay, ..., none``)."""
    if name == PLAIN:
        return None
    factories = available_sources()
    if name not in factories:
        raise UnknownSource(name, [*factories, PLAIN])
    return factories[name]


def self_contained_sources() -> tuple[str, ...]:
    """The built-in sources, in their order, whose declaration is ``self_contained`` (no model of their own,
    no required option): those ``tune`` replays and ``bench --turns`` compares."""
    return tuple(name for name, d in BUILTIN_DESCRIPTORS.items() if d.self_contained)

def check_source_name(name: str) -> str:
    """``name`` if it is a source or ``none``; raises ``UnknownSource`` (see ``resolve_source``)."""
    resolve_source(name)
    return name


def describe_source(name: str) -> SourceDescriptor:
    """The declaration of source ``name``: a built-in's, ``none``'s (no options), or what a
    third-party factory declares (``descriptor``/``options``, see the module docstring;
    loading its entry point). A factory without declarations gives a descriptor with
    ``options`` None. Raises ``UnknownSource``, ``ValueError`` for a malformed
    declaration, or what importing the plugin raises."""
    factory = resolve_source(name)
    if factory is None:
        return PLAIN_SOURCE
    if name in BUILTIN_DESCRIPTORS:  # a name of a built-in is always the built-in (or a test's stand-in)
        return BUILTIN_DESCRIPTORS[name]
    return descriptor_from(name, factory.load() if isinstance(factory, EntryPointFactory) else factory)


def declaration_or_none(name: str) -> SourceDescriptor | None:
    """``describe_source(name)``, or None when ``name`` is unknown, its declaration is malformed or its
    plugin cannot be imported (for a question such as "does it load a model", whose answer is then no)."""
    try:
        return describe_source(name)
    except (ValueError, ImportError):  # UnknownSource is a ValueError
        return None


def declares_option(name: str, option: str) -> bool:
    """Source ``name`` declares an option called ``option`` (False when it is unknown or declares none)."""
    d = declaration_or_none(name)
    return d is not None and d.option(option) is not None


def check_source_options(source: str, options: Mapping) -> dict:
    """Check and convert the options of a source before anything loads, by its declaration.

    ``options``: key -> value, strings from the CLI (``--source-option``,
    ``compare --config``) or typed values. Returns the converted options (only
    the keys given). Raises ``ValueError`` naming the source, the option, the
    observed value and the valid range (e.g. ``source ngram option n_min must
    be a whole number >= 1, observed '0'``), or the unknown options
    (``unknown option for source ngram: bogus (expected n_max, ...)``;
    ``none`` takes none), and ``UnknownSource`` for an unknown source. Ranges:
    ngram ``n_max``, ``n_min`` >= 1 with ``n_min`` <= ``n_max`` (defaults 4
    and 2), ``length`` fixed or adaptive, ``row_cost_ratio`` >= 0,
    ``row_costs`` > 0 each; draft ``draft_max`` >= 1 (``DraftModelSource``),
    ``draft_min`` >= 0, ``p_min`` 0..1. A third-party source without
    declarations gets its options back unchanged (its factory checks them).
    """
    return describe_source(source).check_options(options)


def make_source(name: str, context: SourceContext, options: Mapping) -> ProposalSource | None:
    """Make source ``name`` for ``context`` with ``options`` (key -> value); None for ``none``.

    A declared source's options are checked and converted (``check_source_options``),
    an option taken from a generation setting (``Option.from_setting``, e.g. the draft's
    ``draft_max``) and not given comes from ``context.settings``, and the defaults of the
    others are filled in; an undeclared third-party factory gets ``options`` unchanged.
    Raises ``UnknownSource``, ``ValueError`` for bad options (``none`` takes none), and
    what the factory raises (``IncompatibleDraft``, ``ModelFileError``,
    ``ReceiptsFileError``, ... for a third-party factory anything)."""
    factory = resolve_source(name)
    descriptor = describe_source(name)
    given = dict(options)
    for o in descriptor.options or ():
        if o.from_setting and o.name not in given and hasattr(context.settings, o.from_setting):
            given[o.name] = getattr(context.settings, o.from_setting)
    checked = descriptor.with_defaults(given)
    if factory is None:
        return None
    return factory(context, **checked)


def source_settings(source) -> dict:
    """What a made source records in the receipts: its ``settings()`` (capability
    ``settings``), ``{}`` for None or a source without it."""
    settings = getattr(source, "settings", None)
    return dict(settings()) if callable(settings) else {}


def warm_text(source) -> str:
    """What ``source`` remembered before this request began, in words (its optional ``warm_state()``,
    issue 28 "Warm state, said"), e.g. ``1,204 tokens remembered from 3 earlier requests``; "" when it
    starts cold, has no such method, or the method fails (logged)."""
    warm = getattr(source, "warm_state", None)
    if warm is None:
        return ""
    try:
        return str(warm() or "")
    except Exception:  # a third-party source's failure costs the receipts this line only
        log.exception("proposal source %s failed in warm_state()", getattr(source, "name", "?"))
        return ""


def close_source(source) -> None:
    """Release what a factory-made source holds (capability ``close``): its ``close()``,
    then the draft runtime a ``draft`` factory loaded for it (the factory's source owns it).
    A failing ``close()`` is logged and the draft runtime is still closed (closing never raises)."""
    if source is None:
        return
    try:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    except Exception:
        log.exception("closing proposal source %s failed", getattr(source, "name", source))
    draft = getattr(source, "draft", None)
    if draft is not None and hasattr(draft, "close"):
        try:
            draft.close()
        except Exception:
            log.exception("closing the draft runtime failed")

