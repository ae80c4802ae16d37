"""The inspector window (PySide6 + pyqtgraph). The only package that imports Qt.

Layout: ``app`` (entry point), ``main_window`` (wiring), ``controls`` (left
panel), ``worker`` (the engine thread), ``contention`` (background sessions),
``session_store`` (autosave,
recovery, export), and one module per view. Every view reads ``inspector.session.record.SessionRecord``.
"""
