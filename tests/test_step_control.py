"""StepControl (pause / step window / step token / stop / resume / break-on) without Qt or a model.

A ``Generation`` on the fake runtime runs on its own thread under ``StepControl.run``, as on
the window's engine thread; the test thread plays the GUI. Every announcement is recorded
with a snapshot of the generation taken on the engine thread, so what the run had done when
it paused or held is exact. Every wait has a timeout: a bug fails, never hangs.
"""

from __future__ import annotations

import threading

import pytest

from inspector.engine import Fault, FaultPlan, Generation, GenerationObserver, GenerationSettings, RuntimeScheduler
from inspector.session.run_states import PAUSED, RUNNING, TOKEN_HOLD
from inspector.session.step_control import MAX_AUTO_RESUMES, StepControl

from fake_runtime import FakeRuntime, ListSource, follow

TIMEOUT = 10.0


class Recorder:
    """The callbacks the worker would turn into signals, recorded with what the generation had done."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.gen: Generation | None = None
        self.announced: list[tuple[str, str, int, int]] = []
        """(state, detail, decode steps, generated tokens) per announcement."""
        self.holds: list[tuple] = []
        """(window, row, token, position, generated tokens) per hold."""
        self.errors: list[tuple[str, bool]] = []
        """(message, paused already) per error."""
        self.step: StepControl | None = None

    def announce(self, state: str, detail: str) -> None:
        g = self.gen
        with self.cv:
            self.announced.append((state, detail, g.decode_step, g.generated_count))
            self.cv.notify_all()

    def hold(self, window, row, token, position) -> None:
        with self.cv:
            self.holds.append((window, row, token, position, self.gen.generated_count))
            self.cv.notify_all()

    def error(self, message: str) -> None:
        with self.cv:
            self.errors.append((message, self.step.paused))
            self.cv.notify_all()

    def states(self, state: str) -> list[tuple[str, str, int, int]]:
        with self.cv:
            return [a for a in self.announced if a[0] == state]

    def wait_for(self, state: str, count: int = 1) -> tuple[str, str, int, int]:
        """The ``count``-th announcement of ``state`` (waits for it)."""
        with self.cv:
            ok = self.cv.wait_for(lambda: len([a for a in self.announced if a[0] == state]) >= count, TIMEOUT)
            assert ok, f"no {state} #{count}; announced {self.announced}"
            return [a for a in self.announced if a[0] == state][count - 1]

    def wait_holds(self, count: int) -> tuple:
        with self.cv:
            assert self.cv.wait_for(lambda: len(self.holds) >= count, TIMEOUT), f"holds so far: {self.holds}"
            return self.holds[count - 1]


class StepHooks(GenerationObserver):
    def __init__(self, step: StepControl) -> None:
        self.step = step

    def before_commit(self, window, row, token, position) -> None:
        self.step.before_commit(window, row, token, position)


class SteppedRun:
    """A generation driven by ``StepControl.run`` on a thread of its own."""

    def __init__(self, proposals, *, max_new=8, faults=(), break_on=("error",), start_paused=False,
                 first_action="", hooks=None):
        self.rec = Recorder()
        self.step = StepControl(announce=self.rec.announce, hold=self.rec.hold)
        self.rec.step = self.step
        self.rt = FakeRuntime()
        self.gen = Generation(RuntimeScheduler(self.rt), ListSource(proposals), [100, 101, 102],
                              GenerationSettings(max_new_tokens=max_new, draft_max=16),
                              faults=FaultPlan(list(faults)), observer=(hooks or StepHooks)(self.step))
        self.rec.gen = self.gen
        self.step.begin_run(start_paused=start_paused, first_action=first_action, break_on=break_on)
        self.reason: str | None = None
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        self.gen.start()
        self.reason = self.step.run(self.gen, error=self.rec.error)

    def join(self) -> str:
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive(), f"the run did not end; announced {self.rec.announced}"
        return self.reason

    def stop(self) -> None:
        self.step.request_stop(then=self.gen.cancel)


def plain_output(proposals, max_new=8) -> list[int]:
    """What the same generation commits when nothing steps, pauses or fails."""
    g = Generation(RuntimeScheduler(FakeRuntime()), ListSource(proposals), [100, 101, 102],
                   GenerationSettings(max_new_tokens=max_new, draft_max=16))
    g.run()
    return g.generated


def test_pause_takes_effect_between_windows_and_continue_finishes_the_run():
    class PauseInWindowTwo(StepHooks):
        def before_commit(self, window, row, token, position):
            if window == 2 and row == 0:
                self.step.request_pause()  # pressed while window 2 commits: the window ends first
            super().before_commit(window, row, token, position)

    run = SteppedRun([follow(2)] * 4, max_new=30, hooks=PauseInWindowTwo)
    _state, _detail, steps, generated = run.rec.wait_for(PAUSED)
    # the prefill's first token, then two windows of 2 accepted + bonus
    assert steps == 2 and len(run.gen.receipts) == 2 and generated == 1 + 3 + 3
    assert run.rt.kv_length(run.gen.session_id) == run.gen.canonical_position
    run.step.request_continue()
    assert run.join() == "length"
    assert len(run.rec.states(PAUSED)) == 1
    assert run.gen.generated == plain_output([follow(2)] * 4, max_new=30)


def test_step_window_runs_exactly_one_decode_step_then_pauses():
    proposals = [follow(3), [103 + 5, 999], None, follow(2)]  # after 103 (prefill) and 104..107: 108 right
    run = SteppedRun(proposals, max_new=40, first_action="window")
    for n in (1, 2, 3, 4, 5):
        _state, _detail, steps, _generated = run.rec.wait_for(PAUSED, n)
        assert steps == n
        assert len(run.gen.receipts) + run.gen.plain_steps == n
        run.step.request_step_window()
    run.step.request_continue()
    assert run.join() == "length"


def test_step_token_holds_before_each_token_and_each_request_releases_exactly_one():
    run = SteppedRun([follow(3)], max_new=6, first_action="token")
    first = run.rec.wait_holds(1)
    assert first == (None, 0, 103, 3, 0)  # the prefill's token, held before its commit: nothing generated yet
    _state, _detail, steps, generated = run.rec.wait_for(TOKEN_HOLD, 1)
    assert run.step.holding and (steps, generated) == (0, 0)  # announced in start(), before any decode step
    for n in range(2, 7):
        run.step.request_step_token()
        window, row, token, position, generated = run.rec.wait_holds(n)
        assert generated == n - 1 and token == 102 + n and position == 2 + n
        assert (window, row) == ((1, n - 2) if n <= 5 else (None, 0))  # 3 accepted + bonus, then a plain step
        assert len(run.rec.holds) == n  # one per request, never more
        if n == 2:
            assert run.rec.wait_for(TOKEN_HOLD, 2)[1] == "window 1 row 0"
    assert run.rec.wait_for(TOKEN_HOLD, 6)[1] == "window (plain step) row 0"
    run.step.request_step_token()  # commits the 6th token: the run ends (max tokens)
    assert run.join() == "length"
    assert run.gen.generated == [103, 104, 105, 106, 107, 108] and len(run.rec.holds) == 6


def test_step_token_while_paused_holds_before_the_next_token_without_committing_it():
    run = SteppedRun([follow(2)], max_new=6, start_paused=True)
    run.rec.wait_for(PAUSED)
    run.step.request_step_token()
    # the first token was committed by start() before the pause; the hold is window 1's row 0
    assert run.rec.wait_holds(1)[:2] == (1, 0) and run.gen.generated_count == 1
    run.step.request_continue()
    assert run.join() == "length"
    assert len(run.rec.holds) == 1


def test_stop_while_holding_before_a_commit_ends_the_run_stopped_without_that_token():
    run = SteppedRun([follow(4)], max_new=10, first_action="token")
    run.rec.wait_holds(1)
    run.step.request_step_token()
    assert run.rec.wait_holds(2)[:3] == (1, 0, 104)  # after the prefill's 103: window 1's row 0
    run.stop()
    assert run.join() == "stopped"
    g = run.gen
    assert g.generated == [103]  # the held second token was never committed
    assert run.rt.kv_length(g.session_id) == g.canonical_position
    assert not run.step.holding


def test_stop_while_paused_ends_the_run_stopped():
    run = SteppedRun([follow(2)], start_paused=True)
    run.rec.wait_for(PAUSED)
    run.stop()
    assert run.join() == "stopped" and run.gen.decode_step == 0


def test_a_stop_requested_before_the_run_starts_ends_it_at_once():
    step = StepControl()
    step.begin_run()
    step.request_stop()
    g = Generation(RuntimeScheduler(FakeRuntime()), ListSource([follow(2)]), [100, 101, 102],
                   GenerationSettings(max_new_tokens=8, draft_max=16), observer=StepHooks(step))
    g.start()
    assert step.run(g) == "stopped" and g.decode_step == 0


def test_break_on_first_mismatch_pauses_after_such_a_window():
    proposals = [follow(2), [107, 999, 5], follow(2)]  # window 2 (after 103..106): 107 accepted, 999 mismatches
    run = SteppedRun(proposals, max_new=30, break_on=("first_mismatch",))
    _state, _detail, steps, _generated = run.rec.wait_for(PAUSED)
    g = run.gen
    assert steps == 2 and [r.disposition for r in g.receipts] == ["full_accept", "first_mismatch"]
    run.step.request_continue()
    assert run.join() == "length"
    assert len(run.rec.states(PAUSED)) == 1
    assert g.generated == plain_output(proposals, max_new=30)


def test_break_on_is_read_at_each_step_boundary_so_turning_it_off_lets_the_run_go_on():
    proposals = [[104, 999], [106, 999], follow(2)]  # each: one accepted, then a mismatch
    run = SteppedRun(proposals, max_new=20, break_on=("first_mismatch",))
    run.rec.wait_for(PAUSED)
    run.step.set_break_on(())
    run.step.request_continue()
    assert run.join() == "length" and len(run.rec.states(PAUSED)) == 1


def test_break_on_first_mismatch_does_not_pause_while_stepping_token_by_token():
    # the prefill's 103, window 1's 104 (accepted) and 105 (correction), a plain step's 106
    run = SteppedRun([[104, 999]], max_new=4, break_on=("first_mismatch",), first_action="token")
    for n in (1, 2, 3, 4):
        run.rec.wait_holds(n)
        run.step.request_step_token()
    assert run.join() == "length"
    assert run.gen.receipts[0].disposition == "first_mismatch" and not run.rec.states(PAUSED)


def test_break_on_discard_pauses_after_the_step_that_discarded_a_proposal():
    run = SteppedRun([follow(3)], max_new=10, faults=[Fault("position_drift")], break_on=("discard",))
    _state, _detail, steps, generated = run.rec.wait_for(PAUSED)
    # the prefill's token and the plain step's
    assert steps == 1 and [d.reason for d in run.gen.discards] == ["position_mismatch"] and generated == 2
    run.step.request_continue()
    assert run.join() == "length"


def test_an_error_pauses_before_anyone_hears_of_it_and_resume_finishes_the_text():
    proposals = [follow(4), follow(2)]
    run = SteppedRun(proposals, max_new=12, faults=[Fault("callback_error", 1, 2)])
    _state, _detail, steps, generated = run.rec.wait_for(PAUSED)
    # the prefill's token, then window 1's failing callback ran after its token 2 was committed
    assert steps == 1 and generated == 1 + 2
    message, paused_when_told = run.rec.errors[0]
    assert "injected" in message.lower() and paused_when_told
    g = run.gen
    assert run.rt.kv_length(g.session_id) == g.canonical_position
    run.step.request_resume()
    assert run.join() == "length"
    assert ("running", "resumed") in [a[:2] for a in run.rec.announced]
    assert g.generated == plain_output([follow(4), follow(2)], max_new=12)


def test_an_error_leaves_step_token_mode_so_resume_runs_on_without_holding():
    run = SteppedRun([follow(4)], max_new=8, faults=[Fault("callback_error", 1, 1)], first_action="token")
    assert run.rec.wait_holds(1)[:2] == (None, 0)  # the prefill's token
    run.step.request_step_token()  # commits it (no fault fires on the first token)
    assert run.rec.wait_holds(2)[:2] == (1, 0)
    run.step.request_step_token()  # commits row 0: its callback fails
    run.rec.wait_for(PAUSED)
    holds = len(run.rec.holds)
    run.step.request_resume()
    assert run.join() == "length"
    assert len(run.rec.holds) == holds


def test_an_error_without_break_on_error_resumes_by_itself():
    run = SteppedRun([follow(4), follow(2)], max_new=12, faults=[Fault("callback_error", 1, 2)], break_on=())
    assert run.join() == "length"
    assert len(run.rec.errors) == 1 and not run.rec.errors[0][1] and not run.rec.states(PAUSED)
    assert run.gen.generated == plain_output([follow(4), follow(2)], max_new=12)


def test_automatic_resumes_stop_after_the_maximum_and_the_run_pauses():
    step = StepControl()
    step.begin_run(break_on=())
    assert [step.after_error() for _ in range(MAX_AUTO_RESUMES)] == [False] * MAX_AUTO_RESUMES
    assert step.after_error() is True and step.paused
    step.begin_run(break_on=())  # a new run counts from zero
    assert step.after_error() is False and not step.paused


def test_a_failed_resume_pauses_again_before_it_is_reported():
    run = SteppedRun([follow(4)], max_new=8, faults=[Fault("callback_error", 1, 2)])
    run.rec.wait_for(PAUSED)
    original = run.gen.resume
    calls = []

    def failing_resume():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("disk on fire")
        original()

    run.gen.resume = failing_resume
    run.step.request_resume()
    run.rec.wait_for(PAUSED, 2)
    assert run.rec.errors[-1] == ("resume failed: disk on fire", True)
    run.step.request_resume()
    assert run.join() == "length" and len(calls) == 2


def test_step_window_counts_down_only_steps_that_ended():
    step = StepControl()
    step.begin_run(first_action="window")
    assert step.wait_to_go() == "go"
    assert step.after_step() is True  # the one step ran: pause
    step.request_continue()
    assert step.after_step() is False


@pytest.mark.parametrize("first_action, paused", [("", False), ("window", False), ("token", False)])
def test_begin_run_starts_running_unless_asked_to_start_paused(first_action, paused):
    step = StepControl()
    step.request_pause()
    step.begin_run(first_action=first_action)
    assert step.paused is paused and step.wait_to_go() == "go"
    step.begin_run(start_paused=True)
    assert step.paused


def test_announcements_are_made_without_the_lock_held():
    """A GUI callback may call back into StepControl (as a direct-connected slot would)."""
    seen = []
    step = None

    def announce(state, detail):
        seen.append(state)
        if state == PAUSED:
            step.request_continue()  # would deadlock if the lock were held

    step = StepControl(announce=announce)
    step.begin_run(start_paused=True)
    assert step.wait_to_go() == "go" and seen == [PAUSED]
    assert RUNNING not in seen
