"""The measured synthetic-acceptance table on the engine thread (no widgets): ``SyntheticWorker``.

It lives on the engine worker's thread next to ``EngineWorker`` (their event loop is shared, so it never
runs beside a run) and runs ``inspector.bench.synthetic_table.synthetic_table`` on the loaded model:
c(k), plain decoding, then the synthetic source at mean acceptance lengths 1..8 x draft costs 0, 0.25,
0.5 c(1). Each finished row leaves through ``rowsDone`` (the window fills its cells as they come);
``job.request_cancel`` (any thread) stops the run in flight and keeps the rows done.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal, Slot

from inspector.bench.synthetic_table import COST_FRACTIONS, MEAN_LENGTHS, synthetic_table
from inspector.engine.errors import RequestCancelled
from inspector.gui.engine_thread.engine_job import EngineJob

log = logging.getLogger(__name__)

SYNTHETIC_TOKENS = 48
"""Tokens each run of the window's measured table generates (``bench --synthetic`` takes ``--max-tokens``)."""
SYNTHETIC_REPEATS = 1
"""Runs per cell in the window (the CLI's ``--repeats``): one keeps it to a few minutes."""


@dataclass(frozen=True)
class SyntheticRequest:
    """Measure the table after this prompt (text as typed; ``raw``: no chat template)."""

    prompt_text: str
    raw: bool = False
    max_new_tokens: int = SYNTHETIC_TOKENS
    repeats: int = SYNTHETIC_REPEATS


class SyntheticWorker(QObject):
    """``measure`` runs the table on ``engine``'s runtime and scheduler (the window's ``EngineWorker``, same
    thread), never while a run goes."""

    progress = Signal(int, int, str)
    """(rows done, rows in all, what runs now)."""
    rowsDone = Signal(object)
    """The result so far (``synthetic_table``'s dict, its finished rows)."""
    done = Signal(object, str)
    """(the result, or the rows done when cancelled (None when none), note: "" or why it stopped)."""
    failed = Signal(str)

    def __init__(self, engine) -> None:
        super().__init__()
        self.engine = engine
        self.job = EngineJob(engine)
        """Its cancellation (``job.request_cancel``: the run in flight stops, finished rows are kept)."""

    @Slot(object)
    def measure(self, req: SyntheticRequest) -> None:
        """Run ``synthetic_table`` for ``req`` (minutes); see the signals."""
        e = self.engine
        refusal = self.job.refusal()
        if refusal is not None:
            self.failed.emit(refusal)
            return
        total = len(MEAN_LENGTHS) * len(COST_FRACTIONS)
        done = [0]

        def row_done(partial: dict) -> None:
            done[0] = len(partial["rows"])
            self.rowsDone.emit(partial)

        try:
            tokens = self.job.prompt_tokens(req.prompt_text, req.raw)
            tokens = tokens[: max(1, e.runtime.n_ctx - req.max_new_tokens - 16)]
            result = synthetic_table(e.runtime, tokens, max_new_tokens=req.max_new_tokens, repeats=req.repeats,
                                     progress=lambda text: self.progress.emit(done[0], total, text),
                                     scheduler=e.scheduler, cancel=self.job.cancel, row_done=row_done)
        except RequestCancelled as exc:
            partial = getattr(exc, "partial", None)
            rows = len(partial["rows"]) if partial else 0
            self.done.emit(partial if rows else None, f"cancelled after {rows} of {total} cells")
            return
        except Exception as exc:
            log.exception("synthetic table failed")
            self.failed.emit(str(exc) or type(exc).__name__)
            return
        self.done.emit(result, "")
