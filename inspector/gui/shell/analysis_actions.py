"""The window's "what speculation buys" wiring (GUI thread): the comparison
with plain decoding after a run, the cost model (Measure, cache, PNG) and the
Compare window (several proposal configurations on the current prompt or a conversation).

The work itself runs on the engine thread (``EngineWorker`` for the
baseline, ``inspector.gui.engine_thread.analysis.AnalysisWorker`` for the rest); this
object starts it through queued signals, shows the busy state (the window's
``busy`` state: Run and model changes are refused meanwhile) and hands the
immutable results to the session and the views.
"""

from __future__ import annotations

import html
import os
from dataclasses import replace

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog, QMessageBox

from inspector.gui.audit.actions import AuditActions
from inspector.gui.compare.server_build import ServerBuildActions
from inspector.gui.compare.view import CompareView
from inspector.gui.cost.view import PROGRESS_STEPS
from inspector.gui.shell.analysis_settings import (cost_key, restore_compare, save_compare, save_server_choice,
                                                   store_cost, stored_cost)
from inspector.gui.engine_thread.analysis import AnalysisWorker, CompareRequest, CostMeasured, CostRequest, LayoutsRequest
from inspector.gui.look.banner_colours import BANNER_HINT
from inspector.gui.look.wording import count_noun
from inspector.gui.panel.control_panel import source_names
from inspector.gui.model.window_model import BUSY_PROGRESS, WindowModel
from inspector.gui.ports.handles import MenuHost
from inspector.gui.tune.actions import TuneActions
from inspector.llama.cost_cache import load_cost_model, placement
from inspector.llama.cost_progress import PLAN, progress_text
from inspector.llama.model_file import weight_types_of
from inspector.prompts import example_prompts
from inspector.session.run_states import BUSY, IDLE, SERVING
from inspector.sources.registry import declares_option
from inspector.sources.server_flags import NoServerEquivalent, server_command, server_notes

class AnalysisActions(QObject):
    """Baseline results, cost-model measurement and its per-model cache, Compare and Tune.

    ``cost_models``: measured ``CostMeasured`` by ``cost_key`` (kept for the
    app's lifetime, and in QSettings). ``current``: the loaded model's, or None.

    It reads the side ``panel`` (prompt, source, sampling, draft model) and drives the ``tabs`` and the
    views whose cost model it sets (``cost_view``, ``stats``, ``timeline``). It gets the window's model
    (``WindowModel``: the session shown, what the window says, the engine worker and its thread, the settings,
    the loaded model's ``model_info``, ``load_model`` for Use this form, ``shutdownRequested``), ``host``
    (``MenuHost``) and ``run`` (``RunControl``: ``is_idle``, ``set_state``)."""

    requestMeasure = Signal(object)
    requestCompare = Signal(object)
    costReady = Signal(object, str)
    """(``CostMeasured`` or None, error or note): a measurement ended (tests, status); cancelled: a ``partial``
    ``CostMeasured`` and "cancelled: kept …", or None and "cancelled"."""
    layoutsReady = Signal(object, str)
    """(list of (weight type, ``CostMeasured``) or None, error): "Try weight types" ended."""
    requestLayouts = Signal(object)
    compareReady = Signal(object, str)
    """(``CompareResult`` or None, note or error): a comparison ended (tests, status)."""
    costChanged = Signal(object)
    """The ``CostModel`` now shown (None: none for this model): the Synthetic acceptance tab predicts from it."""

    def __init__(self, model: WindowModel, panel, host: MenuHost, run, tabs, cost_view, stats, timeline) -> None:
        super().__init__(host.parent)
        self.model, self.panel, self.host, self.run = model, panel, host, run
        self.engine, self.settings = model.worker, model.settings
        worker = model.worker
        self.tabs, self.cost_view, self.stats, self.timeline = tabs, cost_view, stats, timeline
        self.cost_models: dict[str, CostMeasured] = {}
        self.current: CostMeasured | None = None
        self.busy = ""
        """What the engine thread measures for us ("" when nothing)."""
        self.worker = AnalysisWorker(worker)
        self.worker.moveToThread(model.thread)
        self.requestMeasure.connect(self.worker.measure_cost)
        self.requestCompare.connect(self.worker.run_compare)
        self.requestLayouts.connect(self.worker.measure_layouts)
        self.worker.layoutsMeasured.connect(self._layouts_measured)
        self.worker.layoutProgress.connect(
            lambda text: self.worker.job.cancel.is_set() or cost_view.set_busy(True, text, cancellable=True))
        self.worker.costMeasured.connect(self._cost_measured)
        self.worker.costProgress.connect(self._cost_progress)
        self.worker.compareProgress.connect(self._compare_progress)
        self.worker.compareTurnProgress.connect(self._compare_turn_progress)
        self.worker.compareRows.connect(lambda partial: self.compare_view and self.compare_view.show_rows(partial))
        self.worker.compareDone.connect(self._compare_done)
        self.worker.failed.connect(self._failed)
        worker.baselineReady.connect(self._baseline_ready)
        worker.modelLoaded.connect(self._model_loaded)
        cost_view.measure.clicked.connect(self.measure)
        cost_view.cancel.clicked.connect(self.cancel_measure)
        cost_view.export.clicked.connect(self.export_png_dialog)
        cost_view.try_layouts.clicked.connect(self.try_layouts)
        cost_view.use_layout.clicked.connect(self.use_layout)
        cost_view.use_draft_max.clicked.connect(self.use_draft_max)
        menu = host.add_menu("&Analysis")
        self.act_measure = host.add_action(menu, "Measure cost model", self.measure, ["Ctrl+M"],
                                           "time verify batches of 1..16 rows on the loaded model")
        self.act_cost_png = host.add_action(menu, "Export cost curve PNG…", self.export_png_dialog)
        menu.addSeparator()
        self.act_compare = host.add_action(menu, "Compare configurations…", self.show_compare, ["Ctrl+K"],
                                           "run the prompt with several proposal configurations, side by side")
        self.act_server_flags = host.add_action(
            menu, "Copy as llama-server flags", self.copy_server_flags, ["Ctrl+Shift+L"],
            "copy the llama-server arguments that reproduce the chosen source and its settings "
            "(llama.cpp's ngram-* proposers and draft models), the context and the sampling")
        self.tune = TuneActions(model, host, menu, lambda: self.current, run)
        """The Tune window (Tune from this run…, Ctrl+Shift+K)."""
        self.audit = AuditActions(model, host, menu, run)
        """The Audit window (Audit the difference from plain decoding…, Ctrl+Shift+A)."""
        self.compare_view = None
        self.server_build: ServerBuildActions | None = None
        """Builds llama-server for the Compare window (on a thread of its own), made with the window."""
        self._compare_turns: tuple | None = None
        """The turns of the conversation being compared (None: the prompt, or no comparison)."""
        model.shutdownRequested.connect(self.worker.job.request_cancel, Qt.ConnectionType.DirectConnection)
        if model.model_info is not None:
            self._model_loaded(model.model_info)

    # -- llama-server --------------------------------------------------------------
    def copy_server_flags(self) -> str | None:
        """Copy ``llama-server ...`` for the side panel's source, options and draft max (and the loaded
        model), its context size and llama.cpp context settings and its sampling (each flag whose
        value is not llama-server's default: ``server_arguments``) to the clipboard and show it in the
        status bar, with notes (a system prompt goes in the requests' messages); a source
        llama-server lacks gets a message naming those it has. Returns the line, or None."""
        p = self.panel
        draft_max = p.draft_max_in_effect()  # auto: what the last run resolved, as the panel's "→ 7" says
        model = (self.model.model_info or {}).get("path")
        source = p.source.currentText()
        try:
            line = server_command(source, p.source_options(), draft_max=draft_max, model=model,
                                  sampling=p.generation_settings().sampling, n_ctx=p.n_ctx.value(),
                                  n_batch=p.llama_context.n_batch.value(), context=p.llama_context.settings(),
                                  n_threads=p.threads.value() or None)
            notes = server_notes(source, p.source_options(), draft_max=draft_max,
                                 system_prompt="" if p.raw.isChecked() else p.system_prompt.text())
        except NoServerEquivalent as exc:
            self.model.show_error("No llama-server flags for this source", str(exc), QMessageBox.Icon.Information)
            return None
        except ValueError as exc:
            self.model.show_error("No llama-server flags for this source", str(exc))
            return None
        QGuiApplication.clipboard().setText(line)
        self.model.say("llama-server flags copied to the clipboard")
        self.model.set_banner("<b>Copied to the clipboard:</b> <code>" + html.escape(line) + "</code>" +
                          "".join(f"<br>Note: {html.escape(n)}" for n in notes), BANNER_HINT)
        return line

    # -- baseline ------------------------------------------------------------------
    def _baseline_ready(self, result, error: str) -> None:
        """The comparison with plain decoding of the run that just ended (before its ``runFinished``);
        the result reaches the shown session as its ``BaselineDone`` record."""
        self.model.drain()
        if error:
            self.model.say(f"comparison with plain decoding failed: {error}")
            self.model.show_error("Comparison with plain decoding failed", error)
            return
        if result is None:  # Stop during the comparison
            self.model.say("comparison with plain decoding stopped")

    # -- busy state ----------------------------------------------------------------
    def _start(self, what: str, detail: str, error=None) -> bool:
        """Begin job ``what`` (``detail``: the busy state's words), or refuse it while a run goes, while serving
        or without a model in a box by ``error(title, message)`` (the main window's, or the asking window's)."""
        error = error or self.model.show_error
        if not self.run.is_idle:
            serving = self.model.state == SERVING  # e.g. Replay under other sources… clicked while serving
            what_stops = "serving (Run > Serve, Ctrl+Shift+S)" if serving else "the run"
            error("Serving" if serving else "Run in progress", f"Stop {what_stops} before {detail.rstrip('…')}.")
            return False
        if self.engine.runtime is None:
            error("No model loaded", "Load a model first (the bundled one loads at startup).")
            return False
        self.busy = what
        self.run.set_state(BUSY, detail)
        return True

    def _end(self) -> None:
        self.busy = ""
        self.model.show_progress(None)
        if self.model.state == BUSY:
            self.run.set_state(IDLE)

    def _prompt(self) -> tuple[str, bool]:
        p = self.panel
        text = p.prompt.toPlainText()
        if not text.strip():
            text = example_prompts().get("copy-with-corrections", "Hello")
        return text, p.raw.isChecked()

    # -- cost model ----------------------------------------------------------------
    def measure(self) -> bool:
        """Measure the cost model of the loaded model after the current prompt, on the engine thread, its
        progress in the Cost model tab and the status bar (``CostProgress`` from the worker), Cancel in the
        tab. Refused (with a message) while a run goes or no model is loaded."""
        if not self._start("cost", "measuring the cost model…"):
            return False
        self.cost_view.set_busy(True, "measuring c(k) for k = 1..16 verification rows (median of 3) …", cancellable=True)
        self.tabs.setCurrentWidget(self.cost_view)
        self.model.show_progress(0, BUSY_PROGRESS)
        text, raw = self._prompt()
        self.worker.job.reset_cancel()
        self.requestMeasure.emit(CostRequest(text, raw))
        return True

    def cancel_measure(self) -> None:
        """Stop the measurement before its next decode (thread safe); the batch sizes timed are kept."""
        self.worker.job.request_cancel()
        self.cost_view.cancel.setEnabled(False)
        self.model.say("busy · cancelling the measurement after the decode in flight …")

    def _cost_progress(self, p) -> None:
        if self.busy != "cost" or self.worker.job.cancel.is_set():
            return
        self.cost_view.set_progress(p)
        if p.stage != PLAN:
            self.model.show_progress(int(p.fraction * PROGRESS_STEPS), PROGRESS_STEPS)
        self.model.say(f"measuring c(k): {progress_text(p)}")

    def _cost_measured(self, m: CostMeasured) -> None:
        key = cost_key(m.model_path, m.n_threads)
        self.cost_models[key] = m
        if not m.partial:
            store_cost(self.settings, key, m)
        self._use(m)
        self.cost_view.set_busy(False)
        self._end()
        note = f"cancelled: kept {m.partial}" if m.partial else ""
        self.model.say(f"cost model {'measured' if not note else note}: {self.cost_view.ceiling_text()}")
        self.costReady.emit(m, note)

    # -- weight layouts ----------------------------------------------------------------
    def try_layouts(self) -> bool:
        """Measure c(k) of the loaded model in its other weight types (``LAYOUT_TYPES``), on the engine
        thread; the Cost model tab then plots every layout's curve and offers the best one."""
        if not self._start("layouts", "trying other weight types…"):
            return False
        self.cost_view.set_busy(True, "converting the model to other weight types (llama.cpp quantize, cached) "
                                        "and measuring c(k) for each …", cancellable=True)
        self.worker.job.reset_cancel()
        self.tabs.setCurrentWidget(self.cost_view)
        text, raw = self._prompt()
        self.requestLayouts.emit(LayoutsRequest(text, raw))
        return True

    def _layouts_measured(self, results) -> None:
        self.cost_view.set_busy(False)
        self._end()
        own = results[0][1]  # the loaded layout's c(k): the current cost model too
        key = cost_key(own.model_path, own.n_threads)
        self.cost_models[key] = own
        store_cost(self.settings, key, own)
        self._use(own)
        self.cost_view.set_layouts(results)
        self.model.say("weight layouts measured: " + ", ".join(
            f"{t} {m.model.ceiling:.1f}x" for t, m in results))
        self.layoutsReady.emit(results, "")

    def use_draft_max(self) -> int:
        """Set the panel's draft max to what the measured curve implies (``CostView.suggested_draft_max``);
        returns it (0: no cost model, nothing changed)."""
        n = self.cost_view.suggested_draft_max()
        if n >= 1:
            self.panel.draft_max.setValue(n)
            self.model.say(f"draft max {n}: the cost curve's best window")
        return n

    def use_layout(self) -> bool:
        """Run the model in the weight type the Cost model tab offers (its best ceiling) from now on:
        the model panel's weights choice (remembered for this model), then load it."""
        best = self.cost_view.offered_layout()
        if best is None or not self.run.is_idle:
            return False
        weight_type, _m = best
        self.panel.set_target_weights(weight_type)
        return self.model.load_model()

    def _failed(self, what: str, message: str) -> None:
        self._end()
        if what in ("layouts", "cost") and not message:  # cancelled before anything was measured
            self.cost_view.set_busy(False)
            self.model.say("cancelled before any batch size was measured: nothing kept")
            (self.layoutsReady if what == "layouts" else self.costReady).emit(None, "cancelled")
            return
        if what == "layouts":
            self.cost_view.set_busy(False)
            self.model.show_error("Cannot try other weight types", message)
            self.layoutsReady.emit(None, message)
            return
        if what == "cost":
            self.cost_view.set_busy(False)
            self.model.show_error("Cannot measure the cost model", message)
            self.costReady.emit(None, message)
        elif self.compare_view is not None:
            self._compare_turns = None
            self.compare_view.set_running(False, f"failed: {message}")
            self.compare_view.show_error("Comparison failed", message)
            self.compareReady.emit(None, message)

    def _use(self, m: CostMeasured | None) -> None:
        self.current = m
        self.cost_view.set_cost_model(m)
        self.stats.set_cost_model(None if m is None else m.model)
        self.timeline.set_cost_model(None if m is None else m.model)
        self.costChanged.emit(None if m is None else m.model)

    def _model_loaded(self, info: dict) -> None:
        """Show the cost model cached for this model (and the thread count a run uses), if any."""
        path = str(info.get("path", ""))
        n = int(info.get("n_threads") or 0)
        cores = os.cpu_count() or 1
        rt = self.engine.runtime
        where = placement(rt) if rt is not None else ""
        for threads in (n, n - 1 if n >= cores and n > 1 else n):
            key = cost_key(path, threads)
            m = None if where else self.cost_models.get(key) or stored_cost(self.settings, key)  # the window's own, local
            if m is None:  # what bench, compare or another window stored for this placement
                cm = load_cost_model(path, threads, where)
                m = None if cm is None else CostMeasured(cm, path, threads, 0, weight_types_of(path),
                                                         str(info.get("layers", "")))
            if m is not None:
                self.cost_models[key] = m
                self._use(m)
                return
        self._use(None)

    def export_png_dialog(self) -> None:
        if self.current is None:
            self.model.show_error("No cost model", "Measure the cost model first (Cost model tab).")
            return
        path, _ = QFileDialog.getSaveFileName(self.host.parent, "Export cost curve PNG", "cost-curve.png", "PNG images (*.png)")
        if path:
            if self.cost_view.export_png(path):
                self.model.say(f"cost curve written: {path}")
            else:
                self.model.show_error("Export failed", f"cannot write {path}")

    # -- compare -------------------------------------------------------------------
    def show_compare(self):
        """Open (or raise) the Compare window; returns it."""
        if self.compare_view is None:
            v = CompareView(source_names(), self.host.parent)
            v.runRequested.connect(self.run_compare)
            v.cancelRequested.connect(self.worker.job.request_cancel, Qt.ConnectionType.DirectConnection)
            restore_compare(self.settings, v)
            v.server_choice.changed.connect(lambda *_a: save_server_choice(self.settings, self.compare_view))
            self.server_build = ServerBuildActions(v.server_choice, parent=self)
            self.model.shutdownRequested.connect(self.server_build.shutdown)
            self.host.every_tick(v.refresh)  # redrawn with the window's views
            self.compare_view = v
        self.compare_view.cost_model = None if self.current is None else self.current.model
        self._describe_prompt()
        self.compare_view.server_choice.update_state()  # a llama-server built meanwhile (the command line)
        self.compare_view.show()
        self.compare_view.raise_()
        return self.compare_view

    def _describe_prompt(self) -> None:
        p = self.panel
        name = p.example_name() or "custom prompt"
        s = p.generation_settings()
        sampling = "greedy" if s.sampling.greedy else f"temperature {s.sampling.temperature:g}"
        cm = "" if self.current is None else " · expected speedup from the measured cost model"
        self.compare_view.set_prompt_info(f"{name} (main window)", s.max_new_tokens, f"{sampling}{cm}")

    def run_compare(self, configs, conversation=None) -> bool:
        """Run ``configs`` (``CompareConfig``) on the engine thread: on the main window's prompt, or
        with ``conversation`` (``(name, turns)``, ``CompareView.conversation``) over its turns, each
        configuration with its own history (a row sums every turn). Refused (with a message) while a
        run goes or no model is loaded."""
        v = self.compare_view or self.show_compare()
        self._describe_prompt()
        if not self._start("compare", "comparing configurations…", v.show_error):
            return False
        save_compare(self.settings, v, configs, conversation)
        text, raw = self._prompt()
        panel = self.panel
        configs = [self._with_panel_draft(c) for c in configs]
        turns = None if conversation is None else tuple(conversation[1])
        self._compare_turns = turns
        what = "" if turns is None else f" over {count_noun(len(turns), 'turn')} of {conversation[0]}"
        v.set_running(True, f"starting {count_noun(len(configs), 'configuration')}{what} …")
        self.worker.job.reset_cancel()
        settings = replace(panel.generation_settings(), max_new_tokens=v.max_tokens.value())  # the window's own
        self.requestCompare.emit(CompareRequest(text, raw, tuple(configs), settings,
                                                None if self.current is None else self.current.model, turns,
                                                v.llama_server_target(), repeats=v.repeats.value()))
        return True

    def _with_panel_draft(self, c):
        """A configuration whose source declares a ``draft_model`` option but gives none uses the main
        window's draft model."""
        path = self.panel.draft_model.text().strip()
        if path and "draft_model" not in c.options and declares_option(c.source, "draft_model"):
            return replace(c, options={**c.options, "draft_model": path})
        return c

    def _compare_progress(self, done: int, total: int, label: str) -> None:
        if self._compare_turns:  # a conversation: its turns report (_compare_turn_progress)
            return
        if self.compare_view is not None:
            self.compare_view.set_progress(done, total, label)
        self.model.say(f"busy · comparing configurations: {done + 1}/{total} {label}")

    def _compare_turn_progress(self, turn: int, turns: int, done: int, total: int, label: str) -> None:
        if self.compare_view is not None:
            self.compare_view.set_turn_progress(turn, turns, done, total, label)
        self.model.say(f"busy · comparing configurations: turn {turn}/{turns}, "
                                    f"configuration {done + 1}/{total} {label}")

    def _compare_done(self, result, note: str) -> None:
        self._end()
        turns = self._compare_turns
        self._compare_turns = None
        v = self.compare_view
        if v is not None:
            v.set_running(False)
            failed = [r.config.label for r in (result.rows if result else ()) if r.error]
            text = note or f"done: {count_noun(len(result.rows), 'configuration')}"
            if turns and result is not None:
                text += f" × {count_noun(len(turns), 'turn')} (each row sums every turn; hover a label for its turns)"
            if failed:
                text += f" · failed: {', '.join(failed)} (hover the row for the error)"
            v.set_result(result, text)
        self.model.say(f"comparison {note or 'done'}")
        self.compareReady.emit(result, note)
