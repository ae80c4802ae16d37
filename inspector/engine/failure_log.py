"""What went wrong in a request: its error messages and its discarded proposals (SPEC steps 2, 3, 9).

A ``Generation`` (``inspector.engine.generation``) owns one ``FailureLog``, which appends to the
generation's own ``errors`` and ``discards`` lists and records each as an event (``error``,
``discard``) through the generation's ``emit``; a discard is also told to the proposal source (a
failure there is logged, never fatal) and to the observer. Only error paths and discards call it,
never a committed token.
"""

from __future__ import annotations

import logging
from typing import Callable

from inspector.engine.errors import RequestCancelled
from inspector.engine.proposal import EXECUTION_FAILED, Proposal
from inspector.engine.records import DISCARD, ERROR, Discard, PartialWindow
from inspector.engine.window import WindowTrace

log = logging.getLogger(__name__)


class FailureLog:
    """A request's errors and discards, recorded into ``errors`` (messages) and ``discards`` (``Discard``s), the
    generation's lists. ``source()``: the request's ``ProposalSource`` (None when it decodes plainly: it discards
    nothing); ``observer()``: its ``GenerationObserver`` (both read when a failure is recorded: the generation's
    attributes, which a caller may replace); ``emit(kind, window, ..., detail=...)``: records an ``EngineEvent``."""

    def __init__(self, errors: list[str], discards: list[Discard], source: Callable[[], object],
                 observer: Callable[[], object], emit: Callable[..., None]) -> None:
        self.errors = errors
        self.discards = discards
        self.source = source
        self.observer = observer
        self.emit = emit

    def error(self, exc: BaseException, window: int | None) -> None:
        """Record ``exc`` (its message, else its class name) as an error of window ``window`` (None: outside a
        window) and an ``error`` event."""
        msg = str(exc) or type(exc).__name__
        self.errors.append(msg)
        self.emit(ERROR, window, detail=msg)

    def cancelled(self) -> RequestCancelled:
        """Record a cancellation outside a window (Stop, or an injected cancellation) as an error, and return the
        ``RequestCancelled`` for the caller to raise."""
        exc = RequestCancelled()
        self.error(exc, None)
        return exc

    def discard(self, decode_step: int, proposal: Proposal, reason: str, base: int, *, error: str | None = None,
                partial: PartialWindow | None = None, error_type: str = "") -> None:
        """Record ``proposal`` as discarded at ``decode_step`` with ``reason`` (``DISCARD_REASONS``; ``base``: the
        canonical KV position then), with ``error``, ``partial`` and ``error_type`` for a failed window
        (``Discard``); then a ``discard`` event, the source's ``discard`` (SPEC step 9: a failure there is logged,
        never fatal) and the observer's ``on_discard``, in that order."""
        decision = proposal.decision_id
        source = self.source()
        d = Discard(decode_step, decision.hex() if isinstance(decision, bytes) else str(decision),
                    source.name, reason, tuple(proposal.token_ids), base, error, partial, error_type)
        self.discards.append(d)
        self.emit(DISCARD, partial.window_index if partial else None,
                  detail=reason if error is None else f"{reason}: {error}")
        try:
            source.discard(proposal.decision_id, reason)
        except Exception:
            log.exception("proposal source %s failed in discard()", source.name)
        self.observer().on_discard(d)

    def window_failed(self, exc: BaseException, decode_step: int, window_index: int, proposal: Proposal,
                      trace: WindowTrace, base: int) -> None:
        """Window ``window_index`` (based at KV position ``base``) raised ``exc``: an error, then its proposal
        discarded as ``execution_failed`` with what the window did before (``trace``: its ``WindowTrace``; a tree
        recorded as the branch it kept)."""
        self.error(exc, window_index)
        self.discard(decode_step, trace.as_recorded(proposal), EXECUTION_FAILED, base,
                     error=str(exc) or type(exc).__name__, partial=trace.partial(window_index, base),
                     error_type=type(exc).__name__)
