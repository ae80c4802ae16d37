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
