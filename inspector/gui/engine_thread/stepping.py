"""What Step token shows while the worker holds before a commit (an object the ``EngineWorker``
owns; the stepping state machine itself is the Qt-free ``inspector.session.step_control.StepControl``,
the worker's ``step``, which calls ``TokenHold.on_hold`` when it holds).

The hold sends the texts of the tokens it shows first (so the window can name them), then a dict
describing the hold: the token, its row, and for a window the proposal and the verification so
far (``Generation.window_in_flight``), so the window shows the window before its receipt.
"""

from __future__ import annotations

from typing import Callable


class TokenHold:
    """Reports a Step token hold on the worker thread.

    ``send_texts(ids)``: push the texts of token ids the window has not been sent yet;
    ``show(info)``: hand the hold's dict to the window (the worker's ``aboutToCommit.emit``);
    ``generation()``: the worker's current ``Generation`` or None."""

    def __init__(self, send_texts: Callable[[tuple], None], show: Callable[[dict], None],
                 generation: Callable[[], object]) -> None:
        self._send_texts = send_texts
        self._show = show
        self._generation = generation

    def on_hold(self, window, row, token, position) -> None:
        """Step token holds before ``token``: send its text, then what the hold shows."""
        self._send_texts((token,))
        self._show(self.info(window, row, token, position))

    def info(self, window, row, token, position) -> dict:
        """What Step token holds before: the token, its row, and for a window the proposal and the
        verification so far (``Generation.window_in_flight``), so the window shows it before its receipt;
        the texts of the proposal and predictions are sent first.

        ``position``: the committed token's stream position (base + row + 1); ``row_position``: the
        row's KV position (base + row), the convention the views show."""
        info = {"window": window, "row": row, "token": token, "position": position, "row_position": position - 1}
        g = self._generation()
        flight = g.window_in_flight if g is not None else None
        if window is not None and flight is not None and flight[0] == window:
            _w, proposal, trace = flight
            info.update(proposal=tuple(trace.as_recorded(proposal).token_ids),  # a tree: its kept branch
                        predictions=tuple(trace.predictions),
                        base_position=position - row - 1,
                        position_after_verification=trace.position_after_verification,
                        committed=tuple(trace.committed), decision_id=bytes(proposal.decision_id),
                        tree=trace.tree)
            self._send_texts(proposal.token_ids)
            self._send_texts(trace.predictions)
            if trace.tree is not None:
                self._send_texts(trace.tree.row_predictions)
        return info
