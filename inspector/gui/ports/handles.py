"""The handle the main window gives its helpers (files, conversation, analysis, tune, serve, help) for its
menus, timers and dialogs, instead of itself: ``MenuHost``.

What the window shows and says (the session shown, the state, the banner, the status line, errors) is the
window's model (``inspector.gui.model.window_model``); the run's commands come from ``RunControl``
(``inspector.gui.shell.run_control``). The idea is napari's: its ``qt_viewer`` hands each widget its own
model slice (``QtDims(viewer.dims)``), not the viewer. A test can make a ``MenuHost`` from plain callables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QWidget


@dataclass(frozen=True)
class MenuHost:
    """Where a helper puts its menu items and what it parents its dialogs to."""

    parent: QWidget
    """The window, as a widget only: dialogs' parent, owner of window-wide shortcuts."""
    add_menu: Callable[[str], QMenu]
    """``(title)``: a new menu in the window's menu bar."""
    add_action: Callable[..., QAction]
    """``(menu, text, slot, shortcuts=(), tip="")``: a menu item with window-wide shortcuts (``slot`` None: its
    command is connected later, as the window's own File and Run menus are)."""
    every_tick: Callable[[Callable[[], None]], None]
    """``(slot)``: call ``slot()`` on every redraw tick of the window (15 Hz)."""
