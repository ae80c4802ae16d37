"""The window's autosave folder (``<app data>/autosave``): a run's ``AutosaveWriter``
(``inspector.receipts.autosave``) opened under the window's naming, the folder kept to the newest
``AUTOSAVE_KEEP`` files. The window's worker opens one per run; the folder itself comes from the window
(``inspector.gui.files.session_store.app_data_dir``)."""

from __future__ import annotations

import time
from pathlib import Path

from inspector.receipts.autosave import AutosaveWriter

AUTOSAVE_KEEP = 20
"""Autosave files kept in the folder (older ones are deleted)."""


def open_autosave(folder: Path, header: dict):
    """A new ``inspector.receipts.autosave.AutosaveWriter`` in ``folder`` (the window's
    naming: ``run-<date>-<time>-<ms>.jsonl``), after deleting all but the newest
    ``AUTOSAVE_KEEP`` - 1 autosave files there. Raises ``OSError``."""
    folder.mkdir(parents=True, exist_ok=True)
    files = sorted(folder.glob("run-*.jsonl"))
    for old in files[: max(0, len(files) - AUTOSAVE_KEEP + 1)]:
        try:
            old.unlink()
        except OSError:
            pass
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return AutosaveWriter(folder / f"run-{stamp}-{int(time.time() * 1000) % 1000:03d}.jsonl", header)
