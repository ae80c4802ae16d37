"""Run control of the main window: the window's state (idle, loading, running, paused,
holding before a commit, error), what each state enables, the banner that says what a run
is doing, and the Run / Pause / Step window / Step token / Stop / Resume handlers.

``RunControl`` is a mixin of ``MainWindow`` (it uses the window's panel, worker, banner and
actions); it never calls llama.cpp: requests go to the worker through queued signals or its
thread-safe ``request_*`` methods.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt

from inspector.engine.faults import Fault, FaultPlan
from inspector.gui.engine_thread import worker as W
from inspector.gui.shell.run_states import ACTIVE_STATES, control_states, state_label  # noqa: F401 (main_window)
from inspector.session.record import SessionRecord
from inspector.sources.registry import PLAIN
from inspector.gui.look.wording import count_noun

BANNER_PAD = 4
BANNER_NEUTRAL = "background:#f5f5f5;color:#424242"
BANNER_HINT = "background:#e3f2fd;color:#0d47a1"
BANNER_DONE = "background:#e8f5e9;color:#1b5e20"
BANNER_ERROR = "background:#ffebee;color:#b71c1c"
LOADED_HINT = "Model loaded. Pick an example prompt and press <b>Run</b> (Ctrl+R)."


class RunControl:
    """States and run controls of ``MainWindow`` (a mixin: see the module docstring)."""

    # -- state ---------------------------------------------------------------------------
    def set_state(self, state: str, detail: str = "") -> None:
        """Enter ``state`` (``inspector.gui.shell.run_states``): enable the controls it allows, set the
        banner and the status bar, emit ``stateChanged``."""
        self.state = state
        p = self.panel
        on = control_states(state, origin=self.session.origin, making_draft=self.sources.job is not None,
                            opening=getattr(self, "files", None) is not None and self.files.opening is not None)
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
        focus = self.focusWidget()
        if not setup_on and focus is not None and p.setup.isAncestorOf(focus):
            # Disabling the focused input would move the focus (and scroll the panel) to the next one.
            self.token_view.stream.setFocus(Qt.FocusReason.OtherFocusReason)
        for b in (p.model_combo, p.weights, p.open_model, p.source, p.source_pages, p.prompt, p.examples, p.max_tokens,
                  p.draft_max, p.temperature, p.verification, p.top_k, p.top_p, p.min_p, p.seed, p.n_ctx,
                  p.threads, p.stop_strings, p.probabilities, p.raw, *p.penalties.values(),
                  *p.llama_context.controls.values()):
            b.setEnabled(setup_on)
        p.system_prompt.setEnabled(setup_on and not p.raw.isChecked())  # a raw prompt has no template
        bar.setValue(scrolled)  # Run never scrolls the side panel
        for b in (p.fault_token, p.baseline, p.background, *p.break_boxes.values()):
            b.setEnabled(on["live_options"])  # a saved session is read only; live runs keep these usable
        if setup_on:
            p._temperature_changed(p.temperature.value())
        self._run_banner(state)
        p.make_draft.setEnabled(on["make_draft"])
        self.act_run.setEnabled(on["run"])
        self.act_run.setIconText(p.run.text())  # toolbar and panel say the same: Run or Continue
        self.act_pause.setEnabled(on["pause"])
        self.act_step_window.setEnabled(on["step_window"])
        self.act_step_token.setEnabled(on["step_token"])
        self.act_stop.setEnabled(on["stop"])
        self.act_resume.setEnabled(on["resume"])
        self.act_open.setEnabled(on["open_receipts"])
        self.status_state.setText(state_label(state, detail, origin=self.session.origin))
        if state != W.TOKEN_HOLD:
            self.token_view.show_hold(None)
        self.stateChanged.emit(state)

    def refresh_controls(self) -> None:
        """Apply the current state again (after what the rules read changed: a file opened, a draft made)."""
        self.set_state(self.state)

    @property
    def is_idle(self) -> bool:
        """No run, load, measurement or comparison is going."""
        return self.state == W.IDLE

    @property
    def engine_busy(self) -> bool:
        """A run (paused, holding or at an error too), a measurement or a comparison holds the engine
        thread; a model loading does not (what is asked next waits for it)."""
        return self.state not in (W.IDLE, W.LOADING)

    def _run_banner(self, state: str) -> None:
        """The banner during a live run says what the run is doing now: running, paused (with
        what continues it) or holding before a commit; errors and the end set their own text."""
        what = self._run_status
        if what is None or state not in (W.RUNNING, W.PAUSED, W.TOKEN_HOLD):
            return
        n = count_noun(len(self.session.tokens), "token")
        if state == W.PAUSED:
            self.set_banner(f"<b>Paused</b>: {what} · {n} so far. <b>Continue</b> (Ctrl+R) runs on; Step window "
                            "(F10) and Step token (F11) go one window or one token at a time.", BANNER_HINT)
        elif state == W.TOKEN_HOLD:
            self.set_banner(f"<b>Step token</b>: holding before a commit ({n} so far; the token is named above "
                            "the stream, a window's rows in the Windows tab). F11 commits it; Continue (Ctrl+R) "
                            "runs on.", BANNER_HINT)
        elif self.banner.text().startswith(("<b>Paused", "<b>Step token")):
            self.set_banner(f"Running: {what} …", BANNER_NEUTRAL)

    def _worker_state(self, state: str, detail: str) -> None:
        self.drain_records()  # the banner counts what the run did up to this state (a pause: its last step)
        if state == W.LOADING:
            self.load_progress.setValue(0)
            self.load_progress.show()
        if state in (W.RUNNING, W.PAUSED, W.TOKEN_HOLD) and self.state == W.ERROR and detail != "resumed":
            return
        if state == W.IDLE and self.state != W.LOADING:
            return  # the run's end is handled by _run_finished
        self.set_state(state, "" if state == W.IDLE else detail)

    # -- run controls ----------------------------------------------------------------------
    def start_run(self, *, paused: bool = False, first_action: str = "", turn: dict | None = None) -> bool:
        """Start a new live run with the panel's settings. Returns False if it cannot start.

        ``paused``: hold before the first decode step; ``first_action`` (``window``
        or ``token``) runs one window or commits one token first. ``turn``: the next turn of the
        window's conversation (``Conversation.next_turn``: ``chat_messages``, ``conversation``); without
        it the run starts from the panel's prompt and leaves the conversation."""
        if turn is None:
            prompt = self.panel.prompt.toPlainText()  # as typed: the CLI sends --prompt verbatim too
        else:
            prompt = turn["conversation"]["user_text"]
        if not prompt.strip():
            self.show_error("No prompt", "Type a prompt or pick an example prompt first.")
            return False
        src = self.panel.source.currentText()
        problem = self.panel.source_problem()  # by the source's declared options: required, ranges, rules
        if problem is not None:
            self.show_error(*problem)
            return False
        if src == "draft" and self.sources.job is not None:
            self.show_error("Draft in progress", "Wait until the draft is made.")
            return False
        try:
            model = self.panel.model_path() or self.bundled_path()
        except Exception as exc:
            self.show_error("No model", str(exc))
            return False
        offload = self.offload_or_none()
        if offload is None or not self.context_allowed(speculative=src != PLAIN):
            return False
        self._hint_on_load = False
        cfg = W.RunConfig(
            model_path=str(model), prompt_text=prompt, settings=self.panel.generation_settings(), source=src,
            source_options=self.panel.source_options(), raw=self.panel.raw.isChecked() and turn is None,
            system_prompt=self._system_prompt(turn),
            break_on=self.panel.break_on(), start_paused=paused, first_action=first_action, autosave_dir=self.data_dir / "autosave",
            baseline=self.panel.baseline.isChecked(), n_ctx=self.panel.n_ctx.value(),
            n_threads=self.panel.threads.value() or None, faults=self.armed_faults,
            draft_max_auto=self.panel.draft_max_auto(),
            target_weights=self.panel.target_weights(), offload=offload, context=self.panel.llama_context.values(),
            chat_messages=turn["chat_messages"] if turn else None, conversation=turn["conversation"] if turn else None,
        )
        # Reset the stepping here, not on the worker: a Stop pressed before the worker picks the
        # run up (it may still be tokenizing or loading the model) is kept.
        self.worker.step.begin_run(start_paused=paused, first_action=first_action, break_on=cfg.break_on)
        cfg.stepping_begun = True
        self.armed_faults = FaultPlan()
        self.save_settings()  # a crash during the run must not lose the settings it ran with
        self._before_run = (self.session, self.worker.faults)
        self.worker.faults = cfg.faults  # fault buttons work before the worker picks the run up
        session = SessionRecord()
        session.prompt_text = prompt
        session.source_name = src
        self.set_session(session)  # a run from the prompt leaves the conversation once it starts
        loading = "loading the model, then " if self.worker.runtime is None else ""
        what = "stepping" if paused or first_action else "running"
        self._run_status = (f"turn {turn['conversation']['turn']} · " if turn else "") + \
            f"source <b>{src}</b> · up to {count_noun(self.panel.max_tokens.value(), 'token')}"
        self.set_banner(f"{(loading + what).capitalize()}: {self._run_status} …", BANNER_NEUTRAL)
        self.set_state(W.RUNNING if self.worker.runtime is not None else W.LOADING)
        self.requestRun.emit(cfg)
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
        if self.state != W.IDLE:
            return False
        try:
            model = str(self.panel.model_path() or self.bundled_path())
        except Exception as exc:
            self.show_error("No model", str(exc))
            return False
        offload = self.offload_or_none()
        if offload is None or not self.context_allowed(speculative=False):
            return False
        self._hint_on_load = True
        self.panel.model_status.setText(f"loading {Path(model).name} …")
        if self.session.origin == "live" and not self.session.tokens:
            self.set_banner(f"Loading the model <b>{html.escape(Path(model).name)}</b> …", BANNER_NEUTRAL)
        self.load_progress.setValue(0)
        self.load_progress.show()
        self.set_state(W.LOADING, Path(model).name)
        self.requestLoad.emit(model, self.panel.n_ctx.value(), self.panel.target_weights(), offload,
                              self.panel.llama_context.values())
        return True

    def context_allowed(self, speculative: bool) -> bool:
        """The panel's llama.cpp context settings can be loaded (``ContextControls.problem``); else False
        after saying why in one line (nothing is loaded)."""
        problem = self.panel.llama_context.problem(speculative)
        if problem:
            self.show_error("llama.cpp context", problem)
        return not problem

    def offload_or_none(self):
        """The panel's offload settings (``Offload``), or None after saying what is wrong with them."""
        try:
            return self.panel.offload()
        except ValueError as exc:
            self.show_error("RPC servers", str(exc))
            return None

    @staticmethod
    def bundled_path() -> Path:
        from inspector.llama import bundled_model_path

        return bundled_model_path()

    def new_live_session(self) -> None:
        """Leave a viewed receipts file: empty live session, run controls enabled."""
        if self.state != W.IDLE:
            return
        self.turns.forget()
        self.set_session(SessionRecord())
        self.set_banner("Live session: pick an example prompt and press <b>Run</b> (Ctrl+R).", BANNER_HINT)
        self.setWindowTitle("spec-inspector — speculative decoding on llama.cpp")
        self.set_state(W.IDLE)

    def run_clicked(self) -> None:
        if self.state == W.IDLE and self.session.origin != "live":
            return
        if self.state == W.IDLE:
            self.start_run()
        elif self.state in (W.PAUSED, W.TOKEN_HOLD):
            self.worker.request_continue()
            self.set_state(W.RUNNING)
        elif self.state == W.ERROR:
            self.resume_clicked()

    def pause_clicked(self) -> None:
        if self.state in (W.RUNNING, W.TOKEN_HOLD):
            self.worker.request_pause()

    def step_window_clicked(self) -> None:
        if self.state == W.IDLE and self.session.origin == "live":
            self.start_run(paused=True, first_action="window")
        elif self.state in (W.PAUSED, W.TOKEN_HOLD):
            self.worker.request_step_window()
            self.set_state(W.RUNNING, "one window")

    def step_token_clicked(self) -> None:
        if self.state == W.IDLE and self.session.origin == "live":
            self.start_run(paused=True, first_action="token")
        elif self.state in (W.PAUSED, W.TOKEN_HOLD):
            self.worker.request_step_token()
            self.set_state(W.RUNNING, "one token")

    def stop_clicked(self) -> None:
        if self.state in (W.RUNNING, W.PAUSED, W.TOKEN_HOLD, W.ERROR):
            self.worker.request_stop()

    def resume_clicked(self) -> None:
        if self.state == W.ERROR:
            self.set_banner("Resuming after the error …", BANNER_NEUTRAL)
            self.worker.request_resume()
            self.set_state(W.RUNNING, "resuming")

    def inject(self, fault: Fault) -> None:
        """Add ``fault`` to the running generation's fault plan (thread safe); with no run going, arm it
        for the next run (it fires at the first opportunity there)."""
        if self.state in (W.RUNNING, W.PAUSED, W.TOKEN_HOLD):
            self.worker.faults.add(fault)
        else:
            self.armed_faults.add(fault)
        self.redraw()
