"""The Synthetic acceptance tab's wiring (GUI thread): the cost model and the comparisons it marks, and
"Measure for real" (the measured synthetic table on the engine thread, ``SyntheticWorker``).

The map itself is predicted in the view from the cost model the Cost model tab shows (``cost_changed``
carries each new one); the measured table holds the window busy (Run and model changes refused) for its
minutes, with progress, its cells filled as they finish, and Cancel (the rows done are kept).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal

from inspector.gui.engine_thread.synthetic import SyntheticRequest, SyntheticWorker
from inspector.gui.model.window_model import WindowModel
from inspector.prompts import example_prompts
from inspector.session.run_states import BUSY, IDLE


class SyntheticActions(QObject):
    """Feeds ``view`` (``SyntheticView``) and runs its measured table.

    ``model``: the window's model (the engine worker and its thread, what the window says, its
    ``shutdownRequested``); ``panel``: the side panel (the prompt the table decodes); ``run``: ``RunControl``
    (``is_idle``, ``set_state``); ``tabs``: the window's tabs; ``analysis``: the ``AnalysisActions``
    (its ``costChanged`` and ``compareReady``, and the cost model shown now, ``current``).
    """

    requestMeasure = Signal(object)
    measured = Signal(object, str)
    """(the table's result or None, note or error): "Measure for real" ended (tests, status)."""

    def __init__(self, model: WindowModel, view, panel, run, tabs, analysis) -> None:
        super().__init__(view)
        self.model, self.view, self.panel, self.run, self.engine, self.tabs = model, view, panel, run, model.worker, tabs
        self.worker = SyntheticWorker(model.worker)
        self.worker.moveToThread(model.thread)
        self.running = False
        self.requestMeasure.connect(self.worker.measure)
        self.worker.progress.connect(view.set_progress)
        self.worker.rowsDone.connect(view.set_measured)
        self.worker.done.connect(self._done)
        self.worker.failed.connect(self._failed)
        view.measure.clicked.connect(self.start)
        view.cancel.clicked.connect(self.cancel)
        analysis.costChanged.connect(view.set_cost_model)
        analysis.compareReady.connect(lambda result, _note: result is not None and view.set_compare(result))
        view.set_cost_model(None if analysis.current is None else analysis.current.model)
        model.shutdownRequested.connect(self.worker.job.request_cancel, Qt.ConnectionType.DirectConnection)

    def start(self) -> bool:
        """Run the measured table on the engine thread after the panel's prompt; refused (with a message)
        while a run goes or nothing is loaded."""
        if not self.run.is_idle:
            self.model.show_error("Run in progress", "Stop the run before measuring the synthetic table.")
            return False
        if self.engine.runtime is None:
            self.model.show_error("No model loaded", "Load a model first (the bundled one loads at startup).")
            return False
        self.running = True
        self.run.set_state(BUSY, "measuring the synthetic table…")
        self.view.set_measured(None)
        self.view.set_running(True, "measuring the cost model and plain decoding …")
        self.tabs.setCurrentWidget(self.view)
        self.worker.job.reset_cancel()
        text = self.panel.prompt.toPlainText()
        if not text.strip():
            text = example_prompts().get("open-ended", "Hello")
        self.requestMeasure.emit(SyntheticRequest(text, self.panel.raw.isChecked()))
        return True

    def cancel(self) -> None:
        """Stop the measured table (the cells done stay)."""
        self.worker.job.request_cancel()
        self.view.cancel.setEnabled(False)

    def _end(self) -> None:
        self.running = False
        if self.model.state == BUSY:
            self.run.set_state(IDLE)

    def _done(self, result, note: str) -> None:
        self._end()
        self.view.set_measured(result)
        self.view.set_running(False, note or "measured: squares are the measured speedups")
        self.model.say(f"synthetic table {note or 'measured'}")
        self.measured.emit(result, note)

    def _failed(self, message: str) -> None:
        self._end()
        self.view.set_running(False, f"failed: {message}")
        self.model.show_error("Cannot measure the synthetic table", message)
        self.measured.emit(None, message)
