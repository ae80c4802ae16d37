"""Which proposal sources exist, what options they take, and how one is made.

Built-in sources (``BUILTIN``) and third-party ones: a package registers a factory
in the Python entry-point group ``spec_inspector.sources``. A factory is called as
``factory(context: SourceContext, **options)`` and returns a ``ProposalSource``
(``inspector.engine.proposal``).

Options are declared once per source (``inspector.sources.descriptors``): the CLI
flags, ``--source-option`` and compare ``--config`` checks, and the window's
source pages are generated from the declarations. A third-party factory declares
its options with one of these attributes (read when the entry point is loaded):

- ``descriptor``: a ``SourceDescriptor`` (its ``options``, ``help``,
  ``capabilities``, an optional cross-option ``check``);
- ``options``: a sequence of ``Option`` (or of dicts of ``Option`` fields, for
  packages that do not import ``inspector``), with optional ``capabilities``
  (names from ``descriptors.CAPABILITIES``) and ``help`` (else the docstring's first
  line).

A declared factory receives checked, converted values (``int``, ``float``, ``str``)
with the defaults of options not given filled in; an unknown option is refused by
name before the factory runs; the window shows a control per option (no GUI code).
A factory without declarations still works: it receives the options as given
(strings from ``--source-option key=value``; nothing from the window) and checks
them itself. Third-party options have no dedicated CLI flags: ``--source-option``.

"Unknown proposal source" is decided only in ``resolve_source`` (``UnknownSource``);
``make_source`` makes a source from its name, context and options.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable, Mapping

from inspector.engine.proposal import ProposalSource
from inspector.sources.descriptors import Option, SourceDescriptor, descriptor_from
from inspector.sources.draft import REASONS as draft_reasons
from inspector.sources.ngram import REASONS as ngram_reasons
from inspector.sources.replay import REASONS as replay_reasons
from inspector.sources.scripted import REASONS as scripted_reasons
from inspector.sources.suffix import LENGTHS as suffix_lengths
from inspector.sources.suffix import REASONS as suffix_reasons

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
    belong in the key), and bounds what it keeps."""

    runtime: Any
    settings: Any = None
    extra: dict = field(default_factory=dict)
    row_costs: tuple[float, ...] | None = None
    memory: dict = field(default_factory=dict)


SourceFactory = Callable[..., ProposalSource]


def _row_cost_ratio(source: str, key: str, value) -> float | None:
    if value in (None, "", "auto"):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not (number >= 0 and number != float("inf")):
        raise ValueError(f"source {source} option {key} must be auto or a finite number >= 0 (cost of one more "
                         f"row as a fraction of a one-row decode), observed {value!r}")
    return number


def _row_costs(source: str, key: str, value):
    """None (not given: the context's stored table), ``"linear"`` (``""`` too: no table) or
    the milliseconds per batch of 1, 2, ... rows."""
    if value is None:
        return None
    if isinstance(value, str) and value in ("", "linear"):
        return "linear"
    items = value.split(",") if isinstance(value, str) else value
    try:
        costs = [float(v) for v in items]
    except (TypeError, ValueError):
        costs = []
    if not costs or not all(0 < c < float("inf") for c in costs):
        raise ValueError(f"source {source} option {key} must be linear or positive milliseconds per batch of "
                         f"1, 2, ... rows (\"a,b,c\"), observed {value!r}")
    return costs


def _ngram_sizes(given: dict, merged: dict) -> None:
    """The n-gram source's cross rule: ``n_min`` <= ``n_max`` (names a default used)."""
    n_min, n_max = merged["n_min"], merged["n_max"]
    if n_min > n_max:
        shown = [f"{k}={v}" + ("" if k in given else " (the default)") for k, v in (("n_min", n_min), ("n_max", n_max))]
        raise ValueError(f"source ngram options must satisfy 1 <= n_min <= n_max, observed {', '.join(shown)}")


NGRAM_LENGTHS = {
    "fixed": "propose everything that followed the match, up to draft max (llama.cpp's prompt lookup)",
    "adaptive": "propose the length that buys the most tokens per unit of verification cost "
                "(the stored cost model, acceptance learned per match length from the receipts); nothing when "
                "a plain step is cheaper, so on a CPU where verifying is expensive it may propose nothing at all",
}
"""The n-gram source's ``length`` option: name -> what it does (the first is the default)."""

NGRAM = SourceDescriptor("ngram", (
    Option("n_max", "int", 4, "longest n-gram to match (tokens; one table per size: bounded)", minimum=1, maximum=16,
           control_max=16, flag="--ngram-max"),
    Option("n_min", "int", 2, "shortest n-gram to match (tokens)", minimum=1, maximum=16, control_max=16,
           flag="--ngram-min"),
    Option("length", "choice", "fixed", "proposal length", choices=NGRAM_LENGTHS, flag="--ngram-length"),
    Option("row_cost_ratio", default=None, convert=_row_cost_ratio, control=False,
           help="adaptive length: auto, or the cost of one more row as a fraction of a one-row decode"),
    Option("row_costs", default=None, convert=_row_costs, control=False,
           help="adaptive length: linear, or ms per batch of 1, 2, ... rows (\"a,b,c\"); default: the stored "
                "cost model"),
), help="prompt lookup: the tokens that followed the last earlier match of the last n tokens",
    capabilities=frozenset({"settings"}), check=_ngram_sizes, reasons=ngram_reasons)

DRAFT = SourceDescriptor("draft", (
    Option("draft_model", "path", "", "the draft model file (GGUF); it must share the target's vocabulary",
           label="draft model", flag="--draft-model", metavar="PATH", required=True,
           missing="Choose a draft GGUF (Open…) or press “Make draft from target”.",
           placeholder="draft GGUF: Open… or Make draft", file_filter="GGUF models (*.gguf);;All files (*)",
           server_flag="--model-draft", aliases=("-md", "--model-draft", "--spec-draft-model")),
    Option("draft_max", "int", 8, "most tokens drafted per window (the generation's draft max)", minimum=1,
           from_setting="draft_max", server_flag="--spec-draft-n-max"),
    Option("draft_min", "int", 0, "drop drafts shorter than this (tokens; 0 = keep all)", minimum=0,
           maximum=64, control_max=64, label="draft min", flag="--draft-min", server_flag="--spec-draft-n-min",
           aliases=("--draft-n-min", "--spec-draft-n-min")),
    Option("p_min", "float", 0.0, "stop drafting when the draft's top probability is below this (0 = never)",
           minimum=0.0, maximum=1.0, step=0.05, label="p-min", flag="--p-min", server_flag="--spec-draft-p-min",
           aliases=("--draft-p-min", "--spec-draft-p-min")),
    Option("n_gpu_layers", "int", -1, "layers of the draft model on a local GPU (llama.cpp -ngld; -1: llama.cpp's "
           "default, all of them when there is a GPU; the draft never goes over RPC)", minimum=-1, maximum=2147483647,
           control=False,
           flag="--n-gpu-layers-draft", server_flag="--gpu-layers-draft",
           aliases=("-ngld", "--gpu-layers-draft", "--spec-draft-ngl")),
), help="a draft model (a smaller or re-quantized GGUF) drafts tokens in its own llama.cpp context",
    capabilities=frozenset({"settings", "close", "loads_model"}), llama_server="draft-simple",
    reasons=draft_reasons)

SCRIPTED = SourceDescriptor("scripted", (
    Option("script", "text", "", "text whose tokens are proposed as the continuation", flag="--script",
           metavar="TEXT", file_flag="--script-file", required=True, missing="The scripted source needs a script text.",
           multiline=True, placeholder="script text: its tokens are proposed as the continuation"),
), help="propose the tokens of a typed text as the continuation", capabilities=frozenset({"settings"}),
    reasons=scripted_reasons)

REPLAY = SourceDescriptor("replay", (
    Option("replay", "path", "", "an exported receipts document: its proposals are made again at the same "
                                 "decode steps", label="receipts file", flag="--replay", metavar="FILE", key="replay_file",
           required=True, missing="The replay source needs a receipts file (Open…).",
           placeholder="receipts file (.json) to replay", file_filter="Receipts (*.json);;All files (*)"),
), help="propose exactly what a receipts file recorded, at the same decode steps", capabilities=frozenset({"settings"}),
    reasons=replay_reasons)

PLAIN_SOURCE = SourceDescriptor(PLAIN, (), help="no proposals: plain one-token decoding")

BUILTIN_DESCRIPTORS: dict[str, SourceDescriptor] = {d.name: d for d in (NGRAM, SCRIPTED, DRAFT, REPLAY)}
"""Built-in source name -> its declaration (the only place their options are declared)."""


def _ngram(ctx: SourceContext, **options) -> ProposalSource:
    """``row_costs``: ms per batch of k = 1.. rows (a list, or "a,b,c"); by default the
    context's ``row_costs`` (the cost model stored for this model and thread count), if
    any; ``"linear"``: none (the linear model, fitted from the receipts).
    Options are checked with ``NGRAM`` (``ValueError``)."""
    o = NGRAM.with_defaults(options)
    ratio, costs = o["row_cost_ratio"], o["row_costs"]
    if costs is None and o["length"] == "adaptive" and ratio is None:
        costs = list(ctx.row_costs) if ctx.row_costs else None
    elif costs == "linear":
        costs = None
    return NgramSource(o["n_max"], o["n_min"], length=o["length"], row_cost_ratio=ratio, row_costs=costs)


def _scripted(ctx: SourceContext, **options) -> ProposalSource:
    o = SCRIPTED.with_defaults(options)
    rt = ctx.runtime
    return ScriptedSource.from_text(lambda t: rt.tokenize(t, False, True), o["script"])


def _replay(ctx: SourceContext, **options) -> ProposalSource:
    o = REPLAY.with_defaults(options)
    doc = load_document(o["replay"])
    if is_conversation(doc):  # one request's windows are replayed, not a chat's
        raise ValueError(f"{o['replay']} is a conversation of {len(doc['turns'])} turns: replay takes one request's "
                         "receipts (spec-inspector view FILE --turn N shows a turn; export one run to replay it)")
    check_replay_model(doc, ctx.runtime, o["replay"])
    return ReplaySource(doc, path=o["replay"])


def check_replay_model(doc: dict, runtime, path) -> None:
    """Compare the model ``doc`` was recorded on with ``runtime``'s: raise ``ValueError`` naming both
    when their vocabulary sizes differ (the recorded token ids mean other tokens there), log one
    warning naming both when only the file differs (by SHA-256, else by path; proposals replay, but
    acceptance is of another model). A runtime without a model file (a test's fake) is not compared."""
    recorded = doc.get("model") or {}
    here = runtime.describe() if hasattr(runtime, "describe") else {}
    here_path = str(getattr(runtime, "model_path", "") or here.get("path") or "")
    if not here_path:
        return
    was = f"{os.path.basename(str(recorded.get('path', '?')))} ({recorded.get('name', '?')})"
    now = f"{os.path.basename(here_path)} ({here.get('name', '?')})"
    n_rec, n_here = recorded.get("n_vocab"), getattr(runtime, "n_vocab", here.get("n_vocab"))
    if n_rec is not None and n_here is not None and n_rec != n_here:
        raise ValueError(f"--replay {path} was recorded on {was}, vocabulary {n_rec} tokens; this run's model is "
                         f"{now}, vocabulary {n_here}: its token ids mean other tokens here (replay on the model "
                         f"it was recorded on)")
    try:
        same = (recorded["sha256"] == model_sha256(here_path)) if recorded.get("sha256") else \
            os.path.realpath(str(recorded.get("path", ""))) == os.path.realpath(here_path)
    except OSError:
        same = False
    if not same:
        log.warning("warning: --replay %s was recorded on %s; this run's model is %s: the same proposals are "
                    "verified by another model, so acceptance and output can differ", path, was, now)


def _draft(ctx: SourceContext, **options) -> ProposalSource:
    """Options are checked with ``DRAFT`` before the draft model loads."""
    from inspector.llama.runtime import LlamaRuntime  # llama.cpp loads only when a draft model is made

    o = DRAFT.with_defaults(options)
    target = ctx.runtime
    ngl = o["n_gpu_layers"]
    draft = LlamaRuntime(o["draft_model"], n_ctx=target.n_ctx, n_batch=target.n_batch, n_seq_max=1,
                         n_threads=target.n_threads, offload=Offload(n_gpu_layers=None if ngl == -1 else ngl))
    if draft.offload_note:
        log.warning("draft model: %s", draft.offload_note.replace("-ngl", "--n-gpu-layers-draft"))
    try:
        sampling = getattr(ctx.settings, "sampling", None)
        return DraftModelSource(draft, target, draft_max=o["draft_max"], draft_min=o["draft_min"],
                                p_min=o["p_min"], sampling=sampling)
    except Exception:
        draft.close()
        raise


for _factory, _descriptor in ((_ngram, NGRAM), (_scripted, SCRIPTED), (_draft, DRAFT), (_replay, REPLAY)):
    _factory.descriptor = _descriptor

BUILTIN: dict[str, SourceFactory] = {"ngram": _ngram, "scripted": _scripted, "draft": _draft, "replay": _replay}

# llama.cpp's model-free proposers (--spec-type ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache).
import os

from inspector.llama.devices import Offload
from inspector.receipts import load_document
from inspector.receipts.document import is_conversation, model_sha256
from inspector.sources import llama_ngram_cache, llama_ngram_map, llama_ngram_mod  # noqa: E402
from inspector.sources.draft import DraftModelSource
from inspector.sources.ngram import NgramSource
from inspector.sources.replay import ReplaySource
from inspector.sources.scripted import ScriptedSource
from inspector.sources.suffix import SuffixSource, memory_for
from inspector.sources.suffix.memory import MAX_MEMORY_FILE_BYTES

for _module in (llama_ngram_map, llama_ngram_mod, llama_ngram_cache):
    for _name, (_factory, _descriptor) in _module.SOURCES.items():
        _factory.descriptor = _descriptor
        BUILTIN_DESCRIPTORS[_name] = _descriptor
        BUILTIN[_name] = _factory


SUFFIX = SourceDescriptor("suffix", (
    Option("max_tree_depth", "int", 24, "longest match plus proposal (tokens): the depth of the suffix trees "
           "(vLLM suffix_decoding_max_tree_depth; arctic-inference's default is 64, which lets long matches "
           "propose more at a draft max of 16)", minimum=2, maximum=64),
    Option("max_spec_factor", "float", 1.0, "propose at most this many tokens per matched token "
           "(vLLM suffix_decoding_max_spec_factor)", minimum=0.0, maximum=64.0, step=0.25),
    Option("max_spec_offset", "float", 0.0, "tokens added to max spec factor x match length (arctic-inference "
           "max_spec_offset)", minimum=-64.0, maximum=64.0, step=1.0),
    Option("min_token_prob", "float", 0.1, "stop where the continuation's estimated probability (count / parent "
           "count, multiplied along the path) falls below this (vLLM suffix_decoding_min_token_prob)",
           minimum=0.0, maximum=1.0, step=0.05),
    Option("max_cached_tokens", "int", 100_000, "tokens of earlier requests' outputs remembered, the oldest "
           "requests dropped first (0: this run neither uses nor changes the memory)", minimum=0, maximum=10_000_000,
           control_max=10_000_000),
    Option("memory_file", "path", "", "load the memory of earlier outputs from this JSON file and save it back "
           f"after each run (empty: this session only; a regular file of at most {MAX_MEMORY_FILE_BYTES // 2**20} MiB)",
           placeholder="memory file (.json), optional", file_filter="Suffix memory (*.json);;All files (*)",
           writes=True),
    Option("length", "choice", "adaptive", "which candidate, how long, and whether to propose at all",
           choices=suffix_lengths),
    Option("row_costs", default=None, convert=_row_costs, control=False,
           help="adaptive length: linear, or ms per batch of 1, 2, ... rows (\"a,b,c\"); default: the stored "
                "cost model"),
), help="suffix decoding: the most frequent continuation of a suffix match in the prompt, the output and earlier "
        "requests' outputs, proposed when it is expected to pay on the measured verify cost",
    capabilities=frozenset({"settings", "close"}), reasons=suffix_reasons)


def _suffix(ctx: SourceContext, **options) -> ProposalSource:
    """Options are checked with ``SUFFIX``; the memory lives in ``ctx.memory`` (a broken memory
    file raises ``ValueError`` naming it). ``row_costs`` as for ``ngram``: by default the context's
    (the stored cost model), ``"linear"``: none."""
    o = SUFFIX.with_defaults(options)
    if o["row_costs"] is None:
        o["row_costs"] = list(ctx.row_costs) if ctx.row_costs else None
    elif o["row_costs"] == "linear":
        o["row_costs"] = None
    return SuffixSource(memory_for(ctx.memory, o["memory_file"], ctx.runtime), **o)


_suffix.descriptor = SUFFIX
BUILTIN_DESCRIPTORS[SUFFIX.name] = SUFFIX
BUILTIN[SUFFIX.name] = _suffix


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
    (a third-party name that clashes with a built-in one is ignored, logged)."""
    found = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found:
            log.warning("ignoring proposal source %r from %s: the name is taken", ep.name, ep.value)
            continue
        found[ep.name] = EntryPointFactory(ep)
    return found


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

