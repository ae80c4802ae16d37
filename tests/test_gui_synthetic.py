"""The Synthetic acceptance tab (issue 39 item 3): the heatmap the stored cost model predicts, its
break-even line where the speedup crosses 1 (a hand-made linear c(k) whose break-even is known in closed
form), the marks of real runs at their own mean acceptance length, and the measured table's cells with
progress and Cancel on the engine thread."""

from __future__ import annotations

import math

import pytest

from PySide6.QtWidgets import QTabWidget
from inspector.bench.compare_result import CompareConfig
from inspector.gui.cost.synthetic_view import FRACTIONS, SyntheticView, TAUS
from inspector.gui.cost.view import CostView
from inspector.llama.cost_cache import placement, store_cost_model
from inspector.llama.cost_model import CostModel
from inspector.session.run_states import BUSY, IDLE
from test_gui_support import make_window, part, run_to_end

D = 8
SLOPE = 0.25
C1 = 20.0
TIMEOUT_MS = 300_000


def linear_costs() -> CostModel:
    """c(k) = c(1) (1 + s (k - 1)): speedup (1 + a E[L]) / (1 + (s + f) E[L]), so it is 1 where the
    conditional rate a equals s + f."""
    return CostModel(tuple(C1 * (1 + SLOPE * (k - 1)) for k in range(1, 17)))


def rate_for(tau: float) -> float:
    """The constant rate a with 1 + a + ... + a^D = tau (the test's own bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(mid ** i for i in range(D + 1)) < tau else (lo, mid)
    return lo


def speedup(tau: float, f: float) -> float:
    a = rate_for(tau)
    expected_l = sum(a ** i for i in range(D))
    return (1 + a * expected_l) / (1 + (SLOPE + f) * expected_l)


def window_with_costs(qtbot, runtime, tmp_path, **kw):
    store_cost_model(runtime.model_path, runtime.n_threads, linear_costs(), placement(runtime))
    w = make_window(qtbot, runtime, tmp_path, **kw)
    synthetic_view = part(w, SyntheticView)
    tabs = part(w, QTabWidget, "views")
    tabs.setCurrentWidget(synthetic_view)
    w.refresh_all()
    return w


def test_the_heatmap_shows_the_stored_cost_models_prediction_and_breaks_even_where_speedup_is_one(
        qtbot, runtime, tmp_path):
    empty = make_window(qtbot, runtime, tmp_path, settings_file="empty.ini")
    empty.refresh_all()
    assert empty.synthetic_view.cost_model is None
    assert empty.synthetic_view.stack.currentWidget() is empty.synthetic_view.empty_hint

    w = window_with_costs(qtbot, runtime, tmp_path)
    model = w.model
    cost_view = part(w, CostView)
    synthetic_view = part(w, SyntheticView)
    tabs = part(w, QTabWidget, "views")
    view = synthetic_view
    assert tabs.tabText(tabs.indexOf(view)) == "Synthetic acceptance"
    assert tabs.indexOf(view) == tabs.indexOf(cost_view) + 1  # next to the Cost model tab
    assert view.cost_model.row_ms == linear_costs().row_ms
    assert view.stack.currentWidget() is view.page
    image = view.image.image  # [tau, draft cost]
    assert image.shape == (len(TAUS), len(FRACTIONS))
    for i, j in ((10, 0), (20, 25), (40, 10), (70, 50)):
        assert image[i, j] == pytest.approx(speedup(TAUS[i], FRACTIONS[j]), rel=1e-4), (TAUS[i], FRACTIONS[j])
    # The break-even line: at each tau the draft cost where a = s + f; faster below, slower above.
    xs, ys = view.line.getData()
    drawn = 0
    for x, y in zip(xs[::10], ys[::10]):
        f = rate_for(x) - SLOPE
        if not 0.0 <= f <= 0.5:  # off the map: not drawn
            assert math.isnan(y), (x, y)
            continue
        drawn += 1
        assert y == pytest.approx(f, abs=1e-5), x
        if 0.02 <= y <= 0.48:
            assert speedup(x, y - 0.02) > 1.0 > speedup(x, y + 0.02)
    assert drawn >= 5
    assert "at 0 c(1): τ ≥ 1.33" in view.text.text()  # 1 + s + s^2 + ... = 1.333 tokens per window
    png = tmp_path / "synthetic.png"
    assert w.grab().save(str(png)) and png.stat().st_size > 20_000
    # A cost model measured in the Cost model tab is the map's from then on.
    with qtbot.waitSignal(model.costReady, timeout=TIMEOUT_MS) as blocker:
        assert model.commands.measure_cost()
    measured, error = blocker.args
    assert error == "" and view.cost_model is measured.model
    tabs.setCurrentWidget(view)
    w.refresh_all()
    c = measured.model.row_ms
    assert view.image.image[0, 0] == pytest.approx(c[0] / c[1], rel=1e-6)  # tau 1, free: 1 token per c(2)


def test_a_real_run_and_compare_rows_are_marked_at_their_own_mean_acceptance_length(qtbot, runtime, tmp_path):
    w = window_with_costs(qtbot, runtime, tmp_path, max_tokens=32, ngram_min=1)
    model = w.model
    synthetic_view = part(w, SyntheticView)
    view = synthetic_view
    assert view.landings == [] and view.mark_positions() == []
    run_to_end(qtbot, w)
    receipts = model.session.receipts
    assert receipts  # ngram_min=1: the first query proposes
    tau = 1 + sum(r.accepted_proposal_tokens for r in receipts) / len(receipts)
    draft = sum(r.proposal_elapsed_us for r in receipts) / 1000 / sum(r.proposal_token_count for r in receipts) / C1
    w.refresh_all()
    assert view.run_marked and view.landings[0].label == "ngram"
    assert view.landings[0].mean_length == pytest.approx(tau)
    (x, y), = view.mark_positions()
    assert x == pytest.approx(min(tau, 8.0)) and y == pytest.approx(min(draft, 0.5), abs=1e-9)
    assert f"τ {tau:.2f} over {len(receipts)} windows" in view.text.text()

    with qtbot.waitSignal(model.compareReady, timeout=TIMEOUT_MS) as blocker:
        assert model.commands.run_compare([CompareConfig("plain", "none", 0),
                                       CompareConfig("ngram n_min 1", "ngram", 4, {"n_min": 1})])
    result, _note = blocker.args
    w.refresh_all()
    labels = [at.label for at in view.landings]
    assert labels == ["ngram", "ngram n_min 1"]  # the plain row has no window: no mark
    run = result.runs[1]
    own = 1 + sum(r.accepted_proposal_tokens for r in run.receipts) / len(run.receipts)
    assert view.landings[1].mean_length == pytest.approx(own)
    assert len(view.mark_positions()) == 2 and view.mark_positions()[1][0] == pytest.approx(min(own, 8.0))


def test_measure_for_real_fills_cells_as_they_finish_and_cancel_keeps_them(qtbot, runtime, tmp_path):
    w = window_with_costs(qtbot, runtime, tmp_path, max_tokens=16)
    model = w.model
    synthetic_view = part(w, SyntheticView)
    view, actions = synthetic_view, w.synthetic
    rows = []
    actions.worker.rowsDone.connect(lambda partial: rows.append(len(partial["rows"])))
    with qtbot.waitSignal(actions.measured, timeout=TIMEOUT_MS) as blocker:
        assert actions.start()
        assert model.state == BUSY and not view.measure.isEnabled() and view.cancel.isVisible()
        assert not actions.start() and not model.commands.measure_cost()  # one thing at a time
        qtbot.waitUntil(lambda: len(rows) >= 1, timeout=TIMEOUT_MS)
        view.cancel.click()
    result, note = blocker.args
    assert model.state == IDLE and view.measure.isEnabled() and not view.cancel.isVisible()
    assert note.startswith("cancelled after ") and note.endswith(" of 24 cells")
    done = int(note.split()[2])
    assert done >= 1 and len(result["rows"]) == done
    w.refresh_all()
    first = result["rows"][0]
    assert first["mean_length"] == 1 and first["cost_fraction"] == 0.0 and first["speedup"] > 0
    x, y = view.cells.getData()
    assert len(x) == done and (x[0], y[0]) == (1, 0.0)
    assert view.cell_texts[0].textItem.toPlainText() == f"{first['speedup']:.2f}"
    assert "Measured" in view.text.text()


def test_labels_take_the_nearest_free_height_and_none_when_the_plot_is_full():
    from inspector.gui.cost.synthetic_view import label_place

    placed: list = []
    assert label_place(2.0, 0.1, 1.5, 0.04, False, placed) == 0.1
    assert label_place(2.5, 0.1, 1.5, 0.04, False, placed) == pytest.approx(0.14)  # one label height up
    assert label_place(5.0, 0.1, 1.5, 0.04, False, placed) == 0.1  # beside them: free
    assert label_place(4.0, 0.1, 1.5, 0.04, True, placed) == pytest.approx(0.06)  # reaches left over 2.5..4: below
    crowded: list = []  # labels 0.2 high in a plot 0.58 high (-0.04..0.54): two fit
    heights = [label_place(3.0, 0.2, 2.0, 0.2, False, crowded) for _ in range(3)]
    assert heights[0] == 0.2 and heights[1] == pytest.approx(0.0)
    assert heights[2] is None  # no room left: the mark goes unlabelled
