"""``serve -np N``: several requests at once, on the real model (issue 53).

Every comparison is between two runs on this machine (the same request alone and among others; ours and a
real llama-server given the same concurrent requests): nothing here names the model's words.
"""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import openai
import pytest

from inspector.bench.server_client import parse_metrics
from inspector.engine import GenerationSettings
from inspector.engine.faults import Fault
from inspector.llama.server_parity import server_context
from inspector.receipts import load_document
from inspector.serve.slots import BATCHED, LOCKED
from inspector.sources.server_flags import server_arguments
from serve_helpers import wait_done
from test_cli import cli, one_clear_line

PROMPTS = ("Count from one to twenty: one, two, three,", "List the days of the week: Monday, Tuesday,",
           "Write the alphabet: A B C D E F", "Name the planets in order: Mercury, Venus,")
"""Four prompts whose greedy answers repeat what they start (so ngram-simple drafts)."""
N_PREDICT = 32
SOURCE = ("ngram-simple", {"size_n": 3, "size_m": 16}, 16)


def _chat(address: str, prompt: str) -> dict:
    client = openai.OpenAI(base_url=address + "/v1", api_key="none", max_retries=0, timeout=120)
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}],
                                       temperature=0, max_tokens=N_PREDICT)
    return r.model_dump()


def _at_once(address: str, prompts=PROMPTS, send=_chat) -> list[dict]:
    """Each prompt's reply, all sent at once from a thread each."""
    out: list = [None] * len(prompts)

    def go(i: int) -> None:
        try:
            out[i] = send(address, prompts[i])
        except Exception as exc:  # noqa: BLE001 - the test reads it
            out[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    return out


def _content(reply: dict) -> str:
    return reply["choices"][0]["message"]["content"]


NEAR_TIE = 0.5
"""Logits below the target's best token within which the batch's shape (how many rows, which KV cells) may
flip a greedy choice: llama.cpp's sums run in another order for another batch, and a flip moves every later
row. A token read from another slot's row would be nowhere near (tens of logits on this model)."""


def _parting(scheduler, alone: dict, together: dict) -> str:
    """"" when the two documents' outputs are equal; else why they part, when it is a near tie
    (``_near_tie``)."""
    return _near_tie(scheduler, alone["prompt"]["token_ids"], alone["output"]["token_ids"],
                     together["output"]["token_ids"])


def _logits_after(scheduler, tokens: list[int], prompt_n: int) -> np.ndarray:
    """The target's logits for the token after ``tokens`` (a copy), with plain decoding's arithmetic as
    ``top2_after`` gets them: the prompt's last row of one prefill, else the last token decoded alone."""

    def op(rt):
        sid = rt.open_session(None)
        try:
            if len(tokens) <= prompt_n:
                rt.prefill_predict(sid, list(tokens), 0)
                return np.array(rt.row_logits(-1))
            rt.prefill(sid, list(tokens[:-1]), 0)
            rt.decode_rows(sid, (tokens[-1],), len(tokens) - 1)
            return np.array(rt.row_logits(0))
        finally:
            rt.drop_session(sid)

    return scheduler.execute("stats", -1, op).value


def _near_tie(scheduler, prompt: list[int], a: list[int], b: list[int]) -> str:
    """"" when the outputs ``a`` and ``b`` (tokens after ``prompt``) are equal; else the reason they part if
    it is a near tie at the first different token (both within ``NEAR_TIE`` logits of the target's best
    token there; where one output ended, its end-of-generation token), or an ``AssertionError`` naming what
    is not explained."""
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if i is None and len(a) == len(b):
        return ""
    logits = _logits_after(scheduler, prompt + a[:(min(len(a), len(b)) if i is None else i)], len(prompt))
    best = float(logits.max())
    if i is None:  # one ended there (an end-of-generation token, not in its text) and the other went on
        i = min(len(a), len(b))
        ends = [t for t in np.argsort(logits)[::-1][:5].tolist() if scheduler.runtime.is_eog(t)]
        chosen = [(a if len(a) > len(b) else b)[i], *ends[:1]]
    else:
        chosen = [a[i], b[i]]
    gaps = [best - float(logits[t]) for t in chosen]
    why = f"token {i}: {chosen[0]} against {chosen[1:] or 'an end nowhere near'}, logits below the best {gaps}"
    assert len(chosen) == 2 and max(gaps) < NEAR_TIE, f"not a near tie: {why}"
    return why


def _parallel(serve, n: int, schedule: str = BATCHED, **kw):
    name, options, draft_max = SOURCE
    return serve(source=name, source_options=options, template=GenerationSettings(draft_max=draft_max),
                 n_parallel=n, schedule=schedule, kv_unified=True, **kw)


def test_four_concurrent_sdk_requests_answer_as_alone_but_for_near_ties_and_ride_shared_steps(serve, scheduler):
    """Alone: one slot, one request at a time. Together, a request's rows share each decode with others'
    (and the KV cache their cells): where a greedy choice was a near tie, the other arithmetic may flip it."""
    alone_server = _parallel(serve, 1)
    for p in PROMPTS:
        _chat(alone_server.address, p)
    alone = [load_document(r.receipts_path) for r in wait_done(alone_server, 4)]
    alone_server.stop()
    server = _parallel(serve, 4)
    together = _at_once(server.address)
    rows = wait_done(server, 4)
    assert all(isinstance(r, dict) for r in together), together
    docs = [load_document(r.receipts_path) for r in rows]
    assert len(docs) == 4
    slots = sorted(d["served"]["concurrency"]["slot"] for d in docs)
    assert slots == [0, 1, 2, 3], "four requests at once: each took a slot of its own"
    shared = [s for d in docs for s in d["served"]["concurrency"]["steps"] if len(s["parts"]) >= 2]
    assert shared, "no decode step carried rows of two slots"
    for d in docs:
        c = d["served"]["concurrency"]
        assert len(c["window_steps"]) == len(d["windows"]), "every window names the step it was verified in"
        assert c["waiting_ms"] >= 0 and c["first_token_unix_s"] >= c["started_unix_s"]
    steps = server.slots.steps
    assert steps.step_count > 0 and 1.0 < steps.busy_per_decode <= 4.0
    metrics = parse_metrics(httpx.get(server.address + "/metrics").text)
    assert metrics.values["n_decode_total"] == steps.step_count
    slots_json = httpx.get(server.address + "/slots").json()
    assert [s["id"] for s in slots_json] == [0, 1, 2, 3] and all("id_task" in s for s in slots_json)
    props = httpx.get(server.address + "/props").json()
    assert props["total_slots"] == 4
    server.stop()  # its slots hold every KV sequence; the near-tie check needs one
    by_prompt = {d["prompt"]["text"]: d for d in docs}
    for a in alone:  # equal, or parted at a near tie (_near_tie asserts it)
        _parting(scheduler, a, by_prompt[a["prompt"]["text"]])


def _completion(address: str, prompt: str) -> dict:
    """``/completion`` with the generated token ids in the reply (``return_tokens``), greedy."""
    return httpx.post(address + "/completion", timeout=120, json={
        "prompt": prompt, "n_predict": N_PREDICT, "temperature": 0, "return_tokens": True}).json()


@pytest.mark.slow
def test_the_same_concurrent_requests_draft_as_llama_server_with_the_same_slots(serve, runtime, scheduler,
                                                                                start_llama_server):
    """Both servers get the four requests at once; which arrive in which step is up to the clocks, so an
    answer may part from llama-server's at a near tie (as between two llama-servers); where the answers are
    equal, the drafts are."""
    name, options, draft_max = SOURCE
    ours_server = _parallel(serve, 4)
    ours = _at_once(ours_server.address, send=_completion)
    docs = {d["prompt"]["text"]: d for d in (load_document(r.receipts_path) for r in wait_done(ours_server, 4))}
    ours_metrics = parse_metrics(httpx.get(ours_server.address + "/metrics").text)
    ours_server.stop()  # never two llama.cpp processes decoding at once
    flags = ["-b", str(runtime.n_batch), *server_context(runtime).server_args(),
             *server_arguments(name, options, draft_max=draft_max), "-np", "4", "-kvu"]
    theirs_server = start_llama_server(args=flags, threads=2, n_ctx=runtime.n_ctx)
    theirs = _at_once(theirs_server.url, send=_completion)
    theirs_metrics = theirs_server.client.metrics()
    theirs_server.stop()
    equal = 0
    for prompt, a, b in zip(PROMPTS, ours, theirs):
        assert a["tokens"] == docs[prompt]["output"]["token_ids"]
        if a["tokens"] != b["tokens"]:
            _near_tie(scheduler, docs[prompt]["prompt"]["token_ids"], a["tokens"], b["tokens"])
            continue
        equal += 1
        assert a["timings"].get("draft_n") == b["timings"].get("draft_n")
        assert a["timings"].get("draft_n_accepted") == b["timings"].get("draft_n_accepted")
    assert equal >= 1, "no answer equal to llama-server's: nothing compared the drafts"
    if equal == 4:
        for key in ("spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total"):
            assert ours_metrics.values[key] == theirs_metrics.values[key]


def _pinned_chat(address: str, prompt: str) -> dict:
    """``_chat`` on the slot of the prompt's place in ``PROMPTS`` (llama-server's ``id_slot``)."""
    client = openai.OpenAI(base_url=address + "/v1", api_key="none", max_retries=0, timeout=120)
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}], temperature=0,
                                       max_tokens=N_PREDICT, extra_body={"id_slot": PROMPTS.index(prompt)})
    return r.model_dump()


def test_a_callback_failure_in_one_of_three_slots_repairs_that_slot_only(serve, scheduler):
    server = _parallel(serve, 3)
    _at_once(server.address, PROMPTS[:3], send=_pinned_chat)
    clean = {d["prompt"]["text"]: d for d in (load_document(r.receipts_path) for r in wait_done(server, 3))}
    server.stop()
    # The fault fires in a window: armed on the slot of a prompt whose clean run had one (greedy text, so which
    # prompts draft, differs between CPUs; each prompt keeps its slot: id_slot).
    slot = next(i for i, p in enumerate(PROMPTS[:3]) if clean[p]["windows"])
    server = _parallel(serve, 3)
    server.slots.arm(slot, Fault("callback_error", 1, 1))
    _at_once(server.address, PROMPTS[:3], send=_pinned_chat)
    rows = wait_done(server, 3)
    server.stop()
    assert {r.slot for r in rows} == {0, 1, 2}
    failed = [r for r in rows if r.slot == slot]
    assert len(failed) == 1 and failed[0].ended_as == "error" and "injected" in failed[0].error
    doc = load_document(failed[0].receipts_path)
    kinds = [e["kind"] for e in doc["events"] if e["window"] == 1]
    assert "repair" in kinds and "error" in kinds and kinds.index("repair") < kinds.index("error")
    others = [load_document(r.receipts_path) for r in rows if r.slot != slot]
    assert len(others) == 2 and all(d["output"]["ended_as"] != "error" for d in others)
    for d in others:  # what they are without the fault, but for a near tie (the failed slot left the steps)
        _parting(scheduler, clean[d["prompt"]["text"]], d)


def test_in_the_locked_schedule_two_sessions_wait_for_the_runtime_lock(serve, scheduler):
    server = _parallel(serve, 2, schedule=LOCKED)
    assert server.slots.steps is None
    seen = len(scheduler.operations)
    _at_once(server.address, PROMPTS[:2])
    rows = wait_done(server, 2)
    assert {r.slot for r in rows} == {0, 1}
    decodes = [op for op in list(scheduler.operations)[seen:] if op.kind in ("prefill", "verify", "step")]
    assert len({op.session_id for op in decodes}) == 2
    assert max(op.wait_us for op in decodes) > 0, "two sessions' decodes never waited for the lock"


def test_a_client_that_leaves_mid_stream_frees_its_slot_for_the_next_request(serve):
    server = _parallel(serve, 2)
    with httpx.stream("POST", server.address + "/completion", timeout=60,
                      json={"prompt": PROMPTS[0], "n_predict": 400, "stream": True, "temperature": 0}) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                break  # the first token arrived: go away
    t = time.monotonic() + 20
    while time.monotonic() < t and server.slots.processing:
        time.sleep(0.02)
    assert server.slots.processing == 0, "the slot stayed busy after its client left"
    row = wait_done(server, 1)[0]
    assert row.ended_as == "cancelled" and row.output_tokens < 400


@pytest.mark.parametrize("flags, words", [
    (["-np", "0"], "-np/--parallel"), (["-np", "100000"], "-np/--parallel"), (["-np", "200", "-c", "1024"], "do not fit"),
])
def test_a_slot_count_that_cannot_run_is_one_line_before_the_model_loads(flags, words):
    p = cli("serve", *flags, timeout=60)
    assert p.returncode == 2, p.stderr
    assert words in one_clear_line(p.stderr) and "loading" not in p.stderr


def test_grammar_and_sampling_read_their_own_rows_of_a_shared_step(serve):
    """A grammar-constrained chat (``response_format``), a sampled one and a greedy one at once: each reads
    only its own rows of the steps they share (JSON that parses; a sampled answer of its length)."""
    import json

    server = _parallel(serve, 3)

    def constrained(address, prompt):
        return httpx.post(address + "/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": prompt}], "max_tokens": 48, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"schema": {
                "type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"},
                                                           "maxItems": 3}},
                "required": ["items"]}}}}).json()

    def sampled(address, prompt):
        return httpx.post(address + "/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": prompt}], "max_tokens": 24, "temperature": 0.9,
            "seed": 7}).json()

    def send(address, prompt):
        return (constrained if prompt == PROMPTS[0] else sampled if prompt == PROMPTS[1] else _chat)(address, prompt)

    replies = _at_once(server.address, PROMPTS[:3], send)
    rows = wait_done(server, 3)
    assert all(r.ended_as in ("length", "eog", "stop") for r in rows), [(r.ended_as, r.error) for r in rows]
    shared = [s for s in server.slots.steps.steps if len(s.parts) >= 2]
    assert shared, "the three requests never shared a step"
    content = _content(replies[0])
    if replies[0]["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(content)["items"], list)
    else:  # cut at max_tokens: still the grammar's prefix
        assert content.lstrip().startswith("{")
    assert replies[1]["usage"]["completion_tokens"] >= 1


def test_each_session_reads_its_own_rows_of_a_shared_step(runtime, scheduler):
    """Two sessions' rows in one decode (the batched schedule): each session's logits are the ones it gets
    decoding alone, but for the batch's arithmetic (well under a logit); another session's rows would be
    nowhere near (a row read at the wrong offset is another token's row)."""
    prompts = [runtime.tokenize(p, add_special=True) for p in PROMPTS[:2]]
    drafts = [[p[-1], p[-2], p[-3]] for p in prompts]  # three rows each, after the prompt

    def alone(i):
        def op(rt):
            sid = rt.open_session(None)
            try:
                rt.prefill(sid, prompts[i], 0)
                rt.decode_rows(sid, drafts[i], len(prompts[i]))
                return np.array(rt.last_logits(3))
            finally:
                rt.drop_session(sid)
        return scheduler.execute("stats", -1, op).value

    expected = [alone(0), alone(1)]
    sids = [scheduler.execute("open", -1, lambda rt: rt.open_session(None)).value for _ in range(2)]
    for sid, p in zip(sids, prompts):
        scheduler.execute("prefill", sid, lambda rt, sid=sid, p=p: rt.prefill(sid, p, 0))
    steps = scheduler.batch_steps(runtime.decode_step, runtime.n_batch)
    runtime.steps = steps
    got: dict = {}
    try:
        with steps.condition:
            for sid in sids:
                steps.activate(sid)

        def verify(i):
            def op(rt):
                rt.decode_rows(sids[i], drafts[i], len(prompts[i]))
                got[i] = np.array(rt.last_logits(3))
                steps.deactivate(sids[i])
            scheduler.execute("verify", sids[i], op)

        threads = [threading.Thread(target=verify, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert steps.steps[-1].rows == 6, "the two windows were not one step"
    finally:
        runtime.steps = None
        scheduler.steps = None
        for sid in sids:
            scheduler.execute("drop", sid, lambda rt, sid=sid: rt.drop_session(sid))
    for i in range(2):
        assert np.abs(got[i] - expected[i]).max() < NEAR_TIE
        assert (got[i].argmax(axis=1) == expected[i].argmax(axis=1)).all()
    assert np.abs(got[0] - expected[1]).max() > 1.0, "the two sessions' rows are alike: the test shows nothing"


def test_a_request_may_ask_for_its_slot_and_a_slot_that_is_not_one_is_refused(serve):
    server = _parallel(serve, 2)
    for wanted in (0, 1, 0):
        r = httpx.post(server.address + "/completion", timeout=120,
                       json={"prompt": PROMPTS[0], "n_predict": 4, "temperature": 0, "id_slot": wanted}).json()
        assert r["id_slot"] == wanted
    rows = wait_done(server, 3)
    assert [row.slot for row in rows] == [0, 1, 0]
    r = httpx.post(server.address + "/completion", timeout=60, json={"prompt": "x", "id_slot": 2})
    assert r.status_code == 400 and "id_slot 2" in r.json()["error"]["message"]
