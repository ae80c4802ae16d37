"""The agents' APIs of ``spec-inspector serve`` answer as llama-server answers them (issue 52):
``POST /v1/messages`` (Anthropic Messages, Claude-Code-style agents), ``/v1/messages/count_tokens``,
``POST /v1/responses`` (OpenAI Responses, Codex-style agents) and ``/v1/responses/input_tokens``.

The same requests go to our ``InspectorServer`` on the shared runtime and to a real llama-server built
from the same llama.cpp (``llama_server_binary``), one server after the other (never both decoding), all
greedy and short: raw HTTP (httpx) streamed and not, the real ``anthropic`` SDK
(``messages.create``, ``messages.stream``) and the real ``openai`` SDK (``responses.create``, streamed
and not), token counting, and error cases (no messages / no input, a bad ``max_tokens`` /
``max_output_tokens``). Compared: the HTTP status and the whole reply with ids reduced to their prefix,
times removed and ``timings`` reduced to its token counts; streamed, the sequence of event names and
every event's data the same way (so the concatenated text too). Nothing here names the model's words:
whatever this CPU's arithmetic gives, both programs must give it.
"""

from __future__ import annotations

import json
import re

import anthropic
import httpx
import openai
import pytest

from inspector.bench.server_process import LlamaServerProcess
from inspector.engine import GenerationSettings
from inspector.engine.settings import SamplingSettings
from inspector.llama.server_parity import server_context
from inspector.receipts import load_document
from inspector.serve.params import ServeDefaults
from inspector.serve.receipts_dir import ReceiptsDir
from inspector.serve.server import InspectorServer, ServeOptions

pytestmark = pytest.mark.slow

N = 24
"""Tokens per answer (short: 2 cores shared)."""
ASK = "Name three rivers of Europe and say one thing about each."
SYSTEM = "You are a brief assistant."
TIMES = ("created", "created_at", "completed_at")
COUNTS = ("cache_n", "prompt_n", "predicted_n")
"""What of ``timings`` is compared (token counts; the rest is time)."""
_ID = re.compile(r"^(chatcmpl-|resp_|msg_|rs_)[0-9A-Za-z]{32}$")


def _norm(value):
    """``value`` with ids reduced to their prefix, times removed, ``timings`` to its token counts."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in TIMES:
                assert isinstance(v, int), (k, v)
                continue
            if k == "timings":
                out[k] = {c: v.get(c) for c in COUNTS}
            elif isinstance(v, str) and _ID.match(v):
                out[k] = _ID.match(v).group(1) + "*"
            else:
                out[k] = _norm(v)
        return out
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def _events(response: httpx.Response) -> list[tuple[str | None, object]]:
    """The SSE events of a streamed reply: (event name or None, parsed data)."""
    out, name = [], None
    for line in response.iter_lines():
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
            out.append((name, data if data == "[DONE]" else json.loads(data)))
            name = None
    return out


def _post(url: str, path: str, body: dict) -> dict:
    r = httpx.post(url + path, json=body, timeout=300, trust_env=False)
    try:
        data = r.json()
    except ValueError:
        data = r.text
    return {"status": r.status_code, "body": _norm(data)}


def _stream(url: str, path: str, body: dict) -> dict:
    with httpx.stream("POST", url + path, json={**body, "stream": True}, timeout=300, trust_env=False) as r:
        if r.status_code != 200:
            r.read()
            return {"status": r.status_code, "body": _norm(r.json())}
        events = _events(r)
    return {"status": 200, "content_type": r.headers["content-type"].split(";")[0],
            "names": [n for n, _ in events], "events": [_norm(d) for _, d in events]}


def _text_of_anthropic(events: list) -> str:
    return "".join(d["delta"]["text"] for d in events if d.get("type") == "content_block_delta")


def _text_of_responses(events: list) -> str:
    return "".join(d["delta"] for d in events if d.get("type") == "response.output_text.delta")


MESSAGES = {"model": "claude-anything", "max_tokens": N, "temperature": 0, "system": SYSTEM,
            "messages": [{"role": "user", "content": ASK}]}
CONVERSATION = {"model": "claude-anything", "max_tokens": N, "temperature": 0, "stop_sequences": ["\n"],
                "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "user", "content": [{"type": "text", "text": "Say hello."}]},
                             {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
                             {"role": "user", "content": [{"type": "text", "text": ASK}]}]}
RESPONSES = {"model": "codex-anything", "input": ASK, "instructions": SYSTEM, "max_output_tokens": N,
             "temperature": 0}
RESPONSES_ITEMS = {"model": "codex-anything", "max_output_tokens": N, "temperature": 0, "stop": ["\n"], "input": [
    {"role": "developer", "content": SYSTEM},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Hello!"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ASK}]}]}

TOOL = {"name": "get_weather", "description": "Weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TOOL_ROUND_TRIP = {"model": "claude-anything", "max_tokens": N, "temperature": 0, "tools": [TOOL],
                   "tool_choice": {"type": "auto"}, "messages": [
                       {"role": "user", "content": "What is the weather in Paris?"},
                       {"role": "assistant", "content": [{"type": "text", "text": "Let me look."},
                                                         {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                          "input": {"city": "Paris"}}]},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                     "content": [{"type": "text", "text": "sunny, 21 C"}]}]}]}
RESPONSES_TOOL_ROUND_TRIP = {"model": "codex-anything", "max_output_tokens": N, "temperature": 0,
                             "tools": [{"type": "function", "name": "get_weather", "description": "Weather of a city",
                                        "parameters": TOOL["input_schema"]}],
                             "input": [{"role": "user", "content": "What is the weather in Paris?"},
                                       {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                                        "arguments": '{"city": "Paris"}'},
                                       {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"}]}


def _anthropic_sdk_tools(url: str) -> dict:
    """A Claude-Code-style turn with the SDK: tools offered, then the tool's result sent back."""
    client = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=300)
    first = client.messages.create(model="claude-anything", max_tokens=N, tools=[TOOL], extra_body={"temperature": 0},
                                   messages=TOOL_ROUND_TRIP["messages"][:1])
    second = client.messages.create(model="claude-anything", max_tokens=N, tools=[TOOL],
                                    extra_body={"temperature": 0}, messages=TOOL_ROUND_TRIP["messages"])
    return {"first": _norm(first.model_dump()), "second": _norm(second.model_dump())}


def _anthropic_sdk(url: str) -> dict:
    client = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=300)
    kw = dict(model="claude-anything", max_tokens=N, system=SYSTEM, messages=[{"role": "user", "content": ASK}],
              extra_body={"temperature": 0})  # this SDK has no temperature argument
    message = client.messages.create(**kw)
    with client.messages.stream(**kw) as stream:
        names = [event.type for event in stream]
        streamed = stream.get_final_message()
    return {"message": _norm(message.model_dump()), "text": "".join(b.text for b in message.content),
            "streamed": _norm(streamed.model_dump()), "names": names,
            "streamed_text": "".join(b.text for b in streamed.content)}


def _openai_sdk(url: str) -> dict:
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    kw = dict(model="codex-anything", input=ASK, instructions=SYSTEM, max_output_tokens=N, temperature=0)
    response = client.responses.create(**kw)
    events = list(client.responses.create(**kw, stream=True))
    done = [e for e in events if e.type == "response.completed"]
    return {"text": response.output_text, "usage": response.usage.model_dump(), "status": response.status,
            "names": [e.type for e in events],
            "streamed_text": "".join(e.delta for e in events if e.type == "response.output_text.delta"),
            "streamed_usage": done[0].response.usage.model_dump() if done else None}


CASES = {
    # name: what is sent (url -> comparable result)
    "messages": lambda u: _post(u, "/v1/messages", MESSAGES),
    "messages streamed": lambda u: _stream(u, "/v1/messages", MESSAGES),
    "messages conversation": lambda u: _post(u, "/v1/messages", CONVERSATION),
    "messages conversation streamed": lambda u: _stream(u, "/v1/messages", CONVERSATION),
    "messages count_tokens": lambda u: _post(u, "/v1/messages/count_tokens", CONVERSATION),
    "messages anthropic SDK": _anthropic_sdk,
    "messages tool round trip": lambda u: _post(u, "/v1/messages", TOOL_ROUND_TRIP),
    "messages tool round trip streamed": lambda u: _stream(u, "/v1/messages", TOOL_ROUND_TRIP),
    "messages tool round trip count_tokens": lambda u: _post(u, "/v1/messages/count_tokens", TOOL_ROUND_TRIP),
    "messages anthropic SDK tools": _anthropic_sdk_tools,
    "responses tool round trip": lambda u: _post(u, "/v1/responses", RESPONSES_TOOL_ROUND_TRIP),
    "responses codex fields": lambda u: _post(u, "/v1/responses", {
        **RESPONSES, "include": [], "prompt_cache_key": "k", "text": {"format": {"type": "text"}},
        "service_tier": "auto", "truncation": "disabled", "parallel_tool_calls": False, "store": False}),
    "responses tool round trip input_tokens": lambda u: _post(u, "/v1/responses/input_tokens",
                                                              RESPONSES_TOOL_ROUND_TRIP),
    "messages without messages": lambda u: _post(u, "/v1/messages", {"model": "m", "max_tokens": N}),
    "messages bad max_tokens": lambda u: _post(u, "/v1/messages", {**MESSAGES, "max_tokens": "ten"}),
    "responses": lambda u: _post(u, "/v1/responses", RESPONSES),
    "responses streamed": lambda u: _stream(u, "/v1/responses", RESPONSES),
    "responses items": lambda u: _post(u, "/v1/responses", RESPONSES_ITEMS),
    "responses items streamed": lambda u: _stream(u, "/responses", RESPONSES_ITEMS),
    "responses input_tokens": lambda u: _post(u, "/v1/responses/input_tokens", RESPONSES_ITEMS),
    "responses openai SDK": _openai_sdk,
    "responses without input": lambda u: _post(u, "/v1/responses", {"model": "m", "max_output_tokens": N}),
    "responses bad max_output_tokens": lambda u: _post(u, "/v1/responses", {**RESPONSES, "max_output_tokens": -7}),
    "responses previous_response_id": lambda u: _post(u, "/v1/responses", {**RESPONSES,
                                                                          "previous_response_id": "resp_1"}),
}


def _run_all(url: str) -> dict:
    return {name: send(url) for name, send in CASES.items()}


@pytest.fixture(scope="module")
def both(scheduler, runtime, llama_server_binary, tmp_path_factory):
    """Every case's result from our serve and from llama-server, and our receipts' documents."""
    folder = tmp_path_factory.mktemp("served")
    ours = InspectorServer(scheduler, str(runtime.model_path), ServeOptions(
        port=0, source="none", template=GenerationSettings(draft_max=0),
        defaults=ServeDefaults(SamplingSettings(temperature=0.8)), receipts=ReceiptsDir(folder)))
    ours.start()
    try:
        assert ours.wait_started(), "uvicorn did not start within 10 s"
        mine = _run_all(ours.address)
        docs = [load_document(r.receipts_path) for r in ours.slots.snapshot_rows() if r.receipts_path]
    finally:
        ours.stop()
    flags = ["-b", str(runtime.n_batch), *server_context(runtime).server_args()]
    with LlamaServerProcess(llama_server_binary, runtime.model_path, args=flags, threads=1,
                            n_ctx=runtime.n_ctx) as server:
        theirs = _run_all(server.url)
    return mine, theirs, docs


@pytest.mark.parametrize("case", list(CASES))
def test_agents_api_answers_as_llama_server(case, both):
    mine, theirs, _docs = both
    a, b = mine[case], theirs[case]
    assert a == b, f"{case}:\n ours         {json.dumps(a)[:3000]}\n llama-server {json.dumps(b)[:3000]}"


def test_the_comparison_shows_something(both):
    """The answers compared have text, the streams have their APIs' events, the errors are errors."""
    mine, _theirs, _docs = both
    assert mine["messages"]["status"] == 200 and mine["messages"]["body"]["content"][0]["text"]
    streamed = mine["messages streamed"]
    assert streamed["names"][0] == "message_start" and streamed["names"][-1] == "message_stop"
    assert _text_of_anthropic(streamed["events"]) == mine["messages"]["body"]["content"][0]["text"]
    assert mine["messages anthropic SDK"]["text"] == mine["messages anthropic SDK"]["streamed_text"] != ""
    assert mine["messages count_tokens"]["body"]["input_tokens"] > 0
    out = mine["responses"]["body"]["output"][0]["content"][0]["text"]
    streamed = mine["responses streamed"]
    assert streamed["names"][:2] == ["response.created", "response.in_progress"]
    assert streamed["names"][-1] == "response.completed"
    assert _text_of_responses(streamed["events"]) == out != ""
    assert mine["responses openai SDK"]["text"] == mine["responses openai SDK"]["streamed_text"] == out
    for case in ("messages without messages", "messages bad max_tokens", "responses without input",
                 "responses bad max_output_tokens", "responses previous_response_id"):
        assert mine[case]["status"] >= 400 and "error" in mine[case]["body"], (case, mine[case])


def test_every_served_generation_is_a_recorded_session_named_by_its_path(both):
    _mine, _theirs, docs = both
    endpoints = [d["served"]["endpoint"] for d in docs]
    # 2 + 2 conversation + the SDK's 2 + 2 tool round trips + the SDK's 2 with tools
    assert endpoints.count("/v1/messages") == 10
    # 2 + the items + the tool round trip + the Codex fields + the SDK's 2; the items streamed on /responses
    assert endpoints.count("/v1/responses") == 7 and endpoints.count("/responses") == 1
    assert all(d["served"]["ended_as"] in ("length", "eog", "stop") for d in docs)


@pytest.fixture
def serve(scheduler, runtime, tmp_path):
    server = InspectorServer(scheduler, str(runtime.model_path), ServeOptions(
        port=0, source="none", template=GenerationSettings(draft_max=0),
        defaults=ServeDefaults(SamplingSettings(temperature=0.8)), receipts=None))
    server.start()
    assert server.wait_started(), "uvicorn did not start within 10 s"
    yield server
    server.stop()


def test_tools_are_taken_as_the_chat_endpoint_takes_them(serve):
    """Tools reach the chat template as in a chat request: the bundled template renders none, so the answer
    is the one without them (greedy, the same prompt); text-only content rules name what they refuse."""
    url = serve.address
    tool = {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}
    plain = httpx.post(url + "/v1/messages", json=MESSAGES, timeout=120, trust_env=False)
    r = httpx.post(url + "/v1/messages", json={**MESSAGES, "tools": [tool]}, timeout=120, trust_env=False)
    assert r.status_code == plain.status_code == 200, r.text
    assert r.json()["content"] == plain.json()["content"]
    assert r.json()["usage"]["input_tokens"] + r.json()["usage"].get("cache_read_input_tokens", 0) == \
        plain.json()["usage"]["input_tokens"] + plain.json()["usage"].get("cache_read_input_tokens", 0)
    r = httpx.post(url + "/v1/responses", json={**RESPONSES, "tools": [{"type": "function", **tool}]}, timeout=120,
                   trust_env=False)
    assert r.status_code == 200, r.text
    r = httpx.post(url + "/v1/messages", json={**MESSAGES, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "x"}}]}]}, timeout=60, trust_env=False)
    assert r.status_code == 400 and "image" in r.json()["error"]["message"], r.text
    # an empty tools list (what a client sends with no tools) is no tool at all
    r = httpx.post(url + "/v1/messages", json={**MESSAGES, "max_tokens": 2, "tools": []}, timeout=120,
                   trust_env=False)
    assert r.status_code == 200, r.text
