"""``bench --figures``: the figures' cost per row against vocabulary size (issue 56), on the real C kernel."""

from __future__ import annotations

import json

import pytest

from inspector.bench import figures_paths, figures_vocab
from inspector.bench.figures_vocab import WINDOW_ROWS, format_figures_bench, measure_vocabulary
from inspector.cli import bench_figures
from inspector.cli.main import main
from inspector.engine.probabilities import figure_path


@pytest.fixture
def small_pool(monkeypatch):
    """A pool of a few MB: the test measures the arithmetic, not the caches."""
    monkeypatch.setattr(figures_vocab, "POOL_BYTES", 4 << 20)


def test_each_measurement_times_the_kernels_figures_and_grows_with_the_vocabulary(small_pool):
    if not figure_path().startswith("C"):
        pytest.fail(f"no C kernel: {figure_path()}")
    small, large = measure_vocabulary("small", 4096, samples=40, numpy_samples=3), \
        measure_vocabulary("large", 262144, samples=40, numpy_samples=3)
    for c in (small, large):
        assert c.argmax_us > 0 and c.plain_us > 0 and c.window_us > 0 and c.numpy_us > 0 and c.samples == 40
    # 64 times the tokens: the scans of a row take longer (a loose bound: timings on a shared machine move).
    assert large.window_us > 4 * small.window_us and large.argmax_us > 4 * small.argmax_us
    text = format_figures_bench([small, large])
    assert "  4,096" in text and "262,144" in text and f"a {WINDOW_ROWS}-row window" in text


def test_the_command_prints_every_vocabulary_and_both_paths_on_the_model_and_writes_the_json(
        small_pool, tmp_path, capsys, monkeypatch, model_path):
    monkeypatch.setattr(figures_paths, "BLOCK", 3)
    monkeypatch.setattr(bench_figures, "bench_models", lambda extra: [("bundled", model_path)])
    out = tmp_path / "f.json"
    assert main(["bench", "--figures", "--repeats", "5", "-t", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    document = json.loads(out.read_text())
    rows = document["synthetic"]
    assert [r["n_vocab"] for r in rows] == [n for _f, n in figures_vocab.VOCABULARIES]
    for _family, n_vocab in figures_vocab.VOCABULARIES:
        assert f"{n_vocab:,}" in printed
    assert all(r["samples"] == 5 and r["window_us"] > 0 for r in rows)
    (model,) = document["models"]
    assert model["name"] == "bundled" and model["n_vocab"] == 49152 and model["steps"] == 18
    for path in ("host", "graph"):  # each path timed its steps: a decode inside each step, figures after it
        cost = model[path]
        assert 0 < cost["decode_ms"] < cost["step_ms"] and cost["figures_us"] > 0
    assert "graph/host" in printed and "bundled" in printed
