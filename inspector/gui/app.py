"""Entry point of the inspector window: ``spec-inspector [--model PATH] [--receipts FILE]``.

``main(argv)`` returns the process exit status. Without a display (Linux,
no ``DISPLAY``/``WAYLAND_DISPLAY`` and ``QT_QPA_PLATFORM`` unset) it prints
one line pointing to ``spec-inspector run`` and ``QT_QPA_PLATFORM=offscreen``
instead of letting Qt abort.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
from pathlib import Path

from inspector.exact_options import ExactOptionParser

EXIT_NO_DISPLAY = 2
NO_DISPLAY_MESSAGE = (
    "spec-inspector: no display found (DISPLAY and WAYLAND_DISPLAY are unset): use `spec-inspector run --help` "
    "for headless runs, or set QT_QPA_PLATFORM=offscreen to start the window without a screen"
)


def display_available(env=None, platform: str | None = None) -> bool:
    """False on Linux when no display server is reachable and QT_QPA_PLATFORM is unset."""
    env = os.environ if env is None else env
    platform = sys.platform if platform is None else platform
    if not platform.startswith("linux"):
        return True
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY") or env.get("QT_QPA_PLATFORM"))


def build_parser() -> argparse.ArgumentParser:
    p = ExactOptionParser(prog="spec-inspector",
                                description="Open the inspector window. Subcommands: run (headless), view FILE.")
    p.add_argument("--model", "-m", type=Path, help="GGUF model to select (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--receipts", type=Path, help="receipts file (.json, or an autosave .jsonl) to open")
    p.add_argument("--prompt", "-p", help="prompt text to put in the editor")
    return p


def create_window(runtime=None, **kwargs):
    """Make the ``MainWindow`` (a ``QApplication`` must exist). ``runtime``: an
    already-loaded ``LlamaRuntime`` to reuse instead of loading one."""
    from inspector.gui.shell.main_window import MainWindow  # the window's modules load with the window, not at --help

    return MainWindow(runtime, **kwargs)


def main(argv: list[str] | None = None) -> int:
    """Run the inspector window until it closes; returns the exit status. A crash in native code (a segfault
    in llama.cpp or Qt) prints every thread's Python stack to stderr first (``faulthandler``): what a report
    of one needs (a quit during Measure crashed once in five tries, issue 54)."""
    try:
        faulthandler.enable()
    except (AttributeError, ValueError, OSError):  # stderr is no file (redirected into an object): no dump
        pass
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if not display_available():
        print(NO_DISPLAY_MESSAGE, file=sys.stderr)
        return EXIT_NO_DISPLAY
    if args.model is not None and not args.model.is_file():
        print(f"spec-inspector: error: model {args.model}: no such file", file=sys.stderr)
        return 1
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(["spec-inspector"])
    app.setOrganizationName("spec-inspector")
    app.setApplicationName("spec-inspector")
    win = create_window(None, offer_recovery=args.receipts is None, model_path=str(args.model) if args.model else None,
                        load_at_start=True)  # the model loads on the worker now, with a progress bar
    if args.prompt:
        win.panel.prompt.setPlainText(args.prompt)
    win.show()
    import gc

    gc.collect()
    gc.freeze()  # startup objects (Qt, pyqtgraph, numpy) never enter later collections: shorter pauses
    if args.receipts is not None:
        win.files.open_receipts(str(args.receipts))
    return int(app.exec())
