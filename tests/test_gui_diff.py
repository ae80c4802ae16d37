"""File > Compare with receipts… (issue 57): the shown run beside another receipts document of its prompt."""

from __future__ import annotations

import copy
import json

from PySide6.QtWidgets import QMessageBox

from inspector.gui.files.receipts_diff import DiffDialog, PART_COLOUR
from inspector.gui.panel.control_panel import ControlPanel
from test_gui_support import export_session, make_window, part, run_to_end


def test_the_shown_run_against_its_own_receipts_is_equal_and_against_a_changed_one_parts_there(qtbot, runtime,
                                                                                               tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24, ngram_min=1)
    model = w.model
    run_to_end(qtbot, w)
    same = tmp_path / "same.json"
    assert export_session(qtbot, w, same) == [str(same), ""]
    with qtbot.waitSignal(model.receiptsCompared, timeout=60_000) as blocker:
        assert model.commands.compare_receipts_file(str(same)) is not None
    comparison, error = blocker.args
    assert error == "" and comparison.diff.outputs_equal and comparison.diff.setup == ()
    dialog = w.findChild(DiffDialog)
    assert dialog is not None and dialog.isVisible() and "Outputs equal" in dialog.headline.text()
    windows = next(r for r in range(dialog.figures.rowCount()) if dialog.figures.item(r, 0).text() == "windows")
    assert dialog.figures.item(windows, 1).text() == str(len(model.session.receipts)) == \
        dialog.figures.item(windows, 2).text() and dialog.figures.item(windows, 3).text() == "1.00"
    dialog.close()
    # B: the same document with one output token changed: the dialog names that token and marks it.
    doc = json.loads(same.read_text())
    changed = copy.deepcopy(doc)
    k = len(doc["output"]["token_ids"]) // 2
    changed["output"]["token_ids"][k] = (doc["output"]["token_ids"][k] + 1) % doc["model"]["n_vocab"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(changed))
    with qtbot.waitSignal(model.receiptsCompared, timeout=60_000) as blocker:
        model.commands.compare_receipts_file(str(other))
    comparison, error = blocker.args
    assert error == "" and comparison.diff.parting.index == k
    dialog = comparison_dialog = next(d for d in w.findChildren(DiffDialog) if d.isVisible())
    assert f"Outputs part at generated token {k}" in dialog.headline.text()
    for view in comparison_dialog.outputs:  # the tokens from the parting on are marked on both sides
        assert PART_COLOUR in view.toHtml()


def test_a_file_of_another_prompt_is_refused_in_a_box_and_the_window_goes_on(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=8)
    model = w.model
    run_to_end(qtbot, w)
    mine = tmp_path / "mine.json"
    export_session(qtbot, w, mine)
    doc = json.loads(mine.read_text())
    doc["prompt"]["token_ids"] = doc["prompt"]["token_ids"][:-1]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    with qtbot.waitSignal(model.receiptsCompared, timeout=60_000) as blocker:
        model.commands.compare_receipts_file(str(other))
    assert blocker.args[0] is None and "not the same prompt" in blocker.args[1]
    assert "not the same prompt" in model.last_error and model.state == "idle"
    box = w.findChild(QMessageBox)
    assert box is not None and box.isVisible()


def test_nothing_shown_is_said_before_any_file_is_read(qtbot, tmp_path):
    model = make_window(qtbot, None, tmp_path).model
    assert model.commands.compare_receipts_file(str(tmp_path / "absent.json")) is None
    assert "Run a generation or open receipts first" in model.last_error


def test_the_windows_tab_aligns_both_runs_by_kv_position_and_the_plots_overlay_a_and_b(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24, ngram_min=1)
    model = w.model
    run_to_end(qtbot, w)
    first = tmp_path / "draft8.json"
    export_session(qtbot, w, first)
    part(w, ControlPanel).draft_max.setValue(2)  # B: the same prompt, shorter proposals: other windows
    run_to_end(qtbot, w)
    with qtbot.waitSignal(model.receiptsCompared, timeout=60_000) as blocker:
        model.commands.compare_receipts_file(str(first))
    comparison, error = blocker.args
    assert error == ""
    shown = tmp_path / "draft2.json"
    export_session(qtbot, w, shown)
    a, b = (json.loads(f.read_text()) for f in (shown, first))  # A: the shown run, B: the file
    assert a["windows"] and b["windows"] and a["settings"]["draft_max"] == 2 != b["settings"]["draft_max"]
    dialog = next(d for d in w.findChildren(DiffDialog) if d.isVisible())
    table = dialog.windows

    def at(doc):
        out = {}
        for x in doc["windows"]:
            out.setdefault(int(x["base_position"]), (x["accepted_proposal_tokens"], x["proposal_token_count"]))
        return out

    wa, wb = at(a), at(b)
    positions = sorted(wa.keys() | wb.keys())
    assert [int(table.item(r, 0).text()) for r in range(table.rowCount())] == positions
    for r, p in enumerate(positions):
        for col, side in ((1, wa), (2, wb)):
            assert table.item(r, col).text() == (f"{side[p][0]} / {side[p][1]}" if p in side else "-")
        change = wb[p][0] - wa[p][0] if p in wa and p in wb else None
        assert table.item(r, 3).text() == ("" if change is None else f"{change:+d}")
    acceptance_a, cumulative_a = dialog.plots.curves["a"]
    acceptance_b, cumulative_b = dialog.plots.curves["b"]
    for curve, side in ((cumulative_a, wa), (cumulative_b, wb)):
        xs, ys = curve.getData()
        assert list(xs) == sorted(side) and ys[-1] == sum(v[0] for v in side.values())
    assert list(acceptance_a.getData()[1]) == a["summary"]["acceptance_by_position"]
    assert list(acceptance_b.getData()[1]) == b["summary"]["acceptance_by_position"]
    assert [dialog.tabs.tabText(i) for i in range(dialog.tabs.count())] == [
        "Outputs", f"Windows ({len(wa)} / {len(wb)})", "Figures", "Plots"]
