"""The Requests tab's concurrency lanes (issue 53): the window's Serve with several slots, each request a bar in its
slot's lane and each batched decode step a column of the slots whose rows it carried; and the geometry functions on
hand-made rows and steps. Nothing here names the model's words."""

from __future__ import annotations


import numpy as np
from PySide6.QtCore import QPointF, QSettings, Qt

from inspector.engine.step_batch import DRAFT, PLAIN, PROMPT, SlotRows, StepRecord
from inspector.gui.serve.concurrency_lanes import QUEUE_LANE, bar_at, request_bars, step_cells, waiting_segments
from inspector.serve.job import ServedRequest

from PySide6.QtWidgets import QTabWidget
from inspector.gui.serve.requests_view import RequestsView
from serve_helpers import ask_at_once
from test_gui_support import make_window, part

MAX = 16
PROMPTS = ("Name three colors.", "Count from one to ten.", "Write a short sentence about the sea.")


def test_bars_and_step_cells_follow_the_rows_and_steps_given():
    t0 = 1000.0
    done = ServedRequest(1, "/completion", t0 + 0.0, 5, state="done", ended_as="eog", slot=0, started=t0 + 0.5,
                         first_token_at=t0 + 0.75, ended=t0 + 2.0)
    running = ServedRequest(2, "/completion", t0 + 1.0, 5, state="running", slot=1, started=t0 + 1.0)
    waiting = ServedRequest(3, "/completion", t0 + 1.5, 5)
    bars = request_bars([done, running, waiting], origin=t0, now=t0 + 3.0)
    assert bars.ids.tolist() == [1, 2, 3] and bars.lane.tolist() == [0, 1, QUEUE_LANE]
    assert bars.start.tolist() == [0.5, 1.0, 1.5] and bars.end.tolist() == [2.0, 3.0, 3.0]  # running, waiting: now
    assert bars.first[0] == 0.75 and np.isnan(bars.first[1:]).all()
    assert bars.state == ("done", "running", "running")
    # Wait lines, in the queue lane: request 1 waited 0.5 s; request 2 never waited; request 3 waits still.
    x, y = waiting_segments(bars)
    assert x.tolist() == [0.0, 0.5, 1.5, 3.0] and y.tolist() == [QUEUE_LANE] * 4
    assert bar_at(bars, 1.0, 0.1) == 1 and bar_at(bars, 0.2, -1.0) == 1 and bar_at(bars, 2.5, 1.2) == 2
    assert bar_at(bars, 0.2, 0.0) is None and bar_at(bars, 2.5, 0.0) is None and bar_at(bars, 2.0, -1.0) == 3
    assert request_bars([done, running, waiting], t0, t0 + 3.0, keep=1).ids.tolist() == [3]

    # Steps: session 7 is slot 0, session 9 slot 1, session 4 (a probe) no slot's; times in µs since the epoch.
    steps = [StepRecord(1, 0, 2000, (SlotRows(7, PROMPT, 5),), 1),
             StepRecord(2, 10_000, 3000, (SlotRows(7, DRAFT, 4), SlotRows(9, PROMPT, 5), SlotRows(4, PLAIN, 1)), 2),
             StepRecord(3, 20_000, 100, (SlotRows(9, PLAIN, 1),), 2)]
    cells = step_cells(steps, {7: 0, 9: 1}, zero_s=5.0, min_width_s=0.001)
    assert cells.index.tolist() == [1, 2, 2, 3] and cells.lane.tolist() == [0, 0, 1, 1]
    assert cells.kind == (PROMPT, DRAFT, PROMPT, PLAIN) and cells.rows.tolist() == [5, 4, 5, 1]
    assert np.allclose(cells.x0, [5.0, 5.01, 5.01, 5.02]) and np.allclose(cells.x1, [5.002, 5.013, 5.013, 5.021])
    assert cells.slots_per_step() == {1: 1, 2: 2, 3: 1}


def serving_window(qtbot, runtime, tmp_path):
    """A window whose Serve listens on any free port with 3 slots, batched (through the remembered settings)."""
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    for key, value in (("serve/port", 0), ("serve/slots", 3), ("serve/schedule", "batched")):
        settings.setValue(key, value)
    settings.sync()
    w = make_window(qtbot, runtime, tmp_path, max_tokens=MAX)
    model = w.model
    requests_view = part(w, RequestsView)
    assert (requests_view.slots.value(), requests_view.schedule.currentText()) == (3, "batched")
    assert requests_view.schedule.isEnabled()
    model.serve_receipts_dir = None
    return w


def test_three_concurrent_requests_ride_three_lanes_and_shared_steps(qtbot, runtime, tmp_path):
    w = serving_window(qtbot, runtime, tmp_path)
    model = w.model
    requests_view = part(w, RequestsView)
    tabs = part(w, QTabWidget, "views")
    tabs.setCurrentWidget(requests_view)
    model.commands.serve(True)
    qtbot.waitUntil(lambda: model.serve_address != "" or not model.serving, timeout=30_000)
    assert model.serve_address, requests_view.status.text()
    assert not requests_view.slots.isEnabled() and not requests_view.schedule.isEnabled()
    assert "3 slots, batched" in requests_view.status.text()
    out, threads = ask_at_once(model.serve_address, PROMPTS, MAX)
    qtbot.waitUntil(lambda: not any(t.is_alive() for t in threads), timeout=180_000)
    errors = [r for r in out if isinstance(r, Exception)]
    assert not errors and len(out) == 3, errors
    lanes = requests_view.lanes
    qtbot.waitUntil(lambda: w.refresh_all() or (len(lanes.bars.ids) == 3 and "running" not in lanes.bars.state),
                    timeout=10_000)
    bars = lanes.bars
    assert sorted(bars.lane.tolist()) == [0, 1, 2]  # three bars, three different lanes
    assert (bars.end > bars.start).all() and not np.isnan(bars.first).any()
    assert ((bars.first >= bars.start) & (bars.first <= bars.end)).all()
    drawn = sum(len(item.opts["x0"]) for item in lanes.bar_items.values())
    assert drawn == 3 and lanes.steps_plot.isVisible()
    shared = [i for i, n in lanes.cells.slots_per_step().items() if n >= 2]
    assert shared, lanes.cells.slots_per_step()  # some decode step carried rows of two slots or more
    assert sum(len(item.opts["x0"]) for item in lanes.cell_items.values()) == len(lanes.cells.index)

    # The KV lanes: a line per slot over the same steps, on the same time axis; each slot's KV grew from where
    # its request began (its prompt, then its tokens) in at least two of them.
    kv = lanes.kv
    assert kv.isVisible() and len(kv.lines.kv) == 3
    grew = [i for i, k in enumerate(kv.lines.kv) if len(k) and k[-1] > k[0]]
    assert len(grew) >= 2, [k.tolist()[:12] for k in kv.lines.kv]
    for i in grew:
        x, y = kv.curves[i].getData()
        assert len(x) == len(kv.lines.x[i]) and np.allclose(y, kv.lines.y(i)) and (np.diff(x) >= 0).all()
        assert bars.start.min() - 0.5 <= x.min() and x.max() <= bars.end.max() + 0.5  # no step before a request
    assert 0 < kv.lines.largest <= kv.lines.scale and f"0–{kv.lines.scale} tokens" in kv.note.text()

    # Clicking a bar picks its request in the table, and every view shows it.
    first = min(int(i) for i in bars.ids if i != model.requests.shown)  # the views show the newest (following)
    x, y = lanes.bar_centre(first)
    vb = lanes.lanes_plot.getPlotItem().vb
    at = lanes.lanes_plot.mapFromScene(vb.mapViewToScene(QPointF(x, y)))
    qtbot.mouseClick(lanes.lanes_plot.viewport(), Qt.MouseButton.LeftButton, pos=at)
    qtbot.waitUntil(lambda: model.requests.shown == first, timeout=5_000)
    assert requests_view.table.selectionModel().isRowSelected(requests_view.model.row_of(first))
    assert model.requests.shown == first and model.session is model.requests.records[first]

    model.commands.serve(False)
    qtbot.waitUntil(lambda: model.state == "idle", timeout=30_000)
    assert requests_view.slots.isEnabled() and requests_view.schedule.isEnabled()


def test_more_slots_than_the_loaded_context_holds_is_refused_with_the_reason(qtbot, runtime, tmp_path):
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    settings.setValue("serve/slots", runtime.n_seq_max + 1)
    settings.sync()
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    requests_view = part(w, RequestsView)
    model.commands.serve(True)
    assert model.server is None and not model.serving and model.state == "idle"
    assert f"-np {runtime.n_seq_max + 1}" in requests_view.status.text()
    assert f"holds {runtime.n_seq_max} sessions" in requests_view.status.text()
    requests_view.slots.setValue(1)  # remembered: the next window starts with it
    assert int(QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat).value("serve/slots")) == 1
