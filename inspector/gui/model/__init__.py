"""The window's model: what the window shows and does, without a widget (``window_model``), how the engine
thread's records reach the session it shows (``record_feed``) and the log of the requests the window serves
(``request_log``). The views and helpers get it and listen."""
