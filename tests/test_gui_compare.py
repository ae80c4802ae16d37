"""The Compare window: configurations run one after the other on the engine thread,
the results table and plots, JSON/CSV export."""

from __future__ import annotations

import csv
import json

from inspector.bench.compare import default_configs
from inspector.bench.compare_result import CompareConfig
from inspector.gui.panel.control_panel import ControlPanel
from inspector.session.run_states import BUSY, IDLE
from test_gui_support import DecodeHold, make_window, part, RUN_TIMEOUT_MS


def test_two_configurations_fill_the_table_and_export(qtbot, runtime, tmp_path):
    """The n-gram configuration matches single tokens: its first query always proposes
    (a window whatever the model says); token counts are checked against each run's finish."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    model = w.model
    panel = part(w, ControlPanel)
    v = model.commands.compare()
    assert [c.source for c in v.config_list()] == ["none", "ngram", "ngram", "ngram"]  # the defaults
    assert [c.draft_max for c in v.config_list()] == [0, 4, 8, 16]
    v.set_configs([CompareConfig("plain", "none", 0), CompareConfig("ngram 4", "ngram", 4, {"n_max": 3, "n_min": 1})])
    configs = v.config_list()
    assert configs[1].options == {"n_max": 3, "n_min": 1, "length": "fixed"}  # fixed: the default length
    assert v.repeats.value() == 3  # every configuration three times, in rounds: tok/s are medians
    with qtbot.waitSignal(model.compareReady, timeout=RUN_TIMEOUT_MS) as blocker:
        assert model.commands.run_compare(configs)
        assert model.state == BUSY and not panel.run.isEnabled() and not v.run.isEnabled()
        assert not model.commands.measure_cost()  # one job at a time
    result, note = blocker.args
    assert note == ""
    assert model.state == IDLE and v.run.isEnabled()
    v.refresh()
    assert v.row_count() == 2
    assert [v.results.item(i, 0).text() for i in range(2)] == ["plain", "ngram 4"]
    plain, ngram = result.rows
    assert result.repeats == 3
    for row in (plain, ngram):
        assert len(row.decode_tokens_per_s_runs) == 3
        assert row.summary.decode_tokens_per_s == sorted(row.decode_tokens_per_s_runs)[1]
    for row in (plain, ngram):  # 24 tokens, unless the model's answer ended earlier
        assert row.summary.generated_tokens == 24 or (
            row.summary.finish_reason == "eog" and 0 < row.summary.generated_tokens < 24)
    if ngram.same_output_as_plain:
        assert plain.summary.generated_tokens == ngram.summary.generated_tokens
    assert ngram.summary.windows > 0 and v.results.item(1, 6).text() == str(ngram.summary.windows)
    assert v.results.item(0, 2).text() == "1.00x"
    assert v.results.item(1, 7).text() == ("yes" if ngram.same_output_as_plain else "no")
    x, y = v._curves[1].getData()
    assert len(y) == len(ngram.summary.acceptance_by_position) > 0
    out = tmp_path / "compare.json"
    assert v.export(str(out), "json")
    doc = json.loads(out.read_text("utf-8"))
    assert [r["config"]["label"] for r in doc["rows"]] == ["plain", "ngram 4"]
    assert doc["rows"][1]["summary"]["windows"] == ngram.summary.windows
    assert v.export(str(tmp_path / "compare.csv"), "csv")
    with open(tmp_path / "compare.csv", newline="", encoding="utf-8") as fh:
        assert len(list(csv.DictReader(fh))) == 2
    # The configurations are remembered for the next window.
    v2 = make_window(qtbot, runtime, tmp_path).analysis.show_compare()
    assert [c.label for c in v2.config_list()] == ["plain", "ngram 4"]


def test_bad_configuration_is_refused_before_running(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    v = model.commands.compare()
    v.set_configs([CompareConfig("bad", "ngram", 4, {"n_max": 2, "n_min": 3})])
    v._run_clicked()
    assert model.state == IDLE
    assert "row" in v.error_box.text() and "n_min=3, n_max=2" in v.error_box.text()


def test_length_column_passes_the_ngram_length(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    v = model.commands.compare()
    v.set_configs([CompareConfig("plain", "none", 0),
                   CompareConfig("a", "ngram", 8, {"length": "adaptive", "row_cost_ratio": "0.5"})])
    t = v.configs
    assert t.cellWidget(1, 5).currentText() == "adaptive" and t.cellWidget(1, 5).isEnabled()
    assert not t.cellWidget(0, 5).isEnabled()  # plain decoding has no length
    plain, ngram = v.config_list()
    assert plain.options == {} and ngram.options == {"n_max": 4, "n_min": 2, "length": "adaptive",
                                                     "row_cost_ratio": "0.5"}
    t.cellWidget(1, 5).setCurrentText("fixed")
    assert v.config_list()[1].options["length"] == "fixed"
    # The spin boxes have room for their digits beside the arrows.
    spin = t.cellWidget(1, 2)
    assert spin.width() >= spin.fontMetrics().horizontalAdvance("99999") + 30


def test_cancel_keeps_the_window_usable(qtbot, runtime, tmp_path):
    """Cancel is clicked right after the start; no decode of the comparison finishes
    before the click (a decode reached earlier is held until then), so the comparison
    stops before its last configuration however fast the CPU."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    model = w.model
    v = model.commands.compare()
    hold = DecodeHold(runtime)
    with hold.installed(), qtbot.waitSignal(model.compareReady, timeout=RUN_TIMEOUT_MS) as blocker:
        assert model.commands.run_compare(v.config_list())
        v.cancel.click()  # before the engine thread starts: still counts
        hold.release()
    result, note = blocker.args
    assert note.startswith("cancelled after")
    assert result is not None and len(result.rows) < 4
    assert model.state == IDLE and v.run.isEnabled() and not v.cancel.isEnabled()
    v.refresh()
    assert v.row_count() == len(result.rows) and v.status.text() == note


def test_every_source_is_listed_with_its_own_options(qtbot, runtime, tmp_path):
    """The source picker lists every registered source; the options cell shows the chosen source's
    declared options and defaults, drops the old source's options on a change, and a bad option is
    refused by the source's own check, naming the row and the option (nothing runs)."""
    from inspector.sources.registry import source_names

    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    v = model.commands.compare()
    v.set_configs([CompareConfig("plain", "none", 0), CompareConfig("s", "ngram-simple", 8, {"size_n": "2"})])
    combo = v.configs.cellWidget(1, 1)
    listed = [combo.itemText(i) for i in range(combo.count())]
    assert set(source_names()) <= set(listed)
    for name in ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache", "suffix"):
        assert name in listed
    cell = v.options_cell(1)
    assert cell.text() == "size_n=2" and cell.placeholderText() == "defaults: size_n=12, size_m=48"
    assert "size_m (default 48" in cell.toolTip() and "llama.cpp spec.ngram_simple.size_m" in cell.toolTip()
    assert not v.options_cell(0).isEnabled() and not v.configs.cellWidget(1, 3).isEnabled()  # n-gram columns
    combo.setCurrentText("ngram-mod")
    assert cell.text() == "" and "n_match=24, n_min=48, n_max=64" in cell.placeholderText()
    combo.setCurrentText("suffix")
    assert "max_tree_depth=24" in cell.placeholderText() and "optional: memory_file" in cell.placeholderText()
    cell.setText("max_tree_depth=1")
    v._run_clicked()
    assert model.state == IDLE
    text = v.error_box.text()
    assert text.startswith("row 2 (s): source suffix option max_tree_depth") and "observed '1'" in text
    cell.setText("size_n=3")
    try:
        v.config_list()
    except ValueError as exc:
        assert str(exc).startswith("row 2 (s): unknown option for source suffix: size_n (expected max_tree_depth")
    else:
        raise AssertionError("an unknown option was accepted")
    cell.setText("max_tree_depth=8, min_token_prob=0.2")
    assert v.config_list()[1].options == {"max_tree_depth": "8", "min_token_prob": "0.2"}


def test_new_sources_compare_in_the_window(qtbot, runtime, tmp_path):
    """An ngram-simple and a suffix row give one result row each (after the plain reference)."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=12)
    model = w.model
    v = model.commands.compare()
    v.set_configs([CompareConfig("", "ngram-simple", 4, {"size_n": 1, "size_m": 4}), CompareConfig("", "suffix", 4)])
    with qtbot.waitSignal(model.compareReady, timeout=RUN_TIMEOUT_MS) as blocker:
        v.run.click()
    result, note = blocker.args
    assert note == "" and model.state == IDLE
    assert [r.config.label for r in result.rows] == [
        "plain (reference)", "ngram-simple draft_max 4 size_n=1 size_m=4", "suffix draft_max 4"]
    for row in result.rows:
        assert row.error is None and 0 < row.summary.generated_tokens <= 12
    v.refresh()
    assert v.row_count() == 3 and v.results.item(2, 0).text() == "suffix draft_max 4"


def test_conversation_compare_sums_every_turn(qtbot, runtime, tmp_path):
    """The bundled conversation: each configuration answers every turn; a row's tokens are the sum of its
    turns (read from the result's runs, not from the model's text), with progress per turn."""
    from inspector.prompts import turns_path
    from inspector.session.conversation import read_turns

    turns = read_turns(turns_path("agent-edits"))
    w = make_window(qtbot, runtime, tmp_path, max_tokens=20)
    model = w.model
    panel = part(w, ControlPanel)
    v = model.commands.compare()
    assert v.max_tokens.value() == 20  # the main window's, until set here
    v.max_tokens.setValue(8)  # the trial: the window had no max tokens of its own
    panel.max_tokens.setValue(30)
    model.commands.compare()
    assert v.max_tokens.value() == 8
    v.set_configs([CompareConfig("plain", "none", 0), CompareConfig("suffix", "suffix", 4)])
    assert v.conversation() is None and v.input.currentText().startswith("prompt: copy-with-corrections")
    assert v.choose_conversation("agent-edits")
    assert v.input.currentText() == f"conversation: agent-edits (bundled, {len(turns)} turns)"
    assert "per turn" in v.prompt_label.text()
    v.repeats.setValue(1)  # one round: the progress of each configuration's turns, once
    seen = []
    show = v.set_turn_progress
    v.set_turn_progress = lambda *a: (show(*a), seen.append((a, v.status.text())))
    with qtbot.waitSignal(model.compareReady, timeout=RUN_TIMEOUT_MS) as blocker:
        v.run.click()
    result, note = blocker.args
    assert note == "" and model.state == IDLE
    n = len(turns)
    assert [a for a, _ in seen] == [(t, n, c, 2, label) for c, label in enumerate(("plain", "suffix"))
                                    for t in range(1, n + 1)]
    assert seen[n + 1][1] == f"turn 2/{n}, configuration 2/2: suffix …"
    assert len(result.rows) == len(result.runs) == 2
    for row, run in zip(result.rows, result.runs):
        assert row.error is None and len(run.generations) == n
        per_turn = [len(g.generated) for g in run.generations]
        assert all(0 < k <= 8 for k in per_turn)
        assert row.summary.generated_tokens == sum(per_turn) == len(row.generated_tokens)
        assert row.summary.windows == sum(len(g.receipts) for g in run.generations)
    v.refresh()
    assert v.row_count() == 2 and v.results.item(1, 0).toolTip().startswith(f"{n} turns, summed in this row:")
    assert f"× {n} turns" in v.status.text()
    # The choice is remembered for the next window.
    assert make_window(qtbot, runtime, tmp_path).analysis.show_compare().conversation()[0] == "agent-edits"


def test_turns_file_is_checked_when_opened(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    v = model.commands.compare()
    bad = tmp_path / "empty.txt"
    bad.write_text("first\n---\n\n", "utf-8")
    assert not v.add_turns_file(str(bad))
    assert "turn 2 is empty" in v.error_box.text() and str(bad) in v.error_box.text()
    good = tmp_path / "two.txt"
    good.write_text("Say red.\n---\nSay it again.\n", "utf-8")
    assert v.add_turns_file(str(good))
    assert v.input.currentText() == "conversation: two.txt (2 turns)"
    assert v.conversation() == (str(good), ("Say red.", "Say it again."))
    assert v.choose_conversation(None) and v.conversation() is None


def test_a_rows_automatic_label_follows_its_source_and_draft_max_until_the_user_names_it(qtbot, runtime, tmp_path):
    """The trial: rows switched from the default ngram to suffix kept "ngram draft_max 4" as their
    label in the results, the plots and the export."""
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    v = model.commands.compare()
    v.set_configs(default_configs())
    v.configs.cellWidget(1, 1).setCurrentText("suffix")
    assert v.configs.item(1, 0).text() == "suffix draft_max 4"
    v.configs.cellWidget(1, 2).setValue(6)
    v.options_cell(1).setText("max_tree_depth=32")
    v.options_cell(1).editingFinished.emit()
    assert [c.label for c in v.config_list()][1] == "suffix draft_max 6 max_tree_depth=32"
    v.configs.item(2, 0).setText("mine")  # typed by the user: kept
    v.configs.cellWidget(2, 1).setCurrentText("ngram-simple")
    assert v.config_list()[2].label == "mine" and v.config_list()[2].source == "ngram-simple"
    v.configs.item(2, 0).setText("")  # emptied: automatic again
    assert v.configs.item(2, 0).text() == "ngram-simple draft_max 8"


def test_rows_appear_as_each_configuration_finishes_and_the_settings_stay_locked_meanwhile(qtbot, runtime, tmp_path,
                                                                                         monkeypatch):
    """Issue 36: the table stayed empty until every configuration was done. The engine is held in the
    second configuration's decode once the first (plain) finished: its row is shown by the window's
    redraw while every setting (configurations, their cells, what to run on, max tokens, which
    llama-server) is locked; after the end all rows are shown and the settings unlock. "Also through
    llama-server" with none built says where to build it in this window (no terminal)."""
    from PySide6.QtCore import Qt

    monkeypatch.setenv("SPEC_INSPECTOR_CACHE", str(tmp_path / "cache"))  # no llama-server built here
    monkeypatch.delenv("SPEC_INSPECTOR_LLAMA_SERVER", raising=False)
    w = make_window(qtbot, runtime, tmp_path, max_tokens=16)
    model = w.model
    v = model.commands.compare()
    v.set_configs([CompareConfig("plain", "none", 0), CompareConfig("ngram 4", "ngram", 4, {"n_min": 1}),
                   CompareConfig("ngram 8", "ngram", 8, {"n_min": 1})])
    v.with_server.setChecked(True)
    v.server_target.setText("")
    assert v.server_choice.build_row.isVisibleTo(v) and v.server_choice.build.isVisibleTo(v)
    finished = []  # on the engine thread, as each row ends
    w.analysis.worker.compareRows.connect(lambda partial: finished.append(len(partial.rows)),
                                          Qt.ConnectionType.DirectConnection)
    settings = [v.run, v.add, v.remove, v.defaults, v.configs, v.input, v.open_turns, v.max_tokens, v.repeats,
                v.with_server,
                v.server_target, v.server_choice.choose, v.configs.cellWidget(1, 2), v.options_cell(1)]
    hold = DecodeHold(runtime, when=lambda: bool(finished))
    with hold.installed(), qtbot.waitSignal(model.compareReady, timeout=RUN_TIMEOUT_MS) as blocker:
        v.run.click()
        qtbot.waitUntil(lambda: hold.held.is_set(), timeout=RUN_TIMEOUT_MS)
        qtbot.waitUntil(lambda: v.row_count() == 1, timeout=5000)  # the redraw timer shows it
        assert v.results.item(0, 0).text() == "plain" and v.results.item(0, 2).text() == "1.00x"
        assert finished == [1] and model.state == BUSY
        assert v.status.text() == "running 2/9: ngram 4 (round 1/3) …"  # the progress stays (3 rounds)
        assert not any(x.isEnabled() for x in settings) and v.cancel.isEnabled()
        assert not v.export_json.isEnabled() and not v.export_csv.isEnabled()
        hold.release()
    result, note = blocker.args
    assert finished == [1, 2, 3] + [3] * 6 and len(result.rows) == 3  # rounds 2 and 3 update the medians
    assert note.startswith("no llama-server to compare with: press Build llama-server") and "terminal" not in note
    # the rows may already be 3 from the partial result; the note comes with the final one's redraw
    qtbot.waitUntil(lambda: v.row_count() == 3 and v.status.text().startswith(note), timeout=5000)
    assert [v.results.item(i, 0).text() for i in range(3)] == ["plain", "ngram 4", "ngram 8"]
    assert all(x.isEnabled() for x in settings) and not v.cancel.isEnabled() and v.export_csv.isEnabled()
    assert not v.configs.cellWidget(0, 3).isEnabled()  # plain's n-gram cells keep their own rule
