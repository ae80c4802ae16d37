"""The synthetic source (issue 39 item 3): the plain run's tokens, each draft position right with a given
conditional rate. Pure tests on token lists, then two short runs on the bundled model: the output is
plain decoding's, and more is accepted per window at a higher rate."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import ProposalRequest
from inspector.engine.settings import GenerationSettings
from inspector.sources.registry import SourceContext, check_source_options, describe_source, make_source
from inspector.sources.synthetic import (
    LEFT_PLAIN,
    PLAIN_DONE,
    SyntheticSource,
    constant_rate,
    expected_length,
    wrong_token,
)

PROMPT = (1, 2, 3)
PLAIN = tuple(range(100, 160))
N_VOCAB = 1000


def request(generated, cap=5, prompt=PROMPT):
    """The engine's query after ``generated`` tokens (token ids) of the plain run."""
    return ProposalRequest(tuple(prompt) + tuple(generated), len(prompt), len(generated), cap, time.perf_counter() + 60)


def source(rates, seed=7, **kw):
    return SyntheticSource(rates, N_VOCAB, plain=PLAIN, seed=seed, **kw)


def test_each_position_is_right_at_its_conditional_rate_given_the_earlier_ones_were():
    rates = (0.8, 0.6, 0.5)
    s = source(rates)
    reached, right = [0] * 5, [0] * 5
    for q in range(20_000):
        g = 1 + q % 50
        p = s.propose(request(PLAIN[:g], cap=5)).token_ids
        for i, token in enumerate(p):
            reached[i] += 1
            if token == PLAIN[g + i]:
                right[i] += 1
            else:
                assert i == len(p) - 1, "the proposal ends at its first wrong token"
    for i in range(5):  # positions past the list take the last rate
        assert right[i] / reached[i] == pytest.approx(rates[min(i, 2)], abs=0.03), (i, right[i], reached[i])
    mean = 1 + sum(right) / 20_000  # tokens committed per window, as the run's statistics count them
    assert mean == pytest.approx(expected_length(rates, 5), abs=0.05)


def test_rate_one_proposes_the_whole_plain_continuation_up_to_the_cap_and_rate_zero_a_wrong_first_token():
    s = source((1.0,))
    assert s.propose(request(PLAIN[:4], cap=6)).token_ids == PLAIN[4:10]
    assert s.propose(request(PLAIN[:57], cap=6)).token_ids == PLAIN[57:]  # the plain run's end
    z = source((0.0,))
    for g in range(1, 30):
        p = z.propose(request(PLAIN[:g])).token_ids
        assert len(p) == 1 and p[0] != PLAIN[g] and p[0] == wrong_token(PLAIN[g], N_VOCAB) < N_VOCAB
    assert wrong_token(N_VOCAB - 1, N_VOCAB) == 0


def test_the_same_seed_gives_the_same_proposals_and_off_the_plain_run_nothing_is_proposed():
    a, b = source((0.6,), seed=3), source((0.6,), seed=3)
    assert [a.propose(request(PLAIN[:g])) for g in range(1, 40)] == [b.propose(request(PLAIN[:g])) for g in range(1, 40)]
    off = source((0.6,)).propose(request(PLAIN[:3] + (5,)))
    assert isinstance(off, NoProposal) and off.reason == LEFT_PLAIN
    done = source((0.6,)).propose(request(PLAIN))
    assert isinstance(done, NoProposal) and done.reason == PLAIN_DONE


def test_mean_accepted_is_a_constant_rate_with_that_mean_tokens_per_window():
    for k in (1, 3, 5, 8):
        for mean in (1.0, 1.5, 2.0, k + 0.5, k + 1.0):
            a = constant_rate(mean, k)
            assert 0.0 <= a <= 1.0
            assert expected_length((a,), k) == pytest.approx(min(mean, k + 1), abs=1e-6)
    assert constant_rate(2.0, 64) == pytest.approx(0.5, abs=1e-6)  # 1 + a/(1-a) for a long draft


def test_the_draft_cost_is_spent_per_proposed_token():
    s = source((1.0,), draft_cost_ms=2.0)
    t = time.perf_counter()
    assert len(s.propose(request(PLAIN[:1], cap=5)).token_ids) == 5
    assert (time.perf_counter() - t) * 1000 >= 10.0 and s.spent_ms >= 10.0


def test_options_are_declared_and_checked():
    d = describe_source("synthetic")
    assert d.runs_target and not d.self_contained and not d.loads_model
    assert check_source_options("synthetic", {"rates": "0.8, 0.6,0.5"}) == {"rates": "0.8,0.6,0.5"}
    assert check_source_options("synthetic", {"rates": "0.8/0.6"}) == {"rates": "0.8,0.6"}  # where commas part options
    for bad in ({"rates": "0.8,1.5"}, {"rates": "x"}, {"rates": "0.5", "mean_accepted": "3"}, {"seed": "-1"},
                {"draft_cost_ms": "1", "draft_cost_c1": "0.5"}):
        with pytest.raises(ValueError, match="synthetic"):
            check_source_options("synthetic", bad)


def test_a_draft_cost_given_as_a_fraction_of_c1_takes_the_stored_plain_step():
    rt = SimpleNamespace(n_vocab=N_VOCAB)
    made = make_source("synthetic", SourceContext(rt, row_costs=(12.0, 13.0)), {"draft_cost_c1": "0.25"})
    assert made.draft_cost_ms == pytest.approx(3.0) and made.settings()["draft_cost_ms"] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="stored cost model"):
        make_source("synthetic", SourceContext(rt), {"draft_cost_c1": "0.25"})


def synthetic_run(make_generation, runtime, scheduler, tokens, rates, max_new=40, draft_max=5):
    """A run of the synthetic source at ``rates`` on the bundled model; returns (generation, source)."""
    settings = GenerationSettings(max_new_tokens=max_new, draft_max=draft_max)
    ctx = SourceContext(runtime, settings, prompt_tokens=tuple(tokens), scheduler=scheduler, memory={})
    src = make_source("synthetic", ctx, {"rates": rates, "seed": "1"})
    g = make_generation(src, tokens, max_new_tokens=max_new, draft_max=draft_max)
    g.run()
    return g, src


def test_real_runs_equal_plain_decoding_and_accept_more_at_a_higher_rate(make_generation, runtime, scheduler,
                                                                       chat_tokens):
    tokens = chat_tokens("Write a short story about a lighthouse keeper.")
    per_window = {}
    for rates in ("0.3", "0.9"):
        g, src = synthetic_run(make_generation, runtime, scheduler, tokens, rates)
        assert g.generated == list(src.plain), f"rates {rates}: the output parted from plain decoding"
        assert g.receipts
        for r in g.receipts:  # a wrong token is really rejected; every right one accepted
            right = next((i for i, (t, p) in enumerate(zip(r.proposal_token_ids, src.plain[r.generated_token_count
                          - r.canonical_prediction_count:])) if t != p), len(r.proposal_token_ids))
            assert r.accepted_proposal_tokens == right
        per_window[rates] = sum(r.accepted_proposal_tokens for r in g.receipts) / len(g.receipts)
    print(f"accepted per window: {per_window}")
    assert per_window["0.9"] > per_window["0.3"] + 0.5


def test_the_cost_models_prediction_at_rate_one_and_zero():
    from inspector.bench.synthetic_table import predicted_speedup
    from inspector.llama.cost_model import CostModel

    cm = CostModel((10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0))
    assert predicted_speedup(cm, 1.0, 8, 0.0) == pytest.approx(cm.speedup(9))  # 9 tokens per c(9)
    assert predicted_speedup(cm, 0.0, 8, 0.0) == pytest.approx(10.0 / 11.0)  # 1 token per c(2)
    assert predicted_speedup(cm, 0.0, 8, 0.5) == pytest.approx(10.0 / 16.0)  # + half a c(1) for the token
    assert predicted_speedup(cm, 0.7, 8, 0.25) < predicted_speedup(cm, 0.7, 8, 0.0) < predicted_speedup(cm, 0.9, 8, 0.0)


def test_the_window_makes_the_synthetic_page_from_its_declaration(qtbot):
    from inspector.gui.panel.source_options import build_source_page

    page, controls = build_source_page(describe_source("synthetic"))
    qtbot.addWidget(page)
    assert set(controls) == {"rates", "mean_accepted", "seed", "draft_cost_ms", "draft_cost_c1"}  # not draft_max
    assert controls["rates"].value() == "0.7" and controls["seed"].value() == 0


def test_the_table_on_the_bundled_model_and_bench_synthetic(runtime, chat_tokens, monkeypatch, capsys):
    from inspector.bench import synthetic_table as table
    from inspector.cli import bench_costs, bench_synthetic
    from inspector.cli.main import main

    result = table.synthetic_table(runtime, chat_tokens("Write a short story about a lighthouse keeper."),
                                   max_new_tokens=24, k_max=9, repeats=1, mean_lengths=(1, 6), cost_fractions=(0, 0.5))
    by = {(r["mean_length"], r["cost_fraction"]): r for r in result["rows"]}
    # The predictions are of the c(k) measured here (its order is timing too): at tau 1 each window verifies one
    # wrong token in 2 rows and commits 1 token, c(1)/c(2); with half a c(1) spent on the token, c(1)/(c(2) + c(1)/2).
    c1, c2 = result["c_ms"][:2]
    assert by[(1, 0)]["predicted_speedup"] == pytest.approx(c1 / c2)
    assert by[(1, 0.5)]["predicted_speedup"] == pytest.approx(c1 / (c2 + 0.5 * c1))
    assert by[(6, 0)]["measured_mean_length"] > by[(1, 0)]["measured_mean_length"] == 1.0
    # measured tokens/s ratios exist for every cell (their order is timing: bench --synthetic's to show, no test's)
    assert all(isinstance(r["speedup"], float) and r["speedup"] > 0 for r in by.values())
    assert "tau run" in table.format_synthetic_table(result)
    fake = SimpleNamespace(prompt_tokens=lambda text, **kw: [1, 2, 3], close=lambda: None)
    monkeypatch.setattr(bench_costs, "open_target_runtime", lambda args, **kw: fake)
    monkeypatch.setattr(bench_synthetic, "synthetic_table", lambda rt, tokens, **kw: result)  # measured above
    assert main(["bench", "--synthetic", "--max-tokens", "24", "--tasks", "copy-exact,open-ended"]) == 0
    out = capsys.readouterr().out
    assert out.count("synthetic acceptance, draft max 8, 24 tokens") == 2  # a table per example
    assert out.index("copy-exact:\n") < out.index("open-ended:\n") < out.index("  all examples ")
    assert main(["bench", "--synthetic", "--tasks", "no-such-example"]) == 2
    assert "unknown task no-such-example" in capsys.readouterr().err


def test_run_with_the_synthetic_source_from_the_command_line_gives_plain_decodings_text(tmp_path, capsys):
    from inspector.cli.main import main

    texts, docs = {}, {}
    for source, extra in (("none", []), ("synthetic", ["--source-option", "rates=0.7,0.5",
                                                        "--source-option", "seed=2"])):
        receipts = tmp_path / f"{source}.json"
        assert main(["run", "--example", "open-ended", "--max-tokens", "32", "--draft-max", "4", "--source", source,
                     *extra, "--receipts", str(receipts)]) == 0
        texts[source] = capsys.readouterr().out.split("--- summary ---")[0]
        docs[source] = json.loads(receipts.read_text("utf-8"))
    assert texts["synthetic"] == texts["none"] and len(texts["none"]) > 40
    settings = docs["synthetic"]["settings"]["source"]
    assert settings["name"] == "synthetic" and settings["settings"]["rates"] == "0.7,0.5"
    assert settings["settings"]["plain_tokens"] == 32 and docs["synthetic"]["windows"]
