"""The window's File and Run menus and its toolbar (``build_menus``, which returns their actions as a
``RunMenus``); the Analysis and Help menus are their helpers' (``AnalysisActions``, ``TuneActions``,
``HelpActions``).

The menus are made before the window's helpers: each item calls one of ``MenuCommands``, which the
window gives as callables that reach its helpers only when triggered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMainWindow

from inspector.gui.ports.handles import MenuHost
from inspector.gui.serve.serve_actions import SERVE_SHORTCUT


@dataclass(frozen=True)
class MenuCommands:
    """What the File and Run menus' items do (each a callable without arguments, but ``serve(on)``)."""

    new_live_session: Callable[[], None]
    open_model: Callable[[], None]
    open_receipts: Callable[[], None]
    export_receipts: Callable[[], None]
    export_plots: Callable[[], None]
    export_trace: Callable[[], None]
    open_last_autosave: Callable[[], None]
    quit: Callable[[], None]
    run: Callable[[], None]
    pause: Callable[[], None]
    step_window: Callable[[], None]
    step_token: Callable[[], None]
    stop: Callable[[], None]
    resume: Callable[[], None]
    serve: Callable[[bool], None]


@dataclass(frozen=True)
class RunMenus:
    """The File and Run menus' actions (also on the toolbar; ``RunControl`` enables them by state)."""

    act_new: QAction
    act_open_model: QAction
    act_open: QAction
    act_export: QAction
    act_png: QAction
    act_trace: QAction
    act_recover: QAction
    act_run: QAction
    act_pause: QAction
    act_step_window: QAction
    act_step_token: QAction
    act_stop: QAction
    act_resume: QAction
    act_serve: QAction


def build_menus(window: QMainWindow, host: MenuHost, do: MenuCommands) -> RunMenus:
    """Add the File and Run menus (``host.add_action``: window-wide shortcuts) and the Run toolbar to
    ``window``; returns their actions."""
    add = host.add_action
    f = host.add_menu("&File")
    act_new = add(f, "New live session", do.new_live_session, ["Ctrl+N"],
                  "leave the opened receipts and enable the run controls again")
    act_open_model = add(f, "Open GGUF model…", do.open_model)
    act_open = add(f, "Open receipts…", do.open_receipts, ["Ctrl+O"])
    act_export = add(f, "Export receipts…", do.export_receipts, ["Ctrl+E"])
    act_png = add(f, "Export plots as PNG…", do.export_plots, ["Ctrl+Shift+E"])
    act_trace = add(f, "Export Perfetto trace…", do.export_trace, ["Ctrl+Shift+T"],
                    "a Chrome trace of the session: open it in https://ui.perfetto.dev")
    act_recover = add(f, "Open last autosave", do.open_last_autosave)
    f.addSeparator()
    add(f, "Quit", do.quit, ["Ctrl+Q"])
    r = host.add_menu("&Run")
    act_run = add(r, "Run / continue", do.run, ["Ctrl+R"])
    act_pause = add(r, "Pause", do.pause, ["Space", "Ctrl+P"])
    act_step_window = add(r, "Step window", do.step_window, ["F10", "Ctrl+W"])
    act_step_token = add(r, "Step token", do.step_token, ["F11", "Ctrl+T"])
    act_stop = add(r, "Stop", do.stop, ["Esc"])
    act_resume = add(r, "Resume after error", do.resume, ["Ctrl+Shift+R"])
    r.addSeparator()
    act_serve = add(
        r, "Serve (llama-server API)", lambda on=False: do.serve(on), [SERVE_SHORTCUT],
        "serve the loaded model as a llama-server-compatible endpoint on 127.0.0.1 (the Requests tab lists "
        "each request); Run waits until it is off")
    tb = window.addToolBar("Run")
    tb.setObjectName("run-toolbar")
    tb.setMovable(False)
    for a, label in ((act_run, "▶ Run"), (act_pause, "Pause"), (act_step_window, "Step window"),
                     (act_step_token, "Step token"), (act_stop, "■ Stop"), (act_resume, "Resume")):
        a.setIconText(label)
        tb.addAction(a)
    tb.addSeparator()
    tb.addAction(act_serve)  # checkable: ``ServeActions`` makes it so
    tb.addSeparator()
    tb.addAction(act_open)
    tb.addAction(act_export)
    return RunMenus(act_new, act_open_model, act_open, act_export, act_png, act_trace, act_recover, act_run,
                    act_pause, act_step_window, act_step_token, act_stop, act_resume, act_serve)
