"""Every ``llama_decode`` runs on the runtime's one decode thread (``inspector.llama.decode_thread``), whichever
thread asks, as llama-server's one loop decodes for every slot."""

from __future__ import annotations

import threading

import pytest

from inspector.llama.decode_thread import DecodeThread


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


def test_every_decode_of_the_real_runtime_runs_on_its_decode_thread(runtime, scheduler):
    seen: set[int] = set()
    real = runtime.decoder.call

    def spy(fn):
        return real(lambda: (seen.add(threading.get_ident()), fn())[1])

    runtime.decoder.call = spy
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
        runtime.decoder.call = real
        runtime.drop_session(sid)
    assert seen == {runtime.decoder.ident}
