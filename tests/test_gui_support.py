"""Helpers for the GUI tests (no tests here): a main window on the session's runtime.

The GUI tests must not rely on the model's words (greedy text differs between
CPUs). Runs that need windows of a given kind use ``follow_window`` (the target's
own continuation with a surely rejected token every other window,
``scenarios.Follower``) or single-token n-gram matches (``ngram_min=1``: the
first query always proposes, since a templated prompt's last token, a newline,
occurs earlier in the prompt); runs that must reach their length limit ban
end-of-generation (``scenarios.NoEndOfTurn``); tests that need the engine at a
given point hold it there (``DecodeHold``) instead of racing it.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings  # noqa: E402

from inspector.gui.panel.control_panel import ControlPanel  # noqa: E402

MAX_TOKENS = 48
RUN_TIMEOUT_MS = 180_000


def make_window(qtbot, runtime, tmp_path, *, max_tokens: int = MAX_TOKENS, example: str = "copy-with-corrections",
                settings_file: str = "settings.ini", ngram_min: int | None = None, **kwargs):
    """A shown ``MainWindow`` reusing ``runtime``, with settings and autosave under ``tmp_path``.
    ``ngram_min=1``: the n-gram source's first query always proposes (a window whatever
    the model says)."""
    from inspector.gui.shell.main_window import MainWindow

    settings = QSettings(str(tmp_path / settings_file), QSettings.Format.IniFormat)
    w = MainWindow(runtime, settings=settings, data_dir=tmp_path / "data", **kwargs)
    panel = part(w, ControlPanel)
    # At the test's end its jobs stop here, not behind a question (the next test shares the runtime).
    qtbot.addWidget(w, before_close_func=lambda window: window.quitting.stop_now())
    panel.choose_example(example)
    panel.max_tokens.setValue(max_tokens)
    if ngram_min is not None:
        panel.ngram_min.setValue(ngram_min)
    w.show()
    return w


def part(w, cls, name: str | None = None):
    """The one widget of type ``cls`` (with object name ``name``) in window ``w``: a test finds a view by what
    it is, not by the window's attribute names (it reads and drives the window's model, ``w.model``, else)."""
    found = w.findChildren(cls, name) if name else w.findChildren(cls)
    assert len(found) == 1, f"{len(found)} {cls.__name__} {name or ''} in the window"
    return found[0]


def use_source(monkeypatch, name: str, factory) -> None:
    """Offer ``factory`` as proposal source ``name`` (as an entry point would) to windows
    made after this call, for the rest of the test."""
    from inspector.sources import registry

    real = registry.available_sources
    monkeypatch.setattr(registry, "available_sources", lambda: {**real(), name: factory})


def follow_window(qtbot, monkeypatch, runtime, tmp_path, plan=None, *, end_of_turn: bool = False, **kwargs):
    """A window whose runs propose the target's own continuation (``scenarios.Follower``,
    by default ``ALTERNATE``: a full accept, then a first mismatch at index 1, and so on),
    on ``runtime`` with end-of-generation banned unless ``end_of_turn``: windows of both
    kinds and a run to the length limit, whatever the model says."""
    from scenarios import ALTERNATE, Follower, NoEndOfTurn

    target = runtime if end_of_turn else NoEndOfTurn(runtime)
    holder = {}

    def factory(ctx, **options):  # on the engine thread
        return Follower(holder["w"].worker.scheduler, ALTERNATE if plan is None else plan, prompt=holder["prompt"])

    use_source(monkeypatch, "follow", factory)
    w = make_window(qtbot, target, tmp_path, **kwargs)
    panel = part(w, ControlPanel)
    holder["w"] = w
    holder["prompt"] = runtime.prompt_tokens(panel.prompt.toPlainText())
    assert panel.set_source("follow")
    return w


def plain_tokens(runtime, text: str, max_tokens: int = MAX_TOKENS, *, end_of_turn: bool = True) -> list[int]:
    """The target's plain greedy output for ``text`` (through the chat template); with
    ``end_of_turn=False`` on the target with end-of-generation banned."""
    from inspector.engine import RuntimeScheduler
    from scenarios import NoEndOfTurn, plain_reference

    target = runtime if end_of_turn else NoEndOfTurn(runtime)
    return plain_reference(RuntimeScheduler(target), runtime.prompt_tokens(text), max_tokens)[0]


def assert_same_greedy_output(runtime, text: str, expected, observed, *, end_of_turn: bool = True) -> None:
    """``observed`` equals ``expected`` (greedy streams of ``text``), or they first differ at
    a near-tie that batch arithmetic may flip (reported with its margin)."""
    from inspector.engine import RuntimeScheduler
    from scenarios import NoEndOfTurn, assert_same_greedy_output as assert_same_stream

    target = runtime if end_of_turn else NoEndOfTurn(runtime)
    assert_same_stream(RuntimeScheduler(target), runtime.prompt_tokens(text), expected, observed)


class DecodeHold:
    """Holds the first ``decode_rows`` call of ``runtime`` for which ``when()`` is true
    (on the engine's thread, inside the runtime lock) until ``release()``, so a test can
    look at the window while the engine is surely in the middle of a run. ``held`` is
    set while it waits; ``threads`` names the threads that decoded. A hang guard
    (``HOLD_GUARD_S``) lets it go on by itself; ``released`` says whether the test did."""

    HOLD_GUARD_S = 300

    def __init__(self, runtime, when=lambda: True) -> None:
        self.runtime = runtime
        self.when = when
        self.held = threading.Event()
        self._go = threading.Event()
        self.released = False
        self.done = False
        self.threads: set[str] = set()

    def release(self) -> None:
        self.released = True
        self._go.set()

    @contextmanager
    def installed(self):
        rt = self.runtime
        real = rt.decode_rows

        def decode_rows(sid, tokens, position, abort=None):
            self.threads.add(threading.current_thread().name)
            if not self.done and self.when():
                self.done = True
                self.held.set()
                self._go.wait(self.HOLD_GUARD_S)
            return real(sid, tokens, position, abort)

        rt.decode_rows = decode_rows
        try:
            yield self
        finally:
            self._go.set()
            del rt.decode_rows


def run_to_end(qtbot, w, **start) -> tuple:
    """Start a run and wait for ``runFinished``; returns (reason, ``RunEnd`` or None)."""
    model = w.model
    with qtbot.waitSignal(model.runFinished, timeout=RUN_TIMEOUT_MS) as blocker:
        assert model.commands.start_run(**start)
    w.refresh_all()
    return tuple(blocker.args)


def run_with_planted_divergence(qtbot, w, runtime, row_position: int) -> None:
    """Run ``w`` to its end with the target's prediction of the row at KV position ``row_position`` (every
    verify batch that holds it) replaced by the next token id: the speculative run parts from plain decoding
    there; decodes after the run (the baseline, the audit) are the real ones."""
    model = w.model
    original = runtime.decode_rows

    def perturbed(sid, tokens, position, abort=None):
        out = original(sid, tokens, position, abort)
        j = row_position - position
        if model.worker.running and 0 <= j < len(out):
            out = list(out)
            out[j] = (out[j] + 1) % runtime.n_vocab
        return out

    runtime.decode_rows = perturbed
    try:
        run_to_end(qtbot, w)
    finally:
        del runtime.decode_rows


def wait_state(qtbot, w, state: str, timeout: int = RUN_TIMEOUT_MS) -> None:
    model = w.model
    qtbot.waitUntil(lambda: model.state == state, timeout=timeout)


def reference_tokens(make_generation, chat_tokens, text: str, max_tokens: int = MAX_TOKENS) -> list[int]:
    """Generated token ids of an uninterrupted greedy n-gram run (the engine, no GUI)."""
    from inspector.sources import NgramSource

    g = make_generation(NgramSource(), chat_tokens(text), max_new_tokens=max_tokens)
    g.run()
    return list(g.generated)


def example_text(name: str) -> str:
    from inspector.prompts import example_prompts

    return example_prompts()[name]


def open_receipts(qtbot, w, path) -> str:
    """Open a receipts file in ``w`` (read on a background thread) and wait until it is
    shown or refused; returns the error ("" when shown)."""
    model = w.model
    with qtbot.waitSignal(model.fileOpened, timeout=120_000) as blocker:
        assert model.commands.open_receipts_file(str(path))
    return blocker.args[1]


def export_session(qtbot, w, path, what: str = "receipts") -> list:
    """Export the shown session (``what``: ``receipts`` or ``trace``) from ``w`` on its
    background thread and wait for the end; returns ``exported``'s args (path, error)."""
    model = w.model
    with qtbot.waitSignal(model.exported, timeout=60_000) as blocker:
        assert getattr(model.commands, f"export_{what}_file")(str(path)) is not None
    return blocker.args


def kv_data_rect(t):
    """The KV plot's data area (its view box) in ``t``'s (a ``Timeline``) coordinates."""
    from PySide6.QtCore import QRect

    vb = t.plot.getPlotItem().getViewBox()
    r = t.plot.mapFromScene(vb.mapRectToScene(vb.boundingRect())).boundingRect()
    return QRect(t.plot.mapTo(t, r.topLeft()), r.size())
