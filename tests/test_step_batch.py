"""The batched schedule's rules on tiny token lists, with a fake decode (issue 53; ``inspector.engine.step_batch``)
and the serve slots' pure rules: which idle slot a request takes, what slots share, how many fit."""

from __future__ import annotations

import threading
import time

import pytest

from inspector.engine import RuntimeScheduler
from inspector.engine.errors import DecodeAborted, DecodeFailed
from inspector.serve.slot import ServeSlot
from inspector.serve.slots import check_parallel, pick_slot
from inspector.sources.slot_memory import SlotMemory


class Decodes:
    """A fake runtime's decode: records each step's rows (token, position, seq, output)."""

    def __init__(self, fail: bool = False) -> None:
        self.steps: list[list[tuple]] = []
        self.fail = fail

    def __call__(self, rows) -> None:
        self.steps.append([(r.token, r.position, r.seq, r.output) for r in rows])
        if self.fail:
            raise DecodeFailed(1, len(rows), rows[0].position)


def _scheduled(n_batch: int = 8, fail: bool = False):
    decodes = Decodes(fail)
    sched = RuntimeScheduler(object())
    steps = sched.batch_steps(decodes, n_batch)
    return sched, steps, decodes


def _join_on_thread(sched, steps, sid, tokens, position, all_outputs, out: dict, abort=None, leave=True):
    """Join from a thread of its own (as a slot does, under the scheduler lock); keep what join returned or
    raised in ``out[sid]``; ``leave``: the session's request ends after this decode (deactivate)."""

    def op(rt):
        try:
            out[sid] = steps.join(sid, tokens, position, all_outputs, abort)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out[sid] = exc
        if leave:
            steps.deactivate(sid)

    t = threading.Thread(target=sched.execute, args=("verify", sid, op))
    t.start()
    return t


def _wait_pending(steps, n: int) -> None:
    t = time.monotonic() + 5
    while time.monotonic() < t:
        with steps.condition:
            if len(steps._pending) >= n:  # noqa: SLF001 - the test waits for its threads to have joined
                return
        time.sleep(0.005)
    raise AssertionError("the joiners did not arrive")


def test_a_step_waits_for_every_active_session_then_carries_generating_rows_first_and_prompts_up_to_n_batch():
    sched, steps, decodes = _scheduled(n_batch=8)
    with steps.condition:
        for sid in (0, 1, 2):
            steps.activate(sid)
    out: dict = {}
    prompt = list(range(100, 110))  # 10 prompt tokens: 4 fit beside the 4 generating rows, 6 in the next step
    threads = [_join_on_thread(sched, steps, 2, prompt, 0, False, out)]
    _wait_pending(steps, 1)
    assert decodes.steps == [], "a step ran before every active session joined"
    threads.append(_join_on_thread(sched, steps, 1, [7, 8, 9], 20, True, out))
    _wait_pending(steps, 2)
    assert decodes.steps == []
    threads.append(_join_on_thread(sched, steps, 0, [5], 30, True, out))
    for t in threads:
        t.join(5)
    first, second = decodes.steps
    assert first == [(5, 30, 0, True), (7, 20, 1, True), (8, 21, 1, True), (9, 22, 1, True),
                     (100, 0, 2, False), (101, 1, 2, False), (102, 2, 2, False), (103, 3, 2, False)]
    assert second == [(100 + i, i, 2, i == 9) for i in range(4, 10)]
    assert (out[0].output_first, out[0].batch_first, out[0].outputs) == (0, 0, 1)
    assert (out[1].output_first, out[1].batch_first, out[1].outputs) == (1, 1, 3)
    assert (out[2].output_first, out[2].batch_first, out[2].outputs, out[2].steps) == (0, 5, 1, (1, 2))
    kinds = [(p.session_id, p.kind, p.rows) for p in steps.steps[0].parts]
    assert kinds == [(0, "plain", 1), (1, "draft", 3), (2, "prompt", 4)]
    # each session's KV length once the step is decoded: the position after its last row in it
    assert [p.kv_end for p in steps.steps[0].parts] == [31, 23, 4]
    assert [p.kv_end for p in steps.steps[1].parts] == [10]
    assert steps.step_count == 2 and steps.busy_per_decode == 2.0


def test_generating_rows_that_would_pass_n_batch_wait_for_the_next_step_whole():
    sched, steps, decodes = _scheduled(n_batch=4)
    with steps.condition:
        steps.activate(0)
        steps.activate(1)
    out: dict = {}
    a = _join_on_thread(sched, steps, 0, [1, 2, 3], 0, True, out)
    _wait_pending(steps, 1)
    b = _join_on_thread(sched, steps, 1, [4, 5], 0, True, out)
    a.join(5)
    b.join(5)
    assert [[r[2] for r in step] for step in decodes.steps] == [[0, 0, 0], [1, 1]]


def test_a_cancelled_joiner_leaves_before_its_rows_are_decoded():
    sched, steps, decodes = _scheduled()
    with steps.condition:
        steps.activate(0)
        steps.activate(1)
    out: dict = {}
    abort = threading.Event()
    t = _join_on_thread(sched, steps, 0, [1, 2], 0, True, out, abort=abort)
    _wait_pending(steps, 1)
    abort.set()
    t.join(5)
    assert isinstance(out[0], DecodeAborted)
    assert decodes.steps == []
    b = _join_on_thread(sched, steps, 1, [3], 0, True, out)  # the other session goes on alone
    b.join(5)
    assert decodes.steps == [[(3, 0, 1, True)]]


def test_a_failed_decode_reaches_every_joiner_of_its_step():
    sched, steps, decodes = _scheduled(fail=True)
    with steps.condition:
        steps.activate(0)
        steps.activate(1)
    out: dict = {}
    a = _join_on_thread(sched, steps, 0, [1], 0, True, out)
    _wait_pending(steps, 1)
    b = _join_on_thread(sched, steps, 1, [2], 0, True, out)
    a.join(5)
    b.join(5)
    assert len(decodes.steps) == 1
    assert isinstance(out[0], DecodeFailed) and isinstance(out[1], DecodeFailed)


def test_a_session_without_a_request_decodes_at_once_when_no_request_runs():
    sched, steps, decodes = _scheduled()
    out: dict = {}
    t = _join_on_thread(sched, steps, 3, [9], 0, True, out, leave=False)  # nobody active: at once
    t.join(5)
    assert decodes.steps == [[(9, 0, 3, True)]]


def test_the_next_step_waits_until_the_rows_of_the_last_one_were_read():
    sched, steps, decodes = _scheduled()
    reading = threading.Event()
    go_on = threading.Event()

    def slow_reader(rt):
        steps.join(0, [1], 0, True)
        reading.set()
        go_on.wait(5)  # still reading its logits: nothing may decode over them

    with steps.condition:
        steps.activate(0)
    a = threading.Thread(target=sched.execute, args=("verify", 0, slow_reader))
    a.start()
    assert reading.wait(5)
    out: dict = {}
    b = _join_on_thread(sched, steps, 5, [2], 0, True, out, leave=False)  # a guest: blocked by the lock
    time.sleep(0.1)
    assert len(decodes.steps) == 1
    go_on.set()
    a.join(5)
    with steps.condition:
        steps.deactivate(0)
    b.join(5)
    assert len(decodes.steps) == 2


class _Pool:
    """What a ``ServeSlot`` reads of its pool, for the pure tests."""

    def __init__(self) -> None:
        self.scheduler = RuntimeScheduler(object())
        self.shared_memory: dict = {}


def _slots(n: int) -> list[ServeSlot]:
    pool = _Pool()
    return [ServeSlot(i, pool) for i in range(n)]


def test_a_request_takes_the_idle_slot_holding_most_of_its_prompt_else_the_least_recently_used():
    a, b, c = _slots(3)
    assert pick_slot([a, b, c], [1, 2, 3]) is c, "at start: the last slot, as llama-server's <= picks"
    a.cached, b.cached = [1, 2, 3, 4], [1, 9]
    assert pick_slot([a, b, c], [1, 2, 3, 7]) is a  # 3/4 of the prompt cached
    a.cached = [5, 5]
    a.last_used, b.last_used, c.last_used = 3.0, 1.0, 2.0
    assert pick_slot([a, b, c], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]) is b  # 1/11 < 0.1 similarity: LRU


def test_slots_share_ngram_mods_pool_and_keep_every_other_sources_memory_apart():
    shared: dict = {}
    one, two = SlotMemory(shared), SlotMemory(shared)
    one[("ngram-mod", 24, 1024)] = "pool"
    one[("ngram-map-k", 3, 16, 1)] = "map"
    assert two[("ngram-mod", 24, 1024)] == "pool"
    assert ("ngram-map-k", 3, 16, 1) not in two
    assert len(one) == 2 and len(two) == 1


@pytest.mark.parametrize("n_parallel, n_ctx, n_batch, words", [
    (0, 2048, 512, "1..256"), (100_000, 2048, 512, "1..256"), (300, 2048, 512, "1..256"),
    (200, 1024, 512, "do not fit"), (8, 2048, 4, "n_batch"),
])
def test_a_slot_count_that_cannot_run_is_refused_in_one_line(n_parallel, n_ctx, n_batch, words):
    with pytest.raises(ValueError, match=words) as e:
        check_parallel(n_parallel, n_ctx, n_batch)
    assert "\n" not in str(e.value)
    check_parallel(4, 2048, 512)


def test_serve_options_hand_every_slot_option_on_with_the_same_default():
    from dataclasses import fields

    from inspector.serve.server import ServeOptions
    from inspector.serve.slots import SlotOptions

    names = [f.name for f in fields(SlotOptions)]
    assert ServeOptions().slot_options() == SlotOptions()
    given = ServeOptions(n_parallel=3, schedule="locked", kv_unified=True, spec_max_active=2, cache_ram_mib=0,
                         cache_idle_slots=False, max_queue=5).slot_options()
    assert [getattr(given, n) for n in names] == [3, "locked", True, 2, 0, False, 5]


def test_a_guest_decodes_at_once_with_what_joined_even_while_an_active_session_has_not():
    """The rollback probe runs on an active slot's own thread: waiting for that slot would wait forever."""
    sched, steps, decodes = _scheduled()
    with steps.condition:
        steps.activate(0)
        steps.activate(1)
    out: dict = {}
    a = _join_on_thread(sched, steps, 0, [1], 0, True, out, leave=False)
    _wait_pending(steps, 1)
    g = _join_on_thread(sched, steps, 7, [2], 0, True, out, leave=False)  # session 1 never joins
    a.join(5)
    g.join(5)
    assert decodes.steps == [[(1, 0, 0, True), (2, 0, 7, True)]]
