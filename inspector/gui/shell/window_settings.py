"""What the window remembers between starts (QSettings): its geometry, its splitters and the side
panel's values (group ``controls``).

Functions of the settings and the widgets they read or set, no window: ``restore_window`` and
``restore_controls`` at start, ``save_window`` at close and before every run (a crash during the run
must not lose the settings it ran with).
"""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QSettings
from PySide6.QtWidgets import QSplitter, QWidget

CONTROLS_GROUP = "controls"
FIRST_EXAMPLE = "copy-with-corrections"
"""The example prompt a first start shows."""


def restore_window(settings: QSettings, window: QWidget, splits: dict[str, QSplitter]) -> list[str]:
    """Give ``window`` its remembered geometry and each splitter of ``splits`` (settings key -> splitter)
    its remembered state; returns the keys restored."""
    geo = settings.value("window/geometry")
    if isinstance(geo, QByteArray) and not geo.isEmpty():
        window.restoreGeometry(geo)
    restored = []
    for key, split in splits.items():
        v = settings.value(key)
        if isinstance(v, QByteArray) and not v.isEmpty():
            split.restoreState(v)
            restored.append(key)
    return restored


def restore_controls(settings: QSettings, panel) -> None:
    """Give the side panel (``ControlPanel``) its remembered values; an empty prompt becomes the first
    example (``FIRST_EXAMPLE``)."""
    values = {}
    settings.beginGroup(CONTROLS_GROUP)
    for k in settings.childKeys():
        values[k] = settings.value(k)
    settings.endGroup()
    if not values.get("prompt"):
        values.setdefault("prompt", "")
    panel.apply_values(values)
    if not panel.prompt.toPlainText():
        try:
            panel.choose_example(FIRST_EXAMPLE)
        except KeyError:
            pass


def save_window(settings: QSettings, window: QWidget, splits: dict[str, QSplitter], panel) -> None:
    """Remember ``window``'s geometry, the state of each splitter of ``splits`` and the panel's live values (not
    an opened file's: a restart after viewing receipts showed the file's prompt; written to disk now)."""
    settings.setValue("window/geometry", window.saveGeometry())
    for key, split in splits.items():
        settings.setValue(key, split.saveState())
    settings.beginGroup(CONTROLS_GROUP)
    for k, v in panel.live_values().items():
        settings.setValue(k, v)
    settings.endGroup()
    settings.sync()
