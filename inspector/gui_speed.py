"""GUI vs headless decode speed, measured in one process (a benchmark, not a test).

``python -m inspector.gui_speed`` builds the inspector window (offscreen
unless ``--show``), runs one task from it several times (the engine on its
worker thread, the views redrawing at their normal rate) and, alternating with
those runs, the same task headless (on the calling thread, as
``spec-inspector run`` does: the run service filling a session record) on the same runtime with the same source options
and settings. Prints decode tokens/s (generated / decode time, prefill
excluded) of every run, the medians and their ratio, and the GUI thread's CPU
share (GUI-thread CPU seconds / wall seconds) during the GUI runs.
Alternating the two kinds spreads a noisy machine's slow phases over both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

TASK = "copy-with-corrections"


def measure(model_path: str | None = None, task: str = TASK, max_tokens: int = 128, repeats: int = 5,
            threads: int | None = None, show: bool = False) -> dict:
    """Run ``task`` ``repeats`` times from the window and headless, alternating.

    Returns ``gui_tps`` and ``headless_tps`` (lists, decode tokens/s), their
    medians, ``ratio`` (median GUI / median headless), ``gui_cpu_share``
    (median GUI-thread CPU / wall time per GUI run) and ``threads``.
    """
    if not show:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QEventLoop, QSettings
    from PySide6.QtWidgets import QApplication

    from inspector.engine import RuntimeScheduler
    from inspector.prompts import example_prompts
    from inspector.gui.shell.main_window import MainWindow
    from inspector.llama import bundled_model_path
    from inspector.llama.runtime import LlamaRuntime
    from inspector.session.record import SessionRecord
    from inspector.session.run import RunRequest, SessionRun

    app = QApplication.instance() or QApplication(sys.argv[:1])
    rt = LlamaRuntime(model_path or bundled_model_path(), n_ctx=2048, n_batch=512, n_seq_max=4, n_threads=threads)
    tmp = tempfile.TemporaryDirectory()
    try:
        settings = QSettings(str(Path(tmp.name) / "settings.ini"), QSettings.Format.IniFormat)
        win = MainWindow(rt, settings=settings, data_dir=Path(tmp.name) / "data")
        win.panel.prompt.setPlainText(example_prompts()[task])
        win.panel.set_source("ngram")
        win.panel.max_tokens.setValue(max_tokens)
        win.resize(1280, 800)
        win.show()
        app.processEvents()
        prompt = example_prompts()[task]
        gen_settings = win.panel.generation_settings()
        options = win.panel.source_options()
        scheduler = RuntimeScheduler(rt)
        gui, headless, shares = [], [], []

        def gui_run() -> float:
            loop = QEventLoop()
            win.runFinished.connect(loop.quit)
            c0, t0 = time.thread_time(), time.perf_counter()
            if not win.start_run():
                raise RuntimeError(f"the window refused to run: {win.last_error}")
            loop.exec()
            shares.append((time.thread_time() - c0) / (time.perf_counter() - t0))
            win.runFinished.disconnect(loop.quit)
            return win.worker.generation.summary().decode_tokens_per_s

        def headless_run() -> float:  # as spec-inspector run: the run service filling a session record
            run = SessionRun(scheduler, RunRequest(prompt, gen_settings, "ngram", dict(options)), SessionRecord().apply)
            g = run.prepare()
            run.start()
            while not g.finished:
                run.step()
            run.end(g.finish_reason)
            return g.summary().decode_tokens_per_s

        gui_run()  # warm-up: first-run imports and allocations
        headless_run()
        for _ in range(repeats):
            gui.append(gui_run())
            headless.append(headless_run())
        win.close()
        app.processEvents()
    finally:
        rt.close()
        tmp.cleanup()
    g_med, h_med = statistics.median(gui), statistics.median(headless)
    return {"task": task, "max_tokens": max_tokens, "threads": rt.n_threads, "gui_tps": gui,
            "headless_tps": headless, "gui_median": g_med, "headless_median": h_med,
            "ratio": g_med / h_med if h_med else None, "gui_cpu_share": statistics.median(shares)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m inspector.gui_speed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="GGUF model (default: the bundled one)")
    ap.add_argument("--task", default=TASK, help=f"example prompt name (default {TASK})")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5, help="runs of each kind (default 5)")
    ap.add_argument("--threads", type=int, help="llama.cpp CPU threads (default: all cores)")
    ap.add_argument("--show", action="store_true", help="show the window (default: offscreen)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    r = measure(a.model, a.task, a.max_tokens, a.repeats, a.threads, a.show)
    if a.json:
        print(json.dumps(r, indent=1))
        return 0
    print(f"task {r['task']}, {r['max_tokens']} tokens, {r['threads']} llama.cpp threads, decode tokens/s:")
    print("  GUI:      " + " ".join(f"{x:6.1f}" for x in r["gui_tps"]) + f"   median {r['gui_median']:.1f}")
    print("  headless: " + " ".join(f"{x:6.1f}" for x in r["headless_tps"]) + f"   median {r['headless_median']:.1f}")
    print(f"  GUI / headless: {r['ratio']:.2f}x   (GUI thread CPU share {r['gui_cpu_share']:.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
