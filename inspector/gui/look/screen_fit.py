"""Every window and dialog inside the screen it opens on (issue 36): the main window, the Compare and
Tune windows, and every dialog they open (message boxes, Help, file dialogs).

``keep_on_screen(window, width, height)`` gives a top-level widget its wanted size, or less on a
smaller screen, and keeps it so each time it is shown: its size (a remembered one too) shrinks to the
screen's available geometry (``QScreen.availableGeometry``: the screen less its panels) with its
frame, and a window that would stick out (or sits on another screen than its parent on its first
show) is moved inside. The screen is the parent's on a first show, then the one the window is on.
A window the user placed that fits is left where it is; a maximized or full-screen one is left alone.
"""

from __future__ import annotations

import time

from PySide6.QtCore import QEvent, QObject, QRect, Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

FRAME_ALLOWANCE = 32
"""Pixels left for the window manager's title bar while the frame is not known yet (before the first
show); once the window manager reports the frame, its own margins count."""


SETTLE_S = 1.0
"""After a show, for this long a move (the window manager placing the window and adding its frame, which
can push a remembered position's title bar above the screen) is fitted again; later moves are the
user's and are left alone."""

REFIT_MS = (100, 400, 900)
"""After a show the window is fitted again at these delays: the window manager adds its frame (its title bar
above the client) without a Move event, and only then is the frame known (issue 54 item 4: at 1024x640 the
title bar lay above the screen)."""

OWN_WINDOWS = (Qt.WindowType.Window, Qt.WindowType.Dialog)
"""The kinds of child windows fitted: windows and dialogs (popups and tooltips place themselves)."""


class ScreenFit(QObject):
    """The event filter ``keep_on_screen`` installs on one window: fits it at each show (before it
    appears, and again once a dialog has sized and placed itself), and gives every window it opens
    (a message box, a Help dialog, a file dialog, the Compare window: a child that is a window) a
    filter of its own when that child is first polished, before it shows."""

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self.window = window
        self.visible = window.isVisible
        self.shown = False
        """True after the first fit on a show: from then on the window's own screen counts."""
        self.shown_at = 0.0  # monotonic seconds of the last show (moves within SETTLE_S are fitted)

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 (Qt's name)
        kind = event.type()  # installed on ``window`` alone: ``obj`` is the window
        if kind in (QEvent.Type.Show, QEvent.Type.ShowToParent):
            fit_to_screen(self.window, first=not self.shown)
            self.shown_at = time.monotonic()
            if kind == QEvent.Type.ShowToParent:
                self.shown = True
                for ms in REFIT_MS:  # the window manager frames it without moving it: no Move event
                    QTimer.singleShot(ms, self.refit)
        elif kind == QEvent.Type.Move and time.monotonic() - self.shown_at < SETTLE_S:
            fit_to_screen(self.window)
        elif kind == QEvent.Type.ChildPolished:
            child = event.child()
            if isinstance(child, QWidget) and child.windowType() in OWN_WINDOWS:  # not menus, tooltips
                keep_on_screen(child)
        return False


    def refit(self) -> None:
        """Fit the window again once its frame is known (``REFIT_MS`` after a show; not when the timer comes
        later than ``SETTLE_S``: a move then is the user's)."""
        if self.visible() and time.monotonic() - self.shown_at < SETTLE_S:
            fit_to_screen(self.window)


def keep_on_screen(window: QWidget, width: int | None = None, height: int | None = None) -> QWidget:
    """Resize the top-level ``window`` to ``width`` x ``height`` (default: its size now), no bigger
    than the available geometry of its screen (``fit_to_screen``), and fit it again every time it is
    shown; the windows it opens (its children that are windows: dialogs, message boxes) are kept so
    too. Returns ``window``."""
    if width is not None and height is not None:
        window.resize(width, height)
    if window.findChild(ScreenFit, options=Qt.FindChildOption.FindDirectChildrenOnly) is None:
        fit_to_screen(window, first=True)
        window.installEventFilter(ScreenFit(window))
    elif width is not None and height is not None:
        fit_to_screen(window, first=not window.isVisible())
    return window


def screen_room(window: QWidget, first: bool = False) -> QRect | None:
    """The available geometry of the screen ``window`` opens on: on its ``first`` show its parent
    window's screen (else the screen under it), later the screen under its middle; None without a
    screen."""
    parent = window.parentWidget()
    screen = None
    if first and parent is not None:
        screen = parent.window().screen()
    if screen is None:
        screen = QGuiApplication.screenAt(window.frameGeometry().center()) or window.screen()
    screen = screen or QGuiApplication.primaryScreen()
    return None if screen is None else screen.availableGeometry()


def frame_margins(window: QWidget) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of ``window``'s frame: what the window manager reported, and at least
    ``FRAME_ALLOWANCE`` for the title bar while none is reported (no frame yet)."""
    frame, inner = window.frameGeometry(), window.geometry()
    left, top = inner.left() - frame.left(), inner.top() - frame.top()
    right, bottom = frame.right() - inner.right(), frame.bottom() - inner.bottom()
    if (left, top, right, bottom) == (0, 0, 0, 0) and not window.windowFlags() & Qt.WindowType.FramelessWindowHint:
        top = FRAME_ALLOWANCE
    return max(0, left), max(0, top), max(0, right), max(0, bottom)


def fit_to_screen(window: QWidget, first: bool = False) -> None:
    """Shrink ``window`` (a top-level widget) to the available geometry of its screen (``screen_room``)
    with its frame, and move it inside when its frame sticks out (a window never placed is left to the
    window manager); on its ``first`` show, a window that lies on another screen than its parent is
    centred over the parent. Never below the window's minimum size; a maximized or full-screen
    window is left alone."""
    if not window.isWindow() or window.isMaximized() or window.isFullScreen():
        return
    room = screen_room(window, first)
    if room is None or room.isEmpty():
        return
    left, top, right, bottom = frame_margins(window)
    width = min(window.width(), room.width() - left - right)
    height = min(window.height(), room.height() - top - bottom)
    if (width, height) != (window.width(), window.height()):
        window.resize(max(width, window.minimumWidth()), max(height, window.minimumHeight()))
    outer_w, outer_h = window.width() + left + right, window.height() + top + bottom
    at = window.frameGeometry().topLeft()
    x, y = at.x(), at.y()
    parent = window.parentWidget()
    if first and parent is not None and not room.contains(window.frameGeometry().center()):
        middle = parent.window().frameGeometry().center()
        x, y = middle.x() - outer_w // 2, middle.y() - outer_h // 2
    elif not window.testAttribute(Qt.WidgetAttribute.WA_Moved):
        return  # never placed: the window manager places it, inside the screen when it fits
    x = max(room.left(), min(x, room.left() + room.width() - outer_w))
    y = max(room.top(), min(y, room.top() + room.height() - outer_h))
    if (x, y) != (at.x(), at.y()):
        if window.frameGeometry() == window.geometry():  # no frame yet: a move places the client, and the
            x, y = x + left, y + top  # window manager's frame then goes above and left of it
        window.move(x, y)
