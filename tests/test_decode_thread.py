"""Every ``llama_decode`` runs on the runtime's one decode thread (``inspector.llama.decode_thread``), whichever
thread asks, as llama-server's one loop decodes for every slot: the native worker (``decode_worker.c``) where
built, else a Python thread."""

from __future__ import annotations

import threading

import pytest

import llama_cpp

from inspector.llama.decode_thread import BatchDecoder, DecodeThread, DecodeWorker


def test_calls_from_several_threads_all_run_on_one_thread_in_order():
    decoder = DecodeThread()
    ran: list[tuple[int, int]] = []

    def ask(i: int) -> None:
        decoder.call(lambda: ran.append((i, threading.get_ident())))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ask(99)
    assert sorted(i for i, _ in ran) == [0, 1, 2, 3, 99]
    assert {ident for _, ident in ran} == {decoder.ident}
    assert decoder.ident not in {t.ident for t in threads} | {threading.get_ident()}
    decoder.close()


def test_a_value_comes_back_and_an_error_is_raised_in_the_caller():
    decoder = DecodeThread()
    assert decoder.call(lambda: 41 + 1) == 42
    with pytest.raises(ZeroDivisionError):
        decoder.call(lambda: 1 / 0)
    assert decoder.call(lambda: "still serving") == "still serving"
    decoder.close()


def test_a_call_from_the_decode_thread_itself_runs_at_once():
    decoder = DecodeThread()
    assert decoder.call(lambda: decoder.call(lambda: "nested")) == "nested"
    decoder.close()


def test_a_closed_decoder_starts_again_on_the_next_call():
    decoder = DecodeThread()
    decoder.call(lambda: None)
    decoder.close()
    assert decoder.call(lambda: "again") == "again"
    decoder.close()


def _decode_from_two_threads(runtime, scheduler) -> None:
    """A prefill asked from a new thread, then a plain step from this one, on the shared runtime."""
    sid = runtime.open_session()
    try:
        tokens = runtime.tokenize("One two three four")

        def decode_on_a_thread() -> None:
            scheduler.execute("prefill", sid, lambda r: r.prefill(sid, tokens, 0))

        t = threading.Thread(target=decode_on_a_thread)
        t.start()
        t.join()
        scheduler.execute("plain", sid, lambda r: r.decode_rows(sid, [tokens[0]], len(tokens)))
    finally:
        runtime.drop_session(sid)


def test_the_runtime_decodes_on_the_native_worker_whatever_thread_asks(runtime, scheduler):
    """The install builds ``inspector/llama/decode_worker.c``; every decode runs on its one native thread."""
    assert DecodeWorker is not None, "the native decode worker did not build"
    assert runtime.decoder.native
    worker = runtime.decoder._worker
    before = worker.decodes
    _decode_from_two_threads(runtime, scheduler)
    assert worker.decodes == before + 2
    assert worker.native_id not in (0, threading.get_native_id())


def test_without_the_worker_every_decode_runs_on_the_python_decode_thread(runtime, scheduler, monkeypatch):
    fallback = BatchDecoder(runtime.ctx, native=False)
    seen: set[int] = set()
    real = fallback._thread.call
    monkeypatch.setattr(fallback._thread, "call", lambda fn: real(lambda: (seen.add(threading.get_ident()), fn())[1]))
    native = runtime.decoder
    runtime.decoder = fallback
    try:
        _decode_from_two_threads(runtime, scheduler)
        ident = fallback._thread.ident
    finally:
        runtime.decoder = native
        fallback.close()
    assert seen == {ident} and ident is not None and threading.get_ident() not in seen


def test_the_worker_returns_llama_decodes_status_and_refuses_after_close(runtime):
    decoder = BatchDecoder(runtime.ctx, native=True)
    empty = llama_cpp.llama_batch_init(1, 0, 1)
    try:
        empty.n_tokens = 0
        assert decoder.decode(empty) == -1  # llama_decode: "n_tokens == 0"
        decoder.close()
        decoder.close()  # idempotent
        with pytest.raises(RuntimeError, match="closed"):
            decoder.decode(empty)
    finally:
        llama_cpp.llama_batch_free(empty)


def test_a_draft_context_decodes_on_its_targets_thread_and_closing_it_leaves_the_target_decoding(runtime, scheduler,
                                                                                                model_path):
    """llama-server's loop decodes the draft and the target on one thread; a context per thread made the two
    OpenMP teams throttle each other (the draft source ran at ~0.7x llama-server's speed)."""
    from inspector.engine import RuntimeScheduler
    from inspector.llama.runtime import LlamaRuntime

    worker = runtime.decoder._worker
    draft = LlamaRuntime(model_path, n_ctx=128, n_batch=16, n_seq_max=1, n_threads=1)
    try:
        before = worker.decodes
        _decode_from_two_threads(draft, RuntimeScheduler(draft))
        assert worker.decodes == before + 2  # the draft's decodes ran on the target's worker thread
    finally:
        draft.close()
    before = worker.decodes
    _decode_from_two_threads(runtime, scheduler)  # the target goes on after the draft closed
    assert worker.decodes == before + 2 and not worker.closed
