"""The window's model: what the window shows and does, without a widget (``window_model``), and how the
engine thread's records reach the session it shows (``record_feed``). The views and helpers get it and listen."""
