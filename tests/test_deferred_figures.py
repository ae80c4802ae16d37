"""Plain steps' probability figures summarised in batches (issue 41, ``inspector.engine.deferred_figures``):
the same figures as one row at a time, ready for every reader, and summarised together. The batches serve the
sampler basis and builds without the C kernel; every test here but the last ones runs them (``_batches``);
the last ones check that where the kernel sums the softmax basis each row is summarised at once, in place.

The real model's plain steps go through the batches in ``test_probabilities`` (figures equal a separate
decode of the same prefix; the autosave of a real run reads back with every token's figures) and
``test_gui_probabilities`` (the token view draws pending rows without running their batch)."""

from __future__ import annotations

import json
import time
from time import perf_counter_ns

import numpy as np
import pytest

from inspector.engine import GenerationSettings, RuntimeScheduler
from inspector.engine import deferred_figures
from inspector.engine.deferred_figures import MAX_AGE_MS, DeferredFigures, FigureBatch, split_rows, summarises_at_once
from inspector.engine.generation import Generation
from inspector.engine.probabilities import summarise_rows
from inspector.engine.records import STEP
from inspector.engine.settings import SamplingSettings
from inspector.session.run_records import RecordingObserver, TokenTexts

from inspector.receipts.autosave import AutosaveWriter, read_autosave
from inspector.session.record_from_file import record_from_autosave
from inspector.session.run import RunRequest, SessionRun
from inspector.session.session_record import SessionRecord

from fake_runtime import FakeRuntime, ListSource, follow
from test_session_record import DescribedRuntime

V = 3000


@pytest.fixture(autouse=True)
def _batches(request, monkeypatch):
    """Every test runs the batches (as a build without the kernel does), unless marked ``at_once``."""
    if "at_once" not in request.keywords:
        monkeypatch.setattr(deferred_figures, "summarises_at_once", lambda sampling, top=5: False)


def _rows(n: int, seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, 3.0, size=(n, V)).astype(np.float32)


def _alone(row: np.ndarray, prediction: int):
    return summarise_rows(row[None, :], (), [prediction])


def _same(a, b) -> None:
    """The same figures, up to the last digit a batch's sums may round differently."""
    assert a.basis == b.basis and a.rows == b.rows == 1
    assert a.top_tokens == b.top_tokens and a.predicted_rank == b.predicted_rank
    assert a.proposed_p == b.proposed_p == (None,) and a.draft_q is None
    for col in ("predicted_p", "entropy", "margin"):
        assert getattr(a, col) == pytest.approx(getattr(b, col), rel=1e-3), col
    assert np.allclose(a.top_p, b.top_p, rtol=1e-3)


def test_each_row_of_a_batch_gets_the_figures_it_gets_alone():
    rows = _rows(5)
    preds = [int(r.argmax()) for r in rows]
    batch = FigureBatch(V)
    handles = [batch.add(r, p) for r, p in zip(rows, preds)]
    assert batch.pending == 5 and not any(h.ready for h in handles)
    batch.flush()
    assert batch.pending == 0 and batch.batches == 1 and all(h.ready for h in handles)
    for h, r, p in zip(handles, rows, preds):
        _same(h.value, _alone(r, p))


def test_reading_a_pending_row_summarises_its_whole_batch_once():
    rows = _rows(3)
    batch = FigureBatch(V)
    handles = [batch.add(r, int(r.argmax())) for r in rows]
    assert handles[1].predicted_p[0] > 0  # any attribute reads through
    assert all(h.ready for h in handles) and batch.batches == 1
    assert handles[2].to_json() == handles[2].value.to_json()
    assert handles[0] == handles[0].value and handles[0] != handles[1]


def test_a_full_batch_is_summarised_before_the_next_row_is_copied():
    rows = _rows(3)
    batch = FigureBatch(V, rows=2)
    handles = [batch.add(r, int(r.argmax())) for r in rows]
    assert [h.ready for h in handles] == [True, True, False]
    assert batch.pending == 1 and batch.batches == 1


def test_the_figures_are_of_the_row_as_it_was_when_copied():
    row = _rows(1)[0]
    kept = row.copy()
    batch = FigureBatch(V)
    handle = batch.add(row, int(row.argmax()))
    row[:] = 0.0  # llama.cpp's buffer holds the next decode's logits by then
    _same(handle.value, _alone(kept, int(kept.argmax())))


def test_a_batch_is_due_when_full_or_when_its_oldest_row_is_old():
    rows = _rows(2)
    batch = FigureBatch(V, rows=2)
    age = int(MAX_AGE_MS * 1e6)
    assert not batch.due()
    before = perf_counter_ns()
    batch.add(rows[0], 0)
    after = perf_counter_ns()
    assert not batch.due(before + age - 1)  # the row was copied at or after ``before``
    assert batch.due(after + age)
    batch.add(rows[1], 0)
    assert batch.due(after)


def test_a_row_of_the_wrong_length_is_refused_and_nothing_is_kept():
    batch = FigureBatch(V)
    with pytest.raises(ValueError, match="3000 logits"):
        batch.add(np.zeros(V - 1, np.float32), 0)
    assert batch.pending == 0
    with pytest.raises(ValueError, match="at least 1 row"):
        FigureBatch(V, rows=0)


def test_split_rows_keeps_every_column_of_each_row():
    rows = _rows(3)
    preds = [int(r.argmax()) for r in rows]
    whole = summarise_rows(rows, (), preds)
    parts = split_rows(whole)
    assert len(parts) == 3
    for i, part in enumerate(parts):
        assert part.row(0).top == whole.row(i).top and part.entropy == (whole.entropy[i],)
        assert part.predicted_rank == (whole.predicted_rank[i],) and part.margin == (whole.margin[i],)


class _ImmediateRuntime(FakeRuntime):
    local_logits = False  # as a RemoteRuntime: every step summarises its own row


def _run(runtime, n: int = 20, observer=None) -> Generation:
    g = Generation(RuntimeScheduler(runtime), None, [1, 2, 3], GenerationSettings(max_new_tokens=n, probabilities=True),
                   observer=observer)
    g.start()
    g.run()
    return g


def _step_figures(g: Generation) -> dict:
    return {e.position: e.probabilities for e in g.events if e.kind == STEP}


def test_a_generations_plain_steps_have_the_figures_of_summarising_each_step_alone():
    batched, alone = _run(FakeRuntime()), _run(_ImmediateRuntime())
    assert batched.generated == alone.generated and batched.plain_steps == 19
    assert alone.figures is None and batched.figures is not None
    b, a = _step_figures(batched), _step_figures(alone)
    assert sorted(b) == sorted(a) and len(b) == 19
    assert all(isinstance(p, DeferredFigures) and p.ready for p in b.values())  # the finish summarised them
    for pos in b:
        _same(b[pos].value, a[pos])
    assert batched.figures.batches < 19  # 19 rows, at most 8 per batch: fewer summaries than steps


def test_the_run_records_give_the_texts_of_every_steps_top_five_by_the_finish():
    pushed = []
    rt = FakeRuntime()
    observer = RecordingObserver(pushed.append, lambda t: f"<{t}>", rt.n_vocab)
    g = _run(rt, n=12, observer=observer)
    texts = {}
    for item in pushed:
        if isinstance(item, TokenTexts):
            texts.update(item.texts)
    tops = {t for p in _step_figures(g).values() for t in p.top_token_ids()}
    assert len(tops) > 12 and tops <= set(texts)


def test_a_resolved_stand_in_lets_go_of_its_batch():
    rows = _rows(2)
    batch = FigureBatch(V)
    handle = batch.add(rows[0], int(rows[0].argmax()))
    batch.flush()
    assert handle.ready and handle._batch is None  # the 8-row buffer is not kept alive by every kept event


def test_a_run_that_stops_early_still_gets_its_last_plain_steps_texts():
    pushed = []
    rt = FakeRuntime()
    observer = RecordingObserver(pushed.append, lambda t: f"<{t}>", rt.n_vocab)
    g = Generation(RuntimeScheduler(rt), None, [1, 2, 3], GenerationSettings(max_new_tokens=50, probabilities=True),
                   observer=observer)
    g.start()
    g.run(max_steps=5)  # stopped before the finish: no on_finish, the batch not due
    pending = [e.probabilities for e in g.events if e.kind == STEP]
    assert len(pending) == 5 and not any(p.ready for p in pending)
    observer.flush_texts()
    texts = {}
    for item in pushed:
        if isinstance(item, TokenTexts):
            texts.update(item.texts)
    assert {t for p in pending for t in p.top_token_ids()} <= set(texts)


def _autosaved_run(tmp_path, steps: int | None = None, clean: bool = True):
    """A plain run of 20 tokens (19 plain steps) on the fake runtime with an autosave; ``steps``: stop after
    that many steps. Returns (live record, generation, autosave path)."""
    model = tmp_path / "fake.gguf"
    model.write_bytes(b"GGUF fake weights")
    rt = DescribedRuntime(model)
    record, path = SessionRecord(), tmp_path / "run.jsonl"
    run = SessionRun(RuntimeScheduler(rt), RunRequest("abc", GenerationSettings(max_new_tokens=20, probabilities=True),
                                                      "list"),
                     record.apply, make_source=lambda req: ListSource([]),
                     open_autosave=lambda header: AutosaveWriter(path, header))
    g = run.prepare()
    run.start()
    for _ in run.steps() if steps is None or steps > 0 else ():
        if steps is not None and g.decode_step >= steps:
            break
    run.end(g.finish_reason or "stopped", clean=clean)
    return record, g, path


def _figures_by_position(s) -> dict:
    """Each plain step's figures (JSON form) by its token's position."""
    return {pos: p.to_json() for pos, p in s.step_probabilities.items()}


def test_an_autosave_writes_each_plain_step_without_running_its_batch_and_reads_back_every_steps_figures(tmp_path):
    live, g, path = _autosaved_run(tmp_path)
    assert g.plain_steps == 19
    assert g.figures.batches <= 3, "19 rows in batches of up to 8: the autosave ran a batch per step"
    back = record_from_autosave(path)
    assert back.skipped_lines == 0 and len(back.tokens) == len(live.tokens) == 20
    assert _figures_by_position(back) == _figures_by_position(live)
    lines = path.read_text().splitlines()
    assert any('"figures"' in line and '"kind": "step"' in line for line in lines), "later step lines carry them"


def test_a_run_stopped_with_pending_figures_writes_them_in_a_tail_line(tmp_path):
    live, g, path = _autosaved_run(tmp_path, steps=5, clean=False)
    assert [p for p in _step_figures(g).values() if p.ready] == list(_step_figures(g).values())  # closed: run
    assert '"kind": "tail"' in path.read_text().splitlines()[-1]
    back = record_from_autosave(path)
    assert back.unfinished and back.skipped_lines == 0
    assert _figures_by_position(back) == _figures_by_position(live) and len(_figures_by_position(back)) >= 5


def test_a_damaged_figures_entry_is_skipped_and_counted_and_the_others_are_kept(tmp_path):
    live, _g, path = _autosaved_run(tmp_path)
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"figures"' in line)
    rec = json.loads(lines[at])
    rec["figures"][0]["seq"] = 9999  # names no step
    lines[at] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")
    run = read_autosave(path)
    assert run.bad_lines == 1
    back = record_from_autosave(path)
    want, got = _figures_by_position(live), _figures_by_position(back)
    assert len(got) == len(want) - 1 and all(want[pos] == block for pos, block in got.items())


def test_a_row_minus_its_largest_logit_has_the_same_figures_without_the_second_subtraction():
    rows = _rows(4, seed=11)
    rows[2, :7] = -np.inf  # -inf logits (a banned token): the row's entropy is of its finite part
    predictions = [int(r.argmax()) for r in rows]
    shifted = rows - rows.max(axis=1, keepdims=True)
    for i in range(4):  # up to float32 rounding of the shifted logits
        _same(split_rows(summarise_rows(shifted, (), predictions, shifted=True))[i],
              split_rows(summarise_rows(rows, (), predictions))[i])


def test_a_row_that_cannot_be_shifted_is_copied_as_is_and_its_batch_keeps_every_rows_figures():
    rows = _rows(3, seed=5)
    rows[1, 10] = np.nan
    batch = FigureBatch(V)
    handles = [batch.add(r, int(np.nanargmax(r))) for r in rows]
    batch.flush()
    for r, h in zip(rows, handles):
        assert repr(h.value) == repr(summarise_rows(r[None, :], (), [int(np.nanargmax(r))]))  # NaN figures too


def test_the_last_plain_rows_before_windows_are_summarised_by_a_window_step_once_old():
    g = Generation(RuntimeScheduler(FakeRuntime()), ListSource([None, None, follow(2), follow(2)]), [1, 2, 3],
                   GenerationSettings(max_new_tokens=30, draft_max=4, probabilities=True))
    g.start()
    g.step()
    g.step()
    pending = list(_step_figures(g).values())
    assert len(pending) >= 2 and not any(p.ready for p in pending)
    time.sleep(MAX_AGE_MS / 1000 + 0.02)
    g.step()
    assert g.window_count == 1
    assert all(p.ready for p in pending), "a run of windows would leave them pending until the next plain step"


def test_a_run_closed_without_its_end_keeps_the_events_after_its_last_line(tmp_path):
    live, g, path = _autosaved_run(tmp_path, clean=False)  # finished, closed as a stopped run is
    assert g.finished and live.events[-1].kind == "finish"
    back = record_from_autosave(path)
    assert back.unfinished and back.skipped_lines == 0
    assert [(e.seq, e.kind) for e in back.events] == [(e.seq, e.kind) for e in live.events]


@pytest.mark.at_once
def test_with_the_kernel_a_softmax_rows_figures_are_ready_at_once_and_equal_the_batches():
    assert summarises_at_once(None) and summarises_at_once(GenerationSettings().sampling)
    assert not summarises_at_once(SamplingSettings(temperature=0.8))  # the sampler basis: numpy, batched
    assert not summarises_at_once(None, top=65)  # more tokens kept than the kernel keeps
    rows = _rows(5)
    at_once, batched = FigureBatch(V), FigureBatch(V, at_once=False)
    assert at_once.at_once and not batched.at_once
    handles = [(at_once.add(r, int(r.argmax())), batched.add(r, int(r.argmax()))) for r in rows]
    assert all(a.ready for a, _b in handles) and at_once.pending == 0 and at_once.batches == 0
    assert batched.pending == 5
    for a, b in handles:
        _same(a.value, b.value)


@pytest.mark.at_once
def test_with_the_kernel_a_generations_plain_steps_are_summarised_as_they_come():
    g = _run(FakeRuntime())
    figures = _step_figures(g)
    assert len(figures) == 19 and g.figures.at_once and g.figures.batches == 0
    alone = _step_figures(_run(_ImmediateRuntime()))
    for pos, p in figures.items():
        _same(p.value, alone[pos])
