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
    n_vocab, n_ctx) and the request's settings."""

    runtime: Any
    settings: Any = None
    extra: dict = field(default_factory=dict)


SourceFactory = Callable[..., ProposalSource]


def _refuse_unknown(source: str, unknown: dict, known: tuple[str, ...]) -> None:
    """Raise ``ValueError`` naming options a built-in factory does not take (a typo
    must not pass silently)."""
    if unknown:
        raise ValueError(f"unknown option{'s' if len(unknown) > 1 else ''} for source {source}: "
                         f"{', '.join(sorted(unknown))} (expected {', '.join(known)})")


def _ngram(ctx: SourceContext, n_max: str | int = 4, n_min: str | int = 2, length: str = "fixed",
           row_cost_ratio: str | float | None = None, row_costs=None, **unknown) -> ProposalSource:
    """``row_costs``: ms per batch of k = 1.. rows (a list, or "a,b,c"); by default the
    cost model stored for this model and thread count (``inspector.bench.cost_cache``),
    if any; ``"linear"``: none (the linear model, fitted from the receipts)."""
    from inspector.sources.ngram import NgramSource

    _refuse_unknown("ngram", unknown, ("n_max", "n_min", "length", "row_cost_ratio", "row_costs"))
    ratio = None if row_cost_ratio in (None, "", "auto") else float(row_cost_ratio)
    if isinstance(row_costs, str):
        row_costs = None if row_costs in ("", "linear") else [float(v) for v in row_costs.split(",")]
    elif row_costs is None and str(length) == "adaptive" and ratio is None:
        from inspector.bench.cost_cache import load_cost_model

        rt = ctx.runtime
        cm = load_cost_model(rt.model_path, rt.n_threads) if getattr(rt, "model_path", None) else None
        row_costs = list(cm.row_ms) if cm is not None else None
    return NgramSource(int(n_max), int(n_min), length=str(length), row_cost_ratio=ratio, row_costs=row_costs)


def _scripted(ctx: SourceContext, script: str = "", **unknown) -> ProposalSource:
    from inspector.sources.scripted import ScriptedSource

    _refuse_unknown("scripted", unknown, ("script",))
    rt = ctx.runtime
    return ScriptedSource.from_text(lambda t: rt.tokenize(t, False, True), script)


def _replay(ctx: SourceContext, replay: str = "", **unknown) -> ProposalSource:
    from inspector.receipts import load_document
    from inspector.sources.replay import ReplaySource

    _refuse_unknown("replay", unknown, ("replay",))
    return ReplaySource(load_document(replay))


def _draft(ctx: SourceContext, draft_model: str = "", draft_max: str | int = 8, draft_min: str | int = 0,
           p_min: str | float = 0.0, **unknown) -> ProposalSource:
    from inspector.llama.runtime import LlamaRuntime
    from inspector.sources.draft import DraftModelSource

    _refuse_unknown("draft", unknown, ("draft_model", "draft_max", "draft_min", "p_min"))
    target = ctx.runtime
    draft = LlamaRuntime(draft_model, n_ctx=target.n_ctx, n_batch=target.n_batch, n_seq_max=1,
                         n_threads=target.n_threads)
    try:
        sampling = getattr(ctx.settings, "sampling", None)
        return DraftModelSource(draft, target, draft_max=int(draft_max), draft_min=int(draft_min),
                                p_min=float(p_min), sampling=sampling)
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
