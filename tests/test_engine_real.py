"""The engine on the real bundled model (SmolLM2-135M through llama.cpp).

Every window of every run here is checked for KV length == canonical_position
(``make_generation`` in conftest.py).
"""

from __future__ import annotations

import threading
import time

import pytest

from inspector.engine import Fault, FaultPlan, Generation, GenerationSettings
from inspector.engine.baseline import compare_with_plain, first_difference, plain_generation, top2_after
from inspector.engine.errors import DecodeAborted, EngineError, PromptTooLong, RepairFailed, RequestCancelled
from inspector.receipts import build_document, load_document, write_document
from inspector.sources import NgramSource, ScriptedSource

COPY = "Copy this sentence twice: The library opens at nine and closes at five."
COUNT = "Count from one to twenty in words, separated by spaces."
CODE = ("Rewrite this Python function with a list comprehension:\n\ndef squares(xs):\n"
        "    out = []\n    for x in xs:\n        out.append(x * x)\n    return out")
STORY = "Write two sentences about a lighthouse keeper."
MAX = 48


def ngram():
    """n-gram source that also matches single tokens: on COPY the bundled model
    then gets 4 windows (the default n_min=2 gives 1)."""
    return NgramSource(n_max=3, n_min=1)


@pytest.fixture(scope="module")
def reference_run(scheduler, chat_tokens):
    """Uninterrupted greedy n-gram runs per prompt (finished ``Generation``), computed once."""
    cache: dict[tuple, Generation] = {}

    def ref(prompt: str, max_new: int = MAX) -> Generation:
        key = (prompt, max_new)
        if key not in cache:
            g = Generation(scheduler, ngram(), chat_tokens(prompt), GenerationSettings(max_new_tokens=max_new))
            g.run()
            g.close()
            cache[key] = g
        return cache[key]

    return ref


@pytest.fixture(scope="module")
def greedy_reference(reference_run):
    """Generated tokens of the uninterrupted greedy n-gram run of a prompt."""
    return lambda prompt, max_new=MAX: list(reference_run(prompt, max_new).generated)


def first_window_committing(run: Generation, at_least: int, from_window: int = 1) -> int:
    return next(r.window_index for r in run.receipts
                if r.window_index >= from_window and r.canonical_prediction_count >= at_least)


@pytest.mark.parametrize("prompt", [COPY, CODE, STORY], ids=["copy", "code", "story"])
def test_greedy_speculative_output_equals_plain_greedy_or_the_divergence_is_reported(
    prompt, make_generation, chat_tokens, scheduler
):
    tokens = chat_tokens(prompt)
    g = make_generation(NgramSource(), tokens, max_new_tokens=64)
    g.run()
    assert g.receipts, "the n-gram source proposed nothing: the test would not exercise speculation"
    plain, divergence = compare_with_plain(scheduler, tokens, g.generated, g.settings)
    if divergence is not None:
        # Reported, with the margin: only a near-tie may flip under batch arithmetic.
        print(divergence.describe())
        assert divergence.margin < 1.0, divergence.describe()
    else:
        assert g.generated == plain


def test_case_max_tokens_inside_a_long_proposal(make_generation, chat_tokens):
    """cases.json `max-tokens-inside-a-long-proposal`: exactly 1, 2, 3 tokens with 10-token proposals."""
    tokens = chat_tokens("Copy this line exactly: one two three four five six seven eight nine ten eleven twelve")
    for n in (1, 2, 3):
        script = ScriptedSource(proposals=[list(tokens[-12:-2])] * 3, clip=True)
        for source in (NgramSource(n_max=3, n_min=1), script):
            g = make_generation(source, tokens, max_new_tokens=n, draft_max=10)
            g.run()
            assert len(g.generated) == n
            assert g.finish_reason == "length"
            assert g.kv_length() == g.canonical_position
            g.close()


def test_case_end_of_turn_inside_an_accepted_run(make_generation, chat_tokens, scheduler, runtime):
    """cases.json `end-of-turn-inside-an-accepted-run`: nothing after end-of-turn leaks."""
    tokens = chat_tokens("Reply with just the word: yes")
    answer = plain_generation(scheduler, tokens, GenerationSettings(max_new_tokens=20)).generated
    assert runtime.is_eog(answer[-1]), "the model's greedy answer should end with end-of-turn"
    extra = runtime.tokenize(" and then five more", False, False)[:5]
    source = ScriptedSource(continuation=answer + extra)
    g = make_generation(source, tokens, max_new_tokens=40, draft_max=16)
    g.run()
    assert g.generated == answer
    assert g.finish_reason == "eog"
    assert all(not runtime.is_eog(t) for t in g.generated[:-1])
    last = g.receipts[-1]
    assert last.disposition in ("full_accept", "stopped")
    assert last.committed_tokens[-1] == answer[-1]
    assert g.summary().generated_tokens == len(answer)


def test_case_cancel_mid_commit_on_a_full_accept(make_generation, chat_tokens, scheduler):
    """cases.json `cancel-mid-commit-on-a-full-accept`."""
    tokens = chat_tokens(COUNT)
    greedy = plain_generation(scheduler, tokens, GenerationSettings(max_new_tokens=8)).generated
    source = ScriptedSource(proposals=[greedy[:4]])
    g = make_generation(source, tokens, max_new_tokens=20, faults=FaultPlan([Fault("cancel", 1, 3)]))
    g.start()
    base = g.canonical_position
    with pytest.raises(RequestCancelled, match="request cancelled"):
        g.step()
    assert g.generated == greedy[:2]
    assert g.canonical_position == base + 2
    assert g.kv_length() == base + 2
    kinds = [e.kind for e in g.events if e.window == 1]
    assert kinds == ["verify", "commit", "commit", "repair", "error", "discard"]
    repair = next(e for e in g.events if e.kind == "repair")
    assert repair.detail.startswith("trim")
    assert [d.reason for d in g.discards] == ["execution_failed"]
    assert g.discards[0].partial.canonical_position == base + 2
    assert source.discarded == [(b"script:1", "execution_failed")]


def test_case_callback_failure_then_resume(make_generation, chat_tokens, greedy_reference, reference_run):
    """cases.json `callback-failure-then-resume`: raise at the 2nd commit token of the 3rd window.

    On the bundled model the 3rd window is a first mismatch at index 0 (it
    commits one token), so the fault targets the first window from the 3rd
    on that commits at least 2 tokens (the 4th here).
    """
    tokens = chat_tokens(COPY)
    w = first_window_committing(reference_run(COPY), 2, from_window=3)
    g = make_generation(ngram(), tokens, max_new_tokens=MAX, faults=FaultPlan([Fault("callback_error", w, 2)]))
    with pytest.raises(EngineError, match="injected"):
        g.run()
    kinds = [e.kind for e in g.events if e.window == w]
    assert kinds[:5] == ["verify", "commit", "commit", "repair", "error"]
    assert g.kv_length() == g.canonical_position
    g.resume()
    g.run()
    assert g.generated == greedy_reference(COPY)


@pytest.mark.parametrize("fault", [
    "cancel@W:3", "callback_error@W:1", "trim_failure", "position_drift@2",
    "late_proposal", "negative_token_id", "token_id_too_large", "too_many_tokens",
])
def test_each_fault_repairs_before_its_error_and_resume_matches_an_uninterrupted_run(
    fault, make_generation, chat_tokens, greedy_reference, reference_run
):
    """W: the first window that commits at least 3 tokens in the uninterrupted run."""
    tokens = chat_tokens(COPY)
    fault = fault.replace("W", str(first_window_committing(reference_run(COPY), 3)))
    plan = FaultPlan([Fault.parse(fault)])
    g = make_generation(ngram(), tokens, max_new_tokens=MAX, faults=plan)
    errors = []
    while not g.finished:
        try:
            g.run()
        except EngineError as exc:
            errors.append(exc)
            window = g.events[-2].window if g.events[-1].kind == "discard" else g.events[-1].window
            seq = [e.kind for e in g.events if e.window == window and e.kind != "discard"]
            assert seq[0] == "verify" and seq[-2:] == ["repair", "error"], seq
            assert set(seq[1:-2]) <= {"commit"}
            if isinstance(exc, RepairFailed):
                assert g.session_retired and g.kv_length() is None
            else:
                assert g.kv_length() == g.canonical_position
            g.resume()
        assert len(errors) <= 1
    assert plan.fired, f"fault {fault} never fired"
    assert g.generated == greedy_reference(COPY)
    if fault.split("@")[0] in ("cancel", "callback_error", "trim_failure"):
        assert len(errors) == 1
    else:
        assert errors == [] and len(g.discards) == 1


def test_cancel_while_verifying_aborts_the_decode_and_leaves_the_kv_canonical(
    make_generation, chat_tokens, greedy_reference
):
    """Cancellation in flight through llama.cpp's abort callback (llama_decode returns 2)."""
    tokens = chat_tokens(COPY)
    source = ngram()
    holder = {}
    inner = source.propose

    def propose_then_cancel(request):
        p = inner(request)
        if p is not None and not holder.get("done"):
            holder["done"] = True
            holder["g"].cancel()  # the user presses Stop while the proposal is being verified
        return p

    source.propose = propose_then_cancel
    g = make_generation(source, tokens, max_new_tokens=MAX)
    holder["g"] = g
    with pytest.raises(RequestCancelled):
        g.run()
    assert g.kv_length() == g.canonical_position
    assert [e.kind for e in g.events][-2:] == ["repair", "discard"] or "error" in [e.kind for e in g.events]
    g.resume()
    g.run()
    assert g.generated == greedy_reference(COPY)


def test_a_decode_aborted_by_the_abort_callback_keeps_nothing_of_the_batch(runtime, scheduler, chat_tokens):
    tokens = chat_tokens(COUNT)
    stop = threading.Event()
    stop.set()

    def op(rt):
        sid = rt.open_session()
        try:
            rt.prefill(sid, tokens[:-1], 0)
            with pytest.raises(DecodeAborted):
                rt.decode_rows(sid, tokens[-8:], len(tokens) - 1, stop)
            rt.trim(sid, len(tokens) - 1)
            return rt.kv_length(sid)
        finally:
            rt.drop_session(sid)

    assert scheduler.execute("test", -1, op).value == len(tokens) - 1


def test_a_prompt_longer_than_the_context_is_refused_before_any_decode(make_generation, runtime):
    g = make_generation(NgramSource(), [1] * (runtime.n_ctx + 5), max_new_tokens=4)
    with pytest.raises(PromptTooLong, match=f"prompt is {runtime.n_ctx + 5} tokens"):
        g.start()
    assert not [e for e in g.events if e.kind == "prefill"]


def test_stop_strings_match_across_tokens_on_committed_text_only(make_generation, chat_tokens, runtime, scheduler):
    tokens = chat_tokens(COUNT)
    plain = plain_generation(scheduler, tokens, GenerationSettings(max_new_tokens=30))
    text = plain.text.text
    # A stop string that spans a token boundary.
    pieces = [runtime.token_piece(t).decode("utf-8", "replace") for t in plain.generated]
    j = next(i for i in range(2, len(pieces)) if len(pieces[i]) > 1 and len(pieces[i - 1]) > 1)
    before = "".join(pieces[:j])
    stop = pieces[j - 1][-2:] + pieces[j][:2]
    g = make_generation(NgramSource(n_max=2, n_min=1), tokens, max_new_tokens=30, stop=(stop,))
    g.run()
    assert g.finish_reason == "stop"
    assert g.text.text == text[: text.index(stop)]
    assert stop not in g.text.text
    assert len(g.generated) == j + 1 or len(g.generated) <= j + 1
    assert len(before) >= len(g.text.text)


def test_several_sessions_generate_at_once_on_their_own_kv_sequences(scheduler, chat_tokens, greedy_reference):
    prompts = [COPY, COUNT]
    gens = [Generation(scheduler, ngram(), chat_tokens(p), GenerationSettings(max_new_tokens=MAX)) for p in prompts]
    threads = [threading.Thread(target=g.run) for g in gens]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert {g.session_id for g in gens} == {gens[0].session_id, gens[1].session_id} and gens[0].session_id != gens[1].session_id
        for g, p in zip(gens, prompts):
            assert g.finished and g.kv_length() == g.canonical_position
            ref = greedy_reference(p)
            i = first_difference(g.generated, ref)
            if i is not None:
                # Another session's cells change the unified KV layout and so the
                # float summation order: a near-tie may flip (seen: 0.07 logits).
                _, _, margin = top2_after(scheduler, chat_tokens(p) + ref[:i])
                print(f"{p!r}: diverged at {i} with margin {margin:.4f}")
                assert margin < 1.0
    finally:
        for g in gens:
            g.close()
    assert scheduler.totals["verify"][0] > 0


def test_seeded_temperature_sampling_is_reproducible(make_generation, chat_tokens):
    tokens = chat_tokens(STORY)
    runs = []
    for _ in range(2):
        g = make_generation(NgramSource(), tokens, max_new_tokens=24,
                            sampling=__import__("inspector.engine.settings", fromlist=["x"]).SamplingSettings(0.8, seed=7))
        g.run()
        runs.append(g.generated)
        g.close()
    assert runs[0] == runs[1] and len(runs[0]) > 0


def test_receipts_document_validates_and_reads_without_the_model(make_generation, chat_tokens, runtime, tmp_path):
    g = make_generation(NgramSource(), chat_tokens(COPY), max_new_tokens=MAX, faults=FaultPlan([Fault("late_proposal")]))
    g.run()
    doc = build_document(g, runtime, prompt_text=COPY, templated_text=None, raw=False, source_settings={"n_max": 4})
    path = write_document(doc, tmp_path / "r.json")
    back = load_document(path)
    assert len(back["windows"]) == len(g.receipts) and back["discards"][0]["reason"] == "deadline_exceeded"
    assert back["output"]["text"] == g.text.text
    w = back["windows"][0]
    assert len(w["verification_row_prediction_texts"]) == w["verification_rows"]
    assert back["summary"]["definitions"]["acceptance_rate"].startswith("accepted_proposal_tokens")


def test_request_abort_from_another_thread_stops_a_decode_in_flight(runtime, scheduler, chat_tokens):
    """The abort flag is read by llama.cpp between graph nodes, without the GIL."""
    tokens = (chat_tokens(COPY) * 6)[:200]
    stop = threading.Event()
    started = threading.Event()

    def op(rt):
        sid = rt.open_session()
        try:
            started.set()
            try:
                rt.decode_rows(sid, tokens, 0, stop)
                outcome = "finished"
            except DecodeAborted:
                outcome = "aborted"
            rt.trim(sid, 0)
            return outcome, rt.kv_length(sid), sid
        finally:
            rt.drop_session(sid)

    def press_stop():
        started.wait(10)
        time.sleep(0.02)
        stop.set()
        runtime.request_abort(0)
        runtime.request_abort(1)

    t = threading.Thread(target=press_stop)
    t.start()
    outcome, kv, sid = scheduler.execute("test", -1, op).value
    t.join()
    assert outcome == "aborted" and kv == 0


def test_a_tiny_context_caps_proposals_and_ends_with_context_full(model_path, chat_tokens):
    """n_ctx 64 with 10-token proposals: never a failed llama_decode, finish reason context_full."""
    from inspector.engine import RuntimeScheduler
    from inspector.llama.runtime import LlamaRuntime

    rt = LlamaRuntime(model_path, n_ctx=64, n_batch=64, n_seq_max=1)
    try:
        tokens = rt.prompt_tokens("Copy: one two three one two three one two three")
        assert len(tokens) < 64
        g = Generation(RuntimeScheduler(rt), ngram(), tokens, GenerationSettings(max_new_tokens=200, draft_max=10))
        g.run()
        assert g.finish_reason in ("context_full", "eog")
        if g.finish_reason == "context_full":
            assert g.canonical_position == 64 and g.kv_length() == 64
        assert all(r.position_after_verification <= 64 for r in g.receipts)
        assert not g.errors
    finally:
        rt.close()


def test_multibyte_text_split_by_real_tokens_streams_exactly_as_the_final_text(runtime):
    """CJK and emoji that the bundled vocabulary splits mid-character are joined; no U+FFFD."""
    from inspector.engine.text import CommittedText

    script = "猫は🙂が好きです。Ünïcödé ok"
    ids = runtime.tokenize(script, False, False)

    def valid(b: bytes) -> bool:
        try:
            b.decode("utf-8")
            return True
        except UnicodeDecodeError:
            return False

    assert any(not valid(runtime.token_piece(t)) for t in ids), "expected a token that splits a character"
    text = CommittedText(runtime.token_piece)
    streamed = "".join(text.push(t) for t in ids) + text.finish()
    assert streamed == text.text == script
    assert runtime.detokenize(ids) == script
