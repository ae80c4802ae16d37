"""What each window gained or lost in time against plain decoding of the same tokens (issue 28 part 2).

A window commits ``canonical_prediction_count`` tokens; plain decoding would have spent ``c(1)`` per
token on them (one one-row decode each). So the window's profit is
``committed × c(1) − (proposal + verification + repair)`` microseconds: positive when speculation
saved time there, negative when the proposal and the extra rows cost more than they bought.
``c(1)`` is measured in the same run where it can be: the median time the run's plain steps held
the runtime (``plain_step_us``); else the caller's (the cost model's).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Iterable, Sequence

STEP_OPERATION = "step"
"""The lock operation kind of a plain step (``inspector.engine.generation``)."""


def plain_step_us(lock_operations: Iterable, session_id: int | None = None) -> float | None:
    """The median hold time (microseconds) of the plain steps among ``lock_operations``
    (``LockOperation``: ``kind``, ``session_id``, ``hold_us``), of session ``session_id`` when given;
    None when there is none."""
    holds = [op.hold_us for op in lock_operations
             if op.kind == STEP_OPERATION and (session_id is None or op.session_id == session_id)]
    return float(median(holds)) if holds else None


class OwnC1:
    """The run's own ``c(1)`` (``plain_step_us`` of its main session), computed again only when lock
    operations arrived: a view redrawing on a timer would otherwise sort every one of them each tick.
    One per view; ``of`` returns microseconds or None (no plain step yet)."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._us: float | None = None

    def of(self, record_id: int, lock_operations: Sequence, session_id: int | None) -> float | None:
        """``plain_step_us(lock_operations, session_id)``, cached by (``record_id``, how many operations)."""
        key = (record_id, len(lock_operations), session_id)
        if key != self._key:
            self._key, self._us = key, plain_step_us(lock_operations, session_id)
        return self._us


def window_profit_us(receipt, c1_us: float) -> float:
    """``receipt``'s committed tokens × ``c1_us`` minus its proposal, verification and repair time
    (microseconds; ``WindowReceipt`` fields)."""
    spent = receipt.proposal_elapsed_us + receipt.verification_elapsed_us + receipt.repair_elapsed_us
    return receipt.canonical_prediction_count * c1_us - spent


@dataclass(frozen=True)
class Balance:
    """A run's windows against plain decoding: ``saved_us`` over the ``saved`` windows that gained,
    ``lost_us`` (positive) over the ``lost`` windows that cost more, ``lost_at_row_0`` of those rejected
    their first proposal token; ``c1_us`` the one-row decode time used and where it came from
    (``c1_from``: "plain steps of this run" or "the cost model")."""

    saved_us: float
    saved: int
    lost_us: float
    lost: int
    lost_at_row_0: int
    c1_us: float
    c1_from: str

    @property
    def net_us(self) -> float:
        return self.saved_us - self.lost_us

    def text(self) -> str:
        """One sentence, e.g. ``saved 312 ms in 9 windows, lost 95 ms in 7 (5 rejected at row 0); net
        +217 ms at c(1) 14.2 ms (plain steps of this run)``."""
        lost = f"lost {_ms(self.lost_us)} in {self.lost}" + (
            f" ({self.lost_at_row_0} rejected at row 0)" if self.lost_at_row_0 else "")
        return (f"saved {_ms(self.saved_us)} in {_windows(self.saved)}, {lost}; net {self.net_text()} at c(1) "
                f"{self.c1_us / 1000:.1f} ms ({self.c1_from})")

    def short_text(self) -> str:
        """The net first, for a narrow column: ``net +217 ms: saved 312 ms in 9, lost 95 ms in 7``."""
        return f"net {self.net_text()}: saved {_ms(self.saved_us)} in {self.saved}, lost {_ms(self.lost_us)} in {self.lost}"

    def net_text(self) -> str:
        net = self.net_us
        return f"{'+' if net >= 0 else '-'}{_ms(abs(net))}"


def _ms(us: float) -> str:
    """Microseconds in words: ``0.9 ms``, ``312 ms``, ``79.8 s``."""
    if us >= 10_000_000:
        return f"{us / 1e6:.1f} s"
    return f"{us / 1000:.0f} ms" if us >= 10_000 else f"{us / 1000:.1f} ms"


def _windows(n: int) -> str:
    return f"{n} window{'s' if n != 1 else ''}"


def cumulative_profit_us(receipts: Iterable, c1_us: float) -> tuple[list[int], list[float]]:
    """(decode steps, the running sum of ``window_profit_us`` after each window) over ``receipts`` in
    decode-step order (``WindowReceipt.decode_step``): the timeline's cumulative profit line, in
    microseconds. Empty lists when there is no receipt."""
    ordered = sorted(receipts, key=lambda r: r.decode_step)
    steps, total, out = [], 0.0, []
    for r in ordered:
        total += window_profit_us(r, c1_us)
        steps.append(r.decode_step)
        out.append(total)
    return steps, out


def balance(receipts: Sequence, c1_us: float, c1_from: str) -> Balance:
    """The ``Balance`` of ``receipts`` at ``c1_us`` microseconds per one-row decode. A window with profit
    0 counts as saved."""
    saved_us = lost_us = 0.0
    saved = lost = row0 = 0
    for r in receipts:
        p = window_profit_us(r, c1_us)
        if p >= 0:
            saved_us, saved = saved_us + p, saved + 1
        else:
            lost_us, lost = lost_us - p, lost + 1
            row0 += r.accepted_proposal_tokens == 0
    return Balance(saved_us, saved, lost_us, lost, row0, c1_us, c1_from)


def run_balance(receipts: Sequence, own_c1_us: float | None, cost_model_c1_us: float | None = None) -> Balance | None:
    """The run's ``Balance`` with ``c(1)`` from its own plain steps (``own_c1_us``: ``plain_step_us``),
    else ``cost_model_c1_us``; None when neither is known or there is no window."""
    if not receipts:
        return None
    c1 = own_c1_us
    if c1 is not None:
        return balance(receipts, c1, "plain steps of this run")
    if cost_model_c1_us is not None:
        return balance(receipts, cost_model_c1_us, "the cost model")
    return None
