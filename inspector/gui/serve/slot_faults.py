"""Faults armed on a served slot from the panel's fault buttons (``Inject cancel`` / ``Fail callback`` while
serving): which slot each fires on, and the panel's line saying where each waits or fired."""

from __future__ import annotations

import time
from collections.abc import Callable


class SlotFaults:
    """The faults armed on the slots of the running server (``server()``: the ``InspectorServer`` or None),
    on the slot the panel's ``slot_box`` (a spin box) names; ``log``: the Requests tab's ``RequestLog`` (which
    request a fault fired in). ``RunControl`` asks it while serving (its ``served_faults``)."""

    def __init__(self, server: Callable[[], object], slot_box, log) -> None:
        self.server = server
        self.slot_box = slot_box
        self.log = log
        self.armed: list = []
        """(slot id, Fault, that slot's FaultPlan, time armed) on this server, oldest first."""
        self.fired_in: int | None = None
        """The request the last armed fault fired in, once known."""

    def clear(self) -> None:
        """Forget every armed fault (a new server starts)."""
        self.armed = []
        self.fired_in = None

    def arm(self, fault) -> None:
        """Arm ``fault`` (``inspector.engine.faults.Fault``) on the slot chosen in the slot box (``ServeSlots.arm``:
        it fires in that slot's next request). Nothing while no server runs."""
        server = self.server()
        if server is None:
            return
        slots = server.slots
        slot = min(max(0, self.slot_box.value()), slots.n_parallel - 1)
        slots.arm(slot, fault)
        self.armed.append((slot, fault, slots.slots[slot].faults, time.time()))
        self.fired_in = None

    def pending_faults_text(self) -> str:
        """The panel's fault line while serving: each fault armed on a slot and not fired yet ("armed on slot 1,
        fires in its next request: …"), else the last one that fired and the request it fired in (the slot's first
        one started after it was armed: "fired on slot 1 in request 4: …"); "" when none."""
        pending = [(slot, f) for slot, f, plan, _t in self.armed if any(p is f for p in plan.pending())]
        if pending:
            return "; ".join(f"armed on slot {slot} (its next request): {f.describe()}" for slot, f in pending)
        if not self.armed:
            return ""
        slot, f, _plan, armed_at = self.armed[-1]
        if self.fired_in is None:  # looked up once: the rows are many on a long-running server
            self.fired_in = next((r.id for r in self.log.rows if r.slot == slot and r.started is not None
                                  and r.started >= armed_at), None)
        return f"fired on slot {slot}{f' in request {self.fired_in}' if self.fired_in else ''}: {f.describe()}"
