"""``GenerationObserver``: what a generation tells its caller, on the generation's thread."""

from __future__ import annotations

from inspector.engine.proposal import Proposal
from inspector.engine.records import Discard, EngineEvent, WindowReceipt


class GenerationObserver:
    """Receives what a generation produces, on the generation's thread.

    Override what you need; every method defaults to doing nothing.
    ``on_token`` may return True to stop generation (the window ends
    ``stopped``) or raise (the error reaches the caller after repair).
    ``before_commit`` may block (step-token mode).
    """

    def on_event(self, event: EngineEvent) -> None: ...

    def on_proposal(self, window: int, proposal: Proposal) -> None:
        """A valid proposal is about to be verified as window ``window`` (1-based)."""

    def on_receipt(self, receipt: WindowReceipt) -> None: ...

    def on_discard(self, discard: Discard) -> None: ...

    def on_token(self, token: int, text: str) -> bool | None: ...

    def before_commit(self, window: int, row: int, token: int, position: int) -> None: ...

    def on_finish(self, reason: str) -> None: ...

    def on_prefill(self, done: int, total: int) -> None:
        """The prefill has ``done`` of the prompt's ``total`` positions in the KV cache (tokens): called
        after each chunk of ``n_batch`` rows of a prompt longer than one chunk, and once at its end.
        Runs on the generation's thread inside the runtime lock: keep it short."""
