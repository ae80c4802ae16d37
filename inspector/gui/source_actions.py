"""Draft-model and replay files of the source panel: Open dialogs and "Make draft from target"."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtWidgets import QFileDialog


class SourceActions:
    """The window's draft/replay file actions; ``job`` is the running make-draft job or None."""

    def __init__(self, window) -> None:
        self.w = window
        self.job = None

    def open_draft_dialog(self) -> None:
        current = self.w.panel.draft_model.text().strip()
        path, _ = QFileDialog.getOpenFileName(self.w, "Open draft GGUF model", str(Path(current).parent) if current else "",
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            self.w.panel.draft_model.setText(path)
            self.w.panel.set_source("draft")

    def open_replay_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.w, "Receipts file to replay", "", "Receipts (*.json);;All files (*)")
        if path:
            self.w.panel.replay_file.setText(path)
            self.w.panel.set_source("replay")

    def make_draft_clicked(self):
        """Re-quantize the chosen target model to the chosen type on a background thread
        (``make_draft``; cached by file); then the draft path is filled in. Returns the job."""
        from inspector.gui.session_store import BackgroundJob
        from inspector.llama.quantize import make_draft

        if self.job is not None:
            return None
        try:
            target = str(self.w.panel.model_path() or self.w._bundled_path())
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

