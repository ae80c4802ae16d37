"""Quitting while something works, and Measure's progress and Cancel (issue 54 items 1 and 2).

Item 1: Ctrl+Q or the close button while a job held the engine thread aborted the process (``QThread:
Destroyed while thread 'spec-inspector-engine' is still running``, exit 134). Each test holds the engine
thread inside a decode of the job (``DecodeHold``), closes the window, answers the question, and checks
that the close returned at once (the GUI thread never waited), that the window closed by itself once the
engine thread ended, and that it is then destroyed without aborting. On a window that waits in its close,
the close blocks until it gives up and the window closes with the thread still running.

Item 2: Measure reports its progress (prefill, round, k, time left) from the worker's signals to the
Cost model tab and the status bar, and Cancel stops it before its next decode, keeping the curve
measured so far (shown, used, not stored).
"""

from __future__ import annotations

import itertools

import pytest

from inspector.bench.compare_result import CompareConfig
from inspector.llama.cost_cache import load_cost_model
from inspector.session.run_states import BUSY, IDLE
from test_gui_compare_build import StandIn
from inspector.gui.cost.view import CostView
from inspector.gui.plots.statistics import StatsView
from inspector.gui.shell.layout import StatusProgress
from test_gui_support import DecodeHold, make_window, part

QUIT_TIMEOUT_MS = 30_000
HOLD_TIMEOUT_MS = 240_000
"""Until the job reaches its held decode (on 2 cores another worker keeps busy, a decode took up to 3 s)."""
FIRST_TIMED_K5 = 31 + 16 + 3 + 1
"""The decode of k = 5 in the first timed round: the warm-up round has 16 one-row decodes and 15 batches,
then the timed round's 16 one-row decodes, k = 2, 3, 4, and this one."""


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """No llama-server built before (the build test builds a stand-in), and no real cache touched."""
    monkeypatch.setenv("SPEC_INSPECTOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPEC_INSPECTOR_LLAMA_SERVER", raising=False)


@pytest.fixture(autouse=True)
def one_thread(runtime):
    """Measure on one thread: with another worker busy on the 2 cores, 2 threads measured c(k) 20-35x slower
    than 1 (each decode waits at llama.cpp's thread barriers for a core)."""
    before = runtime.n_threads
    runtime.set_threads(1)
    yield
    runtime.set_threads(before)


@pytest.fixture
def settled():
    """``settled(w, hold)``: after the test, passed or failed, ``hold`` is released and nothing of ``w`` still
    decodes (a failed test must not leave a job running into the next test, or into the session's end,
    which closes the shared runtime)."""
    made = []
    yield lambda w, hold: made.append((w, hold))
    for w, hold in made:
        model = w.model
        hold.release()
        quitting = getattr(w, "quitting", None)  # (a window without it, as before issue 54, waits below)
        if quitting is not None and not model.thread.isFinished() and not quitting.done:
            quitting.stop_now()
        model.thread.wait(120_000)


def start_measure(w):
    model = w.model
    assert model.commands.measure_cost()


def start_compare(w):
    model = w.model
    v = model.commands.compare()
    v.with_server.setChecked(False)
    assert model.commands.run_compare([CompareConfig("ngram", "ngram", 4)])


def start_synthetic(w):
    assert w.synthetic.start()


def start_run(w):
    model = w.model
    assert model.commands.start_run()


@pytest.mark.parametrize("start", [start_measure, start_compare, start_synthetic, start_run],
                         ids=["measure", "compare", "synthetic", "run"])
def test_closing_during_an_engine_job_asks_cancels_it_and_quits_without_waiting_or_aborting(
        qtbot, runtime, tmp_path, settled, start):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    model = w.model
    hold = DecodeHold(runtime)
    settled(w, hold)
    with hold.installed():
        start(w)
        qtbot.waitUntil(hold.held.is_set, timeout=HOLD_TIMEOUT_MS)  # the job decodes
        w.close()  # returns at once: the engine thread is held inside a decode
        assert w.isVisible() and not model.thread.isFinished()
        box = w.quitting.box
        assert box is not None and box.text().startswith("Quitting now stops ")
        assert box.informativeText().startswith("It is cancelled at its next step"), box.informativeText()  # one job
        assert ("receipts stay autosaved" in box.text()) == (start is start_run), box.text()
        assert ("results so far are not kept" in box.text()) == (start is not start_run), box.text()
        w.quitting.quit_button.click()
        assert w.quitting.stopping and w.isVisible()
        qtbot.waitUntil(lambda: model.status_text.startswith("stopping… waiting for "), timeout=5_000)
        assert not model.thread.isFinished() and not hold.released  # nothing waited for the engine
        hold.release()
        qtbot.waitUntil(lambda: not w.isVisible(), timeout=QUIT_TIMEOUT_MS)
    assert model.thread.isFinished() and w.quitting.done
    assert w.quitting.stopped_after_s < QUIT_TIMEOUT_MS / 1000


def test_closing_during_a_llama_server_build_asks_and_quits_when_the_build_thread_ended(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    v = model.commands.compare()
    builder = w.analysis.server_build
    slow = builder.build = StandIn()
    v.server_choice.build.click()
    qtbot.waitUntil(lambda: v.server_choice.build_progress.value() == 37, timeout=10_000)
    w.close()
    assert w.isVisible() and "building llama-server" in w.quitting.box.text()
    w.quitting.quit_button.click()
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=QUIT_TIMEOUT_MS)
    assert slow.cancelled and slow.thread.isFinished() and model.thread.isFinished()


def test_keep_working_leaves_the_job_running_and_a_close_with_nothing_going_quits_at_once(
        qtbot, runtime, tmp_path, settled):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    cost_view = part(w, CostView)
    hold = DecodeHold(runtime)
    settled(w, hold)
    with hold.installed():
        start_measure(w)
        qtbot.waitUntil(hold.held.is_set, timeout=HOLD_TIMEOUT_MS)
        w.close()
        w.quitting.box.buttons()[-1].click()  # Keep working
        assert not w.quitting.stopping and model.state == BUSY and w.isVisible()
        assert not w.analysis.worker.job.cancel.is_set()  # the measurement goes on …
        with qtbot.waitSignal(model.costReady, timeout=QUIT_TIMEOUT_MS):
            cost_view.cancel.click()  # … until cancelled as usual
            hold.release()
    assert model.state == IDLE
    w.close()
    assert not w.isVisible() and model.thread.isFinished() and w.quitting.box is None


def test_measure_reports_progress_and_cancel_keeps_the_curve_measured_so_far(qtbot, runtime, tmp_path, settled):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    stats = part(w, StatsView)
    cost_view = part(w, CostView)
    load_progress = part(w, StatusProgress)
    view, seen = cost_view, []
    w.analysis.worker.costProgress.connect(seen.append)
    calls = itertools.count(1)
    hold = DecodeHold(runtime, when=lambda: next(calls) == FIRST_TIMED_K5)
    settled(w, hold)
    with hold.installed():
        start_measure(w)
        assert view.cancel.isVisible() and view.busy.isVisible()
        qtbot.waitUntil(hold.held.is_set, timeout=HOLD_TIMEOUT_MS)  # k = 5 of the first timed round
        qtbot.waitUntil(lambda: "round 1 of 3, k = 4 of 16" in model.status_text, timeout=10_000)
        assert model.status_text.startswith("measuring c(k): round 1 of 3, k = 4 of 16 · ")
        assert "left" in model.status_text and load_progress.isVisible() and load_progress.value() > 0
        assert 0 < view.busy.value() < view.busy.maximum()
        label = view.ceiling_label.text()
        assert "prompt tokens: prefill, then a warm-up round and 3 timed rounds of k = 1..16" in label
        assert "in all at this context length" in label  # said up front
        assert [p.stage for p in seen][:2] == ["plan", "prefill"]
        with qtbot.waitSignal(model.costReady, timeout=30_000) as blocker:
            view.cancel.click()
            hold.release()
    measured, note = blocker.args
    assert next(calls) == FIRST_TIMED_K5 + 1  # no decode after the one in flight
    assert measured.partial == "k = 1..5 of 16, 1 of 3 repeats" and note == f"cancelled: kept {measured.partial}"
    assert len(measured.model.row_ms) == 5 and min(measured.model.row_ms) > 0
    assert model.state == IDLE and not view.cancel.isVisible() and not load_progress.isVisible()
    w.refresh_all()
    assert view.point_count() == 5 and "Partial curve" in view.ceiling_label.text()
    assert w.analysis.current is measured and stats.cost_model is measured.model  # used
    assert load_cost_model(runtime.model_path, measured.n_threads) is None  # not stored
