"""Issue 53 items 4-5 in the window: while it serves, the fault buttons arm a fault on the slot chosen beside them
(``ServeSlots.arm``: it fires in that slot's next request only), and the Lock timing plots draw each slot's
session apart. Real model, the ``openai`` SDK; nothing here names the model's words."""

from __future__ import annotations


from PySide6.QtCore import QSettings, Qt

from inspector.gui.plots.lock_plots import LockPlots, ZERO_ROW
from inspector.serve.slots import LOCKED

from PySide6.QtWidgets import QTabWidget
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.serve.requests_view import RequestsView
from serve_helpers import ask_at_once
from test_gui_support import make_window, part

MAX = 16
PROMPTS = ("Name three colors.", "Count from one to ten.", "Write a short sentence about the sea.")


def serving(qtbot, runtime, tmp_path, slots: int, schedule: str = "batched"):
    """A window serving on a free port with ``slots`` slots in ``schedule`` (through the remembered settings)."""
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    for key, value in (("serve/port", 0), ("serve/slots", slots), ("serve/schedule", schedule)):
        settings.setValue(key, value)
    settings.sync()
    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    model = w.model
    panel = part(w, ControlPanel)
    requests_view = part(w, RequestsView)
    model.serve_receipts_dir = None
    assert not panel.fault_slot.isVisible()  # not serving: no slot box
    model.commands.serve(True)
    qtbot.waitUntil(lambda: model.serve_address != "" or not model.serving, timeout=30_000)
    assert model.serve_address, requests_view.status.text()
    return w


def stop_serving(qtbot, w) -> None:
    model = w.model
    panel = part(w, ControlPanel)
    model.commands.serve(False)
    qtbot.waitUntil(lambda: model.state == "idle", timeout=30_000)
    assert not panel.fault_slot.isVisible()


def test_a_fault_armed_on_slot_1_from_the_panel_fails_only_that_slots_request(qtbot, runtime, tmp_path):
    w = serving(qtbot, runtime, tmp_path, 3)
    model = w.model
    panel = part(w, ControlPanel)
    p = panel
    assert p.fault_callback.isEnabled() and p.fault_slot.isEnabled() and p.fault_slot.isVisible()
    assert (p.fault_slot.minimum(), p.fault_slot.maximum()) == (0, 2)  # llama-server's slot ids, as /slots lists
    p.fault_slot.setValue(1)
    p.fault_token.setValue(1)
    qtbot.mouseClick(p.fault_callback, Qt.MouseButton.LeftButton)
    assert [f.kind for f in model.server.slots.slots[1].faults.pending()] == ["callback_error"]
    assert not any(s.faults.pending() for i, s in enumerate(model.server.slots.slots) if i != 1)
    assert not w.run.armed_faults.pending()  # not the window's next run's
    qtbot.waitUntil(lambda: "armed on slot 1" in p.pending_faults.text(), timeout=2_000)

    out, threads = ask_at_once(model.serve_address, PROMPTS)
    qtbot.waitUntil(lambda: not any(t.is_alive() for t in threads), timeout=60_000)
    qtbot.waitUntil(lambda: all(r.state == "done" for r in model.server.slots.snapshot_rows()), timeout=10_000)
    rows = model.server.slots.snapshot_rows()
    assert len(rows) == 3 and sorted(r.slot for r in rows) == [0, 1, 2], [(r.id, r.slot) for r in rows]
    failed = [r for r in rows if r.slot == 1]
    assert failed[0].ended_as == "error" and "injected" in failed[0].error, (failed[0].ended_as, failed[0].error)
    others = [r for r in rows if r.slot != 1]
    assert all(r.ended_as != "error" and "injected" not in (r.error or "") for r in others), \
        [(r.slot, r.ended_as, r.error) for r in others]
    assert not model.server.slots.slots[1].faults.pending()  # fired once
    qtbot.waitUntil(lambda: f"fired on slot 1 in request {failed[0].id}" in p.pending_faults.text(), timeout=2_000)
    stop_serving(qtbot, w)


def test_one_slot_arms_on_slot_0_with_the_slot_box_fixed(qtbot, runtime, tmp_path):
    w = serving(qtbot, runtime, tmp_path, 1)
    model = w.model
    panel = part(w, ControlPanel)
    p = panel
    assert p.fault_cancel.isEnabled() and p.fault_slot.isVisible() and not p.fault_slot.isEnabled()
    assert p.fault_slot.maximum() == 0
    qtbot.mouseClick(p.fault_cancel, Qt.MouseButton.LeftButton)
    assert [f.kind for f in model.server.slots.slots[0].faults.pending()] == ["cancel"]
    out, threads = ask_at_once(model.serve_address, PROMPTS[:1])
    qtbot.waitUntil(lambda: not any(t.is_alive() for t in threads), timeout=30_000)
    qtbot.waitUntil(lambda: [r.state for r in model.server.slots.snapshot_rows()] == ["done"], timeout=10_000)
    row = model.server.slots.snapshot_rows()[0]
    assert row.ended_as == "cancelled" and "injected" in row.error, (row.ended_as, row.error)
    stop_serving(qtbot, w)
    assert p.fault_cancel.isEnabled()  # idle again: the button arms the window's next run
    qtbot.mouseClick(p.fault_cancel, Qt.MouseButton.LeftButton)
    assert [f.kind for f in w.run.armed_faults.pending()] == ["cancel"]


def test_the_lock_plots_draw_each_slot_apart_in_the_locked_schedule(qtbot, runtime, tmp_path):
    w = serving(qtbot, runtime, tmp_path, 2, schedule=LOCKED)
    model = w.model
    lock_plots = part(w, LockPlots)
    tabs = part(w, QTabWidget, "views")
    assert model.server.slots.schedule == LOCKED
    tabs.setCurrentWidget(lock_plots)
    out, threads = ask_at_once(model.serve_address, PROMPTS[:2], max_tokens=32)
    qtbot.waitUntil(lambda: not any(t.is_alive() for t in threads), timeout=60_000)
    errors = [r for r in out if isinstance(r, Exception)]
    assert not errors and len(out) == 2, errors
    plots = lock_plots
    sessions = model.server.slots.session_slots()
    assert sorted(sessions.values()) == [0, 1]

    def drawn() -> list[int]:
        w.refresh_all()
        return [0 if item.xData is None else len(item.xData) for item in plots.slot_wait[:plots.n_slots]]

    qtbot.waitUntil(lambda: model.requests.shown is not None and min(drawn(), default=0) > 0, timeout=10_000)
    assert plots.n_slots == 2 and len(drawn()) == 2 and all(n > 0 for n in drawn())
    # The kinds' series are empty: every point is a slot's, or (grey) no slot's session's, as the rollback probe;
    # the legend names both slots and the shown one.
    counts = plots.series_counts()
    assert not any(n for k, n in counts.items() if not k.startswith("slot") and k != "background"), counts
    other = [op for op in model.session.lock_ops if op.session_id not in sessions]
    assert counts["background"] == len(other)
    assert "slot 0" in plots.legend.text() and "slot 1" in plots.legend.text()
    assert "(this request)" in plots.legend.text()
    # Each slot's points are its own session's decodes: as many as the shown record holds for that session.
    record = model.session
    for k in range(2):
        own = [op for op in record.lock_ops
               if sessions.get(op.session_id) == k and op.kind in ("verify", "trim", "retire", "prefill", "step")]
        assert len(plots.slot_wait[k].xData) == len(own) > 0
        assert (plots.slot_wait[k].yData >= ZERO_ROW).all()
    assert any((plots.slot_wait[k].yData > ZERO_ROW).any() for k in range(2)), "no slot ever waited for the lock"
    items = (list(plots.slot_wait), list(plots.slot_hist_hold))
    w.serve.show_request(model.requests.shown)  # shown again: the items are the same ones (made once)
    assert (list(plots.slot_wait), list(plots.slot_hist_hold)) == items and len(plots.slot_wait) == 2
    stop_serving(qtbot, w)
    w.new_live_session()  # a run's session again: colours by kind (from the next redraw tick)
    qtbot.waitUntil(lambda: plots.n_slots == 0, timeout=2_000)
    w.refresh_all()
    assert "verify" in plots.legend.text() and "slot 0" not in plots.legend.text()
    assert all(item.xData is None or len(item.xData) == 0 for item in plots.slot_wait)
