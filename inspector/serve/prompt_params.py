"""A request's prompt fields read as llama-server 0c1e570 reads them: a chat's ``messages`` (with their
``tool_calls``), its ``tools``, and a completion's ``prompt`` (one or several). Each parser raises
``ApiError`` (400) with llama-server's message for what it refuses; ``inspector.serve.params.parse_request``
calls them for the fields of its endpoint.
"""

from __future__ import annotations

import json

from inspector.serve.errors import ApiError

MESSAGE_FIELDS = {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"}
"""What a chat message may carry (llama.cpp 0c1e570 ``common/chat.cpp`` ``common_chat_msgs_parse_oaicompat``)."""


def _tool_calls(calls, where: str) -> list[dict]:
    """An assistant message's ``tool_calls``, checked as ``common_chat_msgs_parse_oaicompat`` checks them
    (each a ``function`` call with a name; object arguments written as JSON text)."""
    if not isinstance(calls, list):
        raise ApiError(f"Failed to parse messages: {where}.tool_calls must be an array")
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(call, dict) or call.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str) or "arguments" not in fn:
            raise ApiError(f"Failed to parse messages: {where}.tool_calls[{j}] must be "
                           '{"type": "function", "function": {"name", "arguments"}}')
        args = fn["arguments"] if isinstance(fn["arguments"], str) else json.dumps(fn["arguments"])
        out.append({"type": "function", "function": {"name": fn["name"], "arguments": args},
                    **({"id": call["id"]} if isinstance(call.get("id"), str) else {})})
    return out


def parse_messages(value) -> tuple:
    """A chat's messages as llama-server reads them: roles system (developer), user, assistant and tool;
    content a string, text parts or null (an assistant's tool calls, a message with none renders empty);
    ``tool_calls``, ``tool_call_id``, ``name`` kept for the template. Returns a tuple of message dicts (role
    ``developer`` read as ``system``); raises ``ApiError`` naming the message that does not fit."""
    if not isinstance(value, list) or not value:
        raise ApiError("'messages' must be a non-empty array of {\"role\", \"content\"} objects")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise ApiError(f"messages[{i}]: expected an object with role system, user, assistant or tool and its "
                           "content")
        if "content" not in m and "tool_calls" not in m:
            raise ApiError(f"Failed to parse messages: messages[{i}]: expected 'content' or 'tool_calls'")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI's content parts: text only
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                       for p in content):
                raise ApiError(f"messages[{i}]: only text content parts are supported (no images or audio)")
            content = "".join(p["text"] for p in content)
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ApiError(f"messages[{i}]: 'content' must be a string, an array of text parts or null")
        unknown = set(m) - MESSAGE_FIELDS
        if unknown:
            raise ApiError(f"messages[{i}]: field(s) {', '.join(sorted(unknown))} are not supported")
        msg = {"role": "system" if m["role"] == "developer" else m["role"], "content": content}
        if isinstance(m.get("reasoning_content"), str) and m["reasoning_content"]:
            msg["reasoning_content"] = m["reasoning_content"]  # given to the template, as llama-server does
        if m.get("tool_calls") is not None:
            msg["tool_calls"] = _tool_calls(m["tool_calls"], f"messages[{i}]")
        for name in ("tool_call_id", "name"):
            if isinstance(m.get(name), str):
                msg[name] = m[name]
        out.append(msg)
    return tuple(out)


def parse_tools(value) -> tuple:
    """A request's ``tools`` as llama-server reads them (``common_chat_tools_parse_oaicompat``): each
    ``{"type": "function", "function": {"name", "description", "parameters"}}``, given to the template as
    ``common_chat_tools_to_json_oaicompat`` writes them. None gives (); raises ``ApiError`` naming the tool
    that does not fit."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ApiError("Failed to parse tools: expected 'tools' to be an array")
    out = []
    for i, tool in enumerate(value):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str):
            raise ApiError(f"Failed to parse tools: tools[{i}] must be "
                           '{"type": "function", "function": {"name", ...}}')
        out.append({"type": "function", "function": {"name": fn["name"], "description": fn.get("description", ""),
                                                      "parameters": fn.get("parameters", {})}})
    return tuple(out)


def _is_number(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _subprompt(value, where: str):
    """One prompt as llama.cpp 0c1e570 ``tools/server/server-common.cpp`` ``tokenize_input_subprompt`` takes it:
    a string, an array of token ids and strings, or ``{"prompt_string": ...}`` (its
    ``multimodal_data`` refused: the model takes text only)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(x, str) or _is_number(x) for x in value):
        return value[0] if len(value) == 1 and isinstance(value[0], str) else value
    if isinstance(value, dict) and "prompt_string" in value:
        if "multimodal_data" in value:
            raise ApiError("Multimodal data provided, but model does not support multimodal requests.")
        return _subprompt(value["prompt_string"], where)
    raise ApiError(f"{where}: \"prompt\" elements must be a string, a list of tokens, a JSON object containing a "
                   "prompt string, or a list of mixed strings & tokens.")


def parse_prompts(value) -> tuple:
    """The prompts of a completion request, as ``tokenize_input_prompts`` (server-common.cpp 0c1e570) splits
    them: an array holding no number is several prompts (strings, token arrays, ``prompt_string`` objects),
    anything else one. Returns a tuple of prompts (a string, or a list of token ids and strings); raises
    ``ApiError`` for an empty array or an element of another kind."""
    if isinstance(value, list) and not any(_is_number(x) for x in value):
        if not value:
            raise ApiError("\"prompt\" must not be empty")
        return tuple(_subprompt(v, f"prompt[{i}]") for i, v in enumerate(value))
    return (_subprompt(value, "prompt"),)
