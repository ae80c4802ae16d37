"""Which controls each window state enables (``inspector.session.run_states``), without Qt or a model."""

from __future__ import annotations

import subprocess
import sys

import pytest

from inspector.session.run_states import (
    BUSY, CONTROLS, ERROR, IDLE, LOADING, PAUSED, RUNNING, SERVING, STATE_LABELS, TOKEN_HOLD, control_states,
    state_label,
)

ALL_STATES = (IDLE, LOADING, RUNNING, PAUSED, TOKEN_HOLD, ERROR, BUSY, SERVING)


def enabled(state, **kw) -> set[str]:
    return {k for k, v in control_states(state, **kw).items() if v}


def test_every_state_decides_every_control_and_has_a_label():
    for state in ALL_STATES:
        assert tuple(control_states(state)) == CONTROLS
        assert state in STATE_LABELS


def test_idle_with_a_live_session_can_start_a_run_and_change_every_setting():
    assert enabled(IDLE) == {"run", "step_window", "step_token", "faults", "setup", "choose_model", "live_options",
                             "make_draft", "open_receipts"}


def test_a_saved_session_is_read_only_until_a_new_live_session():
    for origin in ("document", "autosave"):
        assert enabled(IDLE, origin=origin) == {"make_draft", "open_receipts"}


def test_while_a_receipts_file_opens_no_run_starts_and_no_second_file_opens():
    on = enabled(IDLE, opening=True)
    assert not on & {"run", "step_window", "step_token", "open_receipts"}
    assert {"setup", "faults"} <= on


def test_running_allows_pause_stop_and_faults_but_no_setting_changes():
    assert enabled(RUNNING) == {"pause", "stop", "faults", "live_options", "make_draft"}


def test_paused_continues_steps_or_stops_and_run_reads_continue():
    on = control_states(PAUSED)
    assert on["run"] and on["run_continues"] and on["step_window"] and on["step_token"] and on["stop"]
    assert not on["pause"] and not on["setup"] and not on["resume"] and not on["open_receipts"]


def test_holding_before_a_commit_can_also_pause():
    assert enabled(TOKEN_HOLD) == enabled(PAUSED) | {"pause"}


def test_an_error_offers_resume_and_stop_but_no_fault_buttons():
    assert enabled(ERROR) == {"stop", "resume", "live_options", "make_draft"}


def test_loading_a_model_leaves_only_opening_receipts_and_the_live_options():
    assert enabled(LOADING) == {"live_options", "make_draft", "open_receipts"}


def test_busy_measuring_or_comparing_refuses_runs_and_keeps_the_settings_editable():
    on = enabled(BUSY)
    assert not on & {"run", "pause", "step_window", "step_token", "stop", "resume", "faults"}
    assert {"setup", "choose_model"} <= on


def test_serving_refuses_runs_and_settings_but_another_model_may_be_chosen():
    assert enabled(SERVING) == {"faults", "choose_model", "live_options", "make_draft"}  # faults: armed on a slot
    assert state_label(SERVING, "http://127.0.0.1:8080") == "serving · http://127.0.0.1:8080"


def test_make_draft_is_disabled_while_a_draft_is_being_made():
    for state in ALL_STATES:
        assert not control_states(state, making_draft=True)["make_draft"]


@pytest.mark.parametrize("state", ALL_STATES)
def test_run_reads_continue_exactly_when_paused_or_holding(state):
    assert control_states(state)["run_continues"] == (state in (PAUSED, TOKEN_HOLD))


def test_the_status_label_names_the_state_the_detail_and_a_read_only_session():
    assert state_label(RUNNING) == "running"
    assert state_label(ERROR, "boom") == "error — Resume continues · boom"
    assert state_label(IDLE, origin="document").startswith("viewing saved receipts (read only)")
    assert state_label(IDLE, "x", origin="autosave").startswith("viewing an autosave")
    assert state_label(PAUSED, origin="document") == "paused"


def test_the_rules_and_step_control_import_no_qt():
    code = ("import sys, inspector.session.run_states, inspector.session.step_control; "
            "sys.exit(any(m.startswith('PySide6') for m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
