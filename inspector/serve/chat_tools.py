"""A chat request's tools as llama-server's chat route takes them (llama.cpp 0c1e570
``tools/server/server-common.cpp`` ``oaicompat_chat_params_parse``, ``common/chat.cpp``
``common_chat_templates_apply_jinja``): the template's tool-call format found once per template, the
assistant messages' arguments given to a template that reads them as objects, and the grammar that
constrains the calls (after the optional reasoning block of a template that has one,
``inspector.serve.reasoning``). Replies parse the calls back (``inspector.serve.tool_calls``)."""

from __future__ import annotations

import json

from inspector.engine.constraints import Constraints
from inspector.serve.errors import ApiError
from inspector.serve.reasoning import template_reasoning
from inspector.serve.tool_calls import tool_grammar
from inspector.serve.tool_format import ToolFormatUnsupported, analyze_tool_format, template_caps

SPECIALIZED = (
    ("Ministral 3", ("[SYSTEM_PROMPT]", "[TOOL_CALLS]", "[ARGS]")), ("GPT-OSS", ("<|channel|>",)),
    ("Muse Glimmer", ("<atem:function_calls>", "<|eom|>")), ("Functionary v3.2", (">>>all", ">>>${recipient}")),
    ("Kimi K2", ("<|tool_calls_section_begin|>", "<|tool_call_begin|>")),
    ("Kimi K3", ("<|open|>", "<|close|>", "<|end_of_msg|>")), ("Ling 3.0", ("<role>ASSISTANT</role>", "<arg_key>")),
    ("Cohere2 MoE", ("<|START_TEXT|>", "<|START_ACTION|>")), ("LFM2", ("<|tool_list_start|>",)),
    ("LFM2.5", ("List of tools: [",)), ("GigaChat 3", ("<|role_sep|>", "<|message_sep|>")),
    ("MiniMax-M3", ("]<]minimax[>[", "<invoke name=")), ("DeepSeek V3.2/V4", ("dsml_token", "DSML")),
    ("Gemma 4", ("'<|tool_call>call:'",)), ("MiniCPM5", ("Tool usage guidelines:", '<function name="')),
    ("Qwen3-Coder", ("<tool_call>", "<function=", "<parameter=")))
"""Templates llama-server parses with a parser of their own (``common_chat_try_specialized_template``, the
markers it looks for in the template's source), not with the autoparser whose JSON rules spec-inspector follows."""


class TemplateTools:
    """What one chat template does with tools: ``caps`` (``template_caps``), the JSON ``format`` or None, and
    ``refusal``: why a request with tools cannot be served alike ("" when it can)."""

    def __init__(self, source: str, render) -> None:
        self.caps = template_caps(render)
        self.format = None
        self.refusal = ""
        special = next((name for name, marks in SPECIALIZED if all(m in source for m in marks)), None)
        if not (self.caps["tools"] or self.caps["tool_calls"]):
            return
        if special:
            self.refusal = (f"this model's chat template ({special}) has its own tool-call parser in llama-server; "
                            "spec-inspector serve parses JSON tool calls only (Qwen 2.5, Hermes, Mistral Nemo)")
            return
        try:
            self.format = analyze_tool_format(render)
        except ToolFormatUnsupported as exc:
            self.refusal = str(exc)
            return
        if self.format is not None and not self.format.trigger:
            self.refusal = ("this model's chat template writes tool calls as bare JSON (no marker); "
                            "spec-inspector serve parses marked JSON tool calls only (Qwen 2.5, Hermes, Mistral Nemo)")
            self.format = None


def template_tools(rt, cache: dict) -> TemplateTools:
    """``TemplateTools`` of ``rt``'s chat template, found once and kept in ``cache`` (call under the lock)."""
    source = rt.chat_template() or ""
    if source not in cache:
        def render(messages, tools, generation_prompt):
            return rt.chat_messages_prompt(messages, tools, None, generation_prompt)

        cache[source] = TemplateTools(source, render)
    return cache[source]


def object_arguments(messages: list[dict]) -> list[dict]:
    """Messages with each assistant tool call's JSON-text arguments parsed to an object (``workaround::
    func_args_not_string`` for a template that reads them as one). Raises ``ApiError`` for text that is not
    JSON."""
    out = []
    for m in messages:
        if m.get("tool_calls"):
            m = dict(m)
            calls = []
            for c in m["tool_calls"]:
                fn = dict(c.get("function", {}))
                if isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = json.loads(fn["arguments"])
                    except ValueError as exc:
                        raise ApiError(f"Failed to parse tool call arguments as JSON: {exc}") from None
                calls.append({**c, "function": fn})
            m["tool_calls"] = calls
        out.append(m)
    return out


def prepare_tools(rt, p, cache: dict) -> list[dict]:
    """Set up chat request ``p``'s tools on runtime ``rt`` (under its lock) and return its messages ready for
    the template: ``p.tool_format`` (the calls to parse back, None: content only) and ``p.constraints`` (the
    tool-call grammar, beside the request's logit bias). Raises ``ApiError`` (400) for tools or calls the
    template writes in a form not served, with the reason."""
    messages = [dict(m) for m in p.messages]
    calls = any(m.get("tool_calls") for m in messages)
    if not p.tools and not calls:
        return messages
    tt = template_tools(rt, cache)
    active = bool(p.tools) and p.tool_choice != "none"
    if tt.refusal and (active or (calls and tt.caps["tool_calls"])):
        raise ApiError(tt.refusal + "; send the request without 'tools' and tool calls")
    if tt.caps["object_arguments"]:
        messages = object_arguments(messages)
    if not active or tt.format is None or (p.constraints is not None and p.constraints.grammar is not None):
        return messages  # a response_format's grammar wins (chat-auto-parser-generator.cpp)
    p.tool_format = tt.format
    parallel = tt.caps["parallel"] if p.parallel_tool_calls is None else p.parallel_tool_calls
    fmt = template_reasoning(rt, cache) if p.reasoning_format != "none" else None
    g = tool_grammar(tt.format, p.tools, p.tool_choice == "required", parallel, fmt)
    if g is not None:
        bias = p.constraints.logit_bias if p.constraints is not None else ()
        p.constraints = Constraints(grammar=g.gbnf, logit_bias=bias, triggers=g.triggers)
    return messages
