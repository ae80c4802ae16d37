"""Reasoning blocks parsed out of chat answers as llama-server parses them (Qwen3's ``<think>``, DeepSeek-R1's).

The pure parts on tiny strings: the markers found from a template's probe renders, the parse of an answer
(the generation prompt's part from the reasoning start prepended), what a stream may show while a marker may
still be growing, the grammar's reasoning block.

On the real model: the bundled model does not write ``<think>`` by itself, so a request ``grammar`` makes it,
identically on both servers; every answer is compared with llama-server's on the same template
(``--chat-template-file`` there, the runtime's template replaced for ours): content and reasoning_content,
streamed (and reasoning deltas before content ones) and not, the anthropic SDK's thinking block, ``/v1/responses``'
reasoning item, ``reasoning_format: none``, ``enable_thinking`` false, tools under ``required``, and a plain chat.
Nothing here names the model's words.
"""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from inspector.serve.chat_tools import TemplateTools
from inspector.serve.params import ServeDefaults
from inspector.serve.reasoning import ReasoningFormat, ReasoningParse, ReasoningSplit, analyze_reasoning, \
    parse_reasoning, reasoning_rules
from inspector.serve.tool_calls import until_rules

from serve_helpers import cases_on_llama_server, cases_on_ours

TEMPLATES = Path(__file__).parent / "data" / "templates"
QWEN3 = TEMPLATES / "Qwen-Qwen3-0.6B.jinja"
R1 = TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"


def _render(path: Path):
    source = path.read_text()

    def render(messages, gp, thinking):
        fmt = Jinja2ChatFormatter(template=source, eos_token="</s>", bos_token="<s>", add_generation_prompt=gp)
        return fmt(messages=messages, enable_thinking=thinking).prompt

    return source, render


def test_qwen3_markers_keep_the_spaces_the_template_writes_around_them():
    assert analyze_reasoning(*_render(QWEN3)) == ReasoningFormat("<think>\n", "\n</think>\n\n")


def test_deepseek_r1_markers_come_from_its_thinking_switch():
    assert analyze_reasoning(*_render(R1)) == ReasoningFormat("<think>", "</think>")


def test_a_template_without_reasoning_has_no_markers():
    for name in ("Qwen-Qwen2.5-7B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407"):
        assert analyze_reasoning(*_render(TEMPLATES / f"{name}.jinja")) is None


Q = ReasoningFormat("<think>\n", "\n</think>\n\n")
GP = "<|im_start|>assistant\n"


def test_the_block_is_parsed_out_and_the_spaces_before_it_skipped():
    assert parse_reasoning("  <think>\nabc\n</think>\n\n\nxyz", Q, GP) == ("abc\n", "\nxyz")
    assert parse_reasoning("<think>a b</think>c d", Q, GP) == ("a b", "c d")
    assert parse_reasoning("\n hello <think>x</think>", Q, GP) == ("", "hello <think>x</think>")


def test_reasoning_format_none_keeps_the_block_in_the_content():
    assert parse_reasoning("  <think>a</think>b", Q, GP, extract=False) == ("", "<think>a</think>b")


def test_an_unfinished_block_is_all_reasoning_and_a_growing_marker_is_held_back():
    assert parse_reasoning("<think>abc", Q, GP) == ("abc", "")
    assert parse_reasoning("<think>abc</thi", Q, GP) == ("abc", "")
    assert parse_reasoning("<thi", Q, GP) == ("", "")
    assert parse_reasoning("<think>\n  \n", Q, GP) == ("", "")  # whitespace-only reasoning is dropped


def test_a_generation_prompt_that_opens_the_block_makes_the_answer_reasoning_until_the_end_marker():
    r1 = ReasoningFormat("<think>", "</think>")
    gp = "<｜Assistant｜><think>\n"
    assert parse_reasoning("abc</think>def", r1, gp) == ("\nabc", "def")
    assert parse_reasoning("abc", r1, gp) == ("\nabc", "")
    assert parse_reasoning("abc</think>def", r1, gp, extract=False) == ("", "<think>\nabc</think>def")


def test_a_stream_sends_reasoning_then_content_and_never_takes_back():
    split = ReasoningSplit(ReasoningParse(Q, GP))
    got = [split.feed(piece) for piece in ("<th", "ink>", "ab", "c</", "think>", "de", "f")]
    assert [r for r, _ in got] == ["", "", "ab", "c", "", "", ""]
    assert [c for _, c in got] == ["", "", "", "", "", "de", "def"]


def test_the_grammar_block_is_llama_servers():
    block, rules = reasoning_rules(Q, until_rules)
    assert block == '("<think>" "\\n"? reasoning-text "\\n"? "</think>" "\\n"? "\\n"?)?'
    assert "reasoning-text" in rules


def test_the_request_fields_are_read_as_llama_server_reads_them():
    from inspector.serve.errors import ApiError
    from inspector.serve.params import parse_request
    from inspector.serve.reasoning import enable_thinking

    chat = {"messages": [{"role": "user", "content": "hi"}]}
    assert parse_request({**chat, "reasoning_format": "none"}, "chat", ServeDefaults()).reasoning_format == "none"
    with pytest.raises(ApiError, match="Unknown reasoning format"):
        parse_request({**chat, "reasoning_format": "think"}, "chat", ServeDefaults())
    assert parse_request({**chat, "reasoning_effort": "none"}, "chat", ServeDefaults()).reasoning_effort_none
    assert enable_thinking({}, True) and not enable_thinking({"enable_thinking": False}, True)
    with pytest.raises(ApiError, match="expected boolean"):
        enable_thinking({"enable_thinking": "false"}, True)


def test_tools_on_a_reasoning_template_are_no_longer_refused():
    source, render = _render(QWEN3)

    def tool_render(messages, tools, gp):
        fmt = Jinja2ChatFormatter(template=source, eos_token="</s>", bos_token="<s>", add_generation_prompt=gp)
        return fmt(messages=messages, tools=tools, enable_thinking=True).prompt

    tt = TemplateTools(source, tool_render)
    assert tt.refusal == "" and tt.format is not None and tt.format.per_call_start == "<tool_call>\n"


def test_a_tool_marker_inside_the_reasoning_block_does_not_wake_the_lazy_grammar(runtime):
    from inspector.llama.grammar import GrammarState
    from inspector.serve.tool_calls import tool_grammar
    from inspector.serve.tool_format import ToolFormat

    fmt = ToolFormat(per_call_start="<tool_call>\n", per_call_end="</tool_call>", parallel=True)
    g = tool_grammar(fmt, TOOLS, False, True)

    def tok(text):
        return runtime.tokenize(text, add_special=False, parse_special=True)

    gate = (tuple(tok("<think>")), tuple(tok("</think>")), ())
    plain = tok("zz")[0]
    for text, gated, woken in (("<think>\n<tool_call>\n", True, False), ("<think>\n<tool_call>\n", False, True),
                               ("<think>a</think>\n<tool_call>\n", True, True)):
        state = GrammarState(runtime.vocab, g.gbnf, runtime.n_vocab, g.triggers, gate if gated else ())
        try:
            state.sync(tok(text))
            assert state.allows(state.sampler, plain) is (not woken), (text, gated)
        finally:
            state.close()


# -- the real model, ours against llama-server -----------------------------------------------------------

N = 60
THINK = 'root ::= "<think>" [a-z] [a-z ]{1,20} "</think>" [a-z] [a-z ]{1,20}'
OPENED = 'root ::= [a-z] [a-z ]{1,20} "</think>" [a-z] [a-z ]{1,20}'
MESSAGES = [{"role": "user", "content": "Say something short."}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def _post(url: str, body: dict) -> dict:
    r = httpx.post(url + "/v1/chat/completions", json={"max_tokens": N, "temperature": 0, "messages": MESSAGES,
                                                       **body}, timeout=300, trust_env=False)
    d = r.json()
    if r.status_code != 200:
        return {"status": r.status_code}
    m = d["choices"][0]["message"]
    return {"content": m.get("content"), "reasoning": m.get("reasoning_content"),
            "calls": [(c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or ()],
            "finish": d["choices"][0]["finish_reason"], "prompt": d["usage"]["prompt_tokens"]}


def _stream(url: str, body: dict) -> dict:
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    content, reasoning, order, finish = "", "", [], None
    for chunk in client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=N, temperature=0,
                                                stream=True, extra_body=body):
        for ch in chunk.choices:
            finish = ch.finish_reason or finish
            extra = ch.delta.model_extra or {}
            if extra.get("reasoning_content"):
                reasoning += extra["reasoning_content"]
                order.append("r")
            if ch.delta.content:
                content += ch.delta.content
                order.append("c")
    first_content = order.index("c") if "c" in order else len(order)
    return {"content": content, "reasoning": reasoning, "finish": finish,
            "reasoning_first": "r" in order and "r" not in order[first_content:]}


def _anthropic(url: str, stream: bool) -> dict:
    """llama-server's Messages conversion passes no grammar on: DeepSeek-R1's template, whose generation prompt
    opens the block, makes the answer reasoning (until an end marker the model does not write)."""
    client = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=300)
    kw = dict(model="claude-anything", max_tokens=16, messages=MESSAGES, extra_body={"temperature": 0})
    if stream:
        with client.messages.stream(**kw) as s:
            r = s.get_final_message()
    else:
        r = client.messages.create(**kw)
    return {"blocks": [(b.type, b.thinking if b.type == "thinking" else b.text,
                        getattr(b, "signature", None)) for b in r.content], "stop": r.stop_reason}


def _responses(url: str, stream: bool, grammar: str) -> dict:
    body = {"model": "codex", "max_output_tokens": N, "temperature": 0, "grammar": grammar, "input": "Say something."}

    def items(output):
        return [(o["type"], (o.get("content") or [{}])[0].get("text")) for o in output]

    if not stream:
        r = httpx.post(url + "/v1/responses", json=body, timeout=300, trust_env=False).json()
        return {"output": items(r["output"])} if "output" in r else r
    done, kinds = None, []
    with httpx.stream("POST", url + "/v1/responses", json={**body, "stream": True}, timeout=300,
                      trust_env=False) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                d = json.loads(line[5:])
                kinds.append(d["type"])
                if d["type"] == "response.completed":
                    done = d["response"]["output"]
    return {"output": items(done) if done is not None else None, "reasoning_deltas": "response.reasoning_text.delta"
            in kinds}


def _anthropic_round_trip(url: str) -> dict:
    """A client sends its earlier answer's thinking block back (Claude Code does): the message's reasoning_content."""
    client = anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=300)
    r = client.messages.create(model="c", max_tokens=8, extra_body={"temperature": 0}, messages=[
        {"role": "user", "content": "Say something short."},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "a short thought", "signature": ""},
                                          {"type": "text", "text": "Something short."}]},
        {"role": "user", "content": "Again."}])
    return {"blocks": [(b.type, getattr(b, "text", None)) for b in r.content], "input": r.usage.input_tokens}


def _responses_round_trip(url: str) -> dict:
    body = {"model": "codex", "max_output_tokens": 8, "temperature": 0, "input": [
        {"role": "user", "content": "Say something short."},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "a short thought"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Something short."}]},
        {"role": "user", "content": "Again."}]}
    r = httpx.post(url + "/v1/responses", json=body, timeout=300, trust_env=False).json()
    return {"output": [(o["type"], (o.get("content") or [{}])[0].get("text")) for o in r["output"]],
            "input": r["usage"]["input_tokens"]} if "output" in r else r


CASES = {
    "chat": lambda u: _post(u, {"grammar": THINK}),
    "chat streamed": lambda u: _stream(u, {"grammar": THINK}),
    "chat reasoning_format none": lambda u: _post(u, {"grammar": THINK, "reasoning_format": "none"}),
    "chat streamed reasoning_format none": lambda u: _stream(u, {"grammar": THINK, "reasoning_format": "none"}),
    "chat enable_thinking false": lambda u: _post(u, {"grammar": THINK,
                                                      "chat_template_kwargs": {"enable_thinking": False}}),
    "chat plain": lambda u: _post(u, {"max_tokens": 16}),
    "chat tools required": lambda u: _post(u, {"tools": TOOLS, "tool_choice": "required", "max_tokens": 40}),
    "chat tools auto": lambda u: _post(u, {"tools": TOOLS, "max_tokens": 24}),
    "chat tools auto streamed": lambda u: _stream(u, {"tools": TOOLS, "max_tokens": 24}),
    "messages round trip with a thinking block": _anthropic_round_trip,
    "responses round trip with a reasoning item": _responses_round_trip,
    "responses": lambda u: _responses(u, False, THINK),
    "responses streamed": lambda u: _responses(u, True, THINK),
}
R1_CASES = {
    "r1 chat": lambda u: _post(u, {"grammar": OPENED}),
    "r1 chat streamed": lambda u: _stream(u, {"grammar": OPENED}),
    "r1 chat reasoning_format none": lambda u: _post(u, {"grammar": OPENED, "reasoning_format": "none"}),
    "r1 chat plain": lambda u: _post(u, {"max_tokens": 16}),
    "r1 messages anthropic SDK": lambda u: _anthropic(u, False),
    "r1 messages anthropic SDK streamed": lambda u: _anthropic(u, True),
    "r1 messages round trip with a thinking block": _anthropic_round_trip,
}


@pytest.fixture(scope="module")
def both(scheduler, runtime, llama_server_binary, tmp_path_factory):
    """Every case's result from our serve and from llama-server (Qwen3's template, then DeepSeek-R1's)."""
    mine = cases_on_ours(scheduler, runtime, QWEN3, CASES, tmp_path_factory.mktemp("qwen3"))
    mine |= cases_on_ours(scheduler, runtime, R1, R1_CASES, tmp_path_factory.mktemp("r1"))
    theirs = cases_on_llama_server(llama_server_binary, runtime, QWEN3, CASES)
    theirs |= cases_on_llama_server(llama_server_binary, runtime, R1, R1_CASES)
    return mine, theirs


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES) + list(R1_CASES))
def test_reasoning_answers_are_llama_servers(case, both):
    mine, theirs = both
    assert mine[case] == theirs[case]


@pytest.mark.slow
def test_the_grammar_made_reasoning_so_the_parse_ran(both):
    _, theirs = both
    assert theirs["chat"]["reasoning"] and theirs["chat"]["content"] is not None
    assert theirs["chat streamed"]["reasoning_first"]
    assert theirs["r1 chat"]["reasoning"]
    assert theirs["r1 messages anthropic SDK"]["blocks"][0][0] == "thinking"
    assert theirs["responses"]["output"][0][0] == "reasoning"
    assert theirs["chat reasoning_format none"]["reasoning"] is None
