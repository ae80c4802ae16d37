"""Files of the source panel (a path option's Open… dialog: draft model, replay receipts, a
third-party source's file) and "Make draft from target"."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtWidgets import QFileDialog


class SourceActions:
    """The window's source file actions; ``job`` is the running make-draft job or None."""

    def __init__(self, window) -> None:
        self.w = window
        self.job = None

    def open_option_file(self, source: str, name: str) -> None:
        """The Open… dialog of path option ``name`` of ``source`` (its ``file_filter``, starting in
        the folder of the current file); a chosen file fills the option and selects the source."""
        control = self.w.panel.option_controls[source][name]
        o = control.option
        current = control.value()
        path, _ = QFileDialog.getOpenFileName(self.w, f"Open {o.label} ({source} source)",
                                              str(Path(current).parent) if current else "",
                                              o.file_filter or "All files (*)")
        if path:
            control.set_value(path)
            self.w.panel.set_source(source)

    def make_draft_clicked(self):
        """Re-quantize the chosen target model to the chosen type on a background thread
        (``make_draft``; cached by file); then the draft path is filled in. Returns the job."""
        from inspector.gui.files.session_store import BackgroundJob
        from inspector.llama.quantize import make_draft

        if self.job is not None:
            return None
        try:
            target = str(self.w.panel.model_path() or self.w.bundled_path())
        except Exception as exc:
            self.w.show_error("No model", str(exc))
            return None
        qtype = self.w.panel.draft_type.currentText()
        out_dir = self.w.draft_dir
        threads = max(1, (os.cpu_count() or 2) - 1)  # one core stays with the GUI

        def job():
            return str(make_draft(target, qtype, out_dir=out_dir, threads=threads))

        p = self.w.panel
        p.make_draft.setEnabled(False)
        p.make_draft.setText(f"Making {qtype} draft…")
        p.draft_busy.show()
        self.w.status_state.setText(f"making a {qtype} draft of {Path(target).name} (llama.cpp quantize)…")
        j = BackgroundJob(job, self.w)
        j.done.connect(self._draft_done)
        self.job = j
        j.start()
        return j

    def _draft_done(self, result, error: str) -> None:
        p = self.w.panel
        self.job = None
        p.draft_busy.hide()
        p.make_draft.setText("Make draft from target")
        self.w.refresh_controls()
        if error:
            self.w.status_state.setText("making the draft failed")
            self.w.show_error("Cannot make the draft", error)
            self.w.draftMade.emit("", error)
            return
        p.draft_model.setText(str(result))
        p.set_source("draft")
        self.w.status_state.setText(f"draft ready: {Path(result).name}")
        self.w.draftMade.emit(str(result), "")

