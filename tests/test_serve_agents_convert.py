"""The agents' request conversions (issue 52), without a model: an Anthropic Messages body and an OpenAI
Responses body become the chat body llama.cpp 0c1e570 makes of them (``server_chat_convert_anthropic_to_oai``,
``server_chat_convert_responses_to_chatcmpl``, tools/server/server-chat.cpp), which ``parse_request``
then reads as a chat; what is not served is refused naming it. Also the stream renderers' cases a short
greedy answer rarely shows (a first token without text, an error in a stream). (The replies are compared
with a real llama-server's in ``test_serve_agents_api``.)"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from inspector.serve import anthropic_api, responses_api
from inspector.serve.errors import SERVER, ApiError
from inspector.serve.job import JobResult, TokenOut
from inspector.serve.params import ServeDefaults, parse_request
from inspector.serve.replies import Replies


def _chat(body):
    return parse_request(body, "chat", ServeDefaults())


def test_anthropic_body_becomes_llama_servers_chat_body():
    body = {"model": "claude-x", "system": [{"type": "text", "text": "A. "}, {"type": "text", "text": "B."},
                                            {"type": "other", "text": "dropped"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {}}]},
                         {"role": "assistant"},  # no content: skipped
                         {"role": "user", "content": [{"type": "document", "source": {}}]},  # nothing left: dropped
                         {"role": "user", "content": "again"}],
            "stop_sequences": ["END"], "temperature": 0, "top_k": 5, "metadata": {"user_id": "u"},
            "service_tier": "auto", "tool_choice": {"type": "none"}}
    chat = anthropic_api.to_chat(body)
    assert chat == {"messages": [{"role": "system", "content": "A. B."},
                                 {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {}}]},
                                 {"role": "user", "content": "again"}],
                    "stop": ["END"], "max_tokens": anthropic_api.DEFAULT_MAX_TOKENS, "temperature": 0, "top_k": 5}
    p = _chat(chat)
    assert [m["content"] for m in p.messages] == ["A. B.", "hi", "again"]
    assert p.model is None and p.stop == ("END",) and p.n_predict == 4096


def test_claude_codes_billing_stamp_is_blanked_as_llama_server_does():
    text = "x-anthropic-billing-header: cc_version=2.1.101.e51; cc_entrypoint=cli; cch=a5145;You are Claude Code."
    chat = anthropic_api.to_chat({"system": text, "messages": [{"role": "user", "content": "x"}]})
    assert chat["messages"][0]["content"] == text.replace("cch=a5145;", "cch=fffff;")
    other = "cch=a5145; not a billing header"
    assert anthropic_api.to_chat({"system": other, "messages": []})["messages"][0]["content"] == other


@pytest.mark.parametrize("body, status, words", [
    ({"max_tokens": 8}, 500, "'messages' is required"),  # llama-server: a std::runtime_error, 500
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, 400, "'image'"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "content": [{"type": "image"}]}]}]}, 400,
     "'tool_result' with an image"),
    ({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 9}}, 400,
     "'thinking'"),
])
def test_anthropic_refusals(body, status, words):
    with pytest.raises(ApiError) as e:
        anthropic_api.to_chat(body)
    assert e.value.status == status and words in e.value.message


def test_anthropic_tools_reach_the_chat_request_as_openai_tools():
    chat = anthropic_api.to_chat({"messages": [{"role": "user", "content": "x"}],
                                  "tools": [{"name": "f", "input_schema": {"type": "object"}}],
                                  "tool_choice": {"type": "any"}})
    assert chat["tools"] == [{"type": "function", "function": {"name": "f", "description": "",
                                                              "parameters": {"type": "object"}}}]
    assert chat["tool_choice"] == "required"
    p = _chat(chat)
    assert p.tools == tuple(chat["tools"]) and p.tool_choice == "required"


def test_responses_body_becomes_llama_servers_chat_body():
    body = {"model": "codex", "instructions": "Be brief.", "max_output_tokens": 9, "temperature": 0,
            "store": False, "reasoning": {"effort": "low"}, "tools": [{"type": "web_search"}],
            "input": [{"role": "developer", "content": "rules"},
                      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
                       "content": [{"type": "output_text", "text": "Hel"}]},
                      {"type": "message", "role": "assistant", "content": "lo"},  # merged into the one before
                      {"role": "user", "content": "go on"}]}
    chat = responses_api.to_chat(body)
    assert chat == {"temperature": 0, "store": False, "max_tokens": 9, "reasoning_effort": "low", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "rules"}]},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},
        {"role": "user", "content": [{"type": "text", "text": "go on"}]}]}  # non-function tools: none left
    p = _chat(chat)
    assert p.template_kwargs == {"reasoning_effort": "low"}  # a template variable, as server-common.cpp passes it
    assert [(m["role"], m["content"]) for m in p.messages] == [
        ("system", "Be brief."), ("system", "rules"), ("user", "hi"), ("assistant", "Hello"), ("user", "go on")]
    assert p.n_predict == 9 and p.model is None


@pytest.mark.parametrize("body, words", [
    ({"model": "m"}, "'input' is required"),
    ({"input": "x", "previous_response_id": "resp_1"}, "llama.cpp does not support 'previous_response_id'."),
    ({"input": 5}, "'input' must be a string or array of objects"),
    ({"input": [{"foo": 1}]}, "Cannot determine type of 'item'"),
    ({"input": [{"role": "user", "content": [{"type": "input_file"}]}]}, "'input_file' is not supported by llamacpp"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]}, "'input_image'"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image"}]}]},
     "'input_image' in a tool call's output"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": [{"text": "o"}]}]},
     "Output of tool call missing 'type' field"),
    ({"input": "x", "tools": {}}, "'tools' must be an array of objects"),
])
def test_responses_refusals(body, words):
    with pytest.raises(ApiError) as e:
        responses_api.to_chat(body)
    assert e.value.status == 400 and words in e.value.message


def test_responses_function_tools_reach_the_chat_request_as_openai_tools():
    chat = responses_api.to_chat({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {}}]})
    assert chat["tools"] == [{"type": "function", "function": {"strict": True, "name": "f", "parameters": {}}}]
    assert _chat(chat).tools == ({"type": "function", "function": {"name": "f", "description": "", "parameters": {}}},)


def _renderer(api):
    p = _chat({"messages": [{"role": "user", "content": "x"}], "stream": True})
    return api.Renderer(Replies(p, "model.gguf", "prompt", 10, lambda t: b"", {}), SimpleNamespace(cache_n=4))


def _events(events):
    return [(e.get("event"), json.loads(e["data"])) for e in events]


def test_anthropic_stream_events_as_llama_server_writes_them():
    r = _renderer(anthropic_api)
    assert r.first() == []
    first = _events(r.chunk(TokenOut(1, "", b"\xe2", None)))  # the first token: message_start, even without text
    assert [n for n, _ in first] == ["message_start"]
    assert first[0][1]["message"]["usage"] == {"cache_read_input_tokens": 4, "input_tokens": 6, "output_tokens": 0}
    assert [n for n, _ in _events(r.chunk(TokenOut(2, "Hi", b"Hi", None)))] == ["content_block_start",
                                                                               "content_block_delta"]
    assert [n for n, _ in _events(r.chunk(TokenOut(3, "!", b"!", None)))] == ["content_block_delta"]
    end = _events(r.last(JobResult(content="Hi!", stop_type="word", stopping_word="\n", predicted_n=4, cache_n=4)))
    assert [n for n, _ in end] == ["content_block_stop", "message_delta", "message_stop"]
    assert end[1][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": "\n"}
    assert _events([r.error(ApiError("boom", SERVER))]) == [("error", {"code": 500, "message": "boom", "type": "server_error"})]


def test_responses_stream_without_visible_text_still_opens_and_completes():
    r = _renderer(responses_api)
    end = _events(r.last(JobResult(content="", stop_type="eos", predicted_n=1)))
    assert [n for n, _ in end] == ["response.created", "response.in_progress", "response.completed"]
    assert end[-1][1]["response"]["output"] == [] and end[-1][1]["response"]["status"] == "completed"
    assert _events([r.error(ApiError("boom", SERVER))]) == [(None, {"error": {"code": 500, "message": "boom", "type": "server_error"}})]


def test_tool_calls_and_results_become_chat_tool_calls_and_tool_messages():
    chat = anthropic_api.to_chat({"messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "w", "input": {"city": "Pärís"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": [{"type": "text", "text": "sun"}, {"type": "text", "text": "ny"}]},
                                     {"type": "text", "text": "and tomorrow?"}]}]})
    assert chat["messages"] == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "w", "arguments": '{"city":"Pärís"}'}}]},
        {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}]},
        {"role": "tool", "tool_call_id": "t1", "content": "sunny"}]  # after its message, as llama-server orders them
    p = _chat(chat)
    assert [m["role"] for m in p.messages] == ["user", "assistant", "user", "tool"]
    chat = responses_api.to_chat({"input": [
        {"role": "user", "content": "weather?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
        {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "sunny"}]}]})
    assert chat["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "Looking."}],
                                   "tool_calls": [{"function": {"arguments": "{}", "name": "w"}, "id": "c1",
                                                   "type": "function"}]}  # merged into the message before
    assert chat["messages"][2] == {"content": [{"type": "text", "text": "sunny"}], "role": "tool",
                                   "tool_call_id": "c1"}
    assert _chat(chat).messages[2] == {"role": "tool", "content": "sunny", "tool_call_id": "c1"}
