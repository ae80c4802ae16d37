"""The Compare window builds llama-server itself (issue 36, defect 5: it said "run `spec-inspector compare
--llama-server` in a terminal"): Build llama-server runs the build on a thread of its own with a progress
bar and Cancel build, or a binary's path is chosen (remembered; ``$SPEC_INSPECTOR_LLAMA_SERVER`` as on
the command line).

The build is a stand-in here (``ServerBuildActions.build``: a real one takes 7-15 minutes; its
cancellation is tested in test_llama_server_infra.py), except for the real build function finding the
binary already built. Every test has a cache folder of its own (never the real one)."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import QThread

from inspector.bench.server_build import ServerBuildCancelled, ServerBuildError, build_llama_server, cached_server_path
from inspector.gui.panel.control_panel import ControlPanel
from test_gui_support import make_window, part


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPEC_INSPECTOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPEC_INSPECTOR_LLAMA_SERVER", raising=False)


class StandIn:
    """A build function: says what a real build says, then waits for ``finish`` or the cancel; records
    the thread it ran on and whether it saw the cancel."""

    def __init__(self, fail: str = "") -> None:
        self.finish = threading.Event()
        self.fail = fail
        self.thread = None
        self.cancelled = False

    def __call__(self, progress, cancel):
        self.thread = QThread.currentThread()
        progress("downloading the llama-cpp-python 0.3.36 sdist")
        progress("building llama-server: 37%")
        while not self.finish.wait(0.05):
            if cancel.is_set():
                self.cancelled = True
                raise ServerBuildCancelled("llama-server build cancelled during its build step")
        if self.fail:
            raise ServerBuildError(self.fail)
        path = cached_server_path()
        path.parent.mkdir(parents=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return path


def compare_window(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    v = model.commands.compare()
    v.with_server.setChecked(True)
    v.server_target.setText("")
    return w, v, v.server_choice, w.analysis.server_build


def test_build_llama_server_from_the_window_with_progress_and_cancel(qtbot, runtime, tmp_path):
    w, v, choice, builder = compare_window(qtbot, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    assert choice.build_row.isVisibleTo(v) and choice.build.isVisibleTo(v)
    assert "Choose… a llama-server binary" in choice.build_note.text() and "terminal" not in choice.build_note.text()
    slow = builder.build = StandIn()
    choice.build.click()
    qtbot.waitUntil(lambda: choice.build_progress.value() == 37, timeout=10_000)
    assert choice.build_note.text() == "building llama-server: 37%"
    assert choice.cancel_build.isVisibleTo(v) and not choice.build.isVisibleTo(v)
    app_thread = QThread.currentThread()
    assert slow.thread not in (app_thread, model.thread)  # neither the GUI thread nor the engine thread
    assert w.run.is_idle and panel.run.isEnabled() and v.run.isEnabled()  # the window stays usable
    with qtbot.waitSignal(builder.built, timeout=10_000) as blocker:
        choice.cancel_build.click()
    assert blocker.args == ["", "", True] and slow.cancelled
    assert choice.build.isVisibleTo(v) and not choice.cancel_build.isVisibleTo(v)
    assert choice.build_note.text().startswith("build cancelled; no llama-server yet")
    # A failed build says why, and offers Build again.
    failing = builder.build = StandIn(fail="llama-server build step failed (exit code 2): error: no cmake")
    with qtbot.waitSignal(builder.built, timeout=10_000):
        choice.build.click()
        failing.finish.set()
    assert "build failed: llama-server build step failed" in choice.build_note.text()
    # A build that ends: the window uses it from then on (the empty path means it).
    done = builder.build = StandIn()
    with qtbot.waitSignal(builder.built, timeout=10_000) as blocker:
        choice.build.click()
        done.finish.set()
    assert blocker.args == [str(cached_server_path()), "", False]
    assert not choice.build_row.isVisibleTo(v)
    assert choice.server_target.placeholderText() == f"built from our llama.cpp: {cached_server_path()}"
    assert v.llama_server_target() == ""


def test_closing_the_window_cancels_a_build(qtbot, runtime, tmp_path):
    w, v, choice, builder = compare_window(qtbot, runtime, tmp_path)
    slow = builder.build = StandIn()
    choice.build.click()
    qtbot.waitUntil(lambda: choice.build_progress.value() == 37, timeout=10_000)
    w.close()  # asks; Stop and quit cancels the build, and the window closes when its thread has ended
    w.quitting.quit_button.click()
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=30_000)
    assert slow.cancelled and slow.thread.isFinished()


def test_the_real_build_uses_a_binary_already_built(qtbot, runtime, tmp_path):
    target = cached_server_path()
    target.parent.mkdir(parents=True)
    target.write_text("#!/bin/sh\n")
    w, v, choice, builder = compare_window(qtbot, runtime, tmp_path)
    assert builder.build is build_llama_server
    assert not choice.build_row.isVisibleTo(v)  # found: nothing to build
    with qtbot.waitSignal(builder.built, timeout=10_000) as blocker:
        assert builder.start()
    assert blocker.args == [str(target), "", False]


def test_a_chosen_binary_or_the_environments_is_used_and_remembered(qtbot, runtime, tmp_path, monkeypatch):
    w, v, choice, builder = compare_window(qtbot, runtime, tmp_path)
    model = w.model
    v.with_server.setChecked(False)
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    assert choice.choose_binary(str(binary)) == str(binary)
    assert v.with_server.isChecked() and v.llama_server_target() == str(binary)
    assert not choice.build_row.isVisibleTo(v)
    assert model.settings.value("compare/llama_server") == str(binary)
    v2 = make_window(qtbot, runtime, tmp_path).analysis.show_compare()  # remembered
    assert v2.llama_server_target() == str(binary)
    # $SPEC_INSPECTOR_LLAMA_SERVER, as the command line honours it: what an empty path means.
    monkeypatch.setenv("SPEC_INSPECTOR_LLAMA_SERVER", "/opt/llama/llama-server")
    v2.server_target.setText("")
    assert v2.server_target.placeholderText() == "SPEC_INSPECTOR_LLAMA_SERVER: /opt/llama/llama-server"
    assert not v2.server_choice.build_row.isVisibleTo(v2) and v2.llama_server_target() == ""
