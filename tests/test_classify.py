"""Pure decision functions on tiny token lists (SPEC steps 5 and 8), incl. the
`classify-table` and `disposition-table` cases of ../shared/cases/cases.json."""

import json
from pathlib import Path

import pytest

from inspector.engine.classify import WindowDecision, classify_window, window_disposition

CASES = {c["id"]: c for c in json.loads((Path(__file__).parent / "data" / "cases.json").read_text())}


def test_case_classify_table_gives_the_expected_accepted_commit_rejected():
    case = CASES["classify-table"]
    got = []
    for row in case["input"]["rows"]:
        eog = set(row["eog"])
        d = classify_window(row["proposal"], row["predictions"], row["generated"], row["max_new"], eog.__contains__)
        got.append([d.accepted, d.commit_count, d.rejected])
    assert got == case["expect"]["accepted_commit_rejected"]


def test_case_disposition_table_gives_the_expected_dispositions():
    case = CASES["disposition-table"]
    got = []
    for row in case["input"]["rows"]:
        a, c, r = row["decision"]
        got.append(window_disposition(WindowDecision(a, c, r), row["proposal_len"], row["committed"], row["reached_stop"]))
    assert got == case["expect"]["disposition"]


def test_spec_example_stop_on_second_token_of_full_accept_is_stopped():
    d = classify_window([11, 12, 13], [11, 12, 13, 14], 0, 8, lambda t: False)
    assert window_disposition(d, 3, 2, True) == "stopped"
    assert min(d.accepted, 2) == 2


def test_fewer_predictions_than_rows_is_an_error_naming_both_counts():
    with pytest.raises(ValueError, match="observed 2, expected 4"):
        classify_window([1, 2, 3], [1, 2], 0, 8, lambda t: False)


def test_empty_proposal_is_an_error():
    with pytest.raises(ValueError):
        classify_window([], [1], 0, 8, lambda t: False)


def test_mismatch_at_first_token_commits_only_the_correction():
    assert classify_window([5, 6], [7, 6, 1], 0, 8, lambda t: False) == WindowDecision(0, 1, True)


def test_max_new_tokens_inside_an_accepted_run_stops_the_walk_there():
    # 1 token left: the first accepted proposal token is the last one.
    assert classify_window([5, 6, 7], [5, 6, 7, 8], 7, 8, lambda t: False) == WindowDecision(1, 1, False)


def test_eog_proposal_token_that_matches_ends_the_window_without_the_tokens_after_it():
    d = classify_window([5, 2, 7], [5, 2, 7, 8], 0, 8, {2}.__contains__)
    assert d == WindowDecision(2, 2, False)
