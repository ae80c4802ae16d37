"""Baseline (plain decoding of the same prompt) and Compare (several configurations), issue 5.

Nothing here relies on the model's words: the n-gram sources match single tokens
(their first query always proposes: a templated prompt's last token, a newline,
occurs earlier in the prompt), the planted divergence sits inside the plain run
whatever its length, and token counts are compared with the run's own finish.
"""

from __future__ import annotations

import csv
import json

import pytest

from inspector.bench.compare import parse_config, run_compare
from inspector.bench.compare_result import CompareConfig
from inspector.bench.compare_result import write_compare_csv, write_compare_json
from inspector.engine import Generation, GenerationSettings, RuntimeScheduler
from inspector.engine.baseline import plain_generation, run_baseline
from inspector.receipts import validate_document
from inspector.session.document import build_document
from inspector.sources import NgramSource

COPY = "Copy this sentence twice: The library opens at nine and closes at five."


class PerturbedRuntime:
    """The real runtime, except that the prediction for stream position ``position``
    is replaced by another token: a scripted perturbation of the sampling."""

    def __init__(self, runtime, position: int):
        self._rt = runtime
        self.position = position

    def __getattr__(self, name):
        return getattr(self._rt, name)

    def decode_rows(self, sid, tokens, position, abort=None):
        preds = self._rt.decode_rows(sid, tokens, position, abort)
        for i in range(len(preds)):
            if position + i + 1 == self.position:
                preds[i] = (preds[i] + 1) % self._rt.n_vocab
        return preds


def test_the_baseline_reports_no_divergence_when_speculation_equals_plain_decoding(make_generation, chat_tokens,
                                                                                    scheduler):
    g = make_generation(NgramSource(n_min=1), chat_tokens(COPY), max_new_tokens=32)
    g.run()
    assert g.receipts
    result = run_baseline(scheduler, g)
    if result.divergence is not None:  # a near-tie flipped by batch arithmetic: reported, never hidden
        print(result.describe())
        assert result.divergence.margin < 1.0
    else:
        assert result.identical and list(result.plain_tokens) == g.generated
        assert result.describe().startswith("identical to plain decoding")
    assert result.plain_decode_tokens_per_s > 0 and result.observed_speedup > 0


def test_the_baseline_finds_a_divergence_planted_in_the_speculative_run(runtime, scheduler, chat_tokens):
    """Generated token 5 is perturbed (or the plain run's last token, when the model's
    answer is shorter: the divergence must be inside both streams)."""
    tokens = chat_tokens(COPY)
    plain = plain_generation(scheduler, tokens, GenerationSettings(max_new_tokens=16)).generated
    planted = min(5, len(plain) - 1)  # generated-token index
    perturbed = RuntimeScheduler(PerturbedRuntime(runtime, len(tokens) + planted))
    g = Generation(perturbed, NgramSource(n_min=1), tokens, GenerationSettings(max_new_tokens=16))
    try:
        g.run()
    finally:
        g.close()
    result = run_baseline(scheduler, g)
    d = result.divergence
    assert d is not None, "the planted divergence was not found"
    assert d.index == planted
    assert d.speculative_token == g.generated[planted]
    assert d.plain_token == result.plain_tokens[planted]
    # The one-row re-decode of the prefix agrees with the plain run, or that is a near-tie.
    assert d.top_token == d.plain_token or d.margin < 1.0
    assert d.speculative_token != d.plain_token
    assert d.margin >= 0
    assert f"generated token {planted}" in result.describe()
    doc = build_document(g, runtime, prompt_text=COPY, templated_text=None, raw=False, baseline=result)
    validate_document(doc)
    assert doc["baseline"]["divergence"]["index"] == planted and doc["baseline"]["identical"] is False
    assert doc["baseline"]["divergence"]["plain_text"] == runtime.token_text(d.plain_token)


def test_compare_runs_every_configuration_and_exports_json_and_csv(scheduler, chat_tokens, tmp_path):
    configs = [CompareConfig("ngram 4", "ngram", 4, {"n_min": 1}), CompareConfig("plain", "none", 0),
               CompareConfig("broken", "no-such-source", 4)]
    seen = []
    result = run_compare(scheduler, chat_tokens(COPY), configs, GenerationSettings(max_new_tokens=12),
                         progress=lambda i, n, label: seen.append((i, n, label)))
    assert [r.config.label for r in result.rows] == ["ngram 4", "plain", "broken"]
    assert seen[0][2] == "plain", "the plain reference runs first"
    ngram, plain, broken = result.rows
    assert plain.speedup_vs_plain == pytest.approx(1.0) and plain.same_output_as_plain
    for row in (ngram, plain):  # 12 tokens, unless the model's answer ended earlier
        assert row.summary.generated_tokens == 12 or (
            row.summary.finish_reason == "eog" and 0 < row.summary.generated_tokens < 12)
    if ngram.same_output_as_plain:
        assert ngram.summary.generated_tokens == plain.summary.generated_tokens
    assert ngram.summary.windows >= 1
    assert ngram.speedup_vs_plain > 0
    assert ngram.summary.accepted_length_histogram and sum(ngram.summary.accepted_length_histogram) == ngram.summary.windows
    assert "no-such-source" in broken.error
    doc = json.loads(write_compare_json(result, tmp_path / "c.json").read_text())
    assert [r["config"]["label"] for r in doc["rows"]] == ["ngram 4", "plain", "broken"]
    assert doc["rows"][0]["summary"]["decode_tokens_per_s"] > 0
    rows = list(csv.DictReader(write_compare_csv(result, tmp_path / "c.csv").open()))
    assert len(rows) == 3 and rows[1]["label"] == "plain"


def test_compare_exports_say_what_ran_model_weight_form_threads_and_llama_cpp_commit(
        scheduler, runtime, chat_tokens, tmp_path):
    result = run_compare(scheduler, chat_tokens(COPY), [parse_config("none")], GenerationSettings(max_new_tokens=4))
    doc = json.loads(write_compare_json(result, tmp_path / "c.json").read_text())
    assert doc["model"]["path"] == str(runtime.model_path)
    assert doc["model"]["weights"] == runtime.info.main_weight_type == "Q4_1"  # the bundled file
    assert doc["model"]["n_threads"] == runtime.n_threads and doc["model"]["llama_cpp"]["commit"] == "0c1e570"
    row = next(csv.DictReader(write_compare_csv(result, tmp_path / "c.csv").open()))
    assert (row["model"], row["weights"], row["threads"], row["llama_cpp_commit"]) == (
        str(runtime.model_path), "Q4_1", str(runtime.n_threads), "0c1e570")


def test_compare_without_a_plain_configuration_adds_the_reference_run(scheduler, chat_tokens):
    """The reference runs first; ``row_done`` hands over the rows finished so far after each configuration
    (issue 36: the window shows them as they come), each with its speedup against the reference."""
    partials = []
    result = run_compare(scheduler, chat_tokens(COPY), [parse_config("ngram:draft_max=2"), parse_config("none")],
                         GenerationSettings(max_new_tokens=8), row_done=partials.append, keep_runs=True)
    assert [r.config.source for r in result.rows] == ["ngram", "none"]  # a "none" row: no extra reference
    assert [[r.config.source for r in p.rows] for p in partials] == [["none"], ["ngram", "none"]]
    assert partials[-1].rows == result.rows[:2] and len(partials[-1].runs) == 2
    result = run_compare(scheduler, chat_tokens(COPY), [parse_config("ngram:draft_max=2")],
                         GenerationSettings(max_new_tokens=8), row_done=partials.append)
    assert [r.config.source for r in result.rows] == ["none", "ngram"]
    assert result.rows[1].config.draft_max == 2 and result.rows[1].same_output_as_plain is not None
    assert [len(p.rows) for p in partials[2:]] == [1, 2] and partials[-1].rows[1].speedup_vs_plain is not None


def test_a_compare_configuration_is_parsed_from_source_and_key_values():
    c = parse_config("ngram:draft_max=16,n_min=1")
    assert (c.source, c.draft_max, c.options) == ("ngram", 16, {"n_min": "1"})
    assert parse_config("none").draft_max == 0
    assert parse_config("ngram:label=fast").label == "fast"
    with pytest.raises(ValueError, match="draft_max must be an integer"):
        parse_config("ngram:draft_max=x")
    with pytest.raises(ValueError, match="not key=value"):
        parse_config("ngram:oops")
