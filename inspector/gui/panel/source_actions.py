"""Files of the source panel (a path option's Open… dialog: draft model, replay receipts, a
third-party source's file) and "Make draft from target".

``SourceActions`` gets the window's model (``WindowModel``: what the window says, where drafts go, and that a
draft is being made: ``busy("draft")``), the side panel and the window's ``RunControl`` (the chosen model, the
controls a draft in progress disables); the quantization runs on a ``BackgroundJob`` thread.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from inspector.gui.files.session_store import BackgroundJob
from inspector.gui.model.window_model import WindowModel
from inspector.llama.quantize import make_draft


class SourceActions(QObject):
    """The window's source file actions; ``job`` is the running make-draft job or None.

    ``draftMade(path, error)``: "Make draft from target" finished ("" error on success)."""

    draftMade = Signal(str, str)

    def __init__(self, model: WindowModel, panel, run, parent: QWidget) -> None:
        super().__init__(parent)
        self.model, self.panel, self.run = model, panel, run
        self.draft_dir = model.draft_dir
        self.dialog_parent = parent

    @property
    def job(self) -> BackgroundJob | None:
        """The running make-draft job, or None (the model's ``busy_with("draft")``)."""
        return self.model.busy_with("draft")

    def open_option_file(self, source: str, name: str) -> None:
        """The Open… dialog of path option ``name`` of ``source`` (its ``file_filter``, starting in
        the folder of the current file); a chosen file fills the option and selects the source."""
        control = self.panel.option_controls[source][name]
        o = control.option
        current = control.value()
        path, _ = QFileDialog.getOpenFileName(self.dialog_parent, f"Open {o.label} ({source} source)",
                                              str(Path(current).parent) if current else "",
                                              o.file_filter or "All files (*)")
        if path:
            control.set_value(path)
            self.panel.set_source(source)

    def make_draft_clicked(self):
        """Re-quantize the chosen target model to the chosen type on a background thread
        (``make_draft``; cached by file); then the draft path is filled in. Returns the job."""
        if self.job is not None:
            return None
        try:
            target = str(self.run.chosen_model())
        except Exception as exc:
            self.model.show_error("No model", str(exc))
            return None
        p = self.panel
        qtype = p.draft_type.currentText()
        out_dir = self.draft_dir
        threads = max(1, (os.cpu_count() or 2) - 1)  # one core stays with the GUI

        def job():
            return str(make_draft(target, qtype, out_dir=out_dir, threads=threads))

        p.make_draft.setEnabled(False)
        p.make_draft.setText(f"Making {qtype} draft…")
        p.draft_busy.show()
        self.model.say(f"making a {qtype} draft of {Path(target).name} (llama.cpp quantize)…")
        j = BackgroundJob(job, self.dialog_parent)
        j.done.connect(self._draft_done)
        self.model.set_busy("draft", j)
        j.start()
        return j

    def _draft_done(self, result, error: str) -> None:
        p = self.panel
        self.model.set_busy("draft", None)
        p.draft_busy.hide()
        p.make_draft.setText("Make draft from target")
        self.run.refresh_controls()
        if error:
            self.model.say("making the draft failed")
            self.model.show_error("Cannot make the draft", error)
            self.draftMade.emit("", error)
            return
        p.draft_model.setText(str(result))
        p.set_source("draft")
        self.model.say(f"draft ready: {Path(result).name}")
        self.draftMade.emit(str(result), "")
