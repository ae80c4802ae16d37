"""The Audit window's wiring (issue 39, item 1): Analysis > Audit the difference from plain decoding…
(Ctrl+Shift+A), and the "audit it" link on the token view's line about the comparison with plain decoding.

The audit inputs come from the shown session (``inspector.session.audit_run.inputs_from_record``: a live
run that has ended, or receipts opened; its windows, so the KV prefix can be rebuilt as the run built it);
the audit runs on the engine thread (``AuditWorker``, the window's ``busy`` state meanwhile: Run and
model changes are refused), its progress and result reach the view through queued signals.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QObject, Qt, Signal

from inspector.gui.engine_thread.audit_job import AuditShown, AuditWorker
from inspector.gui.look.wording import count_noun
from inspector.gui.audit.view import AuditView
from inspector.gui.model.window_model import WindowModel
from inspector.gui.ports.handles import MenuHost
from inspector.receipts.document import ReceiptsFileError
from inspector.session.audit_run import AuditInputs, AuditRefused, inputs_from_record
from inspector.session.run_states import BUSY, IDLE

AUDIT_ACTION = "Audit the difference from plain decoding…"


class AuditActions(QObject):
    """The Audit window (its action goes in ``menu``). ``audited(AuditShown or None, message)`` tells
    when an audit ended (tests, status): the message is "" on success, else why not ("cancelled" when
    cancelled).

    It gets the window's model (``WindowModel``: the session shown, the engine worker and its thread,
    ``shutdownRequested``), ``host`` (``MenuHost``: the menu item, the view's parent) and ``run``
    (``RunControl``: ``is_idle``, ``set_state``)."""

    requestAudit = Signal(object)
    audited = Signal(object, str)

    def __init__(self, model: WindowModel, host: MenuHost, menu, run) -> None:
        super().__init__(host.parent)
        self.parent_widget = host.parent
        self.model, self.run, self.engine = model, run, model.worker
        self.view: AuditView | None = None
        self.busy = False
        self.act_audit = host.add_action(
            menu, AUDIT_ACTION, self.audit, ["Ctrl+Shift+A"],
            "where the shown greedy run parts from plain decoding: the target's pick there at every verify "
            "width, and whether batch-shape numerics explain it")
        self.auditor = AuditWorker(model.worker)
        self.auditor.moveToThread(model.thread)
        self.requestAudit.connect(self.auditor.run_audit)
        self.auditor.progress.connect(self._progress)
        self.auditor.done.connect(self._done)
        self.auditor.failed.connect(self._failed)
        model.shutdownRequested.connect(self.auditor.job.request_cancel, Qt.ConnectionType.DirectConnection)

    def show_view(self) -> AuditView:
        """Open (or raise) the Audit window; returns it."""
        if self.view is None:
            v = AuditView(self.parent_widget)
            v.cancelRequested.connect(self.auditor.job.request_cancel, Qt.ConnectionType.DirectConnection)
            v.againRequested.connect(self.audit)
            self.view = v
        self.view.show()
        self.view.raise_()
        return self.view

    def audit(self) -> bool:
        """Audit the shown run against plain decoding on the engine thread (the window shows the progress,
        then the result). Refused, the window saying why, for a run that cannot be audited (sampled,
        still going, an autosave, no run) and while the engine is busy or no model is loaded."""
        v = self.show_view()
        if self.busy:
            return False
        s = self.model.session
        try:
            inputs = inputs_from_record(s)
        except AuditRefused as exc:
            return self._refuse(str(exc))
        except (ReceiptsFileError, OSError) as exc:
            return self._refuse(f"its receipts file cannot be read again: {exc}")
        except (KeyError, TypeError, ValueError) as exc:
            return self._refuse(f"the run's receipts are not usable: {exc}")
        v.set_run_info(run_info(s, inputs))
        if not self.run.is_idle:
            return self._refuse("the engine is busy: stop the run (or wait for the job) first, then audit again")
        if self.engine.runtime is None:
            return self._refuse("no model is loaded: load the run's model first")
        self.busy = True
        self.run.set_state(BUSY, "auditing the difference from plain decoding…")
        known = "its comparison with plain decoding" if inputs.plain is not None else "plain decoding of the same prompt"
        v.set_running(True, f"starting: {known}, then verify widths 1..{inputs.max_width} where they part")
        self.auditor.job.reset_cancel()
        self.requestAudit.emit(inputs)
        return True

    def _refuse(self, message: str) -> bool:
        self.view.set_refusal(message)
        self.audited.emit(None, message)
        return False

    def _end(self) -> None:
        self.busy = False
        if self.model.state == BUSY:
            self.run.set_state(IDLE)

    def _progress(self, what: str, done: int, total: int) -> None:
        if self.view is not None and self.busy:
            self.view.set_progress(what, done, total)

    def _done(self, shown: AuditShown) -> None:
        self._end()
        if self.view is not None:
            self.view.set_result(shown)
        self.audited.emit(shown, "")

    def _failed(self, message: str) -> None:
        self._end()
        text = message or "cancelled"
        if self.view is not None:
            self.view.set_refusal(f"audit {text}" if not message else f"the audit failed: {message}")
        self.audited.emit(None, text)


def run_info(s, inputs: AuditInputs) -> str:
    """The line naming the audited run (rich text): where it comes from, its source and draft max, its
    tokens and how many of its windows are known."""
    where = "this window's run" if s.origin == "live" else html.escape(s.document_path or "the opened receipts")
    return (f"<b>Audited:</b> {where} · source <b>{html.escape(s.source_name or '?')}</b>, draft max "
            f"{inputs.draft_max} · {count_noun(len(inputs.generated), 'token')} after a "
            f"{len(inputs.prompt)}-token prompt · {count_noun(len(inputs.windows), 'window')} known")
