"""A generation's session outside the decode steps: the checks before a request starts, opening its
session, the ``WindowContext`` every window of it gets, the prefill that decodes the committed stream
into the session (the request's start, or a retired session replaced), the proposal source's ``begin``
in the prefill's time, and bringing the session back to the canonical position after an error
(``resync``).

Functions of their arguments, as ``inspector.engine.runtime_calls``: the ``Generation``
(``inspector.engine.generation``) keeps the request's state (tokens, session id, timings) and commits
the first token itself; events are recorded only through the ``WindowContext``'s ``emit``, where said.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Callable, Sequence

import numpy as np

from inspector.engine.errors import PromptTooLong
from inspector.engine.faults import FaultPlan
from inspector.engine.records import REPAIR
from inspector.engine.runtime_calls import check_speculation_supported, prefill_call
from inspector.engine.scheduler import RuntimeScheduler
from inspector.engine.settings import GenerationSettings, SamplingSettings
from inspector.engine.window import WindowContext, WindowTrace, repair_to

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SessionPlace:
    """Where a request runs in the runtime: its ``request_id`` (receipts and events carry it), its KV session
    (``session_id``: an open session of the runtime, or None to open one) and how many of its prompt tokens that
    session already holds at positions 0.. (``kv_reuse``: llama-server's ``cache_prompt``, kept by the prefill;
    0 <= ``kv_reuse`` < the prompt's tokens, checked by ``Generation``)."""

    request_id: int = 1
    session_id: int | None = None
    kv_reuse: int = 0


def check_start(scheduler: RuntimeScheduler, prompt_token_count: int, speculating: bool) -> None:
    """Raise ``PromptTooLong`` when a prompt of ``prompt_token_count`` tokens needs more than ``n_ctx - 1``
    positions, and ``SpeculationUnsupported`` when ``speculating`` (a proposal source is set) but the runtime's
    KV cache cannot remove a partial suffix exactly (``check_speculation_supported``: its ``rollback`` probe)."""
    runtime = scheduler.runtime
    n_ctx = runtime.n_ctx
    if prompt_token_count >= n_ctx:
        raise PromptTooLong(prompt_token_count, n_ctx)
    if speculating:
        check_speculation_supported(scheduler, getattr(runtime, "model_path", "?"))


def open_session(scheduler: RuntimeScheduler, sampling: SamplingSettings | None) -> int:
    """Open a new session of the runtime, sampling with ``sampling``, under the lock; its id."""
    return scheduler.execute("open", -1, lambda rt: rt.open_session(sampling)).value


def window_context(scheduler: RuntimeScheduler, session_id: int, request_id: int, cancel, faults: FaultPlan,
                   emit: Callable[..., None], before_commit: Callable[[int, int, int, int], None],
                   settings: GenerationSettings, rng: np.random.Generator, constraints) -> WindowContext:
    """The ``WindowContext`` of a request's session ``session_id``: its sampling, verification rule, figures and
    random numbers from ``settings`` and ``rng``; ``grammar`` set when ``constraints`` (``Constraints`` or None)
    hold a grammar. ``cancel``: the request's cancellation event."""
    return WindowContext(
        scheduler, session_id, request_id, cancel, faults, emit, before_commit, settings.sampling,
        settings.verification, rng, settings.probabilities,
        constraints is not None and constraints.grammar is not None, settings.top_probabilities,
    )


def begin_source(source, prompt: Sequence[int]) -> None:
    """The source's optional ``begin(prompt_tokens)`` (``ProposalSource``), in the prefill's time; an exception
    there is logged and ignored. ``source``: a ``ProposalSource`` or None (nothing to tell)."""
    begin = getattr(source, "begin", None)
    if begin is None:
        return
    try:
        begin(tuple(prompt))
    except Exception:
        log.exception("proposal source %s failed in begin()", source.name)


def prefill(ctx: WindowContext, prefix: list[int], first: bool, kept: int, settings: GenerationSettings,
            observer, constraints: tuple, source) -> tuple[int, int | None, object, int]:
    """Decode ``prefix`` into the context's session from position ``kept`` (``prefill_call``), under the lock.

    ``first``: the request's start: the last row's prediction is the first generated token (with its row's
    probabilities when ``settings`` want them), and ``source``'s ``begin`` is told the prompt (``begin_source``).
    ``observer``: its optional ``on_prefill(done, total)`` is told the progress. ``constraints``: ``(Constraints
    or None, position of the first generated token)``. Returns ``(KV length, token or None, probabilities or
    None, elapsed µs)``, the time counting the source's ``begin``. Raises what the runtime raises."""
    sid = ctx.session_id
    call = prefill_call(sid, prefix, first, settings.sampling, first and settings.probabilities, kept,
                        progress=getattr(observer, "on_prefill", None), constraints=constraints,
                        top=settings.top_probabilities)
    t = perf_counter_ns()
    kv, token, probs = ctx.scheduler.execute("prefill", sid, call).value
    if first:
        begin_source(source, prefix)
    return kv, token, probs, (perf_counter_ns() - t) // 1000


def trim_prompt(ctx: WindowContext) -> None:
    """Remove everything from the context's session (trim to position 0): a request cancelled before its first
    token was committed starts over on ``resume``."""
    sid = ctx.session_id
    ctx.scheduler.execute("trim", sid, lambda rt: rt.trim(sid, 0))


def resync(ctx: WindowContext, tokens: list[int], kv: int) -> None:
    """Bring the session's KV length ``kv`` back to the canonical position ``len(tokens) - 1`` (tokens of the
    committed stream): extra positions are trimmed (``repair_to``, which raises ``RepairFailed`` or
    ``PositionMismatch`` and retires the session when that fails), missing ones decoded from ``tokens`` with a
    ``repair`` event."""
    sid = ctx.session_id
    base = len(tokens) - 1
    if kv == base:
        return
    if kv > base:
        repair_to(ctx, WindowTrace(), base, None, "resync")
        return
    missing = tokens[kv:base]
    ctx.scheduler.execute("prefill", sid, lambda rt: rt.prefill(sid, missing, kv))
    ctx.emit(REPAIR, position=base, detail=f"resync: decoded {len(missing)} missing tokens")
