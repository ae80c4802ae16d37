"""Files dropped on the window: a GGUF becomes the model, a receipts document (``.json``, ``.jsonl``) is
opened, as File > Open GGUF… and File > Open receipts… do."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject

MODEL_SUFFIXES = (".gguf",)
RECEIPTS_SUFFIXES = (".json", ".jsonl")


def dropped_kind(path: str) -> str | None:
    """``"model"`` for a GGUF file, ``"receipts"`` for a receipts document, None for anything else (by the
    name's ending, any case: what is inside is checked when it is opened)."""
    name = path.lower()
    if name.endswith(MODEL_SUFFIXES):
        return "model"
    if name.endswith(RECEIPTS_SUFFIXES):
        return "receipts"
    return None


class FileDrop(QObject):
    """An event filter for a window that accepts drops (``setAcceptDrops(True)``): a drag whose files include
    one it can open is accepted; on the drop the first file is opened, ``use_model(path)`` for a GGUF,
    ``open_receipts(path)`` for a receipts document."""

    def __init__(self, use_model: Callable[[str], object], open_receipts: Callable[[str], object],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.use_model = use_model
        self.open_receipts = open_receipts

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        kind = event.type()
        if kind == QEvent.Type.DragEnter:
            if any(dropped_kind(u.toLocalFile()) for u in event.mimeData().urls()):
                event.acceptProposedAction()
            else:
                event.ignore()
            return True
        if kind == QEvent.Type.Drop:
            urls = event.mimeData().urls()
            path = urls[0].toLocalFile() if urls else ""
            what = dropped_kind(path)
            if what == "model":
                self.use_model(path)
            elif what == "receipts":
                self.open_receipts(path)
            return True
        return False
