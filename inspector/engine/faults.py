"""The fault plan: injected failures the GUI buttons and ``--inject`` use.

A ``Fault`` names a kind and where it fires. ``window`` is the 1-based index
of the verified window it targets (None: the next one that reaches the hook,
plain steps included); ``token`` is the 1-based commit token inside that
window (commit faults only; None: the next commit token).
Each fault fires once and is then removed. The plan is thread safe: the GUI
thread adds faults while the worker consumes them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from time import perf_counter

from inspector.engine.proposal import Proposal

CANCEL = "cancel"
"""Cancel the request before commit token ``token`` of window ``window`` (SPEC step 6)."""
CALLBACK_ERROR = "callback_error"
"""The token callback raises at commit token ``token`` of window ``window``."""
TRIM_FAILURE = "trim_failure"
"""The next trim fails as ``llama_memory_seq_rm`` returning false: the session is retired."""
POSITION_DRIFT = "position_drift"
"""Before verifying window ``window`` one extra token is decoded into the session."""
LATE_PROPOSAL = "late_proposal"
"""The source answers after its deadline (discard ``deadline_exceeded``)."""
NEGATIVE_TOKEN_ID = "negative_token_id"
"""The source's next proposal holds token id -1 (discard ``invalid_token_id``)."""
TOKEN_ID_TOO_LARGE = "token_id_too_large"
"""The source's next proposal holds token id n_vocab (discard ``invalid_token_id``)."""
TOO_MANY_TOKENS = "too_many_tokens"
"""The source's next proposal holds cap + 1 tokens (discard ``invalid_token_count``)."""

COMMIT_FAULTS = (CANCEL, CALLBACK_ERROR)
"""Faults that fire at a commit token (``Fault.token`` counts a window's committed tokens from 1)."""
PROPOSAL_FAULTS = (LATE_PROPOSAL, NEGATIVE_TOKEN_ID, TOKEN_ID_TOO_LARGE, TOO_MANY_TOKENS)
FAULT_KINDS = (CANCEL, CALLBACK_ERROR, TRIM_FAILURE, POSITION_DRIFT) + PROPOSAL_FAULTS


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected failure; see the module docstring for ``window`` and ``token``."""

    kind: str
    window: int | None = None
    token: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {self.kind!r}: expected one of {', '.join(FAULT_KINDS)}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"fault window must be >= 1, observed {self.window}")
        if self.token is not None and self.token < 1:
            raise ValueError(f"fault token must be >= 1, observed {self.token}")

    def describe(self) -> str:
        """Where the fault fires, in words: ``callback_error at commit token 20 of a window (the 20th token
        one window commits)``; ``cancel at the next commit``."""
        where = f" of window {self.window}" if self.window else " of a window"
        if self.token is not None:
            return f"{self.kind} at commit token {self.token}{where} (the {ordinal(self.token)} token one window commits)"
        if self.kind in COMMIT_FAULTS:
            return f"{self.kind} at the next commit" + (f" of window {self.window}" if self.window else "")
        return self.kind + (f" at window {self.window}" if self.window else "")

    def why_unfired(self, windows: int, most_committed: int) -> str:
        """Why this fault never fired in a run that verified ``windows`` windows, the most tokens one of
        them committed being ``most_committed`` (tokens): one line for the end of the run."""
        if self.window is not None and self.window > windows:
            return f"{self.describe()} never fired: the run verified {windows} window(s), not {self.window}"
        if self.token is not None and self.token > most_committed:
            return (f"{self.describe()} never fired: no window committed {self.token} tokens (the most one "
                    f"committed: {most_committed})")
        if self.kind == TRIM_FAILURE:
            return f"{self.describe()} never fired: no window needed a repair after it was armed"
        if windows == 0:
            return f"{self.describe()} never fired: no proposal window ran (plain steps only)"
        return f"{self.describe()} never fired: the run ended before the window or token it waits for"

    @classmethod
    def parse(cls, spec: str) -> "Fault":
        """Parse ``KIND[@WINDOW[:TOKEN]]``, e.g. ``cancel@3:2`` or ``trim_failure``.

        Raises ``ValueError`` with the accepted forms on bad input.
        """
        kind, _, where = spec.strip().partition("@")
        window: int | None = None
        token: int | None = None
        try:
            if where:
                w, _, t = where.partition(":")
                window = int(w) if w else None
                token = int(t) if t else None
        except ValueError:
            raise ValueError(f"bad fault {spec!r}: expected KIND[@WINDOW[:TOKEN]] with whole numbers") from None
        return cls(kind.strip().replace("-", "_"), window, token)


class FaultPlan:
    """Pending faults, consumed by the engine at its hooks."""

    def __init__(self, faults: list[Fault] | None = None) -> None:
        self._lock = threading.Lock()
        self._pending: list[Fault] = list(faults or [])
        self.fired: list[tuple[Fault, int | None]] = []
        """(fault, window index) for every fault that fired, in order."""

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._pending.append(fault)

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()

    def pending(self) -> list[Fault]:
        with self._lock:
            return list(self._pending)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def take(self, kind: str, window: int | None, token: int | None = None) -> Fault | None:
        """Remove and return the first pending fault of ``kind`` that targets
        ``window`` (or any window) and ``token`` (or any token)."""
        if not self._pending:
            return None
        with self._lock:
            for i, f in enumerate(self._pending):
                if f.kind != kind:
                    continue
                if f.window is not None and f.window != window:
                    continue
                if token is not None and f.token is not None and f.token != token:
                    continue
                del self._pending[i]
                self.fired.append((f, window))
                return f
        return None


def inject_proposal_fault(plan: "FaultPlan", proposal: Proposal | None, window: int, cap: int, deadline: float,
                          current: int, n_vocab: int) -> Proposal | None:
    """The source's answer with a pending proposal fault of ``plan`` applied (one of
    ``PROPOSAL_FAULTS`` aimed at ``window`` or any window), else ``proposal`` unchanged.

    ``cap``: the request's most proposal tokens; ``deadline``: its ``perf_counter`` deadline (a late
    proposal sleeps past it); ``current``: the current token (a fault on no proposal proposes it);
    ``n_vocab``: vocabulary size (tokens)."""
    kind = next((f.kind for f in plan.pending() if f.kind in PROPOSAL_FAULTS and f.window in (None, window)), None)
    if kind is None or plan.take(kind, window) is None:
        return proposal
    base = proposal or Proposal(b"injected", (current,))
    ids = base.token_ids
    if kind == LATE_PROPOSAL:
        time.sleep(max(0.0, deadline - perf_counter()) + 0.002)
    elif kind == NEGATIVE_TOKEN_ID:
        ids = (-1,) + ids[1:]
    elif kind == TOKEN_ID_TOO_LARGE:
        ids = ids[:-1] + (n_vocab,)
    elif kind == TOO_MANY_TOKENS:
        ids = (ids[0],) * (cap + 1)
    return Proposal(base.decision_id, ids)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
