"""Run control of the main window: the window's state (idle, loading, running, paused,
holding before a commit, busy, error), what each state enables, the banner line that says
what a run is doing, and the Run / Pause / Step window / Step token / Stop / Resume commands.

``RunControl`` gets the window's model (``WindowModel``: the state it sets, the session shown, what the
window says) and what it acts on: the side panel, the model line, the token view (the held token, the
focus), the banner (to measure) and the window's run actions. It never calls llama.cpp: requests go to the
worker through the model's queued signals (``runRequested``, ``loadRequested``) or the worker's thread-safe
``request_*`` methods.
"""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Qt

from inspector.engine.faults import Fault, FaultPlan
from inspector.gui.engine_thread.worker import RunConfig, Stepping
from inspector.gui.look.banner_colours import BANNER_ERROR, BANNER_NEUTRAL
from inspector.gui.look.wording import count_noun
from inspector.gui.model.window_model import WindowModel
from inspector.gui.shell.banner import Banner
from inspector.gui.shell.model_line import ModelLine
from inspector.gui.shell.run_banner import RunBanner
from inspector.llama import bundled_model_path
from inspector.session.session_record import SessionRecord
from inspector.session.run_states import (ACTIVE_STATES, ERROR, IDLE, LOADING, PAUSED, RUNNING, SERVING,
                                          TOKEN_HOLD, control_states, state_label)
from inspector.sources.registry import PLAIN, describe_source

RUN_ACTIONS = ("run", "pause", "step_window", "step_token", "stop", "resume", "open_receipts")
"""Keys of the window's actions ``RunControl`` enables (``control_states`` keys of the same name)."""


class RunControl(QObject):
    """The window's state and run commands.

    The state is the model's ``state``; ``armed_faults``: faults pressed while no
    run goes (the next run starts with them, at the first opportunity); ``served_faults``: while the
    window serves, where the fault buttons arm instead (an object with ``arm(fault)`` and
    ``pending_faults_text()``: the Serve switch's ``ServeActions`` sets itself). The model's ``stateChanged(state)``
    follows every ``set_state``.

    ``model``: the ``WindowModel`` (the session shown, the state, what the window says, the worker, where runs
    autosave; a run or a load is queued to the worker through it); ``panel``: the side panel; ``model_line``;
    ``token_view`` (the held token, the focus); ``banner`` (the ``Banner``: a run's end is cut to its width);
    ``actions``: the window's run actions by ``RUN_ACTIONS`` name.
    Run waits while a draft is being made or a receipts file read (the model's ``busy("draft")`` /
    ``busy("opening")``)."""

    def __init__(self, model: WindowModel, panel, model_line: ModelLine, token_view, banner: Banner,
                 actions: dict, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model, self.panel, self.worker, self.model_line = model, panel, model.worker, model_line
        self.token_view = token_view
        self.actions = actions
        self.armed_faults = FaultPlan()
        self.served_faults = None
        self._before_run = None  # (session, faults) shown before the last start_run: restored if its source fails
        self.run_banner = RunBanner(model, banner)
        """The banner's lines about a live run (``inspector.gui.shell.run_banner``)."""
        panel.source.currentTextChanged.connect(self.forget_refusal)

    # -- state ---------------------------------------------------------------------------
    def set_state(self, state: str, detail: str = "") -> None:
        """Enter ``state`` (``inspector.session.run_states``): enable the controls it allows, set the
        banner and the status bar; the model's ``state`` and ``state_detail`` hold it, then its ``stateChanged``
        tells."""
        self.model.state, self.model.state_detail = state, detail
        p = self.panel
        focus = p.window().focusWidget()  # before any control is disabled (Qt then moves the focus on)
        origin = self.model.session.origin
        on = control_states(state, origin=origin, making_draft=self.model.busy("draft"),
                            opening=self.model.busy("opening"))
        p.run.setEnabled(on["run"])
        p.run.setText("▶ Continue" if on["run_continues"] else "▶ Run")
        p.pause.setEnabled(on["pause"])
        p.step_window.setEnabled(on["step_window"])
        p.step_token.setEnabled(on["step_token"])
        p.stop.setEnabled(on["stop"])
        p.resume.setEnabled(on["resume"])
        p.set_faults_enabled(on["faults"])
        setup_on = on["setup"]
        bar = p.setup_scroll.verticalScrollBar()
        scrolled = bar.value()
        if not setup_on and focus is not None and p.setup.isAncestorOf(focus):
            # Disabling the focused input would move the focus (and scroll the panel) to the next one.
            self.token_view.stream.setFocus(Qt.FocusReason.OtherFocusReason)
        for b in (p.model_combo, p.weights, p.open_model):  # also while serving: another model stops it first
            b.setEnabled(on["choose_model"])
        for b in (p.source, p.source_pages, p.prompt, p.examples, p.max_tokens,
                  p.draft_max, p.temperature, p.verification, p.top_k, p.top_p, p.min_p, p.seed, p.n_ctx,
                  p.threads, p.stop_strings, p.probabilities, p.raw, *p.penalties.values(),
                  *p.llama_context.controls.values()):
            b.setEnabled(setup_on)
        p.system_prompt.setEnabled(setup_on and not p.raw.isChecked())  # a raw prompt has no template
        bar.setValue(scrolled)  # Run never scrolls the side panel
        for b in (p.fault_token, p.baseline, p.background, *p.break_boxes.values()):
            b.setEnabled(on["live_options"])  # a saved session is read only; live runs keep these usable
        if setup_on:
            p.follow_temperature(p.temperature.value())
        self.run_banner.during(state)
        p.make_draft.setEnabled(on["make_draft"])
        for name in RUN_ACTIONS:
            self.actions[name].setEnabled(on[name])
        self.actions["run"].setIconText(p.run.text())  # toolbar and panel say the same: Run or Continue
        self.model.say(state_label(state, detail, origin=origin))
        if state != TOKEN_HOLD:
            self.token_view.show_hold(None)
        if focus is not None and not focus.isEnabled() and p.window().focusWidget() is not focus:
            # Qt moved the focus to the next control in the tab order, the near-tie box once (its value selected,
            # a keystroke away from being replaced): the token stream takes it instead.
            self.token_view.stream.setFocus(Qt.FocusReason.OtherFocusReason)
        self.model.stateChanged.emit(state)

    def refresh_controls(self) -> None:
        """Apply the current state again (after what the rules read changed: a file opened, a draft made)."""
        self.set_state(self.model.state)

    @property
    def is_idle(self) -> bool:
        """No run, load, measurement or comparison is going."""
        return self.model.state == IDLE

    @property
    def engine_busy(self) -> bool:
        """A run (paused, holding or at an error too), a measurement or a comparison holds the engine
        thread; a model loading does not (what is asked next waits for it)."""
        return self.model.state not in (IDLE, LOADING)

    def forget_refusal(self, source: str) -> None:
        """Another source was chosen: a red "The run did not start" about the last one no longer holds."""
        if self.model.banner_style == BANNER_ERROR and "did not start" in self.model.banner_html:
            self.model.set_banner(f"Source <b>{html.escape(source)}</b> chosen: press <b>Run</b>.", BANNER_NEUTRAL)

    def pending_faults_text(self) -> str:
        """The panel's line of faults not fired yet: the running generation's, or those armed for the
        next run ("" when none)."""
        if self.model.state == SERVING and self.served_faults is not None:
            return self.served_faults.pending_faults_text()
        running = self.model.state in ACTIVE_STATES
        pending = self.worker.faults.pending() if running else self.armed_faults.pending()
        if not pending:
            return ""
        return ("pending: " if running else "armed for the next run: ") + "; ".join(f.describe() for f in pending)

    # -- the worker's lifecycle ------------------------------------------------------------
    def worker_state(self, state: str, detail: str) -> None:
        """The worker entered ``state`` (``EngineWorker.stateChanged``; its records drained already)."""
        if state == LOADING:
            self.model.show_progress(0)
        if state in (RUNNING, PAUSED, TOKEN_HOLD) and self.model.state == ERROR and detail != "resumed":
            return
        if state == IDLE and self.model.state != LOADING:
            return  # the run's end is handled by the window's runFinished handler
        self.set_state(state, "" if state == IDLE else detail)

    def run_started(self) -> None:
        """The worker picked the run up: the session shown before it is no longer restored."""
        self._before_run = None
        self.set_state(PAUSED if self.model.state == PAUSED else self.model.state if self.model.state != LOADING else RUNNING)

    def run_ended(self) -> None:
        """The run ended or never started: the banner no longer follows it."""
        self.run_banner.status = None

    def restore_before_run(self) -> None:
        """Show the session (and faults) shown before the last ``start_run`` again, if that run never
        started (its model or source could not be made)."""
        if self._before_run is not None:
            session, faults = self._before_run
            self.worker.faults = faults
            self.model.show_session(session)
            self.model.redraw_all()
        self._before_run = None

    # -- starting ------------------------------------------------------------------------
    def chosen_model(self) -> Path:
        """The model file chosen in the panel, else the bundled one. Raises what
        ``bundled_model_path`` raises when none is chosen and the bundled one is missing."""
        return Path(self.panel.model_path() or bundled_model_path())

    def start_run(self, *, paused: bool = False, first_action: str = "", turn: dict | None = None) -> bool:
        """Start a new live run with the panel's settings. Returns False if it cannot start.

        ``paused``: hold before the first decode step; ``first_action`` (``window``
        or ``token``) runs one window or commits one token first. ``turn``: the next turn of the
        window's conversation (``Conversation.next_turn``: ``chat_messages``, ``conversation``); without
        it the run starts from the panel's prompt and leaves the conversation."""
        panel = self.panel
        if turn is None:
            prompt = panel.prompt.toPlainText()  # as typed: the CLI sends --prompt verbatim too
        else:
            prompt = turn["conversation"]["user_text"]
        if not prompt.strip():
            self.model.show_error("No prompt", "Type a prompt or pick an example prompt first.")
            return False
        src = panel.source.currentText()
        problem = panel.source_problem()  # by the source's declared options: required, ranges, rules
        if problem is not None:
            self.model.show_error(*problem)
            return False
        if self.model.busy("draft") and describe_source(src).loads_model:  # it would load the draft being made
            self.model.show_error("Draft in progress", "Wait until the draft is made.")
            return False
        try:
            model = self.chosen_model()
        except Exception as exc:
            self.model.show_error("No model", str(exc))
            return False
        offload = self.offload_or_none()
        if offload is None or not self.context_allowed(speculative=src != PLAIN):
            return False
        self.model_line.expect_load(hint=False)
        request = replace(panel.run_request(prompt), raw=panel.raw.isChecked() and turn is None,
                          system_prompt=self._system_prompt(turn), faults=self.armed_faults,
                          chat_messages=turn["chat_messages"] if turn else None,
                          conversation=turn["conversation"] if turn else None)
        cfg = RunConfig(request, panel.model_load(str(model), offload),
                        Stepping(panel.break_on(), paused, first_action), self.model.autosave_dir)
        # Reset the stepping here, not on the worker: a Stop pressed before the worker picks the
        # run up (it may still be tokenizing or loading the model) is kept.
        self.worker.step.begin_run(start_paused=paused, first_action=first_action, break_on=cfg.stepping.break_on)
        cfg.stepping.begun = True
        self.armed_faults = FaultPlan()
        self.model.save_settings()  # a crash during the run must not lose the settings it ran with
        self._before_run = (self.model.session, self.worker.faults)
        self.worker.faults = request.faults  # fault buttons work before the worker picks the run up
        session = SessionRecord()
        session.prompt_text = prompt
        session.source_name = src
        self.model.show_session(session)  # a run from the prompt leaves the conversation once it starts
        loading = "loading the model, then " if self.worker.runtime is None else ""
        what = "stepping" if paused or first_action else "running"
        self.run_banner.status = (f"turn {turn['conversation']['turn']} · " if turn else "") + \
            f"source <b>{src}</b> · up to {count_noun(panel.max_tokens.value(), 'token')}"
        self.model.set_banner(f"{(loading + what).capitalize()}: {self.run_banner.status} …", BANNER_NEUTRAL)
        self.set_state(RUNNING if self.worker.runtime is not None else LOADING)
        self.model.runRequested.emit(cfg)
        return True

    def _system_prompt(self, turn: dict | None) -> str:
        """The run's system prompt: the panel's (none with a raw prompt), or for a conversation's turn the
        system message its history starts with (what the turn's prompt holds, whatever the panel says now)."""
        if turn is None:
            return "" if self.panel.raw.isChecked() else self.panel.system_prompt.text()
        first = (turn.get("chat_messages") or ({},))[0]
        return first.get("content", "") if first.get("role") == "system" else ""

    def load_selected_model(self) -> bool:
        """Load the model chosen in the panel (bundled by default) on the worker thread,
        with the progress bar; a hint to press Run shows once it is loaded."""
        if self.model.state != IDLE:
            return False
        try:
            model = str(self.chosen_model())
        except Exception as exc:
            self.model.show_error("No model", str(exc))
            return False
        offload = self.offload_or_none()
        if offload is None or not self.context_allowed(speculative=False):
            return False
        self.model_line.expect_load(hint=True)
        self.panel.model_status.setText(f"loading {Path(model).name} …")
        session = self.model.session
        if session.origin == "live" and not session.tokens:
            self.model.set_banner(f"Loading the model <b>{html.escape(Path(model).name)}</b> …", BANNER_NEUTRAL)
        self.model.show_progress(0)
        self.set_state(LOADING, Path(model).name)
        self.model.loadRequested.emit(model, self.panel.n_ctx.value(), self.panel.target_weights(), offload,
                          self.panel.llama_context.values())
        return True

    def load_after(self, path: str) -> None:
        """Queue loading ``path`` after the load in flight (the panel's context, weights and offload)."""
        self.panel.model_status.setText(f"loading {Path(path).name} …")
        self.model.loadRequested.emit(str(Path(path).resolve()), self.panel.n_ctx.value(), self.panel.target_weights(),
                          self.offload_or_none(), self.panel.llama_context.values())

    def context_allowed(self, speculative: bool) -> bool:
        """The panel's llama.cpp context settings can be loaded (``ContextControls.problem``); else False
        after saying why in one line (nothing is loaded)."""
        problem = self.panel.llama_context.problem(speculative)
        if problem:
            self.model.show_error("llama.cpp context", problem)
        return not problem

    def offload_or_none(self):
        """The panel's offload settings (``Offload``), or None after saying what is wrong with them."""
        try:
            return self.panel.offload()
        except ValueError as exc:
            self.model.show_error("RPC servers", str(exc))
            return None

    # -- run commands ----------------------------------------------------------------------
    def run_clicked(self) -> None:
        """Run: start a run when idle on a live session, continue a paused one, resume after an error."""
        if self.model.state == IDLE and self.model.session.origin != "live":
            return
        if self.model.state == IDLE:
            self.start_run()
        elif self.model.state in (PAUSED, TOKEN_HOLD):
            self.worker.request_continue()
            self.set_state(RUNNING)
        elif self.model.state == ERROR:
            self.resume_clicked()

    def pause_clicked(self) -> None:
        """Pause the running generation (between windows, or at the held token)."""
        if self.model.state in (RUNNING, TOKEN_HOLD):
            self.worker.request_pause()

    def step_window_clicked(self) -> None:
        """Run one window: from a pause, or a new run holding after its first window."""
        if self.model.state == IDLE and self.model.session.origin == "live":
            self.start_run(paused=True, first_action="window")
        elif self.model.state in (PAUSED, TOKEN_HOLD):
            self.worker.request_step_window()
            self.set_state(RUNNING, "one window")

    def step_token_clicked(self) -> None:
        """Commit one token: from a pause, or a new run holding before its first commit."""
        if self.model.state == IDLE and self.model.session.origin == "live":
            self.start_run(paused=True, first_action="token")
        elif self.model.state in (PAUSED, TOKEN_HOLD):
            self.worker.request_step_token()
            self.set_state(RUNNING, "one token")

    def stop_clicked(self) -> None:
        """Stop the run (running, paused, holding or at an error)."""
        if self.model.state in (RUNNING, PAUSED, TOKEN_HOLD, ERROR):
            self.worker.request_stop()

    def resume_clicked(self) -> None:
        """Resume after an error (the worker repaired or retired the session)."""
        if self.model.state == ERROR:
            self.model.set_banner("Resuming after the error …", BANNER_NEUTRAL)
            self.worker.request_resume()
            self.set_state(RUNNING, "resuming")

    def inject(self, fault: Fault) -> None:
        """Add ``fault`` to the running generation's fault plan (thread safe); with no run going, arm it
        for the next run (it fires at the first opportunity there); while serving, arm it on the slot
        chosen (``served_faults.arm``: it fires in that slot's next request)."""
        if self.model.state == SERVING and self.served_faults is not None:
            self.served_faults.arm(fault)
        elif self.model.state in (RUNNING, PAUSED, TOKEN_HOLD):
            self.worker.faults.add(fault)
        else:
            self.armed_faults.add(fault)
        self.model.redraw()
