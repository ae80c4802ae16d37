"""The worker's side of stepping through a run (the state machine itself is the Qt-free
``inspector.session.step_control.StepControl``, the worker's ``step``).

``SteppingControl`` is a mixin of ``EngineWorker``: the thread-safe ``request_*`` methods the
GUI thread calls (they delegate to ``step``; Stop also cancels the step in flight and a
comparison with plain decoding), ``_before_commit`` (the observer's hook) and what Step token
shows (``_on_hold``: ``aboutToCommit`` with ``_hold_info``).
"""

from __future__ import annotations

from inspector.session.step_control import PAUSED, RUNNING, TOKEN_HOLD  # noqa: F401 (worker states)


class SteppingControl:
    """Stepping requests of ``EngineWorker`` (a mixin: see the module docstring).

    Uses the worker's ``step``, ``generation``, ``_running``, ``_closing``,
    ``_baseline_cancel``, ``_send_texts`` and ``aboutToCommit``."""

    # -- control (GUI thread) -------------------------------------------------------
    def request_pause(self) -> None:
        """Pause at the next window boundary."""
        self.step.request_pause()

    def request_continue(self) -> None:
        """Leave pause / token-step mode and run on."""
        self.step.request_continue()

    def request_step_window(self) -> None:
        """Run exactly one decode step (a window or a plain step), then pause."""
        self.step.request_step_window()

    def request_step_token(self) -> None:
        """Step token: commit the held token and hold before the next one (or hold before the next)."""
        self.step.request_step_token()

    def request_resume(self) -> None:
        """After an error: ``generation.resume()`` then continue (runs on the worker thread)."""
        self.step.request_resume()

    def request_stop(self, closing: bool = False) -> None:
        """End the run: cancel the step in flight; the run finishes as ``stopped``.

        ``closing``: also refuse runs that were requested but not started yet.
        """
        def cancel() -> None:  # under the stepping lock, once the stop is set
            self._closing = self._closing or closing
            self._baseline_cancel.set()  # a comparison with plain decoding in flight stops too
            g = self.generation
            if g is not None and self._running:
                g.cancel()

        self.step.request_stop(then=cancel)

    def set_break_on(self, kinds) -> None:
        self.step.set_break_on(kinds)

    # -- the engine thread -------------------------------------------------------------
    def _before_commit(self, window, row, token, position) -> None:
        self.step.before_commit(window, row, token, position)

    def _on_hold(self, window, row, token, position) -> None:
        """Step token holds before ``token``: send its text, then what the hold shows."""
        self._send_texts((token,))
        self.aboutToCommit.emit(self._hold_info(window, row, token, position))

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
