"""Requests llama-server accepts are accepted by ``spec-inspector serve`` and answered alike (issue 52).

Each request goes to our ``InspectorServer`` (on the shared runtime) and to a real llama-server built from
the same llama.cpp (0c1e570), one after the other (never both decoding), and the two answers are
compared: HTTP status, the fields of the reply, and the generated text and tokens where decoding is greedy.
Nothing here names the model's words: whatever this CPU's arithmetic gives, both programs must give it.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from inspector.engine import GenerationSettings
from inspector.engine.settings import SamplingSettings
from inspector.llama.server_parity import server_context
from inspector.serve.params import ServeDefaults
from inspector.serve.server import InspectorServer, ServeOptions

pytestmark = pytest.mark.slow

KEY = "s3cret"
GREEDY = {"temperature": 0}
PROMPT = "Copy exactly: red green blue yellow. Copy exactly: red green blue yellow."


@pytest.fixture
def pair(scheduler, runtime, start_llama_server):
    """Factory: (our server's address, llama-server's address), both plain decoding with llama-server's
    defaults; ``key``: both ask for it; ``metrics``: both answer ``/metrics``."""
    ours = []

    def start(key: str | None = None, metrics: bool = True) -> tuple[str, str]:
        server = InspectorServer(scheduler, str(runtime.model_path), ServeOptions(
            port=0, source="none", template=GenerationSettings(draft_max=0),
            defaults=ServeDefaults(SamplingSettings(temperature=0.8)), receipts=None, api_key=key,
            metrics_endpoint=metrics, max_queue=2))
        server.start()
        assert server.wait_started(), "uvicorn did not start within 10 s"
        ours.append(server)
        args = ["-b", str(runtime.n_batch), *server_context(runtime).server_args()]
        if key:
            args += ["--api-key", key]
        theirs = start_llama_server(args=args, n_ctx=runtime.n_ctx, metrics=metrics)
        return server.address, theirs.url

    yield start
    for s in ours:
        s.stop()


def _both(urls, method: str, path: str, **kw) -> tuple[httpx.Response, httpx.Response]:
    """The same request to both servers, ours first."""
    out = []
    for url in urls:
        with httpx.Client(base_url=url, timeout=300, trust_env=False) as c:
            out.append(c.request(method, path, **kw))
    return out[0], out[1]


def _same_status(a: httpx.Response, b: httpx.Response, what: str) -> None:
    assert a.status_code == b.status_code, f"{what}: ours {a.status_code} {a.text[:300]}, llama-server's " \
                                           f"{b.status_code} {b.text[:300]}"


def _sse(r: httpx.Response) -> list:
    """The JSON events of a Server-Sent Events body (``[DONE]`` kept as the string)."""
    out = []
    for line in r.text.splitlines():
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_requests_llama_server_takes_are_answered_alike(pair):
    urls = pair()
    post = lambda path, body: _both(urls, "POST", path, json=body)  # noqa: E731

    # any model name: llama-server with one model answers whatever a client names
    a, b = post("/v1/chat/completions", {"model": "gpt-3.5-turbo", "messages": [{"role": "user", "content": "Hi"}],
                                         "max_tokens": 8, **GREEDY})
    _same_status(a, b, "model gpt-3.5-turbo")
    assert a.status_code == 200
    assert a.json()["choices"][0]["message"]["content"] == b.json()["choices"][0]["message"]["content"]

    # n_probs beyond the window's 5
    a, b = post("/completion", {"prompt": PROMPT, "n_predict": 6, "n_probs": 10, **GREEDY})
    _same_status(a, b, "n_probs 10")
    pa, pb = a.json()["completion_probabilities"], b.json()["completion_probabilities"]
    assert [t["id"] for t in pa] == [t["id"] for t in pb]
    for i, (x, y) in enumerate(zip(pa, pb)):
        assert len(x["top_logprobs"]) == len(y["top_logprobs"]) == 10, i
        assert x["top_logprobs"][0]["id"] == y["top_logprobs"][0]["id"], i
        # ties may order differently; the values by rank are the same distribution's
        assert [t["logprob"] for t in x["top_logprobs"]] == pytest.approx([t["logprob"] for t in y["top_logprobs"]],
                                                                          abs=2e-3), i
        assert set(x) == set(y) and set(x["top_logprobs"][0]) == set(y["top_logprobs"][0])

    # probabilities after the sampler chain: greedy leaves the token alone, at 1
    a, b = post("/completion", {"prompt": PROMPT, "n_predict": 4, "n_probs": 3, "post_sampling_probs": True, **GREEDY})
    _same_status(a, b, "post_sampling_probs")
    assert a.json()["completion_probabilities"] == b.json()["completion_probabilities"]
    # sampled: the chain's candidates, most likely first, none at 0 (the draw itself may differ: not compared)
    a, b = post("/completion", {"prompt": PROMPT, "n_predict": 4, "n_probs": 50, "post_sampling_probs": True,
                                "temperature": 0.8, "top_k": 8, "seed": 7})
    _same_status(a, b, "post_sampling_probs sampled")
    for reply in (a.json(), b.json()):
        for t in reply["completion_probabilities"]:
            probs = [c["prob"] for c in t["top_probs"]]
            assert 0 < len(probs) <= 8 and all(p > 0 for p in probs) and probs == sorted(probs, reverse=True)
            assert set(t) == {"id", "token", "bytes", "prob", "top_probs"}

    # a chat JSON answer streamed: the deltas are the extracted value's (no spaces or fence around it)
    chat_json = {"messages": [{"role": "user", "content": "Give a JSON object with a name."}], "max_tokens": 24,
                 "response_format": {"type": "json_object"}, **GREEDY}
    whole, _ = post("/v1/chat/completions", chat_json)
    a, b = post("/v1/chat/completions", {**chat_json, "stream": True})
    _same_status(a, b, "response_format streamed")
    texts = ["".join(e["choices"][0]["delta"].get("content") or "" for e in _sse(r)
                     if isinstance(e, dict) and e.get("choices")) for r in (a, b)]
    assert texts[0] == texts[1] == whole.json()["choices"][0]["message"]["content"]

    # several prompts beyond the queue's limit: one request counts once (llama-server answers them all)
    a, b = post("/completion", {"prompt": ["a", "b", "c", "d", "e"], "n_predict": 2, **GREEDY})
    _same_status(a, b, "more prompts than --max-queue")
    assert len(a.json()) == len(b.json()) == 5

    # chat logprobs without top_logprobs: llama-server's 20
    a, b = post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                                         "logprobs": True, **GREEDY})
    _same_status(a, b, "chat logprobs")
    la, lb = a.json()["choices"][0]["logprobs"]["content"], b.json()["choices"][0]["logprobs"]["content"]
    assert [len(t["top_logprobs"]) for t in la] == [len(t["top_logprobs"]) for t in lb]

    # response_fields: only the named paths, under their paths
    fields = ["content", "generation_settings/n_predict", "tokens_predicted", "no/such/field"]
    a, b = post("/completion", {"prompt": PROMPT, "n_predict": 4, "response_fields": fields, **GREEDY})
    _same_status(a, b, "response_fields")
    assert a.json() == b.json()

    # several prompts in one request: an array of answers; OpenAI's: one choice each
    a, b = post("/completion", {"prompt": [PROMPT, [1, 2, 3], {"prompt_string": "Hello"}], "n_predict": 4, **GREEDY})
    _same_status(a, b, "several prompts")
    assert isinstance(a.json(), list) and len(a.json()) == len(b.json()) == 3
    assert [r["content"] for r in a.json()] == [r["content"] for r in b.json()]
    assert [r["index"] for r in a.json()] == [r["index"] for r in b.json()]
    a, b = post("/v1/completions", {"prompt": ["Hi", "Yo"], "max_tokens": 3, **GREEDY})
    _same_status(a, b, "OpenAI several prompts")
    ca, cb = a.json()["choices"], b.json()["choices"]
    assert [(c["index"], c["text"]) for c in ca] == [(c["index"], c["text"]) for c in cb]

    # a JSON-object prompt
    a, b = post("/completion", {"prompt": {"prompt_string": PROMPT}, "n_predict": 4, **GREEDY})
    _same_status(a, b, "prompt_string")
    assert a.json()["content"] == b.json()["content"]

    # timings on every stream event, and the per-token figures without the first token
    a, b = post("/completion", {"prompt": PROMPT, "n_predict": 5, "stream": True, "timings_per_token": True,
                                **GREEDY})
    _same_status(a, b, "timings_per_token")
    ea, eb = _sse(a), _sse(b)
    assert [("timings" in e) for e in ea] == [("timings" in e) for e in eb]
    assert all("timings" in e for e in ea)
    for t in (ea[-1]["timings"], eb[-1]["timings"]):
        steps = t["predicted_n"] - 1
        assert t["predicted_per_second"] == pytest.approx(1e3 * steps / t["predicted_ms"], rel=1e-6)
        assert t["predicted_per_token_ms"] == pytest.approx(t["predicted_ms"] / steps, rel=1e-6)

    # /slots: the slot's state, as llama-server shapes it
    a, b = _both(urls, "GET", "/slots")
    _same_status(a, b, "/slots")
    sa, sb = a.json()[0], b.json()[0]
    assert set(sa) == set(sb) and set(sa["next_token"][0]) == set(sb["next_token"][0])
    assert set(sa["params"]) <= set(sb["params"])
    assert {k: sa[k] for k in ("id", "n_ctx", "speculative", "is_processing")} == \
        {k: sb[k] for k in ("id", "n_ctx", "speculative", "is_processing")}

    # /metrics with --metrics: the start time header
    a, b = _both(urls, "GET", "/metrics")
    _same_status(a, b, "/metrics")
    assert "process-start-time-unix" in a.headers and "process-start-time-unix" in b.headers


def test_cors_the_key_and_metrics_are_as_llama_servers(pair):
    urls = pair(key=KEY, metrics=False)
    origin = {"Origin": "http://example.com"}
    bearer = {"Authorization": f"Bearer {KEY}"}

    # a browser's preflight is answered before the key is checked
    for path in ("/v1/chat/completions", "/completion", "/nothing/here"):
        a, b = _both(urls, "OPTIONS", path, headers={**origin, "Access-Control-Request-Method": "POST"})
        _same_status(a, b, f"OPTIONS {path}")
        assert a.status_code == 200
        for h in ("access-control-allow-origin", "access-control-allow-credentials", "access-control-allow-methods",
                  "access-control-allow-headers"):
            assert a.headers.get(h) == b.headers.get(h), h

    # every reply carries the allowed origin (the request's, echoed; empty without one)
    for headers in ({**origin, **bearer}, bearer, origin):
        a, b = _both(urls, "GET", "/v1/models", headers=headers)
        _same_status(a, b, f"/v1/models {headers}")
        assert a.headers.get("access-control-allow-origin") == b.headers.get("access-control-allow-origin")

    # the key: "Bearer " (so spelled) is removed, a bare key is the key, X-Api-Key when there is no Authorization
    cases = {"bare key": {"Authorization": KEY}, "lower-case bearer": {"Authorization": f"bearer {KEY}"},
             "wrong": {"Authorization": "Bearer nope"}, "x-api-key": {"X-Api-Key": KEY}, "none": {},
             "bearer": bearer}
    for name, headers in cases.items():
        a, b = _both(urls, "GET", "/v1/models", headers=headers)
        _same_status(a, b, f"key {name}")
        if a.status_code != 200:
            assert a.json() == b.json(), name
    assert _both(urls, "GET", "/health")[0].status_code == 200

    # /props says which endpoints answer
    a, b = _both(urls, "GET", "/props", headers=bearer)
    _same_status(a, b, "/props")
    assert {k: a.json()[k] for k in ("endpoint_slots", "endpoint_metrics")} == \
        {k: b.json()[k] for k in ("endpoint_slots", "endpoint_metrics")}

    # /metrics without --metrics: 501 and llama-server's words
    a, b = _both(urls, "GET", "/metrics", headers=bearer)
    _same_status(a, b, "/metrics off")
    assert a.status_code == 501 and a.json() == b.json()

    # an OpenAI client with the key, pointed at both, a made-up model name
    for url in urls:
        client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=120)
        out = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}],
                                             max_tokens=4, temperature=0)
        assert out.choices[0].finish_reason in ("length", "stop")


WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                             "required": ["city"]}}}]


def test_a_tool_call_round_trip_through_the_openai_sdk_is_answered_as_llama_server_answers_it(pair):
    """The bundled model's template renders neither tools nor tool calls: llama-server answers with content
    (no tool call can be parsed), and the follow-up with the tool's result renders the tool message."""
    urls = pair()
    user = [{"role": "user", "content": "What is the weather in Paris?"}]
    follow = user + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    answers = []
    for url in urls:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=120)
        first = client.chat.completions.create(model="any", messages=user, tools=WEATHER, tool_choice="auto",
                                               max_tokens=12, temperature=0)
        required = client.chat.completions.create(model="any", messages=user, tools=WEATHER,
                                                  tool_choice="required", max_tokens=4, temperature=0)
        second = client.chat.completions.create(model="any", messages=follow, tools=WEATHER, max_tokens=12,
                                                temperature=0)
        answers.append([(r.choices[0].message.content, r.choices[0].message.tool_calls, r.choices[0].finish_reason,
                         r.usage.prompt_tokens, r.usage.completion_tokens) for r in (first, required, second)])
    assert answers[0] == answers[1]
    assert answers[0][2][3] > answers[0][0][3], "the follow-up's prompt did not grow by the tool call and result"


def test_tools_a_template_writes_in_a_form_not_parsed_are_refused_in_one_line(runtime, monkeypatch):
    """A template that renders tools and writes its calls in a tagged form (not JSON): llama-server would parse
    them back with its autoparser, serve does not: refused with one line naming the form, not answered as plain
    text; a chat without tools is served."""
    from inspector.serve.chat_tools import prepare_tools
    from inspector.serve.errors import ApiError
    from inspector.serve.params import parse_request

    vocab = runtime.vocabulary
    tool_template = ("{% if tools %}{% for t in tools %}<tool>{{ t.function.name }}</tool>{% endfor %}{% endif %}"
                     "{% for m in messages %}{{ m.role }}: {{ m.content }}"
                     "{% for c in m.tool_calls or [] %}[call {{ c.function.name }}]{% endfor %}\n{% endfor %}")
    for holder in (vocab, runtime):  # the runtime lends the vocabulary's chat_template
        monkeypatch.setattr(holder, "chat_template", lambda: tool_template)
    p = parse_request({"messages": [{"role": "user", "content": "hi"}], "tools": WEATHER}, "chat", ServeDefaults())
    with pytest.raises(ApiError, match="tagged form"):
        prepare_tools(runtime, p, {})
    none = parse_request({"messages": [{"role": "user", "content": "hi"}]}, "chat", ServeDefaults())
    assert prepare_tools(runtime, none, {}) == [{"role": "user", "content": "hi"}]  # no tools: served
    assert none.tool_format is None and none.constraints is None
