"""The handles the main window gives its helpers (files, conversation, analysis, tune, serve, help)
instead of itself.

Each helper receives the widgets it drives and, of the window, only what these name: how to tell the
user something (``Feedback``), the session shown and its redraw (``ShownSession``), where its menu
items and timers go (``MenuHost``). The run's state and commands come from ``RunControl``
(``inspector.gui.shell.run_control``), handed over as such. The idea is napari's: its ``qt_viewer``
hands each widget its own model slice (``QtDims(viewer.dims)``), not the viewer.

The window makes them in one place (``MainWindow.__init__``); a test can make them from plain
callables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QWidget


@dataclass(frozen=True)
class Feedback:
    """How a helper tells the user something."""

    status: Callable[[str], None]
    """Set the status line's text (plain text; a long one is elided, whole in its tooltip)."""
    banner: Callable[[str, str], None]
    """``(html, style)``: show ``html`` in the banner above the tokens, ``style`` one of
    ``inspector.gui.look.banner_colours``'s ``BANNER_*``."""
    error: Callable[..., None]
    """``(title, message, icon=QMessageBox.Icon.Critical)``: a window-modal message box that does not
    block; ``message`` becomes the last error."""
    last_error: Callable[[], str]
    """The message of the last error shown ("" when none)."""
    banner_text: Callable[[], str]
    """The banner's current HTML."""


@dataclass(frozen=True)
class ShownSession:
    """The session the window's views show (a ``SessionRecord``) and how they are redrawn."""

    current: Callable[[], object]
    """The ``SessionRecord`` shown now."""
    show: Callable[[object], None]
    """Show another ``SessionRecord`` in every view (the records still queued go to the one shown before)."""
    redraw: Callable[[], None]
    """Apply the worker's new records, then redraw the token stream and the tab shown."""
    redraw_all: Callable[[], None]
    """``redraw``, then every tab (hidden ones too: exports, tests)."""
    drain: Callable[[], None]
    """Apply the worker's new records to the shown live session, without drawing."""


@dataclass(frozen=True)
class MenuHost:
    """Where a helper puts its menu items and what it parents its dialogs to."""

    parent: QWidget
    """The window, as a widget only: dialogs' parent, owner of window-wide shortcuts."""
    add_menu: Callable[[str], QMenu]
    """``(title)``: a new menu in the window's menu bar."""
    add_action: Callable[..., QAction]
    """``(menu, text, slot, shortcuts=(), tip="")``: a menu item with window-wide shortcuts."""
    every_tick: Callable[[Callable[[], None]], None]
    """``(slot)``: call ``slot()`` on every redraw tick of the window (15 Hz)."""
