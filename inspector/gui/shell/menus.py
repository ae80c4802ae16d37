"""The window's File and Run menus and its toolbar (``build_menus``, which returns their actions as a
``RunMenus``); the Analysis and Help menus are their helpers' (``AnalysisActions``, ``TuneActions``,
``HelpActions``).

The menus are made before the window's helpers (``RunControl`` enables their actions by state), without
commands; once the helpers exist the window gives each item its command (``RunMenus.connect`` with
the model's ``WindowCommands``: the helpers' own methods).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMainWindow

from inspector.gui.model.commands import WindowCommands
from inspector.gui.ports.handles import MenuHost
from inspector.gui.serve.serve_actions import SERVE_SHORTCUT


@dataclass(frozen=True)
class RunMenus:
    """The File and Run menus' actions (also on the toolbar; ``RunControl`` enables them by state)."""

    act_new: QAction
    act_open_model: QAction
    act_open: QAction
    act_compare: QAction
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
    act_quit: QAction

    def run_actions(self) -> dict[str, QAction]:
        """The actions ``RunControl`` enables by state, by its ``RUN_ACTIONS`` names."""
        return {"run": self.act_run, "pause": self.act_pause, "step_window": self.act_step_window,
                "step_token": self.act_step_token, "stop": self.act_stop, "resume": self.act_resume,
                "open_receipts": self.act_open}

    def connect(self, do: WindowCommands) -> None:
        """Give each action its command (once the helpers that carry them out exist)."""
        for action, slot in ((self.act_new, do.new_live_session), (self.act_open_model, do.open_model),
                             (self.act_open, do.open_receipts), (self.act_compare, do.compare_receipts),
                             (self.act_export, do.export_receipts),
                             (self.act_png, do.export_plots), (self.act_trace, do.export_trace),
                             (self.act_recover, do.open_last_autosave), (self.act_quit, do.quit),
                             (self.act_run, do.run), (self.act_pause, do.pause),
                             (self.act_step_window, do.step_window), (self.act_step_token, do.step_token),
                             (self.act_stop, do.stop), (self.act_resume, do.resume)):
            action.triggered.connect(lambda _checked=False, slot=slot: slot())
        self.act_serve.triggered.connect(lambda on=False: do.serve(on))


def build_menus(window: QMainWindow, host: MenuHost) -> RunMenus:
    """Add the File and Run menus (``host.add_action``: window-wide shortcuts) and the Run toolbar to
    ``window``; returns their actions, without commands yet (``RunMenus.connect``)."""

    def add(menu, text, shortcuts=(), tip=""):
        return host.add_action(menu, text, None, shortcuts, tip)

    f = host.add_menu("&File")
    act_new = add(f, "New live session", ["Ctrl+N"], "leave the opened receipts and enable the run controls again")
    act_open_model = add(f, "Open GGUF model…")
    act_open = add(f, "Open receipts…", ["Ctrl+O"])
    act_compare = add(f, "Compare with receipts…", ["Ctrl+Shift+O"],
                      "the shown run beside another receipts document of the same prompt: setup, where the "
                      "outputs part, the figures side by side (as spec-inspector diff)")
    act_export = add(f, "Export receipts…", ["Ctrl+E"])
    act_png = add(f, "Export plots as PNG…", ["Ctrl+Shift+E"])
    act_trace = add(f, "Export Perfetto trace…", ["Ctrl+Shift+T"],
                    "a Chrome trace of the session: open it in https://ui.perfetto.dev")
    act_recover = add(f, "Open last autosave")
    f.addSeparator()
    act_quit = add(f, "Quit", ["Ctrl+Q"])
    r = host.add_menu("&Run")
    act_run = add(r, "Run / continue", ["Ctrl+R"])
    act_pause = add(r, "Pause", ["Space", "Ctrl+P"])
    act_step_window = add(r, "Step window", ["F10", "Ctrl+W"])
    act_step_token = add(r, "Step token", ["F11", "Ctrl+T"])
    act_stop = add(r, "Stop", ["Esc"])
    act_resume = add(r, "Resume after error", ["Ctrl+Shift+R"])
    r.addSeparator()
    act_serve = add(r, "Serve (llama-server API)", [SERVE_SHORTCUT],
                    "serve the loaded model as a llama-server-compatible endpoint on 127.0.0.1 (the Requests tab "
                    "lists each request); Run waits until it is off")
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
    return RunMenus(act_new, act_open_model, act_open, act_compare, act_export, act_png, act_trace, act_recover,
                    act_run, act_pause, act_step_window, act_step_token, act_stop, act_resume, act_serve, act_quit)
