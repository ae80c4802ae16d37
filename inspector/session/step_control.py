"""Stepping through a run, without Qt: Pause (between decode steps), Step window (one decode
step), Step token (hold before each committed token), Stop, Resume after an error, and
break-on (``first_mismatch``, ``stopped``, ``discard``, ``error``).

``StepControl`` owns one condition variable and every stepping flag. Any thread calls the
``request_*`` methods and ``set_break_on``. The engine thread calls ``begin_run`` before a
run, then ``wait_to_go`` between decode steps, ``before_commit`` before each committed token
(the engine's ``GenerationObserver.before_commit``; it blocks in token mode), ``after_step``
after a step and ``after_error`` after a failed one; ``run`` does all of that for one started
``Generation``. State changes reach the owner through the callbacks given at construction,
always called on the engine thread without the lock held: ``announce(state, detail)`` (states
``RUNNING``, ``PAUSED``, ``TOKEN_HOLD``) and ``hold(window, row, token, position)`` (the token
about to be committed; ``window`` is None for a plain step).
"""

from __future__ import annotations

import threading
from typing import Callable, Sequence

from inspector.engine.errors import RuntimeLost
from inspector.session.run_states import PAUSED, RUNNING, TOKEN_HOLD

BREAK_KINDS = ("first_mismatch", "stopped", "discard", "error")
MAX_AUTO_RESUMES = 50
"""Errors resumed automatically in one run (``error`` not in break-on) before the run pauses anyway."""


def _ignore(*_args) -> None:
    return None


class StepControl:
    """Pause / step / stop requests and the waits they cause (see the module docstring)."""

    def __init__(self, announce: Callable[[str, str], None] | None = None,
                 hold: Callable[[int | None, int, int, int], None] | None = None) -> None:
        self._announce = announce or _ignore
        self._hold = hold or _ignore
        self._cv = threading.Condition()
        self._paused = False
        self._window_budget = 0
        """Decode steps left before pausing (Step window), 0 = no limit."""
        self._token_mode = False
        self._token_permits = 0
        self._holding = False
        """The commit loop waits in ``before_commit`` (Step token) for a permit."""
        self._stop = False
        self._resume = False
        self._break_on: frozenset = frozenset({"error"})
        self._auto_resumes = 0

    # -- what the owner may read (any thread) ------------------------------------------
    @property
    def stopping(self) -> bool:
        """Stop was requested for the current run."""
        return self._stop

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def holding(self) -> bool:
        return self._holding

    @property
    def break_on(self) -> frozenset:
        return self._break_on

    # -- requests (any thread) ---------------------------------------------------------
    def begin_run(self, *, start_paused: bool = False, first_action: str = "",
                  break_on=frozenset({"error"})) -> None:
        """Reset for a new run. ``start_paused``: wait before the first decode step;
        ``first_action`` ``window`` runs one decode step first, ``token`` holds before the first
        token. A Stop requested after this call is kept (the run ends ``stopped`` at once)."""
        with self._cv:
            self._stop = False
            self._resume = False
            self._paused = start_paused
            self._window_budget = 0
            self._token_mode = False
            self._token_permits = 0
            self._auto_resumes = 0
            self._break_on = frozenset(break_on)
            if first_action == "window":
                self._paused, self._window_budget = False, 1
            elif first_action == "token":  # hold before the first token
                self._paused, self._token_mode, self._token_permits = False, True, 0

    def request_pause(self) -> None:
        """Pause at the next decode-step boundary."""
        with self._cv:
            self._paused = True
            self._cv.notify_all()

    def _set_mode(self, *, window_budget: int, token_mode: bool, add_permit: bool) -> None:
        """Leave pause and run under the given stepping mode."""
        with self._cv:
            self._paused = False
            self._window_budget = window_budget
            self._token_mode = token_mode
            self._token_permits = self._token_permits + 1 if add_permit else 0
            self._cv.notify_all()

    def request_continue(self) -> None:
        """Leave pause / token-step mode and run on."""
        self._set_mode(window_budget=0, token_mode=False, add_permit=False)

    def request_step_window(self) -> None:
        """Run exactly one decode step (a window or a plain step), then pause."""
        self._set_mode(window_budget=1, token_mode=False, add_permit=False)

    def request_step_token(self) -> None:
        """Step token. Holding before a commit: commit the held token, then hold before the next
        one. Running or paused: hold before the next token (it is shown, not yet committed)."""
        with self._cv:
            holding = self._holding
        self._set_mode(window_budget=0, token_mode=True, add_permit=holding)

    def request_resume(self) -> None:
        """After an error: the engine thread resumes the generation, then runs on."""
        with self._cv:
            self._resume = True
            self._paused = False
            self._token_mode = False
            self._token_permits = 0
            self._cv.notify_all()

    def request_stop(self, then: Callable[[], None] | None = None) -> None:
        """End the run: every wait returns and the run finishes as ``stopped``.

        ``then`` runs under the lock once the stop is set (the owner cancels the step in flight
        there, so a step failing from that cancel always finds ``stopping`` set)."""
        with self._cv:
            self._stop = True
            if then is not None:
                then()
            self._cv.notify_all()

    def set_break_on(self, kinds) -> None:
        """Pause after a step whose receipt has one of these dispositions (``discard``: a step
        that discarded a proposal; ``error``: a failed step)."""
        with self._cv:
            self._break_on = frozenset(kinds)

    # -- the engine thread ---------------------------------------------------------------
    def wait_to_go(self) -> str:
        """Block while paused (announcing ``PAUSED`` once). Returns ``stop``, ``resume`` or ``go``."""
        announced = False
        with self._cv:
            while self._paused and not self._stop and not self._resume:
                if not announced:
                    announced = True
                    self._cv.release()
                    try:
                        self._announce(PAUSED, "")
                    finally:
                        self._cv.acquire()
                    continue
                self._cv.wait()
            if self._stop:
                return "stop"
            if self._resume:
                self._resume = False
                return "resume"
            return "go"

    def before_commit(self, window: int | None, row: int, token: int, position: int) -> None:
        """In token mode, hold before committing ``token`` until a Step token, Continue or Stop
        (a permit from an earlier Step token is used up instead of holding)."""
        with self._cv:
            if not self._token_mode or self._stop:
                return
            if self._token_permits > 0:
                self._token_permits -= 1
                return
            self._holding = True  # before the owner hears of the hold: a Step token then commits it
        self._hold(window, row, token, position)
        self._announce(TOKEN_HOLD, f"window {window or '(plain step)'} row {row}")
        with self._cv:
            while self._token_mode and self._token_permits == 0 and not self._stop:
                self._cv.wait()
            if self._token_permits > 0:
                self._token_permits -= 1
            self._holding = False
        self._announce(RUNNING, "")

    def after_step(self, new_receipts: Sequence = (), new_discards: Sequence = ()) -> bool:
        """A decode step ended (the generation did not finish) with these new receipts and
        discards: count it against Step window's budget and apply break-on. Returns whether the
        run pauses before the next step."""
        with self._cv:
            brk = self._break_on
            hit = any(r.disposition in brk for r in new_receipts)
            hit = hit or ("discard" in brk and len(new_discards) > 0)
            if self._window_budget > 0:
                self._window_budget -= 1
                if self._window_budget == 0:
                    self._paused = True
            if hit and not self._token_mode:
                self._paused = True
            return self._paused

    def after_error(self) -> bool:
        """A decode step failed: pause (leaving token mode and Step window) when ``error`` is in
        break-on or after ``MAX_AUTO_RESUMES`` automatic resumes in this run, else count one
        automatic resume. Call it before telling anyone of the error: a Resume pressed as soon
        as the error shows must find the pause already set (it clears it). Returns whether the
        run pauses."""
        with self._cv:
            if "error" in self._break_on or self._auto_resumes >= MAX_AUTO_RESUMES:
                self._paused = True
                self._token_mode = False
                self._window_budget = 0
                return True
            self._auto_resumes += 1
            return False

    def after_failed_resume(self) -> None:
        """Resuming after an error failed: pause (before anyone hears of it, as ``after_error``)."""
        with self._cv:
            self._paused = True

    def run(self, gen, *, progress: Callable[[], None] = _ignore,
            error: Callable[[str], None] = _ignore) -> str:
        """Step the started generation ``gen`` until it finishes or is stopped, waiting as
        requested. Returns its finish reason, or ``stopped``.

        ``progress()`` is called after every decode step, failed or not; ``error(message)``
        after a failed step or resume (the pause is already decided). After an error the next
        go resumes the generation first (``Generation.resume``)."""
        progress()
        self._announce(RUNNING, "")
        in_error = False
        while True:
            what = self.wait_to_go()
            if what == "stop":
                return "stopped"
            if what == "resume" or (in_error and what == "go"):
                try:
                    gen.resume()
                except Exception as exc:
                    self.after_failed_resume()
                    error(f"resume failed: {exc}")
                    continue
                in_error = False
                self._announce(RUNNING, "resumed")
            if gen.finished:
                return gen.finish_reason or "finished"
            n_receipts, n_discards = len(gen.receipts), len(gen.discards)
            try:
                gen.step()
            except Exception as exc:
                if self._stop:
                    return "stopped"
                if isinstance(exc, RuntimeLost):  # nothing to resume on: the run ends, its receipts stay
                    progress()
                    error(exc.at(gen.failure_place()), ended=True)
                    return "error"
                in_error = True
                self.after_error()
                progress()
                error(str(exc) or type(exc).__name__)
                continue
            progress()
            if gen.finished:
                return gen.finish_reason or "finished"
            self.after_step(gen.receipts[n_receipts:], gen.discards[n_discards:])
