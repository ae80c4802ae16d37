"""The banner's colours (``inspector.gui.shell.banner.Banner.say``): a style sheet per kind of message,
shared by whoever says something there (the run control, the model line, the file, conversation,
serve and analysis actions)."""

from __future__ import annotations

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
