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


def test_empty_proposal_error_names_the_expected_and_observed_counts_in_words():
    with pytest.raises(ValueError) as err:
        classify_window([], [1], 0, 8, lambda t: False)
    assert str(err.value) == "cannot classify an empty proposal: expected 1 or more tokens, observed 0"


def test_max_new_tokens_reached_in_the_middle_of_an_accepted_run_stops_the_walk_at_that_token():
    # 2 generated, limit 4: proposal tokens 0 and 1 bring the count to 3 and 4; the walk stops after
    # token 1 (accepted 2, committed 2), never reaching token 2 or the bonus row.
    assert classify_window([5, 6, 7], [5, 6, 7, 8], 2, 4, lambda t: False) == WindowDecision(2, 2, False)
    # one more token of room: all three accepted and committed, no bonus (2 + 3 = 5 = the limit)
    assert classify_window([5, 6, 7], [5, 6, 7, 8], 2, 5, lambda t: False) == WindowDecision(3, 3, False)
    # room for the bonus: 2 + 4 <= 6
    assert classify_window([5, 6, 7], [5, 6, 7, 8], 2, 6, lambda t: False) == WindowDecision(3, 4, False)


def test_an_uncommitted_correction_row_is_not_committed_and_only_the_rows_after_it_are_branch():
    from inspector.engine.classify import row_outcomes

    # row 1 mismatched (9 != 2) but the window stopped after row 0: row 1 is the correction-to-be, not a
    # branch; rows 2 and 3 are conditioned on the rejected token 2.
    assert row_outcomes([1, 2, 3], [1, 9, 7, 8], committed=1) == ["accepted", "not committed", "branch", "branch"]
    assert row_outcomes([1, 2, 3], [1, 9, 7, 8], committed=2) == ["accepted", "correction", "branch", "branch"]
