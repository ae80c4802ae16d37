"""The window's "what speculation buys" wiring (GUI thread): the comparison
with plain decoding after a run.

The work itself runs on the engine thread (``EngineWorker`` for the
baseline, ``inspector.gui.analysis``); this object only receives the
immutable results and hands them to the session and the views.
"""

from __future__ import annotations

from PySide6.QtCore import QObject


class AnalysisActions(QObject):
    """Baseline results of ``window``'s runs."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.w = window
        window.worker.baselineReady.connect(self._baseline_ready)

    def _baseline_ready(self, result, error: str) -> None:
        """The comparison with plain decoding of the run that just ended (before its ``runFinished``)."""
        if error:
            self.w.status_state.setText(f"comparison with plain decoding failed: {error}")
            self.w.show_error("Comparison with plain decoding failed", error)
            return
        if self.w.session.origin == "live":
            self.w.session.set_baseline(result)
