"""``spec-inspector serve`` with real clients on 127.0.0.1 (issue 35): the official ``openai`` SDK for chat
and completions, raw HTTP (httpx) for ``/completion``, ``/tokenize``, ``/metrics``; the real bundled
model. Nothing here names the model's words: streamed and not, served and run directly, first and
second request are compared with each other on this machine."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from inspector.engine import Generation, GenerationSettings
from inspector.receipts import load_document
from inspector.serve.receipts_dir import ReceiptsDir, session_document
from inspector.serve.server import InspectorServer, ServeError
from serve_helpers import serve_options, wait_done

COPY = ("Copy exactly, twice: the red fox jumps over the lazy brown dog near the quiet river bank. "
        "the red fox jumps over the lazy brown dog near the quiet river bank.")
GREEDY = {"temperature": 0}


def _client(server, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.address + "/v1", api_key=kw.pop("api_key", "none"), max_retries=0,
                         timeout=120, **kw)


def test_chat_streamed_and_not_give_the_same_answer_and_usage_counts_the_templated_prompt(serve, runtime):
    server = serve()
    client = _client(server)
    messages = [{"role": "system", "content": "You copy text."}, {"role": "user", "content": COPY}]
    whole = client.chat.completions.create(model=str(runtime.model_path), messages=messages, max_tokens=24,
                                           temperature=0)
    chunks = list(client.chat.completions.create(model=str(runtime.model_path), messages=messages, max_tokens=24,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content, "the answer is empty"
    assert streamed == whole.choices[0].message.content
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    usage = chunks[-1].usage
    expected_prompt = len(runtime.tokenize(runtime.chat_messages_prompt(messages), add_special=True))
    assert whole.usage.prompt_tokens == expected_prompt == usage.prompt_tokens
    assert whole.usage.completion_tokens == usage.completion_tokens <= 24
    # the second identical request reuses the slot's cache: all but one prompt token (llama-server's rule)
    assert usage.prompt_tokens_details.cached_tokens == expected_prompt - 1


def test_text_completions_streamed_and_not_agree_and_equal_a_direct_engine_run(serve, runtime, scheduler):
    server = serve(source="none", source_options={})
    client = _client(server)
    prompt = "The three primary colours are"
    whole = client.completions.create(model=str(runtime.model_path), prompt=prompt, max_tokens=16, temperature=0,
                                      extra_body={"cache_prompt": False})
    parts = list(client.completions.create(model=str(runtime.model_path), prompt=prompt, max_tokens=16,
                                           temperature=0, stream=True, extra_body={"cache_prompt": False}))
    assert "".join(p.choices[0].text for p in parts) == whole.choices[0].text
    g = Generation(scheduler, None, runtime.tokenize(prompt, add_special=True), GenerationSettings(max_new_tokens=16))
    try:
        g.run()
    finally:
        g.close()
    assert whole.choices[0].text == g.text.text
    assert whole.usage.completion_tokens == g.generated_count


def test_completion_probabilities_are_each_tokens_own_rows_accepted_draft_tokens_included(serve, runtime):
    server = serve()
    chat = runtime.chat_messages_prompt([{"role": "user", "content": COPY}])
    r = httpx.post(server.address + "/completion", json={"prompt": chat, "n_predict": 40, "n_probs": 3,
                                                         "temperature": 0, "return_tokens": True}, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    probs = body["completion_probabilities"]
    assert len(probs) == body["tokens_predicted"] == len(body["tokens"]) > 0
    assert body["timings"].get("draft_n_accepted", 0) > 0, "the copy prompt accepted no draft token"
    for i, (tok, pr) in enumerate(zip(body["tokens"], probs)):
        assert pr["id"] == tok
        assert len(pr["top_logprobs"]) == 3
        lps = [t["logprob"] for t in pr["top_logprobs"]]
        assert lps == sorted(lps, reverse=True)
        # greedy: the committed token is its row's argmax, so its logprob is the row's best (not 0.0 as a
        # llama.cpp report has it for draft tokens)
        assert pr["top_logprobs"][0]["id"] == tok, f"token {i}"
        assert pr["logprob"] == pytest.approx(lps[0])
    assert any(p["logprob"] < -1e-4 for p in probs)


def test_tokenize_detokenize_and_metrics_count_what_the_replies_said(serve, runtime):
    server = serve()
    a = server.address
    toks = httpx.post(a + "/tokenize", json={"content": COPY}).json()["tokens"]
    assert toks == runtime.tokenize(COPY, add_special=False, parse_special=True)
    assert httpx.post(a + "/detokenize", json={"tokens": toks}).json()["content"] == COPY
    chat = runtime.chat_messages_prompt([{"role": "user", "content": COPY}])
    replies = [httpx.post(a + "/completion", json={"prompt": chat, "n_predict": 32, "temperature": 0},
                          timeout=120).json() for _ in range(2)]
    metrics = httpx.get(a + "/metrics").text
    values = {}
    for line in metrics.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    drafted = sum(r["timings"].get("draft_n", 0) for r in replies)
    accepted = sum(r["timings"].get("draft_n_accepted", 0) for r in replies)
    assert values["llamacpp:spec_decode_num_draft_tokens_total"] == drafted > 0
    assert values["llamacpp:spec_decode_num_accepted_tokens_total"] == accepted
    assert values["llamacpp:tokens_predicted_total"] == sum(r["tokens_predicted"] for r in replies)
    assert values["llamacpp:prompt_tokens_cached_total"] == sum(r["timings"]["cache_n"] for r in replies)
    per_pos = [values[f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}}'] for i in range(16)]
    assert sum(per_pos) == accepted
    assert per_pos == sorted(per_pos, reverse=True)
    assert httpx.get(a + "/health").json() == {"status": "ok"}
    assert httpx.get(a + "/v1/models").json()["data"][0]["id"] == str(runtime.model_path)


def test_the_second_request_reuses_the_shared_prefix_and_the_receipts_say_how_much(serve, runtime):
    server = serve()
    a = server.address
    first = httpx.post(a + "/completion", json={"prompt": COPY, "n_predict": 8, "temperature": 0},
                       timeout=120).json()
    second_prompt = COPY + " And once more:"
    second = httpx.post(a + "/completion", json={"prompt": second_prompt, "n_predict": 8, "temperature": 0},
                        timeout=120).json()
    shared = len(runtime.tokenize(COPY, add_special=True))
    p2 = runtime.tokenize(second_prompt, add_special=True)
    common = next(i for i, (x, y) in enumerate(zip(runtime.tokenize(COPY, add_special=True) + [-1], p2)) if x != y)
    assert first["timings"]["cache_n"] == 0
    assert second["timings"]["cache_n"] == common > 0
    assert second["timings"]["prompt_n"] == len(p2) - common
    assert common <= shared
    rows = wait_done(server, 2)
    doc = load_document(rows[1].receipts_path)
    assert doc["served"]["prompt_reused"] == common
    assert doc["prompt"]["token_ids"] == p2


def test_bad_input_gets_llama_servers_error_json_and_the_server_keeps_serving(serve, runtime):
    server = serve()
    a = server.address
    cases = {
        "malformed": httpx.post(a + "/completion", content=b"{bad json", headers={"Content-Type": "application/json"}),
        "n_predict string": httpx.post(a + "/completion", json={"prompt": "hi", "n_predict": "8"}),
        "no prompt": httpx.post(a + "/completion", json={"n_predict": 8}),
        "unknown field": httpx.post(a + "/completion", json={"prompt": "hi", "mirostat_typo": 1}),
        "unsupported value": httpx.post(a + "/completion", json={"prompt": "hi", "mirostat": 2}),
        "n_predict out of range": httpx.post(a + "/completion", json={"prompt": "hi", "n_predict": -5}),
        "too long": httpx.post(a + "/completion", json={"prompt": "word " * 3000}),
        "too large": httpx.post(a + "/completion", content=b"{" + b" " * (17 << 20) + b"}"),
        "unknown path": httpx.get(a + "/v2/nothing"),
    }
    expected = {"malformed": 400, "n_predict string": 400, "no prompt": 400, "unknown field": 400,
                "unsupported value": 400, "n_predict out of range": 400, "too long": 400,
                "too large": 413, "unknown path": 404}
    for name, r in cases.items():
        assert r.status_code == expected[name], f"{name}: {r.status_code} {r.text[:200]}"
        err = r.json()["error"]
        assert err["code"] == expected[name] and err["message"] and err["type"], name
    assert cases["too long"].json()["error"]["type"] == "exceed_context_size_error"
    assert cases["too long"].json()["error"]["n_ctx"] == runtime.n_ctx
    assert "n_predict" in cases["n_predict string"].json()["error"]["message"]
    assert "mirostat_typo" in cases["unknown field"].json()["error"]["message"]
    ok = httpx.post(a + "/completion", json={"prompt": "hi", "n_predict": 4, "temperature": 0}, timeout=60)
    assert ok.status_code == 200 and ok.json()["tokens_predicted"] >= 1
    assert len(server.slots.snapshot_rows()) == 1, "a refused request reached the slot"


def test_an_api_key_is_required_everywhere_but_health(serve):
    server = serve(api_key="s3cret")
    a = server.address
    assert httpx.get(a + "/health").status_code == 200
    r = httpx.get(a + "/v1/models")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(a + "/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(a + "/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        _client(server, api_key="wrong").models.list()
    assert _client(server, api_key="s3cret").models.list().data


def test_another_address_needs_expose(scheduler, runtime, tmp_path):
    server = InspectorServer(scheduler, str(runtime.model_path), serve_options(tmp_path, host="0.0.0.0"))
    with pytest.raises(ServeError, match="--expose"):
        server.start()


def test_a_client_that_disconnects_mid_stream_cancels_its_request_within_one_window(serve, runtime):
    server = serve()
    a = server.address
    body = {"prompt": runtime.chat_messages_prompt([{"role": "user", "content": COPY}]), "n_predict": 200,
            "temperature": 0, "cache_prompt": False}
    fresh = httpx.post(a + "/completion", json=body, timeout=120).json()
    with httpx.stream("POST", a + "/completion", json={**body, "stream": True}, timeout=120) as r:
        got = 0
        for line in r.iter_lines():
            if line.startswith("data: "):
                got += 1
                if got == 3:
                    break
    rows = wait_done(server, 2, 30)
    cancelled = rows[1]
    assert cancelled.ended_as == "cancelled"
    assert cancelled.output_tokens < fresh["tokens_predicted"]
    assert cancelled.receipts_path, server.slots.receipts.error
    doc = load_document(cancelled.receipts_path)
    for w in doc["windows"]:  # complete windows only, each canonical
        assert w["canonical_position"] == w["base_position"] + len(w["committed_tokens"])
    again = httpx.post(a + "/completion", json=body, timeout=120).json()
    assert again["content"] == fresh["content"]
    assert again["tokens_predicted"] == fresh["tokens_predicted"]


def test_a_full_queue_answers_503_with_a_retry_hint(serve):
    server = serve(max_queue=1)
    a = server.address
    body = {"prompt": COPY, "n_predict": 120, "temperature": 0, "cache_prompt": False}
    results = [None] * 3

    def send(i):
        results[i] = httpx.post(a + "/completion", json=body, timeout=120)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.3)
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in results)
    assert codes == [200, 200, 503], codes
    refused = next(r for r in results if r.status_code == 503)
    assert refused.headers.get("retry-after") == "1"
    assert refused.json()["error"]["type"] == "unavailable_error"


def test_bounded_load_every_request_answered_in_order_or_refused_and_recorded(serve, tmp_path):
    import resource

    server = serve(max_queue=6)
    client = _client(server)
    n_clients, per_client = 8, 5
    answered, refused, lock = [], [], threading.Lock()

    def work(c):
        for i in range(per_client):
            try:
                if (c + i) % 2:
                    out = client.chat.completions.create(model=server.state.model_name,
                                                         messages=[{"role": "user", "content": f"Say {c} {i}"}],
                                                         max_tokens=6, temperature=0)
                    text = out.choices[0].message.content
                else:
                    chunks = client.chat.completions.create(model=server.state.model_name, stream=True,
                                                            messages=[{"role": "user", "content": f"Say {c} {i}"}],
                                                            max_tokens=6, temperature=0)
                    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
                with lock:
                    answered.append(text)
            except openai.APIStatusError as exc:
                assert exc.status_code == 503, exc
                with lock:
                    refused.append(exc)

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    threads = [threading.Thread(target=work, args=(c,)) for c in range(n_clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert time.monotonic() - t0 < 240
    assert len(answered) + len(refused) == n_clients * per_client
    assert answered, "nothing was answered"
    rows = wait_done(server, len(answered), 30)
    done = [r for r in rows if r.state == "done"]
    assert len(done) == len(answered)
    starts = [r.id for r in done]
    assert starts == sorted(starts)  # ran in arrival order
    files = server.options.receipts.files()
    assert len(files) == len(answered)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert rss1 - rss0 < 200 * 1024, f"peak memory grew by {(rss1 - rss0) / 1024:.0f} MB over the load"


def test_the_receipts_folder_is_bounded_and_the_session_exports_as_one_conversation(serve, tmp_path):
    server = serve(receipts=ReceiptsDir(tmp_path / "bounded", keep=3))
    client = _client(server)
    for i in range(5):
        client.chat.completions.create(model=server.state.model_name, max_tokens=4, temperature=0,
                                       messages=[{"role": "user", "content": f"Count to {i + 2}."}])
    wait_done(server, 5)
    files = server.slots.receipts.files()
    assert len(files) == 3
    doc = session_document(files)
    assert doc["kind"] == "conversation" and len(doc["turns"]) == 3
    assert [t["conversation"]["user_text"] for t in doc["turns"]] == [f"Count to {i + 2}." for i in (2, 3, 4)]
    out = tmp_path / "session.json"
    out.write_text(json.dumps(doc))
    assert load_document(out)["conversation"]["turns"] == 3
