"""The Tune window's wiring (issue 28): Analysis > Tune from this run… (Ctrl+Shift+K).

The recording and c(k) come from the shown session (``recording_from_record``, ``costs_from_record``;
c(k) from the Cost model tab's measurement when the run has no plain step); the grid is predicted on a
thread of its own (``TuneWorker``: the GUI never waits, a progress bar and Cancel); Verify runs the
selected configuration and plain decoding on the engine thread (an ``AnalysisWorker`` of its own, its
``run_compare`` with the recording's prompt token ids) and compares the measured tokens/s and windows with
the prediction; Copy as llama-server flags writes ``server_command`` for the selected row.
"""

from __future__ import annotations

import dataclasses
import html
import threading
from dataclasses import dataclass

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot
from PySide6.QtGui import QGuiApplication

from inspector.bench.compare_result import CompareConfig
from inspector.bench.tune import (NotReplayable, cold_replay_note, costs_from_record, fitted_costs, grid,
                                  points_from_record, recording_from_record, replay, tune)
from inspector.engine.settings import GenerationSettings, SamplingSettings
from inspector.gui.engine_thread.analysis import AnalysisWorker, CompareRequest
from inspector.gui.look.wording import count_noun
from inspector.gui.model.window_model import WindowModel
from inspector.gui.ports.handles import MenuHost
from inspector.gui.tune.view import TuneView
from inspector.receipts.document import ReceiptsFileError
from inspector.session.run_states import BUSY, IDLE
from inspector.sources.registry import SourceContext, make_source
from inspector.sources.server_flags import NoServerEquivalent, server_command, server_notes


@dataclass(frozen=True)
class Verified:
    """A Verify run against its prediction: tokens/s and speedup (measured: over the plain run beside it),
    ``same_output`` (the run's output equals the recording's) and ``windows_match`` (its windows equal the
    replay's; None when the outputs differ, so the windows are not comparable)."""

    label: str
    predicted_tokens_per_s: float
    measured_tokens_per_s: float | None
    predicted_speedup: float
    measured_speedup: float | None
    same_output: bool
    windows_match: bool | None
    windows: int
    replayed_windows: int


class TuneWorker(QObject):
    """Predicts a grid on its own thread (``run``); ``cancel`` (any thread) stops it."""

    progress = Signal(int, int)
    """(configurations replayed, total)."""
    done = Signal(object, bool)
    """(``TuneRow`` list best first, cancelled)."""

    def __init__(self) -> None:
        super().__init__()
        self.cancel = threading.Event()

    @Slot(object)
    def run(self, job) -> None:
        """Predict ``job`` = (recording, costs, configurations) (``inspector.bench.tune.tune``)."""
        rec, costs, configs = job
        step = max(1, len(configs) // 100)
        rows = tune(rec, costs, configs, lambda d, n: (d % step == 0 or d == n) and self.progress.emit(d, n),
                    cancel=self.cancel)
        self.done.emit(rows, self.cancel.is_set())


class TuneActions(QObject):
    """The Tune window (its action goes in ``menu``). ``recording`` / ``costs``: what the
    view tunes (None when the shown run cannot be replayed). ``tuned(rows, note)`` and
    ``verified(Verified or None, text)`` tell when the grid or a Verify run ended (tests, status).
    ``measured()``: the Cost model tab's ``CostMeasured`` (or None), the c(k) a run without a plain step
    falls back on.

    It gets the window's model (``WindowModel``: the session shown, the engine worker and its thread, the
    loaded model's ``model_info``, the signals after which the shown session may have changed: ``runFinished``
    and ``fileOpened``, and ``shutdownRequested``), ``host`` (``MenuHost``: the menu item, the view's parent) and
    ``run`` (``RunControl``: ``is_idle``, ``set_state``)."""

    requestTune = Signal(object)
    requestVerify = Signal(object)
    tuned = Signal(object, str)
    verified = Signal(object, str)

    def __init__(self, model: WindowModel, host: MenuHost, menu, measured, run) -> None:
        super().__init__(host.parent)
        self.parent_widget = host.parent
        self.model, self.run, self.engine = model, run, model.worker
        self.measured = measured
        self.view: TuneView | None = None
        self.recording = None
        self.costs = None
        self.costs_from = ""
        self._tuned_for: tuple | None = None
        self._verifying = None
        self._thread: QThread | None = None
        self._worker: TuneWorker | None = None
        self.act_tune = host.add_action(
            menu, "Tune from this run…", self.show_tune, ["Ctrl+Shift+K"],
            "predict what other model-free sources and settings would have done on this greedy run, without "
            "the model, best first; verify the best for real")
        self.analysis = AnalysisWorker(model.worker)
        self.analysis.moveToThread(model.thread)
        self.requestVerify.connect(self.analysis.run_compare)
        self.analysis.compareDone.connect(self._verify_done)
        self.analysis.failed.connect(lambda _what, message: self._verify_done(None, f"failed: {message}"))
        model.shutdownRequested.connect(self.shutdown, Qt.ConnectionType.DirectConnection)
        for signal in (model.runFinished, model.fileOpened):
            signal.connect(lambda *_a: self._session_changed())

    # -- the window ------------------------------------------------------------------
    def show_tune(self) -> TuneView:
        """Open (or raise) the Tune window on the shown session and start its grid if it has none yet."""
        if self.view is None:
            v = TuneView(self.parent_widget)
            v.tuneRequested.connect(self.start_tune)
            v.cancelRequested.connect(self.cancel)
            v.verifyRequested.connect(self.verify)
            v.copyRequested.connect(self.copy_flags)
            self.view = v
        self.load()
        self.view.show()
        self.view.raise_()
        if self.recording is not None and self._tuned_for != self._key() and not self._busy():
            self.view.request_tune()
        return self.view

    def _key(self) -> tuple:
        s = self.model.session
        return (id(s), s.version)

    def _busy(self) -> bool:
        return self._worker is not None and self.view is not None and self.view.cancel.isEnabled()

    def _session_changed(self) -> None:
        if self.view is not None and self.view.isVisible() and not self._busy():
            self.show_tune()

    def load(self) -> bool:
        """Build the recording and c(k) from the shown session; the view says why when it cannot."""
        s, v = self.model.session, self.view
        self.recording = self.costs = None
        try:
            if s.origin == "live" and s.header is not None and s.end is None:
                raise NotReplayable("the run is still going: tune it when it has ended")
            rt = self.engine.runtime
            is_eog = None
            if s.origin == "live" and rt is not None:
                eog = {t for t in set(s.generated_token_ids) if rt.is_eog(t)}
                is_eog = eog.__contains__
            rec = recording_from_record(s, is_eog)
        except NotReplayable as exc:
            v.set_refusal(html.escape(str(exc)))
            return False
        except (ReceiptsFileError, OSError) as exc:
            v.set_refusal(f"its receipts file cannot be read again: {html.escape(str(exc))}")
            return False
        costs, self.costs_from = costs_from_record(s), "this run's own plain steps and windows"
        measured = self.measured()
        points = points_from_record(s)
        if measured is not None and points:  # the measured curve's shape (c(k) is not linear between a
            # run's few sizes) at this run's level
            costs, self.costs_from = fitted_costs(measured.model, points), "the Cost model tab's curve at this run's level"
        elif measured is not None and (costs is None or len(costs.row_ms) == 1):  # no plain step, or no window
            costs, self.costs_from = measured.model, "the Cost model tab's measurement"
        elif costs is not None and len(costs.row_ms) == 1:
            self.costs_from += " (no window: c(k) taken as k·c(1); Measure the cost model for a better guess)"
        if costs is None:
            v.set_refusal("the run has no plain step to measure c(1) from: measure the cost model (Analysis > "
                          "Measure cost model, Ctrl+M) or record a longer run")
            return False
        self.recording, self.costs = rec, costs
        settings = s.settings or {}
        note = cold_replay_note((settings.get("source") or {}).get("warm"), (s.conversation or {}).get("turn"))
        v.set_recording(
            f"<b>{html.escape(s.source_name or 'run')}</b> (draft max {settings.get('draft_max', '?')}), "
            f"{count_noun(len(rec.output), 'token')} after a {len(rec.prompt)}-token prompt · c(1) "
            f"{costs.cost(1):.1f} ms, c(8) {costs.cost(8):.1f} ms from {self.costs_from} · predicted "
            "without the model: a replayed window equals the real one whenever the output is the same"
            + ("" if note is None else f"<br><b>Note:</b> {html.escape(note)}"))
        return True

    # -- the grid --------------------------------------------------------------------
    def start_tune(self, sources, draft_maxes) -> bool:
        """Predict the grid of ``sources`` and ``draft_maxes`` over the recording, off the GUI thread."""
        if self.recording is None or self.view is None or self._busy():
            return False
        if self._thread is None:
            self._thread = QThread(self)
            self._thread.setObjectName("spec-inspector-tune")
            self._worker = TuneWorker()
            self._worker.moveToThread(self._thread)
            self.requestTune.connect(self._worker.run)
            self._worker.progress.connect(self.view.set_progress)
            self._worker.done.connect(self._tune_done)
            self._thread.start()
        configs = grid(sources, draft_maxes)
        self._tuned_for = self._key()
        self._worker.cancel.clear()
        self.view.set_running(True, f"replaying {count_noun(len(configs), 'configuration')} …")
        self.view.set_progress(0, len(configs))
        self.requestTune.emit((self.recording, self.costs, configs))
        return True

    def cancel(self) -> None:
        """Stop the grid: the rows predicted so far are shown."""
        if self._worker is not None:
            self._worker.cancel.set()

    def _tune_done(self, rows, cancelled: bool) -> None:
        note = (f"cancelled: {count_noun(len(rows), 'configuration')} predicted" if cancelled else
                f"{count_noun(len(rows), 'configuration')} predicted, best first")
        if self.view is not None:
            self.view.set_running(False)
            self.view.set_rows(rows, note)
        self.tuned.emit(rows, note)

    def shutdown(self) -> None:
        """Stop the grid and a Verify run, and ask the grid's thread to end (the main window closes; it does
        not wait here: ``thread_running`` says when it has ended)."""
        self.cancel()
        self.analysis.job.request_cancel()
        if self._thread is not None:
            self._thread.quit()

    def grid_running(self) -> bool:
        """The grid is being predicted."""
        return self._busy()

    def thread_running(self) -> bool:
        """The grid's thread has not ended (it ends after ``shutdown``)."""
        return self._thread is not None and not self._thread.isFinished()

    def wait(self, timeout_ms: int) -> None:
        """Wait (blocking) for the grid's thread to end, up to ``timeout_ms``."""
        if self._thread is not None:
            self._thread.wait(timeout_ms)

    # -- llama-server ----------------------------------------------------------------
    def copy_flags(self, row) -> str | None:
        """Copy ``llama-server ...`` for ``row`` (a ``TuneRow``) to the clipboard, with its notes in the
        view's status line; our own sources (``ngram``, ``suffix``) have none: the view says so."""
        v = self.view
        model = (self.model.model_info or {}).get("path") if self.model.session.origin == "live" else None
        try:
            line = server_command(row.source, row.options, draft_max=row.draft_max, model=model,
                                  sampling=SamplingSettings(), n_ctx=self.recording.n_ctx if self.recording else None)
            notes = server_notes(row.source, row.options, draft_max=row.draft_max)
        except NoServerEquivalent as exc:
            v.say(f"no llama-server flags: {row.source} is spec-inspector's own source ({exc})")
            return None
        except ValueError as exc:
            v.say(f"no llama-server flags: {exc}")
            return None
        QGuiApplication.clipboard().setText(line)
        v.say("copied: " + line + "".join(f" · note: {n}" for n in notes))
        return line

    # -- verify ----------------------------------------------------------------------
    def verify(self, row) -> bool:
        """Run ``row`` (and plain decoding) for real on the recording's prompt tokens, on the engine thread;
        ``verified`` then gives predicted beside measured. Refused (the view says why) while a run or
        another job goes or no model is loaded."""
        run, v, rec = self.run, self.view, self.recording
        if rec is None or v is None:
            return False
        if not run.is_idle:
            v.set_verified("Verify needs the engine: stop the run (or wait for the job) first")
            return False
        if self.engine.runtime is None:
            v.set_verified("Verify needs a model: load one first")
            return False
        sampling = (self.model.session.settings or {}).get("sampling") or {}
        names = {f.name for f in dataclasses.fields(SamplingSettings)}
        try:
            sampling = SamplingSettings(**{k: x for k, x in sampling.items() if k in names})
        except (TypeError, ValueError):
            sampling = SamplingSettings()
        settings = GenerationSettings(max_new_tokens=rec.max_new_tokens, draft_max=row.draft_max, sampling=sampling)
        self._verifying = row
        self.analysis.job.reset_cancel()
        run.set_state(BUSY, "verifying a tuned configuration…")
        v.set_verifying(f"verifying {html.escape(row.label)} (and plain decoding beside it) …")
        self.requestVerify.emit(CompareRequest("", True, (CompareConfig(row.label, row.source, row.draft_max,
                                                                        dict(row.options)),),
                                               settings, self.costs, prompt_tokens=tuple(rec.prompt)))
        return True

    def _verify_done(self, result, note: str) -> None:
        row, self._verifying = self._verifying, None
        if row is None:
            return
        if self.model.state == BUSY:
            self.run.set_state(IDLE)
        i = next((k for k, r in enumerate(result.rows) if r.config.source == row.source), None) if result else None
        if i is None or result.rows[i].error:
            text = note or (result.rows[i].error if i is not None else "no result")
            self.view.set_verified(f"Verify of {html.escape(row.label)}: {html.escape(text)}")
            self.verified.emit(None, text)
            return
        real, run = result.rows[i], result.runs[i]
        rec = self.recording
        same = run is not None and tuple(run.generated) == tuple(rec.output)
        windows_match = None
        replayed = 0
        if same:
            source = make_source(row.source, SourceContext(None, memory={}), dict(row.options))
            windows, _plain, _ms = replay(source, rec, row.draft_max)
            replayed = len(windows)
            windows_match = [(x.decode_step, x.proposal, x.accepted, x.committed) for x in windows] == [
                (r.decode_step, tuple(r.proposal_token_ids), r.accepted_proposal_tokens, r.canonical_prediction_count)
                for r in run.receipts]
        s = real.summary
        out = Verified(row.label, row.tokens_per_s, s.decode_tokens_per_s, row.speedup, real.speedup_vs_plain, same,
                       windows_match, s.windows, replayed)
        self.view.set_verified(verified_text(out))
        self.verified.emit(out, note)


def verified_text(v: Verified) -> str:
    """A Verify result in words (rich text): predicted beside measured, and whether the windows matched."""
    def fmt(x, spec):
        return "n/a" if x is None else format(x, spec)

    if v.windows_match is None:
        windows = "the output differs from the recording (a near-tie flipped): its windows are not comparable"
    elif v.windows_match:
        windows = f"same output, and its {count_noun(v.windows, 'window')} equal the replay's"
    else:
        windows = f"same output, but its {count_noun(v.windows, 'window')} differ from the replay's {v.replayed_windows}"
    return (f"<b>Verified {html.escape(v.label)}</b><br>"
            f"<table><tr><td></td><td><b>predicted</b>&nbsp;</td><td><b>measured</b></td></tr>"
            f"<tr><td>decode tokens/s&nbsp;</td><td>{v.predicted_tokens_per_s:.1f}</td>"
            f"<td>{fmt(v.measured_tokens_per_s, '.1f')}</td></tr>"
            f"<tr><td>speedup vs plain&nbsp;</td><td>{v.predicted_speedup:.2f}x</td>"
            f"<td>{fmt(v.measured_speedup, '.2f')}x</td></tr></table>{windows}")
