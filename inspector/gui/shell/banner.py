"""The banner above the token stream: one line or two saying what the window is doing (a hint, a
run's status, its end, an error), in one of the ``BANNER_*`` colors.

``Banner`` is the label; whoever has something to say gets it (the run control, the model line,
the file, conversation and analysis actions) and calls ``say``.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel

BANNER_PAD = 4
"""Padding around the banner's text, in pixels."""
BANNER_NEUTRAL = "background:#f5f5f5;color:#424242"
BANNER_HINT = "background:#e3f2fd;color:#0d47a1"
BANNER_DONE = "background:#e8f5e9;color:#1b5e20"
BANNER_ERROR = "background:#ffebee;color:#b71c1c"
BANNER_WARN = "background:#fff8e1;color:#8a4b00"
"""Finished, with something the user asked for that did not happen (a fault that never fired)."""
BANNER_FILE = "background:#e3f2fd;color:#0d47a1"
"""A receipts file shown whole."""
BANNER_FILE_PARTIAL = "background:#fff3e0;color:#e65100"
"""A receipts file shown in part (damaged lines skipped, or a run that did not finish)."""


class Banner(QLabel):
    """A word-wrapped, selectable label two lines high at least; never hidden, so its space stays
    and the view below does not jump when its text changes."""

    def __init__(self) -> None:
        super().__init__("")
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        fm = self.fontMetrics()
        self.setMinimumHeight(2 * fm.lineSpacing() + 2 * BANNER_PAD + 2)  # hints and run status fit in two lines
        self.say("", BANNER_NEUTRAL)

    def say(self, text: str, style: str) -> None:
        """Show ``text`` (rich text) in ``style`` (one of the ``BANNER_*`` colors)."""
        self.setText(text)
        self.style_now = style
        """The ``BANNER_*`` color shown now."""
        self.setStyleSheet(f"{style};padding:{BANNER_PAD}px")
        self.show()
