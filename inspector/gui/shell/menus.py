"""The window's File and Run menus and its toolbar (``build_menus``); the Analysis and Help menus
are their helpers' (``AnalysisActions``, ``TuneActions``, ``HelpActions``).

The menus are made before the window's helpers and its ``run``: their items call ``win.files``,
``win.run`` and ``win.serve`` when triggered.
"""

from __future__ import annotations

from inspector.gui.serve.serve_actions import SERVE_SHORTCUT


def build_menus(win) -> None:
    """Add ``win``'s (the ``MainWindow``'s) File and Run menus and the Run toolbar; sets its ``act_*``
    actions (``win.add_action``: window-wide shortcuts)."""
    f = win.menuBar().addMenu("&File")
    win.act_new = win.add_action(f, "New live session", win.new_live_session, ["Ctrl+N"],
                                 "leave the opened receipts and enable the run controls again")
    win.act_open_model = win.add_action(f, "Open GGUF model…", lambda: win.files.open_model_dialog())
    win.act_open = win.add_action(f, "Open receipts…", lambda: win.files.open_receipts_dialog(), ["Ctrl+O"])
    win.act_export = win.add_action(f, "Export receipts…", lambda: win.files.export_receipts_dialog(), ["Ctrl+E"])
    win.act_png = win.add_action(f, "Export plots as PNG…", lambda: win.files.export_plots_dialog(),
                                 ["Ctrl+Shift+E"])
    win.act_trace = win.add_action(
        f, "Export Perfetto trace…", lambda: win.files.export_trace_dialog(), ["Ctrl+Shift+T"],
        "a Chrome trace of the session: open it in https://ui.perfetto.dev")
    win.act_recover = win.add_action(f, "Open last autosave", lambda: win.files.open_last_autosave())
    f.addSeparator()
    win.add_action(f, "Quit", win.close, ["Ctrl+Q"])
    r = win.menuBar().addMenu("&Run")
    win.act_run = win.add_action(r, "Run / continue", win.run_clicked, ["Ctrl+R"])
    win.act_pause = win.add_action(r, "Pause", lambda: win.run.pause_clicked(), ["Space", "Ctrl+P"])
    win.act_step_window = win.add_action(r, "Step window", win.step_window_clicked, ["F10", "Ctrl+W"])
    win.act_step_token = win.add_action(r, "Step token", win.step_token_clicked, ["F11", "Ctrl+T"])
    win.act_stop = win.add_action(r, "Stop", win.stop_clicked, ["Esc"])
    win.act_resume = win.add_action(r, "Resume after error", win.resume_clicked, ["Ctrl+Shift+R"])
    r.addSeparator()
    win.act_serve = win.add_action(
        r, "Serve (llama-server API)", lambda on=False: win.serve.toggle(on), [SERVE_SHORTCUT],
        "serve the loaded model as a llama-server-compatible endpoint on 127.0.0.1 (the Requests tab lists "
        "each request); Run waits until it is off")
    tb = win.addToolBar("Run")
    tb.setObjectName("run-toolbar")
    tb.setMovable(False)
    for a, label in ((win.act_run, "▶ Run"), (win.act_pause, "Pause"), (win.act_step_window, "Step window"),
                     (win.act_step_token, "Step token"), (win.act_stop, "■ Stop"), (win.act_resume, "Resume")):
        a.setIconText(label)
        tb.addAction(a)
    tb.addSeparator()
    tb.addAction(win.act_serve)  # checkable: ``ServeActions`` makes it so
    tb.addSeparator()
    tb.addAction(win.act_open)
    tb.addAction(win.act_export)
