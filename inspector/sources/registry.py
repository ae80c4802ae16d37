"""Which proposal sources exist: the built-in ones and third-party ones.

Third-party sources register a factory in the Python entry-point group
``spec_inspector.sources``; the factory is called as
``factory(context: SourceContext, **options)`` and returns a ``ProposalSource``.
``options`` are strings from the CLI (``--source-option key=value``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Callable

from inspector.engine.proposal import ProposalSource

ENTRY_POINT_GROUP = "spec_inspector.sources"
log = logging.getLogger(__name__)


@dataclass
class SourceContext:
    """What a source factory may use: the target's runtime (tokenize, token_text,
    n_vocab, n_ctx) and the request's settings.

    ``row_costs``: the verify cost c(k) measured for this runtime (ms per batch of
    k = 1.. rows), or None; the caller looks it up (``inspector.bench.cost_cache.
    stored_row_costs``), so sources never reach up into ``bench``."""

    runtime: Any
    settings: Any = None
    extra: dict = field(default_factory=dict)
    row_costs: tuple[float, ...] | None = None


SourceFactory = Callable[..., ProposalSource]


def _refuse_unknown(source: str, unknown: dict, known: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming options a built-in factory does not take (a typo
    must not pass silently)."""
    if unknown:
        raise ValueError(f"unknown option{'s' if len(unknown) > 1 else ''} for source {source}: "
                         f"{', '.join(sorted(unknown))} (expected {', '.join(known)})")


def _whole(minimum: int):
    def convert(source: str, key: str, value) -> int:
        try:
            number = int(value) if not isinstance(value, (bool, float)) else None
        except (TypeError, ValueError):
            number = None
        if number is None or number < minimum:
            raise ValueError(f"source {source} option {key} must be a whole number >= {minimum}, observed {value!r}")
        return number
    return convert


def _fraction(source: str, key: str, value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not 0.0 <= number <= 1.0:
        raise ValueError(f"source {source} option {key} must be a number 0 <= {key} <= 1, observed {value!r}")
    return number


def _length(source: str, key: str, value) -> str:
    if str(value) not in ("fixed", "adaptive"):
        raise ValueError(f"source {source} option {key} must be fixed or adaptive, observed {value!r}")
    return str(value)


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
    if value is None or value in ("", "linear"):
        return None
    items = value.split(",") if isinstance(value, str) else value
    try:
        costs = [float(v) for v in items]
    except (TypeError, ValueError):
        costs = []
    if not costs or not all(0 < c < float("inf") for c in costs):
        raise ValueError(f"source {source} option {key} must be linear or positive milliseconds per batch of "
                         f"1, 2, ... rows (\"a,b,c\"), observed {value!r}")
    return costs


def _text(source: str, key: str, value) -> str:
    return str(value)


OPTION_RULES: dict[str, dict[str, Callable]] = {
    "ngram": {"n_max": _whole(1), "n_min": _whole(1), "length": _length, "row_cost_ratio": _row_cost_ratio,
              "row_costs": _row_costs},
    "draft": {"draft_model": _text, "draft_max": _whole(1), "draft_min": _whole(0), "p_min": _fraction},
    "scripted": {"script": _text},
    "replay": {"replay": _text},
}
"""Built-in source -> option -> converter ``(source, key, value) -> value`` (raises ``ValueError``)."""

_NGRAM_DEFAULTS = {"n_max": 4, "n_min": 2}


def check_source_options(source: str, options: dict) -> dict:
    """Check and convert the options of a built-in source before anything loads.

    ``options``: key -> value, strings from the CLI (``--source-option``,
    ``compare --config``) or typed values. Returns the converted options (only
    the keys given). Raises ``ValueError`` naming the source, the option, the
    observed value and the valid range (e.g. ``source ngram option n_min must
    be a whole number >= 1, observed '0'``), or the unknown options. Ranges:
    ngram ``n_max``, ``n_min`` >= 1 with ``n_min`` <= ``n_max`` (defaults 4
    and 2), ``length`` fixed or adaptive, ``row_cost_ratio`` >= 0,
    ``row_costs`` > 0 each; draft ``draft_max`` >= 1 (``DraftModelSource``),
    ``draft_min`` >= 0, ``p_min`` 0..1. A third-party source's options are
    returned unchanged (its factory checks them).
    """
    rules = OPTION_RULES.get(source)
    if rules is None:
        return dict(options)
    _refuse_unknown(source, {k: v for k, v in options.items() if k not in rules}, tuple(rules))
    out = {k: rules[k](source, k, v) for k, v in options.items()}
    if source == "ngram":
        n_max = out.get("n_max", _NGRAM_DEFAULTS["n_max"])
        n_min = out.get("n_min", _NGRAM_DEFAULTS["n_min"])
        if n_min > n_max:
            shown = [f"{k}={v}" + ("" if k in out else " (the default)") for k, v in (("n_min", n_min), ("n_max", n_max))]
            raise ValueError(f"source ngram options must satisfy 1 <= n_min <= n_max, observed {', '.join(shown)}")
    return out


def _ngram(ctx: SourceContext, n_max: str | int = 4, n_min: str | int = 2, length: str = "fixed",
           row_cost_ratio: str | float | None = None, row_costs=None, **unknown) -> ProposalSource:
    """``row_costs``: ms per batch of k = 1.. rows (a list, or "a,b,c"); by default the
    context's ``row_costs`` (the cost model stored for this model and thread count), if
    any; ``"linear"``: none (the linear model, fitted from the receipts).
    Options are checked by ``check_source_options`` (``ValueError``)."""
    from inspector.sources.ngram import NgramSource

    o = check_source_options("ngram", {"n_max": n_max, "n_min": n_min, "length": length,
                                       "row_cost_ratio": row_cost_ratio, "row_costs": row_costs, **unknown})
    ratio, costs = o["row_cost_ratio"], o["row_costs"]
    if row_costs is None and o["length"] == "adaptive" and ratio is None:
        costs = list(ctx.row_costs) if ctx.row_costs else None
    return NgramSource(o["n_max"], o["n_min"], length=o["length"], row_cost_ratio=ratio, row_costs=costs)


def _scripted(ctx: SourceContext, script: str = "", **unknown) -> ProposalSource:
    from inspector.sources.scripted import ScriptedSource

    o = check_source_options("scripted", {"script": script, **unknown})
    rt = ctx.runtime
    return ScriptedSource.from_text(lambda t: rt.tokenize(t, False, True), o["script"])


def _replay(ctx: SourceContext, replay: str = "", **unknown) -> ProposalSource:
    from inspector.receipts import load_document
    from inspector.sources.replay import ReplaySource

    o = check_source_options("replay", {"replay": replay, **unknown})
    return ReplaySource(load_document(o["replay"]))


def _draft(ctx: SourceContext, draft_model: str = "", draft_max: str | int = 8, draft_min: str | int = 0,
           p_min: str | float = 0.0, **unknown) -> ProposalSource:
    """Options are checked by ``check_source_options`` before the draft model loads."""
    from inspector.llama.runtime import LlamaRuntime
    from inspector.sources.draft import DraftModelSource

    o = check_source_options("draft", {"draft_model": draft_model, "draft_max": draft_max,
                                       "draft_min": draft_min, "p_min": p_min, **unknown})
    target = ctx.runtime
    draft = LlamaRuntime(o["draft_model"], n_ctx=target.n_ctx, n_batch=target.n_batch, n_seq_max=1,
                         n_threads=target.n_threads)
    try:
        sampling = getattr(ctx.settings, "sampling", None)
        return DraftModelSource(draft, target, draft_max=o["draft_max"], draft_min=o["draft_min"],
                                p_min=o["p_min"], sampling=sampling)
    except Exception:
        draft.close()
        raise


BUILTIN: dict[str, SourceFactory] = {"ngram": _ngram, "scripted": _scripted, "draft": _draft, "replay": _replay}


def available_sources() -> dict[str, SourceFactory]:
    """Name -> factory for every source: built-in first, then entry points
    (a third-party name that clashes with a built-in one is ignored, logged)."""
    found = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in found:
            log.warning("ignoring proposal source %r from %s: the name is taken", ep.name, ep.value)
            continue
        found[ep.name] = _lazy(ep)
    return found


def _lazy(ep) -> SourceFactory:
    def factory(ctx: SourceContext, **options):
        return ep.load()(ctx, **options)

    factory.__doc__ = f"entry point {ep.value}"
    return factory


def close_source(source) -> None:
    """Release what a factory-made source holds: its ``close()``, then the draft
    runtime a ``draft`` factory loaded for it (the factory's source owns it)."""
    if source is None:
        return
    close = getattr(source, "close", None)
    if close is not None:
        close()
    draft = getattr(source, "draft", None)
    if draft is not None and hasattr(draft, "close"):
        draft.close()
