"""c(k) at several context lengths (issue 39): the prompt made to each length, the refusal of a length
the context cannot hold, and the table, on the real model (no timing asserted)."""

from __future__ import annotations

import pytest

from inspector.bench.context_costs import context_prompt, cost_by_context, format_cost_by_context
from inspector.llama.cost_model import CostModel


def test_a_context_prompt_repeats_the_tokens_to_exactly_the_length():
    assert context_prompt([5, 6, 7], 7) == [5, 6, 7, 5, 6, 7, 5]
    assert context_prompt([5, 6, 7], 2) == [5, 6]
    with pytest.raises(ValueError):
        context_prompt([], 4)


def test_the_table_shows_each_length_its_costs_and_the_break_even():
    short = CostModel((10.0, 12.0, 15.0, 18.0))
    long = CostModel((20.0, 30.0, 45.0, 60.0))
    text = format_cost_by_context([(512, short), (4096, long)])
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["context", "c(1)", "ms", "c(2)", "ms"] and "c(8)" not in lines[0]
    assert lines[1].split()[:5] == ["512", "10.0", "12.0", "18.0", "1.00x"]
    # 4096: c(1) twice the first; ceiling max k*20/c(k) = 1.33x at 2 rows; break-even 30/20 - 1 = 0.5
    assert lines[2].split() == ["4096", "20.0", "30.0", "60.0", "2.00x", "1.33x", "2", "0.5"]


def test_a_length_the_context_cannot_hold_is_refused_before_anything_runs(scheduler, runtime):
    with pytest.raises(ValueError, match="needs -c of at least"):
        cost_by_context(scheduler, [1, 2, 3], [64, runtime.n_ctx], k_max=4, repeats=1)


def test_on_the_real_model_each_length_gets_its_own_measured_curve(scheduler, runtime):
    tokens = runtime.tokenize("def f(x):\n    return x * 2\n", True, False)
    seen = []
    rows = cost_by_context(scheduler, tokens, [32, 600], k_max=4, repeats=1, progress=seen.append)
    assert seen == [32, 600] and [n for n, _cm in rows] == [32, 600]
    assert all(len(cm.row_ms) == 4 and min(cm.row_ms) > 0 for _n, cm in rows)


def test_bench_context_lengths_prints_one_row_per_length(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "c.json"
    p = subprocess.run([sys.executable, "-m", "inspector", "bench", "--context-lengths", "16,300", "--k-max", "8", "--max-tokens", "8",
                        "--repeats", "1", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = [ln.split() for ln in p.stdout.splitlines() if ln.split() and ln.split()[0].isdigit()]
    assert [r[0] for r in rows[:2]] == ["16", "300"]  # c(k) at each length
    assert sorted((r[0], r[1]) for r in rows[2:]) == [("16", "ngram"), ("16", "suffix"), ("300", "ngram"),
                                                      ("300", "suffix")]  # each source at each length
    assert any(ln.startswith(("ngram: ", "suffix: ")) for ln in p.stdout.splitlines())
    doc = json.loads(out.read_text())
    assert [d["context"] for d in doc["context_lengths"]] == [16, 300] and len(doc["sources"]) == 4
    # stored for runs to read at their own length (the conftest gives each test its own cache file)
    stored = json.loads((tmp_path / "cost-models.json").read_text())
    by_context = [e.get("by_context", {}) for e in stored.values()]
    assert [sorted(b, key=int) for b in by_context] == [["16", "300"]]
    assert by_context[0]["300"] == doc["context_lengths"][1]["row_ms"]
    bad = subprocess.run([sys.executable, "-m", "inspector", "bench", "--context-lengths", "0,12"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "expected lengths 1.." in bad.stderr and "Traceback" not in bad.stderr


def test_where_a_source_stops_paying_names_the_length_and_whether_acceptance_or_cost_moved():
    from inspector.bench.context_costs import SourceAtLength, stops_paying

    rows = [SourceAtLength(512, "ngram", 1.30, 0.7, 3.0, 10), SourceAtLength(4096, "ngram", 0.90, 0.7, 3.0, 10),
            SourceAtLength(512, "suffix", 1.20, 0.6, 2.5, 9), SourceAtLength(4096, "suffix", 0.80, 0.3, 1.5, 9),
            SourceAtLength(512, "mod", 1.10, 0.5, 2.0, 8), SourceAtLength(4096, "mod", 1.05, 0.5, 2.0, 8)]
    costs = {512: CostModel((10.0, 12.0)), 4096: CostModel((25.0, 30.0))}
    said = stops_paying(rows, costs)
    assert said["ngram"].startswith("stops paying at 4096 (0.90x): cost:") and "c(1) 2.50x the 512's" in said["ngram"]
    assert said["suffix"].startswith("stops paying at 4096 (0.80x): acceptance: 1.50 tokens per window against 2.50")
    assert said["mod"] == "pays at every length measured"


def test_a_length_under_break_even_followed_by_one_that_pays_is_a_dip_not_where_it_stops():
    """Seen in the window's By KV position line: a run whose first group of windows lost (0.99x) and every
    later group paid was said to "stop paying at 129". Stopping means every longer length loses too."""
    from inspector.bench.context_costs import SourceAtLength, stops_paying

    rows = [SourceAtLength(129, "run", 0.99, 0.5, 3.0, 4), SourceAtLength(147, "run", 1.40, 0.9, 5.0, 4),
            SourceAtLength(170, "run", 0.95, 0.9, 5.0, 4), SourceAtLength(190, "run", 1.30, 0.9, 5.0, 4),
            SourceAtLength(129, "late", 1.20, 0.9, 5.0, 4), SourceAtLength(147, "late", 0.90, 0.9, 5.0, 4),
            SourceAtLength(170, "late", 1.10, 0.9, 5.0, 4), SourceAtLength(190, "late", 0.80, 0.9, 5.0, 4)]
    said = stops_paying(rows)
    assert said["run"] == ("below break-even at 129 (0.99x): 3.00 tokens per window do not pay for the rows here, "
                           "pays again at 147")
    assert said["late"].startswith("stops paying at 190 (0.80x): cost:")  # 147 was a dip: 170 paid again


def test_a_long_prompt_is_filler_then_the_task():
    from inspector.bench.context_costs import long_prompt

    assert long_prompt([1, 2], [7, 8, 9], 8) == [1, 2, 1, 2, 1, 7, 8, 9]
    assert long_prompt([1, 2], [7, 8, 9], 2) == [7, 8, 9]
