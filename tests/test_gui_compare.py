"""The Compare window: configurations run one after the other on the engine thread,
the results table and plots, JSON/CSV export."""

from __future__ import annotations

import csv
import json

from inspector.bench.compare import CompareConfig
from inspector.gui import worker as W
from test_gui_support import RUN_TIMEOUT_MS, DecodeHold, make_window


def test_two_configurations_fill_the_table_and_export(qtbot, runtime, tmp_path):
    """The n-gram configuration matches single tokens: its first query always proposes
    (a window whatever the model says); token counts are checked against each run's finish."""
    w = make_window(qtbot, runtime, tmp_path, max_tokens=24)
    v = w.analysis.show_compare()
    assert [c.source for c in v.config_list()] == ["none", "ngram", "ngram", "ngram"]  # the defaults
    assert [c.draft_max for c in v.config_list()] == [0, 4, 8, 16]
    v.set_configs([CompareConfig("plain", "none", 0), CompareConfig("ngram 4", "ngram", 4, {"n_max": 3, "n_min": 1})])
    configs = v.config_list()
    assert configs[1].options == {"n_max": 3, "n_min": 1, "length": "fixed"}  # fixed: the default length
    with qtbot.waitSignal(w.analysis.compareReady, timeout=RUN_TIMEOUT_MS) as blocker:
        assert w.analysis.run_compare(configs)
        assert w.state == W.BUSY and not w.panel.run.isEnabled() and not v.run.isEnabled()
        assert not w.analysis.measure()  # one job at a time
    result, note = blocker.args
    assert note == ""
    assert w.state == W.IDLE and v.run.isEnabled()
    v.refresh()
    assert v.row_count() == 2
    assert [v.results.item(i, 0).text() for i in range(2)] == ["plain", "ngram 4"]
    plain, ngram = result.rows
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
    v = w.analysis.show_compare()
    v.set_configs([CompareConfig("bad", "ngram", 4, {"n_max": 2, "n_min": 3})])
    v._run_clicked()
    assert w.state == W.IDLE
    assert "row" in v.error_box.text() and "n_min=3, n_max=2" in v.error_box.text()


def test_length_column_passes_the_ngram_length(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path)
    v = w.analysis.show_compare()
    v.set_configs([CompareConfig("plain", "none", 0), CompareConfig("a", "ngram", 8, {"length": "adaptive", "k": "1"})])
    t = v.configs
    assert t.cellWidget(1, 5).currentText() == "adaptive" and t.cellWidget(1, 5).isEnabled()
    assert not t.cellWidget(0, 5).isEnabled()  # plain decoding has no length
    plain, ngram = v.config_list()
    assert plain.options == {} and ngram.options == {"n_max": 4, "n_min": 2, "length": "adaptive", "k": "1"}
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
    v = w.analysis.show_compare()
    hold = DecodeHold(runtime)
    with hold.installed(), qtbot.waitSignal(w.analysis.compareReady, timeout=RUN_TIMEOUT_MS) as blocker:
        assert w.analysis.run_compare(v.config_list())
        v.cancel.click()  # before the engine thread starts: still counts
        hold.release()
    result, note = blocker.args
    assert note.startswith("cancelled after")
    assert result is not None and len(result.rows) < 4
    assert w.state == W.IDLE and v.run.isEnabled() and not v.cancel.isEnabled()
    v.refresh()
    assert v.row_count() == len(result.rows) and v.status.text() == note
