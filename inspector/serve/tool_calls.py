"""A chat's tool calls in a template's JSON tool-call format (``inspector.serve.tool_format.ToolFormat``): the
grammar that constrains them and the parse of the model's text back into content and calls.

Rules of llama.cpp 0c1e570 ``common/chat-auto-parser-generator.cpp`` (``generate_parser``,
``build_tool_parser_json_native``) and ``common/chat-peg-parser.cpp`` (``standard_json_tools``,
``build_json_tools_flat_keys``), whose PEG parser llama-server turns into GBNF (``common/peg-parser.cpp``
``build_grammar``) and parses the output with (``common_chat_peg_parse``):

- ``tool_choice: auto``: a lazy grammar, woken by the format's first marker (``ToolFormat.trigger``), whose root
  is the trigger rules (``tool-call``, and ``tool-calls`` when each call has its own markers); no marker, no
  grammar. ``required``: the whole answer is constrained: spaces, any text without the marker, then the calls.
  The grammar's language is llama-server's; its rule names are not. The generation prompt that llama-server's
  grammar begins with (and feeds to it before sampling, ``common/sampling.cpp``) is left out: the same state.
- The parse: leading spaces skipped (the space after the generation prompt), the content up to the marker, then
  the calls; each call's arguments kept as the model wrote them (``common_chat_peg_mapper``: trailing spaces
  trimmed). Text that does not parse as calls is the content (llama-server answers an error there).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from inspector.serve.json_grammar import SchemaRules, literal
from inspector.serve.reasoning import reasoning_rules
from inspector.serve.tool_format import ToolFormat

JSON_NUMBER = '"-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? (("e" | "E") [+-]? [0-9]+)?'
JSON_STRING = '"\\"" ( [^"\\\\] | "\\\\" ( ["\\\\/ bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""'
_WS = " \t\n\r"


def tool_parameters(function: dict) -> dict:
    """A tool's parameters schema (``common_chat_tool_parameters``: absent, null or {} -> an empty object)."""
    params = function.get("parameters")
    if params is None or params == {}:
        return {"type": "object", "properties": {}}
    return params


def _char_class(chars: set[str], negate: bool) -> str:
    body = "".join(f"\\x{ord(c):02X}" if ord(c) < 0x80 and not c.isalnum() else
                   (c if ord(c) < 0x80 else f"\\u{ord(c):04X}") for c in sorted(chars))
    return "[" + ("^" if negate else "") + body + "]"


def until_rules(name: str, delimiter: str) -> dict[str, str]:
    """GBNF rules ``name``, ``name-1`` ...: every text (empty included) that does not contain ``delimiter``
    (the PEG ``until`` as llama.cpp's ``build_grammar`` writes it: one rule per matched prefix)."""
    n = len(delimiter)

    def step(state: int, c: str) -> int:  # the longest prefix of the delimiter ending the text + c
        text = delimiter[:state] + c
        for k in range(min(n, len(text)), 0, -1):
            if text.endswith(delimiter[:k]):
                return k
        return 0

    def rule(state: int) -> str:
        return name if state == 0 else f"{name}-{state}"

    rules = {}
    alphabet = set(delimiter)
    for state in range(n):
        alts, handled = [""], set()
        for c in sorted(alphabet):
            nxt = step(state, c)
            handled.add(c)
            if nxt == n:
                continue
            if nxt:
                alts.append(f"{_char_class({c}, False)} {rule(nxt)}")
            else:
                handled.discard(c)
        alts.append(f"{_char_class(handled, True)} {rule(0)}")
        rules[rule(state)] = " | ".join(alts)
    return rules


@dataclass(frozen=True)
class ToolGrammar:
    """The grammar of a request's tool calls: GBNF text and the lazy triggers (regular expressions, empty for
    a grammar that applies from the first token)."""

    gbnf: str
    triggers: tuple[str, ...] = ()


def regex_escape(word: str) -> str:
    """``regex_escape`` of llama.cpp's ``common/common.cpp``: a trigger word as a regular expression."""
    return re.sub(r"([.^$|()*+?\[\]{}\\])", r"\\\1", word)


def tool_grammar(fmt: ToolFormat, tools, required: bool, parallel: bool, reasoning=None) -> ToolGrammar | None:
    """The grammar llama-server gives a chat with ``tools`` (OpenAI tool definitions) under ``fmt``:
    ``required`` (``tool_choice: required``) or auto; ``parallel`` (``parallel_tool_calls``: several calls in
    one call section); ``reasoning``: the template's ``ReasoningFormat`` when its block is parsed out (the
    ``required`` grammar then opens with the optional block). None: auto on a format without a marker
    (llama-server constrains nothing then)."""
    if not required and not fmt.trigger:
        return None
    rules = SchemaRules()
    choices = []
    for i, tool in enumerate(tools):
        function = tool.get("function", {})
        name = function.get("name", "")
        schema = rules.visit(tool_parameters(function), f"/tools/{i}/function/parameters")
        pairs = {fmt.name_field: f'{literal(json.dumps(fmt.name_field))} space ":" space ("\\"" {literal(name)} "\\"")',
                 fmt.args_field: f'{literal(json.dumps(fmt.args_field))} space ":" space {schema}'}
        for key in (fmt.id_field, fmt.gen_id_field):
            if key:
                rules.rules["json-number"] = JSON_NUMBER
                pairs[key] = f'({literal(json.dumps(key))} space ":" space ({JSON_STRING} | json-number))?'
        order = sorted(pairs, key=lambda k: fmt.parameter_order.index(k) if k in fmt.parameter_order else 99)
        body = ' space "," space '.join(pairs[k] for k in order)
        rule = f"tool-{i}"
        rules.rules[rule] = f'"{{" space {body} space "}}"'
        choices.append(rule)
    one = "(" + " | ".join(choices) + ")"
    calls = one + (f' (space "," space {one})*' if parallel else "")
    if fmt.array_wrapped:
        calls = f'"[" space {calls} space "]"'
    start, end = (fmt.per_call_start, fmt.per_call_end) if fmt.per_call_start else (fmt.section_start, fmt.section_end)
    rules.rules["tool-call"] = f"{literal(start)} space {calls} space {literal(end)}"
    if fmt.per_call_start:
        rules.rules["tool-calls"] = "(tool-call space)+" if required else "(tool-call? space)+"
        top = "tool-calls"
    else:
        top = "tool-call"
    if required:
        rules.rules.update(until_rules("content", fmt.tool_start))
        block = ""
        if reasoning is not None:
            block, more = reasoning_rules(reasoning, until_rules)
            rules.rules.update(more)
            block += " "
        rules.rules["root"] = f"space {block}content? {top}"
        return ToolGrammar(rules.text())
    rules.rules["root"] = "tool-call | tool-calls" if fmt.per_call_start else "tool-call"
    return ToolGrammar(rules.text(), (regex_escape(fmt.trigger),))


@dataclass
class ToolCall:
    """One parsed call: the function's name, its arguments as the model wrote them (JSON text), and the id the
    model wrote (``id_field``), or ""."""

    name: str
    arguments: str
    id: str = ""


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _call_object(text: str, i: int, fmt: ToolFormat, names: set[str]) -> tuple[ToolCall, int]:
    """The call object at ``text[i]`` (ValueError when it is none) and the index after it."""
    decoder = json.JSONDecoder()
    if not text.startswith("{", i):
        raise ValueError("no call object")
    i = _skip(text, i + 1)
    found: dict[str, tuple[object, str]] = {}
    while True:
        key, i = decoder.raw_decode(text, i)
        i = _skip(text, i)
        if not text.startswith(":", i):
            raise ValueError("no colon")
        start = _skip(text, i + 1)
        value, i = decoder.raw_decode(text, start)
        found[key] = (value, text[start:i])
        i = _skip(text, i)
        if text.startswith(",", i):
            i = _skip(text, i + 1)
            continue
        if text.startswith("}", i):
            break
        raise ValueError("no end of the call object")
    name = found.get(fmt.name_field, (None, ""))[0]
    args = found.get(fmt.args_field)
    if name not in names or args is None or not isinstance(args[0], dict):
        raise ValueError("not a call of a given tool")
    call_id = found.get(fmt.id_field, ("", ""))[0] if fmt.id_field else ""
    return ToolCall(name, args[1].rstrip(), str(call_id)), i + 1


def _calls(text: str, i: int, fmt: ToolFormat, names: set[str]) -> tuple[list[ToolCall], int]:
    """The calls of one section (``standard_json_tools``) from ``text[i]`` on; ValueError when they do not parse."""
    start, end = (fmt.per_call_start, fmt.per_call_end) if fmt.per_call_start else (fmt.section_start, fmt.section_end)
    if not text.startswith(start, i):
        raise ValueError("no marker")
    i = _skip(text, i + len(start))
    wrapped = fmt.array_wrapped
    if wrapped:
        if not text.startswith("[", i):
            raise ValueError("no array")
        i = _skip(text, i + 1)
    out = []
    while True:
        call, i = _call_object(text, i, fmt, names)
        out.append(call)
        j = _skip(text, i)
        if text.startswith(",", j):
            i = _skip(text, j + 1)
            continue
        i = j
        break
    if wrapped:
        if not text.startswith("]", i):
            raise ValueError("no array end")
        i = _skip(text, i + 1)
    if not text.startswith(end, i):
        raise ValueError("no end marker")
    return out, i + len(end)


def parse_tool_calls(text: str, fmt: ToolFormat, tools) -> tuple[str, list[ToolCall]]:
    """The content and the tool calls of a whole answer ``text`` (module docstring)."""
    names = {t.get("function", {}).get("name") for t in tools}
    t = text.lstrip(_WS)
    at = t.find(fmt.tool_start)
    if at < 0:
        return t, []
    content, i, calls = t[:at], at, []
    try:
        while True:
            more, i = _calls(t, i, fmt, names)
            calls += more
            i = _skip(t, i)
            if not fmt.per_call_start or not t.startswith(fmt.per_call_start, i):
                break
        if i != len(t):
            raise ValueError("text after the calls")
    except ValueError:
        return t, []
    return content, calls


def visible_content(text: str, fmt: ToolFormat) -> str:
    """The content of a partial answer that can be streamed: up to the first marker, without a tail that may
    still grow into the marker, leading spaces skipped (``parse_tool_calls``'s content so far)."""
    t = text.lstrip(_WS)
    at = t.find(fmt.tool_start)
    if at >= 0:
        return t[:at]
    for k in range(min(len(fmt.tool_start) - 1, len(t)), 0, -1):
        if fmt.tool_start.startswith(t[-k:]):
            return t[:-k]
    return t
