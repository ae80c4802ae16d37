"""The Compare window: one prompt or conversation run with several proposal sources side by side."""
