"""The Windows tab: one row per proposal window, and the selected window's rows."""
