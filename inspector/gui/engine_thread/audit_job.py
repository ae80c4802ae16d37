"""The losslessness audit of the shown run, on the engine thread (no widgets; issue 39, item 1).

``AuditWorker`` lives on the engine worker's thread next to ``EngineWorker`` (its slot runs one at a
time with runs and the other analysis jobs: the shared event loop) and runs
``inspector.session.audit_run``: plain decoding of the run's prompt (unless the live run was already
compared with it), then the audit where the two streams part. The result leaves as an immutable
``AuditShown``: the ``RunAudit`` and the text of every token it names (the GUI thread never calls
llama.cpp, not even its tokenizer).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal, Slot

from inspector.engine.errors import RequestCancelled
from inspector.gui.engine_thread.engine_job import EngineJob
from inspector.session.audit_run import (PLAIN_DECODING, AuditInputs, AuditRefused, RunAudit, audit_run_against,
                                         check_model, plain_reference)

log = logging.getLogger(__name__)

PLAIN_STEP = "plain decoding of the same prompt"
"""The progress text while the reference is decoded (no count: one token per decode, up to the run's length)."""


@dataclass(frozen=True)
class AuditShown:
    """A finished audit as the window shows it: ``audit`` (``RunAudit``) and ``texts``, token id -> its
    text for every token it names (both streams' tokens at the position, every width's picks and
    runners-up)."""

    audit: RunAudit
    texts: dict

    def text(self, token: int) -> str:
        """The text of ``token`` ("" for -1, a stream that had ended; ``<id>`` when unknown)."""
        return "" if token < 0 else self.texts.get(token, f"<{token}>")


def named_tokens(audit: RunAudit) -> set[int]:
    """Every token id ``audit`` names: at the position in both streams, and each place's pick and
    runner-up at every width of every table tried."""
    out: set[int] = set()
    for result in audit.tried:
        out.update((result.speculative_token, result.plain_token))
        for w in result.widths:
            for p in w.places:
                out.update((p.token, p.second))
    return {t for t in out if t >= 0}


class AuditWorker(QObject):
    """Runs the audit of one run on the engine thread. ``engine`` is the window's ``EngineWorker`` (same
    thread): its runtime and scheduler are used, never while a run goes. ``job.request_cancel`` (any thread)
    stops it between decodes."""

    progress = Signal(str, int, int)
    """(what runs now, verify batches done, total; total 0: no count)."""
    done = Signal(object)
    """``AuditShown``."""
    failed = Signal(str)
    """One line: why the audit did not run or failed ("" when cancelled)."""

    def __init__(self, engine) -> None:
        super().__init__()
        self.engine = engine
        self.job = EngineJob(engine)
        """Its cancellation (``job.request_cancel``: the audit stops at its next decode)."""

    @Slot(object)
    def run_audit(self, inputs: AuditInputs) -> None:
        """Audit the run of ``inputs`` against plain decoding on the loaded model; ``done`` or ``failed``."""
        refusal = self.job.refusal()
        if refusal is not None:
            self.failed.emit(refusal)
            return
        e = self.engine
        rt = e.runtime
        try:
            check_model(rt, inputs.model, inputs.prompt)
            if inputs.plain is None:
                self.progress.emit(PLAIN_STEP, 0, 0)
            plain = plain_reference(e.scheduler, inputs, self.job.cancel)
            audit = audit_run_against(e.scheduler, inputs, plain, PLAIN_DECODING, None, rt.token_text,
                                      self.progress.emit, self.job.cancel)
            texts = {t: rt.token_text(t) for t in named_tokens(audit)}
        except RequestCancelled:
            self.failed.emit("")
            return
        except AuditRefused as exc:
            self.failed.emit(str(exc))
            return
        except Exception as exc:  # a failed audit never takes the window down: it says what failed
            log.exception("audit failed")
            self.failed.emit(f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc))
            return
        self.done.emit(AuditShown(audit, texts))
