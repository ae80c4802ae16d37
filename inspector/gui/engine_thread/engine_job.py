"""What every analysis job on the engine thread shares (cost model, comparison, audit, synthetic table):
``EngineJob``, held by each job's worker (composition, not a base class).

A job runs on the window's ``EngineWorker``'s thread and uses its runtime and scheduler, never while a
run goes (their event loop is shared, so a job and a run never interleave; the GUI refuses as well). A
job is cancelled from any thread through its event, which the bench and session functions poll between
decodes.
"""

from __future__ import annotations

import threading

from inspector.engine.errors import EngineError

RUN_GOING = "a run is going: stop it first"
NO_MODEL = "no model is loaded"


class EngineJob:
    """``engine`` (the window's ``EngineWorker``) and ``cancel`` (a ``threading.Event`` any thread sets)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.cancel = threading.Event()

    def request_cancel(self) -> None:
        """Stop the job at its next check (thread safe)."""
        self.cancel.set()

    def reset_cancel(self) -> None:
        """Forget an old cancellation; call (GUI thread) before requesting a job, so a Cancel pressed
        before the job starts still counts."""
        self.cancel.clear()

    def refusal(self) -> str | None:
        """Why no job can run now, in one line (a run is going, no model is loaded), or None."""
        e = self.engine
        if e.running:
            return RUN_GOING
        if e.runtime is None or e.scheduler is None:
            return NO_MODEL
        return None

    def prompt_tokens(self, text: str, raw: bool) -> list[int]:
        """``text`` as the loaded model's prompt tokens (chat template unless ``raw``). Raises
        ``EngineError`` when nothing is left after tokenization."""
        tokens = self.engine.runtime.prompt_tokens(text, raw=raw)
        if not tokens:
            raise EngineError("the prompt is empty after tokenization")
        return tokens
