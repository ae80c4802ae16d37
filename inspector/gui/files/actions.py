"""File menu actions of the main window: models, receipts, autosave, PNG export.

Slow work (building a receipts document hashes the model file and renders
token texts) runs on a ``BackgroundJob`` thread; the GUI thread only opens
dialogs and shows results. Errors become dialogs, never tracebacks.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox

from inspector.gui.files.receipts_loading import read_session
from inspector.gui.files.session_store import BackgroundJob, autosave_is_clean
from inspector.gui.look.banner_colours import BANNER_FILE, BANNER_FILE_PARTIAL
from inspector.gui.look.wording import count_noun
from inspector.gui.model.window_model import BUSY_PROGRESS, WindowModel
from inspector.gui.ports.handles import MenuHost
from inspector.receipts import load_document, write_document
from inspector.receipts.trace import write_trace
from inspector.session.conversation import conversation_document
from inspector.session.document import record_document
from inspector.session.run_states import LOADING, SERVING


class FileActions(QObject):
    """Open GGUF / Open receipts / Export receipts / Export plots / autosave recovery.

    It gets the window's model (``WindowModel``: the session shown, what the window says, the settings, its
    state, the progress bar, the window's title, and the load of the panel's model it asks for: while
    serving, serving stops first), the conversation (``turns``: which turns a file holds, what an export
    writes), ``host`` (``MenuHost``: dialogs' parent), the side ``panel`` (recent models), ``run``
    (``RunControl``: ``is_idle``, ``engine_busy``, ``refresh_controls``, ``load_after``) and the
    ``plots`` it exports (``(name, widget)`` pairs)."""

    exported = Signal(str, str)
    """(path, error): a receipts export finished ("" error on success)."""

    def __init__(self, model: WindowModel, turns, host: MenuHost, panel, run, plots) -> None:
        super().__init__(host.parent)
        self.model, self.turns, self.panel, self.run = model, turns, panel, run
        self.parent_widget, self.settings, self.plots = host.parent, model.settings, tuple(plots)
        self.jobs: list[BackgroundJob] = []
        self.opened = model.fileOpened
        """(path, error): opening a receipts file ended (the model's ``fileOpened``)."""

    @property
    def opening(self) -> str | None:
        """The receipts file being read on a background thread, or None (the model's ``busy_with("opening")``)."""
        return self.model.busy_with("opening")

    # -- models ------------------------------------------------------------------------
    def open_model_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.parent_widget, "Open GGUF model", "", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.use_model(path)

    def use_model(self, path: str) -> None:
        """Select ``path`` as the model (added to the recent models) and load it on the worker thread (while
        serving, serving stops first)."""
        if self.model.state == SERVING:  # a server starts, serves or stops
            self.panel.add_recent_model(str(Path(path).resolve()))
            self.model.load_model()
            return
        if self.run.engine_busy:
            self.model.show_error("Run in progress", "Stop the run before changing the model.")
            return
        self.panel.add_recent_model(str(Path(path).resolve()))
        if self.run.is_idle:
            self.model.load_model()
        else:  # queued after the load in flight
            self.run.load_after(path)

    # -- receipts ------------------------------------------------------------------------
    def receipts_dir(self) -> str:
        """Where the receipts dialogs start: the folder of the last receipts file opened or written
        (remembered), else the working folder."""
        return str(self.settings.value("files/receipts_dir", "") or "")

    def _remember_dir(self, path: str) -> None:
        self.settings.setValue("files/receipts_dir", str(Path(path).resolve().parent))
    def open_receipts_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.parent_widget, "Open receipts", self.receipts_dir(),
                                              "Receipts (*.json *.jsonl);;All files (*)")
        if path:
            self.open_receipts(path)

    def open_receipts(self, path: str) -> bool:
        """Open a saved receipts document (or an autosave ``.jsonl``) with run controls disabled.

        Reading and checking the file runs on a background thread (a 20,000-window
        file takes seconds) with a busy bar; ``opened(path, error)`` reports the end, and the
        status bar then names the document's schema version (``version_note``).
        Returns whether the opening started."""
        if self.run.engine_busy:  # a model loading (at startup) is no run
            self.model.show_error("Run in progress", "Stop the run before opening receipts.")
            return False
        if self.opening:
            self.model.show_error("Opening receipts", f"Still opening {Path(self.opening).name}.")
            return False
        path = str(path)
        self.model.set_busy("opening", path)
        job = BackgroundJob(lambda: read_session(path), self)
        job.done.connect(lambda result, error: self._opened(path, result, error))
        self.jobs.append(job)
        self.run.refresh_controls()  # Run and Open wait for the file
        self.model.say(f"opening {Path(path).name} …")
        self.model.show_progress(0, BUSY_PROGRESS)
        job.start()
        return True

    def _opened(self, path: str, result, error: str) -> None:
        self.model.set_busy("opening", None)
        self.jobs = [j for j in self.jobs if j.running()]
        self.model.show_progress(0 if self.model.state == LOADING else None)  # a load going: its bar again (0 until its next step)
        session, message, note, conversation = result if result is not None else (None, error, "", None)
        if session is None or self.run.engine_busy:
            self.model.say("")
            self.model.show_error("Cannot open receipts", message or "a run started meanwhile")
            self.run.refresh_controls()
            self.opened.emit(path, message or "a run started meanwhile")
            return
        self.model.show_session(session)
        if conversation is not None:
            self.turns.adopt(conversation, path)
        else:
            self.turns.forget()
        self.model.redraw()  # the shown tab; the others draw when shown
        skipped = session.skipped_lines
        partial = (f" <b>Partial view:</b> {count_noun(skipped, 'damaged or incomplete line')} "
                   "skipped.") if skipped else ""
        unfinished = (" <b>Unfinished run</b> (it stopped or was killed): every complete record is shown."
                      if session.unfinished else "")
        background = (f" {count_noun(session.background_sessions, 'background session')} ran beside it."
                      if session.background_sessions else "")
        turns = (f"a conversation of {count_noun(len(conversation.records), 'turn')} (pick one beside "
                 "the Next turn row; this is the last), " if conversation is not None else "")
        self.model.set_banner(f"Viewing <b>{html.escape(Path(path).name)}</b> — {turns}"
                            f"{count_noun(len(session.tokens), 'token')}, {count_noun(len(session.receipts), 'window')}"
                            f", model {html.escape(session.model_name)}.{unfinished}{partial}{background} Read only "
                            "(the panel shows the file's settings): File &gt; New live session (Ctrl+N) enables the "
                            "run controls.", BANNER_FILE_PARTIAL if skipped or session.unfinished else BANNER_FILE)
        self.model.set_title(f"spec-inspector — {Path(path).name}")
        self._remember_dir(path)
        self.run.refresh_controls()
        if note:  # the schema version, after the state's own text (``refresh_controls``)
            self.model.say(f"viewing {Path(path).name} (read only) · {note}")
        self.opened.emit(path, "")

    def export_receipts_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.parent_widget, "Export receipts", str(Path(self.receipts_dir()) / "receipts.json"),
                                              "Receipts (*.json)")
        if path:
            self.export_receipts(path)

    def export_receipts(self, path: str) -> BackgroundJob | None:
        """Write the shown session as a receipts document (``record_document`` / ``write_document``)
        on a background thread; ``exported(path, error)`` reports the end."""
        return self._export(path, lambda doc: str(write_document(doc, path)))

    def export_trace_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.parent_widget, "Export Perfetto trace", str(Path(self.receipts_dir()) / "trace.json"),
                                              "Chrome trace JSON (*.json)")
        if path:
            self.export_trace(path)

    def export_trace(self, path: str) -> BackgroundJob | None:
        """Write the shown session as a Chrome trace (``inspector.receipts.trace``, as
        ``spec-inspector trace``; open it in https://ui.perfetto.dev) on a background thread;
        ``exported(path, error)`` reports the end."""
        return self._export(path, lambda doc: str(write_trace(doc, path)))

    def shown_document(self, what: str = "export"):
        """A callable that returns the shown session's receipts document, to be called on a background thread
        (``inspector.session.document.record_document``: the file holds what the window shows; a conversation's
        every turn; a file as it was read), or None when nothing shown makes one (a box says so: "Nothing to ``what``")."""
        s = self.model.session
        conv = self.turns.export_conversation()
        if isinstance(conv, str):  # a conversation file: as it was read
            return lambda: load_document(conv)
        if conv is not None:  # every turn of the live conversation (snapshots: a turn may still run)
            return lambda: conversation_document(conv)
        if s.origin == "document":  # a saved receipts document (an autosave cannot be exported)
            doc, source = s.document, s.document_path
            return lambda: doc if doc is not None else load_document(source)
        if s.origin == "live" and s.header is not None:
            shown = s.snapshot()  # on this thread: the run may go on appending while the job writes
            return lambda: record_document(shown)
        self.model.show_error(f"Nothing to {what}", "Run a generation or open receipts first "
                              "(an autosave can be viewed but not made a receipts document).")
        return None

    def _export(self, path: str, write) -> BackgroundJob | None:
        """Run ``write(receipts document of the shown session)`` (``shown_document``) on a background thread."""
        document = self.shown_document()
        if document is None:
            return None
        j = BackgroundJob(lambda: write(document()), self)
        j.done.connect(self._export_done)
        self.jobs.append(j)
        self.model.say(f"exporting {Path(path).name} …")
        j.start()
        return j

    def _export_done(self, result, error: str) -> None:
        if error:
            self.model.show_error("Export failed", error)
            self.exported.emit("", error)
        else:
            self.model.say(f"receipts written: {result}")
            self._remember_dir(str(result))
            self.exported.emit(str(result), "")

    def wait(self) -> None:
        for j in self.jobs:
            j.wait(30)

    # -- plots -------------------------------------------------------------------------
    def export_plots_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self.parent_widget, "Export plots as PNG (prefix)", "spec-inspector.png",
                                              "PNG images (*.png)")
        if path:
            written = self.export_plots(path)
            self.model.say("plots written: " + ", ".join(Path(p).name for p in written))

    def export_plots(self, path: str) -> list[str]:
        """Save the timeline, lock plots and statistics as PNG files next to ``path``
        (``NAME-timeline.png`` etc.); returns the files written."""
        self.model.redraw_all()
        base = Path(path)
        stem = base.with_suffix("")
        out = []
        for name, widget in self.plots:
            if widget.width() < 100:
                widget.resize(1000, 560)
            target = f"{stem}-{name}.png"
            whole = getattr(widget, "export_pixmap", None)  # a view that scrolls saves all of itself
            if not (whole() if whole is not None else widget.grab()).save(target):
                self.model.show_error("Export failed", f"cannot write {target}")
                return out
            out.append(target)
        return out

    # -- autosave recovery -----------------------------------------------------------------
    def last_unclean_autosave(self) -> str | None:
        s = self.settings
        path = s.value("autosave/path")
        clean = str(s.value("autosave/clean", True)).lower() in ("true", "1")
        if not path or clean or not Path(path).exists() or autosave_is_clean(path):
            return None
        return str(path)

    def offer_recovery(self) -> None:
        """If the last run did not finish cleanly, ask whether to open its autosave (non-blocking)."""
        path = self.last_unclean_autosave()
        if path is None:
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Last run did not finish",
                          f"The last run did not finish cleanly. Its receipts were autosaved to\n{path}\n\nOpen them?",
                          QMessageBox.StandardButton.Open | QMessageBox.StandardButton.Discard, self.parent_widget)

        def answered(button) -> None:
            if box.standardButton(button) == QMessageBox.StandardButton.Open:
                self.open_receipts(path)
            self.settings.setValue("autosave/clean", True)

        box.buttonClicked.connect(answered)
        box.open()
        self.recovery_box = box

    def open_last_autosave(self) -> None:
        path = self.settings.value("autosave/path")
        if not path or not Path(path).exists():
            self.model.show_error("No autosave", "No autosaved run was found.")
            return
        self.open_receipts(str(path))
