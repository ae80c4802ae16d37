"""The Statistics tab's probability charts, the "probabilities" run setting and the schema
version named when a file opens (issue 15).

Runs use single-token n-gram matches (``ngram_min=1``: the first query always proposes),
so there are windows whatever the model says; nothing here expects particular words.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from PySide6.QtWidgets import QTabWidget
from inspector.engine.probability_stats import acceptance_by_probability, judged_count, probability_by_position
from inspector.gui.panel.control_panel import ControlPanel
from inspector.gui.plots.statistics import StatsView
from inspector.receipts import load_document
from test_gui_support import export_session, make_window, open_receipts, part, run_to_end

V1 = Path(__file__).parent / "data" / "receipts-v1.json"
SHORT = 16


def fits(plot) -> bool:
    """The chart's contents (axes and title) fit the widget: nothing is cut on the right."""
    return plot.plotItem.geometry().width() <= plot.width() + 1


def test_a_run_shows_acceptance_against_the_targets_probability(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=SHORT, ngram_min=1)
    model = w.model
    panel = part(w, ControlPanel)
    stats = part(w, StatsView)
    tabs = part(w, QTabWidget, "views")
    assert panel.probabilities.isChecked() and panel.generation_settings().probabilities
    run_to_end(qtbot, w)
    tabs.setCurrentWidget(stats)
    w.refresh_all()
    st, receipts = stats, model.session.receipts
    assert receipts and all(r.probabilities is not None for r in receipts)
    assert st.no_figures_text() == "" and st.vs_p.isVisible()
    expected = acceptance_by_probability(receipts)
    assert st.vs_p.counts() == [b.judged for b in expected]
    assert sum(st.vs_p.counts()) == sum(judged_count(r) for r in receipts) > 0
    heights = st.vs_p.bars.opts["height"]
    assert np.allclose(heights, [b.rate or 0.0 for b in expected])
    assert st.vs_q.isHidden()  # an n-gram source has no draft q
    # the mean target p beside each position's accepted share
    mean_p = [f.mean_p or 0.0 for f in probability_by_position(receipts)]
    assert np.allclose(st.pos_p_bars.opts["height"][: len(mean_p)], mean_p)
    assert len(st.pos_bars.opts["height"]) == len(st.pos_p_bars.opts["height"]) > 0
    assert w.width() == 1280 and w.height() <= 800
    for plot in (st.by_pos, st.disp, st.vs_p):
        assert plot.isVisible() and fits(plot), plot


def test_with_probabilities_off_the_file_has_no_blocks_and_the_box_is_remembered(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=SHORT, ngram_min=1)
    model = w.model
    panel = part(w, ControlPanel)
    stats = part(w, StatsView)
    tabs = part(w, QTabWidget, "views")
    panel.probabilities.setChecked(False)
    assert not panel.generation_settings().probabilities
    run_to_end(qtbot, w)
    assert model.session.receipts and all(r.probabilities is None for r in model.session.receipts)
    out = tmp_path / "off.json"
    assert export_session(qtbot, w, out) == [str(out), ""]
    doc = load_document(out)  # validates against the schema
    assert doc["settings"]["probabilities"] is False
    assert doc["windows"] and not any("probabilities" in x for x in doc["windows"])
    assert not any("probabilities" in e for e in doc["events"])
    tabs.setCurrentWidget(stats)
    w.refresh_all()
    assert "turned off" in stats.no_figures_text()
    assert not stats.vs_p.isVisible()
    w.save_settings()
    again = make_window(qtbot, None, tmp_path)  # the same settings file: the box stays off
    again_panel = part(again, ControlPanel)
    assert not again_panel.probabilities.isChecked()
    fresh = make_window(qtbot, None, tmp_path, settings_file="fresh.ini")
    fresh_panel = part(fresh, ControlPanel)
    assert fresh_panel.probabilities.isChecked()  # on by default
    from inspector.engine.probabilities import COST_NOTE

    assert COST_NOTE in fresh_panel.probabilities.toolTip()
    assert "smallest files" in fresh_panel.probabilities.toolTip()


def test_opening_a_v1_file_names_its_version_and_shows_no_figures(qtbot, tmp_path):
    v = make_window(qtbot, None, tmp_path)
    v_model = v.model
    v_panel = part(v, ControlPanel)
    v_stats = part(v, StatsView)
    v_tabs = part(v, QTabWidget, "views")
    assert v_panel.probabilities.isChecked() and v_panel.probabilities.isEnabled()
    assert open_receipts(qtbot, v, V1) == ""
    status = v_model.status_text
    assert "receipts-v1.json" in status and "schema v1" in status and "no per-row probabilities" in status
    v_tabs.setCurrentWidget(v_stats)
    v.refresh_all()
    assert "schema v1" in v_stats.no_figures_text()
    # the file's settings, read only: it had no figures
    assert not v_panel.probabilities.isChecked() and not v_panel.probabilities.isEnabled()
    v.new_live_session()
    assert v_panel.probabilities.isChecked() and v_panel.probabilities.isEnabled()
    v.refresh_all()
    assert v_stats.no_figures_text() == ""
