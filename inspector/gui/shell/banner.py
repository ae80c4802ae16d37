"""The banner above the token stream: one line or two saying what the window is doing (a hint, a
run's status, its end, an error), in one of the ``BANNER_*`` colors (``inspector.gui.look.banner_colours``).

``Banner`` is the label; whoever has something to say gets it (the run control, the model line,
the file, conversation and analysis actions) and calls ``say``.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMessageBox

from inspector.gui.look.banner_colours import BANNER_NEUTRAL

BANNER_PAD = 4
"""Padding around the banner's text, in pixels."""
DETAILS_HREF = "details"
DETAILS_LINK = "details"
"""A link a banner cut to its two lines ends with: it shows the whole text (the banner's tooltip) in a box."""


class Banner(QLabel):
    """A word-wrapped, selectable label two lines high at least; never hidden, so its space stays
    and the view below does not jump when its text changes."""

    def __init__(self) -> None:
        super().__init__("")
        self.setWordWrap(True)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse
                                     | Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.linkActivated.connect(self._link)
        self.details: QMessageBox | None = None
        """The box the **details** link opened last (not modal)."""
        fm = self.fontMetrics()
        self.setMinimumHeight(2 * fm.lineSpacing() + 2 * BANNER_PAD + 2)  # hints and run status fit in two lines
        self.say("", BANNER_NEUTRAL)

    def _link(self, href: str) -> None:
        if href != DETAILS_HREF:
            return
        box = self.details = QMessageBox(QMessageBox.Icon.Information, "Details", self.toolTip(),
                                         QMessageBox.StandardButton.Close, self.window())
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        box.open()  # not modal: the window goes on

    def say(self, text: str, style: str, tip: str = "") -> None:
        """Show ``text`` (rich text) in ``style`` (one of the ``BANNER_*`` colors), ``tip`` as its tooltip."""
        self.setText(text)
        self.setToolTip(tip)
        self.style_now = style
        """The ``BANNER_*`` color shown now."""
        self.setStyleSheet(f"{style};padding:{BANNER_PAD}px")
        self.show()


def repair_text(err) -> str:
    """Where the repair left the KV cache after ``err`` (a ``RunError`` the run waits on), for the banner:
    retired, repaired (KV length = canonical position, both in positions), unknown, or the mismatch."""
    if err.retired:
        return ("the session was retired (the repair failed); Resume opens a new session prefilled with the "
                "canonical stream")
    if err.repaired:
        return f"repaired: KV length {err.kv_length} = canonical position {err.canonical_position}"
    if err.kv_length is None:
        return f"KV length unknown (it could not be read), canonical position {err.canonical_position}"
    return f"KV length {err.kv_length} ≠ canonical position {err.canonical_position}"
