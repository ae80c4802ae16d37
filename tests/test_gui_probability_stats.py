"""The Statistics tab's probability charts, the "probabilities" run setting and the schema
version named when a file opens (issue 15).

Runs use single-token n-gram matches (``ngram_min=1``: the first query always proposes),
so there are windows whatever the model says; nothing here expects particular words.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from inspector.engine.probability_stats import acceptance_by_probability, judged_count, probability_by_position
from inspector.receipts import load_document
from test_gui_support import export_session, make_window, open_receipts, run_to_end

V1 = Path(__file__).parent / "data" / "receipts-v1.json"
SHORT = 16


def fits(plot) -> bool:
    """The chart's contents (axes and title) fit the widget: nothing is cut on the right."""
    return plot.plotItem.geometry().width() <= plot.width() + 1


def test_a_run_shows_acceptance_against_the_targets_probability(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=SHORT, ngram_min=1)
    assert w.panel.probabilities.isChecked() and w.panel.generation_settings().probabilities
    run_to_end(qtbot, w)
    w.tabs.setCurrentWidget(w.stats)
    w.refresh_all()
    st, receipts = w.stats, w.session.receipts
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
    w.panel.probabilities.setChecked(False)
    assert not w.panel.generation_settings().probabilities
    run_to_end(qtbot, w)
    assert w.session.receipts and all(r.probabilities is None for r in w.session.receipts)
    out = tmp_path / "off.json"
    assert export_session(qtbot, w, out) == [str(out), ""]
    doc = load_document(out)  # validates against the schema
    assert doc["settings"]["probabilities"] is False
    assert doc["windows"] and not any("probabilities" in x for x in doc["windows"])
    assert not any("probabilities" in e for e in doc["events"])
    w.tabs.setCurrentWidget(w.stats)
    w.refresh_all()
    assert "turned off" in w.stats.no_figures_text()
    assert not w.stats.vs_p.isVisible()
    w.save_settings()
    again = make_window(qtbot, None, tmp_path)  # the same settings file: the box stays off
    assert not again.panel.probabilities.isChecked()
    fresh = make_window(qtbot, None, tmp_path, settings_file="fresh.ini")
    assert fresh.panel.probabilities.isChecked()  # on by default
    from inspector.engine.probabilities import COST_NOTE

    assert COST_NOTE in fresh.panel.probabilities.toolTip()
    assert "smallest files" in fresh.panel.probabilities.toolTip()


def test_opening_a_v1_file_names_its_version_and_shows_no_figures(qtbot, tmp_path):
    v = make_window(qtbot, None, tmp_path)
    assert v.panel.probabilities.isChecked() and v.panel.probabilities.isEnabled()
    assert open_receipts(qtbot, v, V1) == ""
    status = v.status_state.text()
    assert "receipts-v1.json" in status and "schema v1" in status and "no per-row probabilities" in status
    v.tabs.setCurrentWidget(v.stats)
    v.refresh_all()
    assert "schema v1" in v.stats.no_figures_text()
    # the file's settings, read only: it had no figures
    assert not v.panel.probabilities.isChecked() and not v.panel.probabilities.isEnabled()
    v.new_live_session()
    assert v.panel.probabilities.isChecked() and v.panel.probabilities.isEnabled()
    v.refresh_all()
    assert v.stats.no_figures_text() == ""
