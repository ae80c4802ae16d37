"""``spec-inspector bench --gui`` (``inspector.cli.gui_speed``): the window against headless, in pairs.

A short measurement on the bundled model: the ratio is the median of each pair's GUI / headless (the
machine drifts between pairs), never a ratio of the two medians; the text names it. Speeds themselves are
benchmark output, never asserted."""

from __future__ import annotations

import statistics

from inspector.cli import gui_speed


def test_the_window_against_headless_is_the_median_of_the_pairs_ratios(qapp, model_path):
    r = gui_speed.measure(str(model_path), task="copy-exact", max_tokens=8, repeats=3, threads=2)
    assert len(r["gui_tps"]) == len(r["headless_tps"]) == 3 and min(r["gui_tps"] + r["headless_tps"]) > 0
    assert r["ratio"] == statistics.median(g / h for g, h in zip(r["gui_tps"], r["headless_tps"]))
    assert 0.0 < r["gui_cpu_share"] < 1.0
    text = gui_speed.format_gui_speed(r)
    assert f"GUI / headless: {r['ratio']:.2f}x (median of the pairs' ratios" in text
