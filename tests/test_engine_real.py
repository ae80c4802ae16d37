"""The engine on the real bundled model (SmolLM2-135M through llama.cpp).

Every window of every run here is checked for KV length == canonical_position
(``make_generation`` in conftest.py).

No test relies on the model's particular words: greedy text differs between
CPUs. Situations that need particular tokens (a window that fully accepts, one
that mismatches, an end of turn, a run long enough) are built from the run's
own tokens with ``tests/scenarios.py``; fault targets come from the receipts
of an uninterrupted run of the same configuration.
"""

from __future__ import annotations

import threading
import time

import pytest

from inspector.engine import Fault, FaultPlan, Generation, GenerationSettings, RuntimeScheduler
from inspector.engine.baseline import compare_with_plain, first_difference, top2_after
from inspector.engine.classify import FROM_PREFILL
from inspector.engine.errors import DecodeAborted, EngineError, PromptTooLong, RequestCancelled
from inspector.engine.text import CommittedText
from inspector.receipts import load_document, write_document
from inspector.session.document import build_document
from inspector.sources import NgramSource, ScriptedSource
from scenarios import (ALTERNATE, EndsTurnBy, Follower, NoEndOfTurn, first_window, plain_reference,
                       run_resuming_after_each_error, assert_same_greedy_output)

COPY = "Copy this sentence twice: The library opens at nine and closes at five."
COUNT = "Count from one to twenty in words, separated by spaces."
CODE = ("Rewrite this Python function with a list comprehension:\n\ndef squares(xs):\n"
        "    out = []\n    for x in xs:\n        out.append(x * x)\n    return out")
STORY = "Write two sentences about a lighthouse keeper."
MAX = 48


def ngram():
    """n-gram source that also matches single tokens: its first query always proposes
    (a templated prompt's last token, a newline, occurs earlier in the prompt), so
    every run has a window whatever the model answers."""
    return NgramSource(n_max=3, n_min=1)


def no_end_of_turn(runtime) -> RuntimeScheduler:
    """A scheduler of the target with end-of-generation banned (``NoEndOfTurn``): a run
    always reaches its length limit, whatever the model answers."""
    return RuntimeScheduler(NoEndOfTurn(runtime))


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


@pytest.fixture(scope="module")
def follow_target(runtime):
    """The target the fault tests run on: end-of-generation banned, so every run goes
    on to ``MAX`` tokens (the windows a fault targets exist whatever the model says)."""
    return no_end_of_turn(runtime)


@pytest.fixture(scope="module")
def follow_run(follow_target, chat_tokens):
    """Uninterrupted runs of ``Follower(ALTERNATE)`` per prompt: windows that fully accept
    the target's own continuation, alternating with first mismatches at index 1."""
    cache: dict[str, Generation] = {}

    def ref(prompt: str) -> Generation:
        if prompt not in cache:
            tokens = chat_tokens(prompt)
            g = Generation(follow_target, Follower(follow_target, ALTERNATE, prompt=tokens), tokens,
                           GenerationSettings(max_new_tokens=MAX))
            g.run()
            g.close()
            cache[prompt] = g
        return cache[prompt]

    return ref


@pytest.mark.parametrize("kind", ["ngram", "follow"])
@pytest.mark.parametrize("prompt", [COPY, CODE, STORY], ids=["copy", "code", "story"])
def test_greedy_speculative_output_equals_plain_greedy_or_the_divergence_is_reported(
    prompt, kind, make_generation, chat_tokens, scheduler
):
    """``ngram``: the n-gram source (its first query always proposes); ``follow``: the
    target's own continuation with a surely rejected token every other window, so
    full accepts, first mismatches and trims happen whatever the model says."""
    tokens = chat_tokens(prompt)
    source = NgramSource(n_min=1) if kind == "ngram" else Follower(scheduler, ALTERNATE, prompt=tokens)
    g = make_generation(source, tokens, max_new_tokens=64)
    g.run()
    assert g.receipts, "the source proposed nothing: the test would not exercise speculation"
    if kind == "follow":
        assert "first_mismatch" in {r.disposition for r in g.receipts} or len(g.receipts) == 1
    plain, divergence = compare_with_plain(scheduler, tokens, g.generated, g.settings)
    if divergence is not None:
        # Reported, with the margin: only a near-tie may flip under batch arithmetic.
        print(divergence.describe())
        assert divergence.margin < 1.0, divergence.describe()
    else:
        assert g.generated == plain


def test_case_max_tokens_inside_a_long_proposal(make_generation, chat_tokens, runtime):
    """cases.json `max-tokens-inside-a-long-proposal`: exactly 1, 2, 3 tokens with 10-token proposals.

    The target has end-of-generation banned (``NoEndOfTurn``): the case needs a run
    that can reach 3 tokens, whatever the model answers. Two sources: the case's n-gram
    source, and the target's own next 10 tokens (scripted), so the limit lands inside an
    accepted run whatever the model says.
    """
    target = no_end_of_turn(runtime)
    tokens = chat_tokens("Copy this line exactly: one two three four five six seven eight nine ten eleven twelve")
    own, _ = plain_reference(target, tokens, 10)
    assert len(own) == 10
    for n in (1, 2, 3):
        script = ScriptedSource(proposals=[own] * 3, clip=True)
        for source in (NgramSource(n_max=3, n_min=1), script):
            g = make_generation(source, tokens, on=target, max_new_tokens=n, draft_max=10)
            g.run()
            assert len(g.generated) == n
            assert g.finish_reason == "length"
            assert g.kv_length() == g.canonical_position
            g.close()


ANSWER_MAX = 6
"""The end-of-turn case's answer ends by this many tokens (its end-of-turn token included)."""


def test_case_end_of_turn_inside_an_accepted_run(make_generation, chat_tokens, runtime):
    """cases.json `end-of-turn-inside-an-accepted-run`: nothing after end-of-turn leaks.

    The model's greedy answer to the case's prompt is "yes" + end-of-turn on some CPUs
    and 20 tokens of chat on others. So the target is the bundled model whose answer
    ends with its end-of-turn token by token ``ANSWER_MAX`` at the latest (``EndsTurnBy``:
    its prediction there is the end-of-turn token; an answer that ends earlier by itself
    is the model's own). The proposal is the target's own greedy answer up to and
    including its end-of-turn token, followed by five more tokens (``Follower`` with a
    tail), in one window; were a near-tie to flip under batch arithmetic, the next window
    proposes the rest of the answer again.
    """
    tokens = chat_tokens("Reply with just the word: yes")
    target = RuntimeScheduler(EndsTurnBy(runtime, len(tokens) - 1 + ANSWER_MAX))
    answer, _ = plain_reference(target, tokens, 40)
    assert len(answer) <= ANSWER_MAX and runtime.is_eog(answer[-1])
    extra = runtime.tokenize(" and then five more tokens of any text", False, False)[:5]
    assert len(extra) == 5 and not any(runtime.is_eog(t) for t in extra)
    source = Follower(target, plan=((16, None),), tail=extra, prompt=tokens)
    g = make_generation(source, tokens, on=target, max_new_tokens=40, draft_max=16)
    g.run()
    assert_same_greedy_output(target, tokens, answer, g.generated)
    # The output ends at the end-of-turn token; nothing after it.
    assert g.finish_reason == "eog"
    assert runtime.is_eog(g.generated[-1])
    assert all(not runtime.is_eog(t) for t in g.generated[:-1])
    # The window that committed it accepted it inside its proposal, with tokens after it.
    last = g.receipts[-1]
    assert last.committed_tokens[-1] == g.generated[-1]
    assert last.disposition in ("full_accept", "stopped")
    proposal = list(last.proposal_token_ids)
    at = proposal.index(g.generated[-1])
    assert proposal[at + 1:] == list(extra), "the proposal has tokens after end-of-turn"
    assert last.accepted_proposal_tokens == at + 1
    assert last.canonical_prediction_count == at + 1
    assert last.trimmed_rows == len(proposal) + 1 - (at + 1)
    assert g.canonical_position == last.canonical_position
    # Nor in the statistics.
    summary = g.summary()
    assert summary.generated_tokens == len(g.generated)
    assert summary.accepted_tokens <= len(g.generated)
    # Every generated token is one window's canonical prediction, one plain step's, or the first token,
    # committed from the prefill's last row (llama.cpp's schedule: no decode step, no window).
    first = [e for e in g.events if e.kind == "commit" and e.detail == FROM_PREFILL]
    assert [(e.token, e.window) for e in first] == [(g.generated[0], None)]
    assert sum(r.canonical_prediction_count for r in g.receipts) + g.plain_steps + 1 == len(g.generated)


def test_case_cancel_mid_commit_on_a_full_accept(make_generation, chat_tokens, runtime):
    """cases.json `cancel-mid-commit-on-a-full-accept`.

    The proposal is the next 4 tokens of the target's own greedy output (``Follower``);
    the target has end-of-generation banned, so 4 tokens follow whatever the model
    answers. The window is the first that fully accepted in an uninterrupted run of the
    same configuration (the first one, unless a near-tie flipped under batch arithmetic).
    """
    target = no_end_of_turn(runtime)
    tokens = chat_tokens(COUNT)
    dry = make_generation(Follower(target, ((4, None),), prompt=tokens), tokens, on=target, max_new_tokens=20)
    dry.run()
    w = first_window(dry.receipts, disposition="full_accept", at_least=3)
    source = Follower(target, ((4, None),), prompt=tokens)
    g = make_generation(source, tokens, on=target, max_new_tokens=20, faults=FaultPlan([Fault("cancel", w, 3)]))
    g.start()
    while True:
        base, before = g.canonical_position, len(g.generated)
        try:
            g.step()
        except RequestCancelled as exc:
            assert "request cancelled" in str(exc)
            break
        assert not g.finished, "the cancel never fired"
    assert g.window_count == w
    assert g.generated == dry.generated[: before + 2]
    assert g.canonical_position == base + 2
    assert g.kv_length() == base + 2
    kinds = [e.kind for e in g.events if e.window == w]
    assert kinds == ["verify", "commit", "commit", "repair", "error", "discard"]
    repair = next(e for e in g.events if e.kind == "repair" and e.window == w)
    assert repair.detail.startswith("trim")
    assert [d.reason for d in g.discards] == ["execution_failed"]
    assert g.discards[0].partial.canonical_position == base + 2
    assert [reason for _, reason in source.discarded] == ["execution_failed"]
    assert source.discarded[0][0].hex() == g.discards[0].decision_id


def test_case_callback_failure_then_resume(make_generation, chat_tokens, follow_target, follow_run):
    """cases.json `callback-failure-then-resume`: raise at the 2nd commit token of the 3rd window.

    The case's n-gram source commits 2 tokens in a window only where the model's answer
    copies the prompt, which depends on its words (so on the CPU: on one the 3rd window
    commits 1 token). Here the source proposes the target's own continuation, with a
    token it surely rejects at index 1 every other window (``Follower``, ``ALTERNATE``):
    every window commits at least 2 tokens, and the target has end-of-generation banned,
    so the 3rd window exists. The fault targets the first window from the 3rd on that
    committed at least 2 tokens in the uninterrupted run (the 3rd, unless a near-tie
    flipped under batch arithmetic).
    """
    tokens = chat_tokens(COPY)
    reference = follow_run(COPY)
    w = first_window(reference.receipts, at_least=2, from_window=3)
    g = make_generation(Follower(follow_target, ALTERNATE, prompt=tokens), tokens, on=follow_target,
                        max_new_tokens=MAX, faults=FaultPlan([Fault("callback_error", w, 2)]))
    with pytest.raises(EngineError, match="injected"):
        g.run()
    kinds = [e.kind for e in g.events if e.window == w]
    assert kinds[:5] == ["verify", "commit", "commit", "repair", "error"]
    assert g.kv_length() == g.canonical_position
    g.resume()
    g.run()
    assert_same_greedy_output(follow_target, tokens, reference.generated, g.generated)


@pytest.mark.parametrize("fault", [
    "cancel@W:3", "callback_error@W:1", "trim_failure", "position_drift@2",
    "late_proposal", "negative_token_id", "token_id_too_large", "too_many_tokens",
])
def test_each_fault_repairs_before_its_error_and_resume_matches_an_uninterrupted_run(
    fault, make_generation, chat_tokens, follow_target, follow_run
):
    """W: the first window that commits at least 3 tokens in the uninterrupted run.

    The source proposes the target's own continuation and a surely rejected token every
    other window (``Follower``, ``ALTERNATE``) on a target with end-of-generation banned:
    windows that commit 3 tokens, windows that trim, and a 2nd window exist whatever
    the model says.
    """
    tokens = chat_tokens(COPY)
    reference = follow_run(COPY)
    fault = fault.replace("W", str(first_window(reference.receipts, at_least=3)))
    plan = FaultPlan([Fault.parse(fault)])
    g = make_generation(Follower(follow_target, ALTERNATE, prompt=tokens), tokens, on=follow_target,
                        max_new_tokens=MAX, faults=plan)
    errors = run_resuming_after_each_error(g)
    assert plan.fired, f"fault {fault} never fired"
    assert_same_greedy_output(follow_target, tokens, reference.generated, g.generated)
    if fault.split("@")[0] in ("cancel", "callback_error", "trim_failure"):
        assert len(errors) == 1
    else:
        assert errors == [] and len(g.discards) == 1


def test_cancel_while_verifying_aborts_the_decode_and_leaves_the_kv_canonical(
    make_generation, chat_tokens, greedy_reference, scheduler
):
    """Cancellation in flight through llama.cpp's abort callback (llama_decode returns 2).
    The n-gram source's first query always proposes (``ngram``), whatever the model says."""
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
    assert_same_greedy_output(scheduler, tokens, greedy_reference(COPY), g.generated)


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


def boundary_stop_string(runtime, generated) -> tuple[str, int, int]:
    """A stop string from the text of ``generated`` that spans a token boundary and
    first occurs there: (stop string, its start in the text, index of the token that
    completes it)."""
    text = CommittedText(runtime.token_piece)
    ends = []  # text length after each token
    for t in generated:
        text.push(t)
        ends.append(len(text.text))
    full = text.text
    for i, b in enumerate(ends[:-1]):
        for before, after in ((2, 2), (1, 2), (2, 1), (1, 1)):
            start, stop_end = b - before, b + after
            if start < 0 or stop_end > ends[-1]:
                continue
            s = full[start:stop_end]
            if full.index(s) == start:
                return s, start, next(m for m, e in enumerate(ends) if e >= stop_end)
    # The text's beginning is its own first occurrence: up to one character past a boundary.
    i = next(i for i, e in enumerate(ends[:-1]) if 0 < e < ends[-1])
    return full[: ends[i] + 1], 0, next(m for m, e in enumerate(ends) if e >= ends[i] + 1)


def test_stop_strings_match_across_tokens_on_committed_text_only(make_generation, chat_tokens, runtime):
    """The stop string is chosen from the text of an uninterrupted run of the same
    configuration (a run is deterministic), where it spans a token boundary; the
    target has end-of-generation banned, so there are 30 tokens of text whatever
    the model answers."""
    target = no_end_of_turn(runtime)
    tokens = chat_tokens(COUNT)
    free = make_generation(NgramSource(n_max=2, n_min=1), tokens, on=target, max_new_tokens=30)
    free.run()
    stop, start, m = boundary_stop_string(runtime, free.generated)
    g = make_generation(NgramSource(n_max=2, n_min=1), tokens, on=target, max_new_tokens=30, stop=(stop,))
    g.run()
    assert g.finish_reason == "stop"
    assert g.text.text == free.text.text[:start]
    assert stop not in g.text.text
    assert g.generated == free.generated[: m + 1]  # the token that completed it is the last
    assert g.kv_length() == g.canonical_position


def test_several_sessions_generate_at_once_on_their_own_kv_sequences(scheduler, chat_tokens, greedy_reference):
    prompts = [COPY, COUNT]
    gens = [Generation(scheduler, ngram(), chat_tokens(p), GenerationSettings(max_new_tokens=MAX)) for p in prompts]
    threads = [threading.Thread(target=g.run) for g in gens]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)  # a hang guard, not a timing
    try:
        assert len({g.session_id for g in gens}) == len(gens), "two generations shared a KV sequence"
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
    """Scripted proposals (of prompt tokens): every query proposes, so the document has
    windows whatever the model answers (end-of-generation banned: the run goes on after
    the first query, whose proposal is the late one)."""
    tokens = chat_tokens(COPY)
    source = ScriptedSource(proposals=[tokens[-8:-4]] * 4)
    g = make_generation(source, tokens, on=no_end_of_turn(runtime), max_new_tokens=MAX,
                        faults=FaultPlan([Fault("late_proposal")]))
    g.run()
    assert g.receipts
    doc = build_document(g, runtime, prompt_text=COPY, templated_text=None, raw=False,
                         source_settings=source.settings())
    path = write_document(doc, tmp_path / "r.json")
    back = load_document(path)
    assert len(back["windows"]) == len(g.receipts) and back["discards"][0]["reason"] == "deadline_exceeded"
    assert back["output"]["text"] == g.text.text
    w = back["windows"][0]
    assert len(w["verification_row_prediction_texts"]) == w["verification_rows"]
    assert back["summary"]["definitions"]["acceptance_rate"].startswith("accepted_proposal_tokens")


def test_request_abort_from_another_thread_stops_a_decode_in_flight(runtime, scheduler, chat_tokens):
    """The abort flag is read by llama.cpp between graph nodes, without the GIL.

    Another thread requests the abort over and over while this one decodes a 200-row
    batch again and again: the request reaches a decode in flight and that decode ends
    aborted. No sleep and no timing: a faster CPU only makes more attempts.
    """
    tokens = (chat_tokens(COPY) * 6)[:200]
    never = threading.Event()  # the engine's cancel event: never set, only the in-flight flag aborts
    decoding = threading.Event()
    done = threading.Event()
    holder = {}

    def op(rt):
        sid = rt.open_session()
        holder["sid"] = sid
        try:
            for attempt in range(1, 1001):
                decoding.set()
                try:
                    rt.decode_rows(sid, tokens, 0, never)
                    outcome = "finished"
                except DecodeAborted:
                    outcome = "aborted"
                rt.trim(sid, 0)
                if outcome == "aborted":
                    break
            return outcome, attempt, rt.kv_length(sid)
        finally:
            done.set()
            rt.drop_session(sid)

    def press_stop():
        decoding.wait()
        while not done.is_set():
            runtime.request_abort(holder["sid"])
            time.sleep(0)

    t = threading.Thread(target=press_stop)
    t.start()
    try:
        outcome, attempts, kv = scheduler.execute("test", -1, op).value
    finally:
        done.set()
        t.join()
    print(f"aborted after {attempts} decode(s)")
    assert outcome == "aborted" and kv == 0


@pytest.mark.parametrize("kind", ["ngram", "scripted"])
def test_a_tiny_context_caps_proposals_and_ends_with_context_full(model_path, kind):
    """n_ctx 64 with 10-token proposals: never a failed llama_decode, finish reason context_full.

    The target has end-of-generation banned, so the run always fills the context; the
    scripted source proposes 10 tokens at every query, so the last windows are capped
    by the free positions whatever the model says.
    """
    from inspector.llama.runtime import LlamaRuntime

    rt = LlamaRuntime(model_path, n_ctx=64, n_batch=64, n_seq_max=1)
    try:
        tokens = rt.prompt_tokens("Copy: one two three one two three one two three")
        assert len(tokens) < 64
        source = ngram() if kind == "ngram" else ScriptedSource(proposals=[tokens[-10:]] * 64, clip=True)
        g = Generation(RuntimeScheduler(NoEndOfTurn(rt)), source, tokens,
                       GenerationSettings(max_new_tokens=200, draft_max=10))
        g.run()
        assert g.finish_reason == "context_full"
        assert g.canonical_position == 64 and g.kv_length() == 64
        assert all(r.position_after_verification <= 64 for r in g.receipts)
        assert not g.errors
        if kind == "scripted":
            assert any(r.proposal_token_count < 10 for r in g.receipts), "no proposal was capped by the context"
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


def test_a_run_cut_inside_a_character_keeps_its_bytes_out_of_the_text_and_says_so(
        make_generation, runtime, chat_tokens, tmp_path):
    """Max tokens can end a run between the byte tokens of one character: the text keeps no U+FFFD
    (llama-server holds incomplete UTF-8 back), the receipts count the bytes kept out."""
    prompt = "Reply with five different emoji and nothing else."
    tokens = chat_tokens(prompt)
    g = make_generation(None, tokens, max_new_tokens=24)
    g.run()

    def opens_a_character(t: int) -> bool:
        try:
            runtime.token_piece(t).decode("utf-8")
            return False
        except UnicodeDecodeError as e:
            return e.reason == "unexpected end of data"

    cut = next((i for i, t in enumerate(g.generated) if opens_a_character(t)), None)
    if cut is None:
        pytest.skip("the model wrote no character split over tokens here (its words differ between CPUs)")
    g2 = make_generation(None, tokens, max_new_tokens=cut + 1)
    g2.run()
    assert g2.generated == g.generated[:cut + 1] and g2.finish_reason == "length"
    assert "\ufffd" not in g2.text.text and g2.text.incomplete_bytes > 0
    doc = build_document(g2, runtime, prompt_text=prompt, templated_text=None, raw=False)
    back = load_document(write_document(doc, tmp_path / "r.json"))  # the schema takes the count
    assert back["output"]["incomplete_utf8_bytes"] == g2.text.incomplete_bytes
    assert back["output"]["text"] == g2.text.text
