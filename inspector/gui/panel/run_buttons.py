"""The control panel's fixed groups under the scrolling setup: the Run group (run, pause, step,
stop, resume, break-on boxes, the comparison with plain decoding) and the Faults and contention
group (fault buttons, background sessions). Widgets only: the window connects them.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QGridLayout, QGroupBox, QHBoxLayout, QLabel, QPushButton

from inspector.gui.engine_thread.contention import MAX_BACKGROUND
from inspector.gui.panel.widgets import spin

FAULT_DISABLED_TIP = ("Available in a live session: before a run (armed for it), while it runs or is paused, "
                      "and while the window serves (armed on a slot).")
SLOT_TIP = ("while the window serves: the slot (llama-server's id, as /slots lists them) a fault button arms; the "
            "fault fires in that slot's next request only, the other slots run untouched")
SERVING_TIP = "While the window serves: armed on the slot chosen beside \"slot\"; it fires in that slot's next request."
BREAK_KINDS = (("first_mismatch", "mismatch"), ("stopped", "stopped"), ("discard", "discard"), ("error", "error"))
"""(window outcome, box label) of the break-on boxes; ``error`` is checked by default."""


class RunButtons(QGroupBox):
    """The Run group: ``run``, ``pause``, ``stop``, ``step_window``, ``step_token``, ``resume``,
    ``break_boxes`` (window outcome -> its box) and ``baseline``."""

    def __init__(self, parent=None) -> None:
        super().__init__("Run", parent)
        grid = QGridLayout(self)
        self.run = QPushButton("▶ Run")
        self.pause = QPushButton("Pause")
        self.step_window = QPushButton("Step window")
        self.step_token = QPushButton("Step token")
        self.stop = QPushButton("■ Stop")
        self.resume = QPushButton("Resume")
        self.run.setToolTip("Run (Ctrl+R); continues a paused run")
        self.pause.setToolTip("Pause between windows (Space or Ctrl+P)")
        self.step_window.setToolTip("Run one decode step, then pause (F10)")
        self.step_token.setToolTip("Commit one token, then hold before the next (F11)")
        self.stop.setToolTip("End the run (Esc)")
        self.resume.setToolTip("After an error: resume from the canonical position and continue (Ctrl+Shift+R)")
        for i, b in enumerate((self.run, self.pause, self.stop, self.step_window, self.step_token, self.resume)):
            grid.addWidget(b, i // 3, i % 3)
        brk = QHBoxLayout()
        brk.addWidget(QLabel("break on"))
        self.break_boxes: dict[str, QCheckBox] = {}
        for kind, label in BREAK_KINDS:
            cb = QCheckBox(label)
            cb.setToolTip(f"pause after a window that ends with {kind}")
            cb.setChecked(kind == "error")
            self.break_boxes[kind] = cb
            brk.addWidget(cb)
        grid.addLayout(brk, 2, 0, 1, 3)
        self.baseline = QCheckBox("Compare with plain decoding")
        self.baseline.setToolTip("after the run (or Stop), decode the same prompt one token per step with the same "
                                 "sampling, mark the first token where the outputs differ and measure the speedup")
        grid.addWidget(self.baseline, 3, 0, 1, 3)
        grid.setContentsMargins(6, 4, 6, 4)
        grid.setVerticalSpacing(2)

    def break_on(self) -> frozenset:
        """The window outcomes checked in "break on" (``first_mismatch``, ``stopped``, ``discard``, ``error``)."""
        return frozenset(k for k, cb in self.break_boxes.items() if cb.isChecked())


class FaultButtons(QGroupBox):
    """The Faults and contention group: ``fault_cancel``, ``fault_callback`` with its token
    ``fault_token``, ``fault_trim``, ``fault_drift`` (all four in ``fault_buttons``), the
    ``background`` sessions spin box, the ``fault_slot`` box (while serving: the slot a fault is armed on)
    and the ``pending_faults`` line."""

    def __init__(self, parent=None) -> None:
        super().__init__("Faults (fire once) and contention", parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(6, 4, 6, 4)
        grid.setVerticalSpacing(2)
        self.fault_cancel = QPushButton("Cancel at next commit")
        self.fault_cancel.setToolTip("Fault('cancel'): the request is cancelled before the next commit token")
        self.fault_callback = QPushButton("Fail callback at token")
        self.fault_callback.setToolTip("Fault('callback_error', token=j): the token callback raises at commit token j of the next window that reaches it: the j-th token one window commits (a window that commits fewer tokens does not fire it; the run's end says when it never fired)")
        self.fault_token = spin(1, 64, 1, "j: 1-based commit token inside the window")
        self.fault_trim = QPushButton("Fail next repair")
        self.fault_trim.setToolTip("Fault('trim_failure'): the next trim fails; the session is retired")
        self.fault_drift = QPushButton("Shift session position")
        self.fault_drift.setToolTip("Fault('position_drift'): one extra token is decoded into the session before the next verification")
        grid.addWidget(self.fault_cancel, 0, 0, 1, 2)
        grid.addWidget(self.fault_trim, 0, 2)
        grid.addWidget(self.fault_callback, 1, 0)
        grid.addWidget(self.fault_token, 1, 1)
        grid.addWidget(self.fault_drift, 1, 2)
        self.fault_buttons = (self.fault_cancel, self.fault_callback, self.fault_trim, self.fault_drift)
        self._fault_tips = {b: b.toolTip() for b in self.fault_buttons}
        self._serving = False
        self.set_faults_enabled(False)
        row = QHBoxLayout()
        row.addWidget(QLabel("Background sessions"))
        self.background = spin(0, MAX_BACKGROUND, 0,
                               "other sessions generating through the same runtime lock (plain and n-gram)")
        row.addWidget(self.background)
        row.addStretch(1)
        # On the background row (shown while the window serves, on a row that is always there: serving moves
        # no button).
        self.slot_label = QLabel("arm on slot")
        self.fault_slot = spin(0, 0, 0, f"{SLOT_TIP} (off: the window does not serve)")
        self.slot_label.setToolTip(self.fault_slot.toolTip())
        row.addWidget(self.slot_label)
        row.addWidget(self.fault_slot)
        self.set_serving(0)
        grid.addLayout(row, 2, 0, 1, 3)
        # On a row of its own, wrapped: a long armed fault's text never squeezes the buttons above; two lines
        # high whether empty or not, so arming a fault moves nothing under the mouse (the whole text: tooltip).
        self.pending_faults = QLabel("")
        self.pending_faults.setStyleSheet("color:#c62828")
        self.pending_faults.setWordWrap(True)
        self.pending_faults.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.pending_faults.setFixedHeight(2 * self.pending_faults.fontMetrics().lineSpacing() + 2)
        grid.addWidget(self.pending_faults, 3, 0, 1, 3)

    def set_faults_enabled(self, on: bool) -> None:
        """Enable the fault buttons (a run is running or paused, or the window serves); disabled ones say when
        they work, enabled ones while serving say where they arm."""
        for b in self.fault_buttons:
            b.setEnabled(on)
            tip = self._fault_tips[b]
            b.setToolTip(f"{tip}\n{SERVING_TIP}" if on and self._serving else tip if on else
                         f"{tip}\n{FAULT_DISABLED_TIP}")

    def set_serving(self, n_slots: int) -> None:
        """The window serves with ``n_slots`` slots (0: it does not): the slot box offers 0..n_slots-1 (one slot:
        0, fixed), off when not serving."""
        self._serving = n_slots > 0
        box = self.fault_slot
        box.setRange(0, max(0, n_slots - 1))
        box.setEnabled(n_slots > 1)
        box.setVisible(n_slots > 0)
        self.slot_label.setVisible(n_slots > 0)
        tip = (f"{SLOT_TIP} (slots 0..{n_slots - 1})" if n_slots > 1 else
               f"{SLOT_TIP} (one slot: faults go to slot 0)" if n_slots == 1 else
               f"{SLOT_TIP} (off: the window does not serve)")
        box.setToolTip(tip)
        self.slot_label.setToolTip(tip)
        self.set_faults_enabled(self.fault_cancel.isEnabled())
