"""Stepping through a run on the engine thread: Pause (between decode steps), Step window,
Step token (the commit loop holds before each token), Stop and Resume.

``SteppingControl`` is a mixin of ``EngineWorker``. The GUI thread calls the thread-safe
``request_*`` methods; the engine thread waits in ``_wait_to_go`` (between decode steps)
and ``_before_commit`` (before each committed token, the engine's
``GenerationObserver.before_commit``), on one condition variable ``_cv``.
"""

from __future__ import annotations

RUNNING = "running"
PAUSED = "paused"
TOKEN_HOLD = "token_hold"


class SteppingControl:
    """Pause / step / stop requests and the waits they cause (see the module docstring).

    Uses the worker's ``_cv``, ``_paused``, ``_window_budget``, ``_token_mode``,
    ``_token_permits``, ``_holding``, ``_stop``, ``_resume``, ``_break_on``, ``generation``,
    ``stateChanged`` and ``aboutToCommit``."""

    # -- control (GUI thread) -------------------------------------------------------
    def request_pause(self) -> None:
        """Pause at the next window boundary."""
        with self._cv:
            self._paused = True
            self._cv.notify_all()

    def _set_mode(self, *, window_budget: int, token_mode: bool, add_permit: bool) -> None:
        """Leave pause and run under the given stepping mode (GUI thread)."""
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
        """After an error: ``generation.resume()`` then continue (runs on the worker thread)."""
        with self._cv:
            self._resume = True
            self._paused = False
            self._token_mode = False
            self._token_permits = 0
            self._cv.notify_all()

    def request_stop(self, closing: bool = False) -> None:
        """End the run: cancel the step in flight; the run finishes as ``stopped``.

        ``closing``: also refuse runs that were requested but not started yet.
        """
        with self._cv:
            self._stop = True
            self._closing = self._closing or closing
            self._baseline_cancel.set()  # a comparison with plain decoding in flight stops too
            g = self.generation
            if g is not None and self._running:
                g.cancel()
            self._cv.notify_all()

    def set_break_on(self, kinds) -> None:
        with self._cv:
            self._break_on = frozenset(kinds)

    def _before_commit(self, window, row, token, position) -> None:
        with self._cv:
            if not self._token_mode or self._stop:
                return
            if self._token_permits > 0:
                self._token_permits -= 1
                return
        self._send_texts((token,))
        with self._cv:
            self._holding = True
        self.aboutToCommit.emit(self._hold_info(window, row, token, position))
        self.stateChanged.emit(TOKEN_HOLD, f"window {window or '(plain step)'} row {row}")
        with self._cv:
            while self._token_mode and self._token_permits == 0 and not self._stop:
                self._cv.wait()
            if self._token_permits > 0:
                self._token_permits -= 1
            self._holding = False
        self.stateChanged.emit(RUNNING, "")

    def _hold_info(self, window, row, token, position) -> dict:
        """What Step token holds before: the token, its row, and for a window the proposal and the
        verification so far (``Generation.window_in_flight``), so the window shows it before its receipt.

        ``position``: the committed token's stream position (base + row + 1); ``row_position``: the
        row's KV position (base + row), the convention the views show."""
        info = {"window": window, "row": row, "token": token, "position": position, "row_position": position - 1}
        g = self.generation
        flight = g.window_in_flight if g is not None else None
        if window is not None and flight is not None and flight[0] == window:
            _w, proposal, trace = flight
            info.update(proposal=tuple(proposal.token_ids), predictions=tuple(trace.predictions),
                        base_position=position - row - 1,
                        position_after_verification=trace.position_after_verification,
                        committed=tuple(trace.committed), decision_id=bytes(proposal.decision_id))
            self._send_texts(proposal.token_ids)
            self._send_texts(trace.predictions)
        return info

    def _wait_to_go(self) -> str:
        """Block while paused. Returns ``stop``, ``resume`` or ``go``."""
        announced = False
        with self._cv:
            while self._paused and not self._stop and not self._resume:
                if not announced:
                    announced = True
                    self._cv.release()
                    try:
                        self.stateChanged.emit(PAUSED, "")
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
