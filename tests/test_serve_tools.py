"""Tool calls parsed back as llama-server parses them (issue 52): templates that write JSON tool calls.

The pure parts on tiny inputs: the format read from a template's probe renders (the markers llama-server's
own grammar for the same template shows: Qwen 2.5's ``<tool_call>`` per call, Mistral Nemo's ``[TOOL_CALLS]``
array with an ``id`` field), refusals for templates llama-server parses with parsers of their own, the parse of
an answer into content and calls, the content a stream may show while a marker may still be growing, and the
``until`` rules of the ``required`` grammar (llama.cpp's grammar engine decides what they accept).

On the real model: the bundled model with Qwen 2.5's template (``--chat-template-file`` for llama-server, the
runtime's template replaced for ours) answers a few-shot chat whose earlier turns called a tool, through
``/v1/chat/completions`` (auto, required, none; streamed and not; the ``openai`` SDK with a round trip),
``/v1/messages`` (the ``anthropic`` SDK) and ``/v1/responses``; every answer is compared with llama-server's:
content, each call's name and arguments, the finish or stop reason, the prompt's token count. Nothing here
names the model's words; at least one answer must hold a call, so the parse is exercised.
"""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import llama_cpp
import openai
import pytest
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from inspector.serve.chat_tools import TemplateTools
from inspector.serve.tool_calls import parse_tool_calls, tool_grammar, until_rules, visible_content
from inspector.serve.tool_format import ToolFormat, analyze_tool_format

from serve_helpers import cases_on_llama_server, cases_on_ours

TEMPLATES = Path(__file__).parent / "data" / "templates"
QWEN = TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"


def _render(path: Path):
    source = path.read_text()

    def render(messages, tools, generation_prompt):
        fmt = Jinja2ChatFormatter(template=source, eos_token="</s>", bos_token="<s>",
                                  add_generation_prompt=generation_prompt)
        return fmt(messages=messages, tools=tools).prompt

    return source, render


def test_qwen_and_hermes_templates_write_one_marked_json_object_per_call():
    for name in ("Qwen-Qwen2.5-7B-Instruct", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"):
        fmt = analyze_tool_format(_render(TEMPLATES / f"{name}.jinja")[1])
        # llama-server's grammar for this template: "<tool_call>\n" space (tool ...) space "</tool_call>"
        assert (fmt.per_call_start, fmt.per_call_end, fmt.section_start) == ("<tool_call>\n", "</tool_call>", "")
        assert (fmt.name_field, fmt.args_field, fmt.array_wrapped) == ("name", "arguments", False)
        assert fmt.parallel and fmt.object_arguments


def test_mistral_nemo_writes_one_array_of_calls_with_their_ids():
    fmt = analyze_tool_format(_render(TEMPLATES / "mistralai-Mistral-Nemo-Instruct-2407.jinja")[1])
    # llama-server: "[TOOL_CALLS]" space "[" ... "\"id\"" ... "]"
    assert (fmt.section_start, fmt.section_end, fmt.array_wrapped) == ("[TOOL_CALLS]", "", True)
    assert fmt.parameter_order == ("name", "arguments", "id") and fmt.id_field == "id"


def test_a_template_llama_server_parses_with_its_own_parser_is_refused_with_its_name():
    tt = TemplateTools(*_render(TEMPLATES / "Qwen3-Coder.jinja"))
    assert tt.format is None and "Qwen3-Coder" in tt.refusal


def test_the_bundled_template_renders_no_tools_so_nothing_is_refused(runtime):
    tt = TemplateTools(runtime.chat_template(), lambda m, t, g: runtime.chat_messages_prompt(m, t, None, g))
    assert tt.format is None and tt.refusal == "" and not tt.caps["tool_calls"]


QWEN_FORMAT = ToolFormat(per_call_start="<tool_call>\n", per_call_end="</tool_call>", parallel=True)
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}]


def test_an_answer_parses_into_its_content_and_its_calls_with_the_arguments_as_written():
    text = ('\n Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city":  "Oslo"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>')
    content, calls = parse_tool_calls(text, QWEN_FORMAT, TOOLS)
    assert content == "Let me look.\n"
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city":  "Oslo"}'),
                                                       ("get_time", '{"zone": "CET"}')]


def test_an_answer_whose_calls_do_not_parse_is_all_content():
    for text in ('<tool_call>\n{"name": "no_such_tool", "arguments": {}}\n</tool_call>',
                 '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}',
                 'Hello <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call> and more'):
        assert parse_tool_calls(text, QWEN_FORMAT, TOOLS) == (text.lstrip(), [])


def test_a_stream_holds_back_what_may_still_become_the_marker():
    assert visible_content("Sure <tool_", QWEN_FORMAT) == "Sure "
    assert visible_content("Sure <tool_call>\n{", QWEN_FORMAT) == "Sure "
    assert visible_content("  a < b", QWEN_FORMAT) == "a < b"


def test_the_content_rule_accepts_every_text_without_the_marker_and_refuses_the_marker(runtime):
    rules = until_rules("content", "<tool_call>\n")
    gbnf = "root ::= content\n" + "\n".join(f"{k} ::= {v}" for k, v in rules.items()) + "\n"
    vocab = llama_cpp.llama_model_get_vocab(runtime.model)

    def accepts(text: str) -> bool:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
        assert sampler, gbnf
        try:
            for token in runtime.tokenize(text, add_special=False, parse_special=False):
                one = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 1.0, 0.0))
                arr = llama_cpp.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
                llama_cpp.llama_sampler_apply(sampler, llama_cpp.ctypes.byref(arr))
                if one[0].logit == float("-inf"):
                    return False
                llama_cpp.llama_sampler_accept(sampler, token)
            return True
        finally:
            llama_cpp.llama_sampler_free(sampler)

    for text in ("plain text", "a <tool_call> without a newline", "<tool_call", "<<tool_call>x\n", "<tool_call>>\n"):
        assert accepts(text), text
    for text in ("<tool_call>\n", "say <tool_call>\n{", "<<tool_call>\n"):
        assert not accepts(text), text


def test_the_tool_grammars_are_grammars_llama_cpp_parses(runtime):
    vocab = llama_cpp.llama_model_get_vocab(runtime.model)
    for required in (False, True):
        g = tool_grammar(QWEN_FORMAT, TOOLS, required, parallel=True)
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, g.gbnf.encode(), b"root")
        assert sampler, g.gbnf
        llama_cpp.llama_sampler_free(sampler)
        assert g.triggers == (() if required else ("<tool_call>\n",))


# -- the real model, ours against llama-server -----------------------------------------------------------

N = 40


def _shot(city: str, i: int) -> list[dict]:
    call_id = f"call0000{i}"
    return [{"role": "user", "content": f"What is the weather in {city}?"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": {
                "name": "get_weather", "arguments": json.dumps({"city": city})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "sunny"},
            {"role": "assistant", "content": f"It is sunny in {city}."}]


FEW_SHOT = _shot("Paris", 1) + _shot("Rome", 2) + _shot("Oslo", 3) + [
    {"role": "user", "content": "What is the weather in Berlin?"}]
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": "tool",
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]


def _anthropic_messages(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        if m["role"] == "tool":
            out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": m["tool_call_id"],
                                                     "content": m["content"]}]})
        elif m.get("tool_calls"):
            out.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                 "input": json.loads(c["function"]["arguments"])} for c in m["tool_calls"]]})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


def _chat(url: str, choice: str, stream: bool) -> dict:
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    kw = dict(model="gpt-anything", messages=FEW_SHOT, tools=TOOLS, tool_choice=choice, max_tokens=N, temperature=0)
    if not stream:
        r = client.chat.completions.create(**kw)
        m = r.choices[0].message
        calls = [(c.function.name, c.function.arguments, len(c.id)) for c in m.tool_calls or ()]
        return {"content": m.content, "calls": calls, "finish": r.choices[0].finish_reason,
                "prompt": r.usage.prompt_tokens}
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(**kw, stream=True):
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            content += ch.delta.content or ""
            for tc in ch.delta.tool_calls or ():
                entry = calls.setdefault(tc.index, ["", "", ""])
                entry[0] += (tc.function.name or "") if tc.function else ""
                entry[1] += (tc.function.arguments or "") if tc.function else ""
                entry[2] = tc.id or entry[2]
    return {"content": content, "calls": [(n, a, len(i)) for n, a, i in calls.values()], "finish": finish}


def _round_trip(url: str) -> dict:
    """The openai SDK's loop: the answer's calls sent back with a result each, and the next answer."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    first = client.chat.completions.create(model="m", messages=FEW_SHOT, tools=TOOLS, max_tokens=N, temperature=0)
    m = first.choices[0].message
    messages = FEW_SHOT + [m.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": "cloudy"} for c in m.tool_calls or ()]
    second = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=N, temperature=0)
    return {"first": [(c.function.name, c.function.arguments) for c in m.tool_calls or ()],
            "second": second.choices[0].message.content, "prompt": second.usage.prompt_tokens}


def _anthropic(url: str, stream: bool) -> dict:
    client = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=300)
    kw = dict(model="claude-anything", max_tokens=N, extra_body={"temperature": 0}, tools=ANTHROPIC_TOOLS,
              messages=_anthropic_messages(FEW_SHOT))
    if stream:
        with client.messages.stream(**kw) as s:
            r = s.get_final_message()
    else:
        r = client.messages.create(**kw)
    return {"blocks": [(b.type, b.text if b.type == "text" else (b.name, b.input, len(b.id))) for b in r.content],
            "stop": r.stop_reason}


def _responses(url: str, stream: bool) -> dict:
    tools = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
             for t in TOOLS]
    body = {"model": "codex", "max_output_tokens": N, "temperature": 0, "tools": tools}
    body["input"] = []
    for m in FEW_SHOT:  # the few-shot chat as Responses items
        if m["role"] == "tool":
            body["input"].append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        elif m.get("tool_calls"):
            body["input"] += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                               "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
        elif m["role"] == "assistant":
            body["input"].append({"type": "message", "role": "assistant",
                                  "content": [{"type": "output_text", "text": m["content"]}]})
        else:
            body["input"].append({"role": "user", "content": m["content"]})
    if not stream:
        r = httpx.post(url + "/v1/responses", json=body, timeout=300, trust_env=False).json()
        if "output" not in r:
            return r
        return {"output": [(o["type"], o.get("name"), o.get("arguments"), o.get("content", [{}])[0].get("text"))
                           for o in r["output"]]}
    done = None
    with httpx.stream("POST", url + "/v1/responses", json={**body, "stream": True}, timeout=300,
                      trust_env=False) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data:"):
                d = json.loads(line[5:])
                if d["type"] == "response.completed":
                    done = d["response"]["output"]
    return {"output": [(o["type"], o.get("name"), o.get("arguments"), (o.get("content") or [{}])[0].get("text"))
                       for o in done]} if done is not None else {"stream": "no response.completed"}


def _raw_keys(url: str) -> dict:
    """The fields of the raw chat reply's choice and message (the SDK hides a key written as null)."""
    r = httpx.post(url + "/v1/chat/completions", json={"messages": FEW_SHOT, "tools": TOOLS, "max_tokens": N,
                                                        "temperature": 0}, timeout=300, trust_env=False).json()
    choice = r["choices"][0]
    return {"choice": sorted(choice), "message": sorted(choice["message"]),
            "call": sorted(choice["message"].get("tool_calls", [{}])[0])}


CASES = {
    "chat raw fields": _raw_keys,
    "chat auto": lambda u: _chat(u, "auto", False),
    "chat auto streamed": lambda u: _chat(u, "auto", True),
    "chat required": lambda u: _chat(u, "required", False),
    "chat required streamed": lambda u: _chat(u, "required", True),
    "chat none": lambda u: _chat(u, "none", False),
    "chat openai SDK round trip": _round_trip,
    "messages anthropic SDK": lambda u: _anthropic(u, False),
    "messages anthropic SDK streamed": lambda u: _anthropic(u, True),
    "responses": lambda u: _responses(u, False),
    "responses streamed": lambda u: _responses(u, True),
}


@pytest.fixture(scope="module")
def both(scheduler, runtime, llama_server_binary, tmp_path_factory):
    """Every case's result from our serve and from llama-server, both on Qwen 2.5's chat template."""
    mine = cases_on_ours(scheduler, runtime, QWEN, CASES, tmp_path_factory.mktemp("served"))
    theirs = cases_on_llama_server(llama_server_binary, runtime, QWEN, CASES)
    return mine, theirs


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_tool_answers_are_llama_servers(case, both):
    mine, theirs = both
    assert mine[case] == theirs[case]


@pytest.mark.slow
def test_some_answer_holds_a_tool_call_so_the_parse_ran(both):
    _, theirs = both
    assert any(r.get("calls") for r in theirs.values()), theirs
    assert any(r.get("finish") == "tool_calls" for r in theirs.values()), theirs


@pytest.mark.slow
def test_serve_takes_llama_servers_chat_template_file_flag(both, tmp_path):
    from test_serve_cli import _start

    proc, address = _start(tmp_path, "--chat-template-file", QWEN)
    try:
        mine = _chat(address, "auto", False)
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert mine == both[1]["chat auto"]


def test_a_built_in_template_name_is_one_clear_line_before_the_model_loads():
    from test_cli import cli, one_clear_line

    p = cli("serve", "--chat-template", "chatml", timeout=60)
    assert p.returncode == 2
    assert "not a Jinja template" in one_clear_line(p.stderr)
    assert "loading" not in p.stderr
