"""Formatters pinned to literal strings (issue 42): the tests that check tooltips and tables build their
expected text with these same functions, so a formatter that changed its digits would pass them; these
do not."""

from __future__ import annotations

from inspector.engine.stats import decode_tokens_per_s
from inspector.gui.look.wording import count_noun
from inspector.gui.tokens.token_figures import margin_text, probability_text, quoted
from inspector.session.audit import compact


def test_a_probability_has_three_decimals_and_two_significant_digits_below_a_thousandth():
    assert probability_text(0.5) == "0.500"
    assert probability_text(1.0) == "1.000"
    assert probability_text(0.001) == "0.001"
    assert probability_text(0.0009996) == "1.0e-03"
    assert probability_text(3.21e-5) == "3.2e-05"
    assert probability_text(0.0) == "0.000"
    assert probability_text(None) == "—"


def test_a_margin_has_three_decimals_and_infinity_for_a_single_candidate():
    assert margin_text(0.03125) == "0.031"
    assert margin_text(12.0) == "12.000"
    assert margin_text(float("inf")) == "∞"


def test_a_token_is_quoted_with_its_whitespace_visible_and_html_escaped():
    assert quoted("a\nb\t<c>") == "&#x27;a\\nb\\t&lt;c&gt;&#x27;"
    assert quoted(" ") == "&#x27; &#x27;"


def test_decode_tokens_per_s_is_tokens_over_microseconds():
    assert decode_tokens_per_s(50, 2_000_000) == 25.0
    assert decode_tokens_per_s(0, 0) is None


def test_count_noun_and_compact_ranges():
    assert count_noun(1, "window") == "1 window"
    assert count_noun(2, "window") == "2 windows"
    assert count_noun(0, "window") == "0 windows"
    assert count_noun(1_234, "token") == "1234 tokens"
    assert compact([5, 1, 2, 3, 7, 8]) == "1-3, 5, 7-8"
    assert compact([]) == ""
