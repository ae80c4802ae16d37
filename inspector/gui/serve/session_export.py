"""Export session… and Replay under other sources…: a server run's requests written as one conversation document
(what ``serve --session`` writes, ``inspector.serve.receipts_dir.session_document``), for replay under other sources
with ``tune --turns`` or ``compare --turns``, or at once in the Compare window (``replayReady``: the document is
written beside the run's receipts, in ``sessions/``). The document is gathered and written on a background thread;
the Requests tab's line says where it went, or why not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog

from inspector.gui.files.session_store import BackgroundJob
from inspector.gui.look.wording import count_noun
from inspector.gui.serve.requests_view import RequestsView
from inspector.receipts import write_document
from inspector.serve.receipts_dir import ReceiptsDir, session_document


class SessionExport(QObject):
    """Writes the requests of the server run ``receipts()`` names (its ``ReceiptsDir``, None before any run)
    and reports on ``view``'s line."""

    replayReady = Signal(str)
    """The path of a session document written for Replay under other sources… (the Compare window opens it)."""

    def __init__(self, view: RequestsView, receipts: Callable[[], ReceiptsDir | None], parent=None) -> None:
        super().__init__(parent)
        self.view = view
        self.receipts = receipts
        self._job = None  # the BackgroundJob writing a document

    def ask(self) -> None:
        """Export session… clicked: ask where (first offered: the run's receipts folder, named after the run),
        then ``write``."""
        receipts = self.receipts()
        suggested = ("served-session.json" if receipts is None
                     else str(receipts.folder / f"served-session-{receipts.stamp}.json"))
        path, _ = QFileDialog.getSaveFileName(self.view, "Export served session", suggested,
                                              "Conversation documents (*.json)")
        if path:
            self.write(Path(path))

    def replay(self) -> None:
        """Replay under other sources… clicked: write the session to ``sessions/served-session-<run>.json`` in the
        run's receipts folder, then ``replayReady`` with its path."""
        receipts = self.receipts()
        if receipts is None:
            self.view.say("no server run has recorded requests yet", error=True)
            return
        self.write(receipts.folder / "sessions" / f"served-session-{receipts.stamp}.json", replay=True)

    def write(self, path: Path, replay: bool = False) -> None:
        """Write the last server run's requests as one conversation document at ``path``, on a background
        thread; the tab's line says where, or why not; ``replay``: then ``replayReady``."""
        receipts = self.receipts()
        if receipts is None:
            self.view.say("no server run has recorded requests yet", error=True)
            return

        def work():
            doc = session_document(receipts.files(this_run_only=True))
            write_document(doc, path)
            return len(doc["turns"])

        job = self._job = BackgroundJob(work, self)
        job.done.connect(lambda n, error: self._written(path, n, error, replay))
        job.start()

    def _written(self, path: Path, n, error: str, replay: bool = False) -> None:
        self._job = None
        if error:
            self.view.say(f"session not exported: {error}", error=True)
            return
        if replay:
            self.view.say(f"session: {path} ({count_noun(n, 'request')}), chosen in the Compare window: pick the "
                          "sources and Run")
            self.replayReady.emit(str(path))
            return
        self.view.say(f"session: {path} ({count_noun(n, 'request')}); replay it under other sources: "
                      f"spec-inspector tune --turns {path}, or compare --turns {path}")
