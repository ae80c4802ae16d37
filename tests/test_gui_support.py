"""Helpers for the GUI tests (no tests here): a main window on the session's runtime."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings  # noqa: E402

MAX_TOKENS = 48
RUN_TIMEOUT_MS = 180_000


def make_window(qtbot, runtime, tmp_path, *, max_tokens: int = MAX_TOKENS, example: str = "copy-with-corrections",
                settings_file: str = "settings.ini", **kwargs):
    """A shown ``MainWindow`` reusing ``runtime``, with settings and autosave under ``tmp_path``."""
    from inspector.gui.main_window import MainWindow

    settings = QSettings(str(tmp_path / settings_file), QSettings.Format.IniFormat)
    w = MainWindow(runtime, settings=settings, data_dir=tmp_path / "data", **kwargs)
    qtbot.addWidget(w)
    w.panel.choose_example(example)
    w.panel.max_tokens.setValue(max_tokens)
    w.show()
    return w


def run_to_end(qtbot, w, **start) -> tuple[str, dict]:
    """Start a run and wait for ``runFinished``; returns (reason, kv info)."""
    with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS) as blocker:
        assert w.start_run(**start)
    w.refresh_all()
    return tuple(blocker.args)


def wait_state(qtbot, w, state: str, timeout: int = RUN_TIMEOUT_MS) -> None:
    qtbot.waitUntil(lambda: w.state == state, timeout=timeout)


def reference_tokens(make_generation, chat_tokens, text: str, max_tokens: int = MAX_TOKENS) -> list[int]:
    """Generated token ids of an uninterrupted greedy n-gram run (the engine, no GUI)."""
    from inspector.sources import NgramSource

    g = make_generation(NgramSource(), chat_tokens(text), max_new_tokens=max_tokens)
    g.run()
    return list(g.generated)


def example_text(name: str) -> str:
    from inspector.gui.controls import example_prompts

    return example_prompts()[name]


def open_receipts(qtbot, w, path) -> str:
    """Open a receipts file in ``w`` (read on a background thread) and wait until it is
    shown or refused; returns the error ("" when shown)."""
    with qtbot.waitSignal(w.files.opened, timeout=120_000) as blocker:
        assert w.files.open_receipts(str(path))
    return blocker.args[1]
