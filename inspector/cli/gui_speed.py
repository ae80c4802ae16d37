"""``spec-inspector bench --gui``: the window's decode speed against headless, in one process
(a benchmark, not a test).

``measure`` builds the inspector window (offscreen unless ``--show``), runs one task from it
several times (the engine on its worker thread, the views redrawing at their normal rate) and,
alternating with those runs, the same task headless (on the calling thread, as
``spec-inspector run`` does: the run service filling a session record) on the same runtime with
the same source options and settings. ``format_gui_speed`` prints decode tokens/s (generated /
decode time, prefill excluded) of every run, the medians, the median over the pairs of GUI / headless,
and the GUI thread's CPU share (GUI-thread CPU seconds / wall seconds) during the GUI runs. Runs go in
pairs, alternately GUI first and headless first, so a noisy machine's slow phases and the first run's
advantage reach both kinds. ``bench --llama-server`` adds the same measurement to its report.

In the command line (above the window's layer): the ``bench`` command imports this module only
when it is asked for the window, so the other commands start without PySide6.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QEventLoop, QSettings
from PySide6.QtWidgets import QApplication

from inspector.engine import RuntimeScheduler
from inspector.gui.shell.main_window import MainWindow
from inspector.llama import bundled_model_path
from inspector.llama.runtime import LlamaRuntime
from inspector.prompts import DEFAULT_EXAMPLE, example_prompts
from inspector.session.session_record import SessionRecord
from inspector.session.run import RunRequest, SessionRun

TASK = DEFAULT_EXAMPLE
"""The example the window runs by default (the copy task)."""


def measure(model_path: str | None = None, task: str = TASK, max_tokens: int = 128, repeats: int = 5,
            threads: int | None = None, show: bool = False) -> dict:
    """Run ``task`` ``repeats`` times from the window and headless, alternating.

    Returns ``gui_tps`` and ``headless_tps`` (lists, decode tokens/s), their
    medians, ``ratio`` (the median over the pairs of GUI / headless: each pair's runs are a second apart,
    while the machine drifts up to 20% between minutes), ``gui_cpu_share``
    (median GUI-thread CPU / wall time per GUI run) and ``threads``.
    """
    if not show:  # read when the application is made, below
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
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
            if not win.run.start_run():
                raise RuntimeError(f"the window refused to run: {win.last_error}")
            loop.exec()
            shares.append((time.thread_time() - c0) / (time.perf_counter() - t0))
            win.runFinished.disconnect(loop.quit)
            return win.worker.generation.summary().decode_tokens_per_s

        def headless_run() -> float:  # as spec-inspector run: the run service filling a session record
            run = SessionRun(scheduler, RunRequest(prompt, gen_settings, "ngram", dict(options)), SessionRecord().apply)
            g = run.prepare()
            run.start()
            for _ in run.steps():
                pass
            run.end(g.finish_reason)
            return g.summary().decode_tokens_per_s

        gui_run()  # warm-up: first-run imports and allocations
        headless_run()
        for i in range(repeats):  # pairs, alternately GUI first and headless first (the first run was faster)
            if i % 2 == 0:
                gui.append(gui_run())
                headless.append(headless_run())
            else:
                headless.append(headless_run())
                gui.append(gui_run())
        win.close()
        app.processEvents()
    finally:
        rt.close()
        tmp.cleanup()
    g_med, h_med = statistics.median(gui), statistics.median(headless)
    return {"task": task, "max_tokens": max_tokens, "threads": rt.n_threads, "gui_tps": gui,
            "headless_tps": headless, "gui_median": g_med, "headless_median": h_med,
            "ratio": statistics.median(g / h for g, h in zip(gui, headless)) if min(headless) > 0 else None,
            "gui_cpu_share": statistics.median(shares)}


def format_gui_speed(r: dict) -> str:
    """``measure``'s result as text: each kind's decode tokens/s per run (pair by pair) and median, the median
    of the pairs' ratios and the GUI thread's CPU share."""
    return "\n".join([
        f"task {r['task']}, {r['max_tokens']} tokens, {r['threads']} llama.cpp threads, decode tokens/s:",
        "  GUI:      " + " ".join(f"{x:6.1f}" for x in r["gui_tps"]) + f"   median {r['gui_median']:.1f}",
        "  headless: " + " ".join(f"{x:6.1f}" for x in r["headless_tps"]) + f"   median {r['headless_median']:.1f}",
        f"  GUI / headless: {r['ratio']:.2f}x (median of the pairs' ratios; GUI thread CPU share "
        f"{r['gui_cpu_share']:.1%})"])
