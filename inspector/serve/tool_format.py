"""How a chat template writes tool calls, found as llama-server finds it: by rendering probe chats.

llama.cpp 0c1e570 (``common/chat-diff-analyzer.cpp``, ``common/jinja/caps.cpp``) renders the template with and
without an assistant tool call and reads the format from the difference; this module follows the same probes
and the same rules for the tool-call family most local models use, **JSON tool calls** (``tool_format::
JSON_NATIVE``): each call is a JSON object ``{"name": ..., "arguments": {...}}`` (field names read from the
template), alone, between markers written once per call (Qwen 2.5/3, Hermes: ``<tool_call>`` ... ``</tool_call>``)
or around all of them (Mistral: ``[TOOL_CALLS]`` and a JSON array). ``analyze_tool_format`` returns the format,
or says why the template is not served: it renders no tool calls (then tools change nothing in the answer, as
with llama-server), or it writes them in another family (tagged arguments, ``<function=...>``; llama-server
parses those with its template autoparser and per-model parsers, ``common/chat.cpp``; spec-inspector does not).

What differs from llama.cpp's analyzer: the difference of two renders is taken on characters (llama.cpp splits
both at markers first, ``calculate_diff_split``); the reasoning markers of the template are not analyzed (a
template that writes reasoning inside its tool calls is not recognised). Proven against llama-server on the
Qwen 2.5 and Mistral Nemo templates of ``llama.cpp/models/templates`` (``tests/test_serve_tools.py``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

FUN_FIRST, FUN_SECOND = "FFF_FIRST_FUN_F", "SSS_SECOND_FUN_S"
ARG_FIRST, ARG_SECOND = "AA_ARG_FST_AA", "BB_ARG_SND_BB"
USER_MSG = "U_USER_MSG Hello END_U"
ASSISTANT_MSG = "A_ASST_MSG I can help END_A"
"""The probe chat's names and texts (``chat-diff-analyzer.cpp``'s, so a template reacts as it does there)."""

_PARAMS = {"type": "object", "properties": {ARG_FIRST: {"type": "string", "description": "First argument"},
                                            ARG_SECOND: {"type": "string", "description": "Second argument"}},
           "required": []}
PROBE_TOOLS = [{"type": "function", "function": {"name": n, "description": d, "parameters": _PARAMS}}
               for n, d in ((FUN_FIRST, "Test function foo"), (FUN_SECOND, "Test function bar"))]


def _call(name: str, call_id: str) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"}}}


class ToolFormatUnsupported(ValueError):
    """The template writes tool calls in a form spec-inspector does not parse (the message says which)."""


@dataclass(frozen=True)
class ToolFormat:
    """A template's JSON tool-call format (llama.cpp's ``tool_format_analysis``): the markers (each may be
    empty), whether the calls sit in a JSON array, the call object's field names in the order the template
    writes them, and the template's capabilities (``parallel``: renders a second call; ``object_arguments``:
    reads the arguments as an object, so a request's JSON-text arguments are parsed before rendering)."""

    section_start: str = ""
    section_end: str = ""
    per_call_start: str = ""
    per_call_end: str = ""
    array_wrapped: bool = False
    name_field: str = "name"
    args_field: str = "arguments"
    id_field: str = ""
    gen_id_field: str = ""
    parameter_order: tuple[str, ...] = ()
    parallel: bool = False
    object_arguments: bool = False

    @property
    def tool_start(self) -> str:
        """Where the content ends and the calls begin (``build_tool_parser_json_native``'s ``tool_start``)."""
        return self.section_start or self.per_call_start or "{"

    @property
    def trigger(self) -> str:
        """The word that wakes the lazy grammar under ``tool_choice: auto`` ("" when there is none: then
        llama-server constrains nothing, ``chat-auto-parser-generator.cpp`` ``generate_parser``)."""
        return self.section_start or self.per_call_start


def render_diff(left: str, right: str) -> tuple[str, str]:
    """What each of two renders has where they differ: their common prefix and suffix removed, never
    overlapping (``compare_variants``' split, taken here on characters)."""
    n = min(len(left), len(right))
    pre = 0
    while pre < n and left[pre] == right[pre]:
        pre += 1
    suf = 0
    while suf < n - pre and left[-1 - suf] == right[-1 - suf]:
        suf += 1
    return left[pre:len(left) - suf], right[pre:len(right) - suf]



def template_caps(render) -> dict:
    """The template's tool capabilities as ``common/jinja/caps.cpp`` probes them, read here from the probe
    names in the rendered text: ``tools`` (renders the tools it is given), ``tool_calls`` (an assistant
    message's calls), ``parallel`` (a second call), ``object_arguments`` (arguments given as an object are
    read). ``render(messages, tools, generation_prompt)`` renders a chat; a render that fails counts as not
    rendering the probe."""
    user = {"role": "user", "content": "User message"}

    def text(messages, tools=None):
        try:
            return render(messages, tools, True)
        except Exception:  # a template that refuses the probe chat: nothing to infer from it
            return ""

    tools = [{"type": "function", "function": {"name": "tool1_probe_fn", "description": "Tool description",
              "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}}]

    def calls(args, n=1):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"id": f"call0000{i + 1}", "type": "function", "function": {"name": f"call{i + 1}_probe_fn",
                                                                          "arguments": args}} for i in range(n)]}

    tail = [{"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
            {"role": "assistant", "content": "The tool response was 'tool response'"}, user]
    obj = text([user, calls({"arg": "value_probe"}), *tail], tools)
    string = text([user, calls('{"arg": "value_probe"}'), *tail], tools)
    object_arguments = "value_probe" in obj and "call1_probe_fn" in obj
    pair = text([user, calls({"arg": "value_probe"} if object_arguments else '{"arg": "value_probe"}', 2), *tail],
                tools)
    return {"tools": "tool1_probe_fn" in (obj or string), "tool_calls": "call1_probe_fn" in (obj or string),
            "parallel": "call2_probe_fn" in pair, "object_arguments": object_arguments}


def analyze_tool_format(render) -> ToolFormat | None:
    """The template's JSON tool-call format (``render`` as ``template_caps`` takes it), or None when it renders
    no tool calls. Raises ``ToolFormatUnsupported`` for a template that writes them in another form. Rules of
    ``analyze_tools::analyze_tool_calls``, ``analyze_tool_call_format``, ``..._json_native`` and
    ``analyze_json_native_parallel_calls`` (llama.cpp 0c1e570 ``common/chat-diff-analyzer.cpp``)."""
    caps = template_caps(render)
    if not caps["tool_calls"]:
        return None
    user = {"role": "user", "content": USER_MSG}
    plain = {"role": "assistant", "content": ASSISTANT_MSG}
    one = {"role": "assistant", "content": "", "tool_calls": [_call(FUN_FIRST, "call00001")]}
    try:
        haystack = render_diff(render([user, plain], PROBE_TOOLS, False), render([user, one], PROBE_TOOLS, False))[1]
    except Exception:
        return None  # the probe does not render: llama.cpp's analysis ends with no tool format too
    if not haystack:
        return None
    if not re.search(r'[{:]\s*"' + FUN_FIRST + '"', haystack):
        raise ToolFormatUnsupported(
            "this model's chat template writes tool calls in a tagged form (not a JSON object per call); "
            "spec-inspector serve parses JSON tool calls only (Qwen, Hermes, Mistral templates)")
    start, end = haystack.find("{"), haystack.rfind("}")
    cut = haystack[start:end + 1]
    try:
        call = json.loads(cut)
    except ValueError:
        raise ToolFormatUnsupported("this model's chat template writes a tool call that is not one JSON object; "
                                    "spec-inspector serve cannot parse it") from None
    fields = {"name": "", "args": "", "id": "", "gen_id": ""}
    for key, value in call.items():
        if key == FUN_FIRST:
            raise ToolFormatUnsupported("this model's chat template writes the function name as a JSON key; "
                                        "spec-inspector serve does not parse that form")
        if isinstance(value, dict) and ARG_FIRST not in json.dumps(value):
            raise ToolFormatUnsupported("this model's chat template nests the call in a JSON object; "
                                        "spec-inspector serve does not parse that form")
        if isinstance(value, str) and "call0000" in value:
            fields["id"] = key
        elif value == FUN_FIRST:
            fields["name"] = key
        elif ARG_FIRST in json.dumps(value):
            fields["args"] = key
        elif "id" in key:
            fields["gen_id"] = key
    if not fields["name"] or not fields["args"]:
        raise ToolFormatUnsupported("this model's chat template writes tool calls without a name and arguments "
                                    "field spec-inspector serve can read")
    wrap = re.search(r"\[\s*" + re.escape(cut) + r"\s*\]", haystack)
    if wrap:
        start, end = wrap.start(), wrap.end() - 1
    order = sorted((haystack.find(f), f) for f in fields.values() if f)
    section_start = haystack[:start].lstrip()
    section_end = haystack[end + 1:].strip()
    if wrap and section_end == "]":
        section_end = ""
    per_call_start = per_call_end = ""
    if caps["parallel"] and section_start:
        two = {"role": "assistant", "content": "", "tool_calls": [_call(FUN_FIRST, "call00001"),
                                                                  _call(FUN_SECOND, "call00002")]}
        try:
            second = render_diff(render([user, one], PROBE_TOOLS, False), render([user, two], PROBE_TOOLS, False))[1]
        except Exception:
            second = ""
        if section_start in second:
            per_call_start, per_call_end, section_start, section_end = section_start, section_end, "", ""
    return ToolFormat(section_start=section_start, section_end=section_end.strip(), per_call_start=per_call_start,
                      per_call_end=per_call_end.strip(), array_wrapped=bool(wrap), name_field=fields["name"],
                      args_field=fields["args"], id_field=fields["id"], gen_id_field=fields["gen_id"],
                      parameter_order=tuple(f for _, f in order), parallel=caps["parallel"],
                      object_arguments=caps["object_arguments"])
