"""The cost model says, in words, why verification costs what it costs (issue 13 item 1).
Pure figures (no model); the real model's weight types come from its GGUF header."""

from inspector.llama.cost_model import CostModel, verify_cost_diagnosis
from inspector.llama.model_file import bundled_model_path, check_gguf


def test_a_steep_curve_on_a_type_without_a_multi_row_kernel_says_so_and_names_the_type():
    text = verify_cost_diagnosis(CostModel((6.0, 11.5, 16.0, 22.0)), (("Q4_1", 700), ("Q8_0", 300)))
    assert "Q4_1 (70% of the matrix bytes; Q8_0 30%)" in text and "c(2)/c(1) = 1.92" in text
    assert "no multi-row kernel for Q4_1" in text and "Q8_0, Q4_0" in text


def test_a_flat_curve_says_extra_rows_are_cheap():
    text = verify_cost_diagnosis(CostModel((6.0, 6.6, 7.0, 7.5)), (("Q8_0", 1000),))
    assert "Extra rows are cheap" in text and "raise draft max" in text


def test_a_curve_in_between_names_the_break_even():
    text = verify_cost_diagnosis(CostModel((6.0, 9.0, 11.0, 13.0)), (("Q4_0", 1000),))
    assert "partly batched" in text and "4-row window" in text


def test_the_bundled_models_weight_types_come_from_its_header():
    info = check_gguf(bundled_model_path())
    assert info.main_weight_type == "Q4_1"
    assert [t for t, _b in info.weight_types] == sorted({t for t, _b in info.weight_types},
                                                       key=dict(info.weight_types).get, reverse=True)


def test_the_original_layout_is_the_model_file_itself_not_a_conversion():
    from inspector.llama.quantize import weight_form

    path, converted = weight_form(bundled_model_path(), "Q4_1")
    assert not converted and path == bundled_model_path()


def test_the_layout_table_reads_per_weight_type():
    from inspector.bench.weights import format_weights

    row = {"weight_type": "Q8_0", "path": "m.gguf", "size_bytes": 145_000_000, "converted": True,
           "row_ms": (6.0, 7.0), "ceiling": 1.71, "best_rows": 2, "diagnosis": "weights: Q8_0 (100%)",
           "plain_tps": 100.0, "ngram_tps": 250.0, "ngram_draft_max": 16, "ngram_over_plain": 2.5,
           "fraction_of_ceiling": 0.8, "acceptance_rate": 0.9, "same_as_original": {"copy": True, "story": False},
           "top_token_differs": 0.021, "best_draft_max": 16}
    text = format_weights({"layouts": [row], "task": "copy", "max_tokens": 8})
    assert "Q8_0    c(k) ms = 1:6.0 2:7.0   ceiling 1.71x at 2 rows" in text
    assert "2.50x" in text and "2.1%" in text and "copy yes, story NO" in text


def test_an_unknown_weight_type_is_refused_before_anything_loads(capsys):
    from inspector.cli.main import main

    assert main(["bench", "--weights", "Q4_1,Q9_9"]) == 2
    assert "unknown weight type Q9_9" in capsys.readouterr().err


def test_compare_defaults_add_the_draft_max_the_measured_curve_implies():
    from inspector.bench.compare import default_configs

    assert [c.draft_max for c in default_configs()] == [0, 4, 8, 16]
    flat = CostModel(tuple(6.0 + 0.5 * k for k in range(16)))  # the ceiling's best window: 16 rows
    assert [c.draft_max for c in default_configs(flat)] == [0, 4, 8, 16, 15]
    steep = CostModel((6.0, 12.0, 18.0, 24.0, 30.0, 31.0, 40.0, 48.0))
    assert default_configs(steep)[-1].label == f"ngram draft_max {steep.best_rows - 1} (the cost model's best)"


def test_auto_draft_max_is_long_on_a_flat_curve_and_short_on_a_steep_one():
    from inspector.llama.cost_model import auto_draft_max

    flat = CostModel((6.0, 6.3, 6.6, 6.9, 7.2, 7.5, 7.8, 8.1))  # every extra row cheap: the 8-row window is best
    steep = CostModel((6.0, 8.0, 11.5, 16.0, 21.0, 26.0, 31.0, 36.0))  # with all accepted 3 rows: 18/11.5 = 1.57x
    assert flat.best_draft_max == 7 and auto_draft_max(flat).value == 7
    assert steep.best_draft_max == 2
    # At 90% acceptance per token 2 rows commit 1.9 tokens per 8 ms, 3 rows 2.71 per 11.5 ms: 1 proposal token.
    assert steep.best_draft_max_at(0.9) == 1 and auto_draft_max(steep).value == 1
    assert "if 90% of proposal tokens are accepted (2 if all are; ceiling 1.57x)" in auto_draft_max(steep).why


def test_lower_acceptance_never_asks_for_longer_proposals():
    curve = CostModel((12.2, 19.6, 26.3, 31.8, 38.7, 48.8, 61.9, 54.8, 62.1, 66.0, 73.4, 78.8, 96.5, 111.8, 97.1, 104.1))
    lengths = [curve.best_draft_max_at(a) for a in (1.0, 0.95, 0.9, 0.8, 0.5)]
    assert lengths[0] == curve.best_draft_max == 14 and lengths == sorted(lengths, reverse=True)


def test_auto_draft_max_without_a_curve_or_without_a_paying_window_is_the_default():
    from inspector.engine.settings import DEFAULT_DRAFT_MAX
    from inspector.llama.cost_model import auto_draft_max

    assert auto_draft_max(None).value == DEFAULT_DRAFT_MAX == 8
    assert "no cost model is stored" in auto_draft_max(None).why
    never = CostModel((6.0, 12.5, 19.0, 26.0))  # every batch dearer than its rows as plain steps
    assert never.best_draft_max == 0
    choice = auto_draft_max(never)
    assert choice.value == DEFAULT_DRAFT_MAX and "no proposal beats a plain step" in choice.why
