"""The inspector window (PySide6 + pyqtgraph). The only package that imports Qt.

One package per thing the user sees, in one order (``GUI_LAYERS`` in ``tests/test_layers.py``): ``look``;
``engine_thread`` and ``files``; the views ``panel``, ``tokens``, ``plots``, ``cost``, ``compare`` and
``tune``; ``windows`` and ``serve``; ``shell``, which composes the window; ``app``, the entry point. A
package imports only from the groups before its own (what two groups share goes down: the window's
states are ``inspector.session.run_states``, the banner's colours ``look.banner_colours``).
Every view reads ``inspector.session.session_record.SessionRecord``.
"""
