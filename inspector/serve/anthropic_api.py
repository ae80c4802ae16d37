"""``POST /v1/messages`` (Anthropic's Messages API, what Claude-Code-style agents speak) and
``POST /v1/messages/count_tokens``, as llama.cpp 0c1e570 serves them (issue 52).

llama-server converts the request to a chat-completions body (``server_chat_convert_anthropic_to_oai``,
``tools/server/server-chat.cpp``), runs it as ``/v1/chat/completions`` runs, and writes the result in
Anthropic's shape (``to_json_anthropic`` / ``to_json_anthropic_stream`` of the final result and
``to_json_anthropic`` of each partial one, ``tools/server/server-task.cpp``; the events are
``format_anthropic_sse``'s ``event: NAME`` + ``data: JSON``, ``tools/server/server-common.cpp``). So do
we: ``to_chat`` is that conversion, the chat body goes through ``parse_request(body, "chat", ...)`` and
the chat job path, and ``Renderer`` writes the replies.

What llama-server's conversion does, followed here: only ``system``, ``messages``, ``tools``,
``tool_choice``, ``stop_sequences`` (-> ``stop``), ``max_tokens`` (4096 when absent), ``temperature``,
``top_p``, ``top_k``, ``stream``, ``chat_template_kwargs`` and ``thinking`` are read (``metadata`` is dropped), any
other field is dropped (``model`` too: the reply names the served model); ``system`` (a string, or the
concatenated ``text`` blocks) becomes a first system message, its Claude Code billing header's ``cch=``
stamp blanked to ``fffff`` (``normalize_anthropic_billing_header``); a message's ``text`` blocks are
kept as chat text parts, a message whose blocks leave nothing is dropped, an assistant message without
``content`` is skipped; a missing ``messages`` is llama-server's 500 ``'messages' is required`` (a
``std::runtime_error`` there, so a server error, not 400). Errors have llama-server's usual
``{"error": {...}}`` shape (not Anthropic's ``{"type": "error", ...}``); an error in a stream is an
``event: error`` whose data is the error object itself.

Tools as llama-server converts them: ``tools`` (``input_schema`` -> ``parameters``), ``tool_choice``, a
``tool_use`` block -> the assistant message's ``tool_calls`` (``input`` as JSON text), a ``tool_result``
block -> a ``tool`` message after it (its text blocks joined); the chat rules then take them
(``inspector.serve.params``; a template whose tool-call format would have to be parsed is refused there).
A ``thinking`` block becomes its message's ``reasoning_content`` (the blocks' texts joined; the template
renders it or not). ``image`` blocks and ``thinking`` enabled are refused (400, naming them): the model takes
text only, and llama-server turns ``thinking: enabled`` into a reasoning budget, which is not served here.

A reply on a template with reasoning blocks (``inspector.serve.reasoning``) opens with a ``thinking`` block
(``signature: ""``) when the answer has reasoning, as ``to_json_anthropic`` writes it; its stream sends the
thinking block (index 0, ``thinking_delta`` events) before the text block (then index 1), and closes it at the
end with an empty ``signature_delta``.
"""

from __future__ import annotations

import json

from inspector.serve.errors import SERVER, ApiError
from inspector.serve.job import JobResult, TokenOut
from inspector.serve.replies import Renderer, sse

PATH = "/v1/messages"
COUNT_PATH = "/v1/messages/count_tokens"
DEFAULT_MAX_TOKENS = 4096
"""llama-server's ``max_tokens`` when the request has none (Anthropic requires it; llama-server does not)."""
PASSED = ("temperature", "top_p", "top_k", "stream", "chat_template_kwargs")
"""Fields passed to the chat body as they are (llama-server's "common params")."""
REFUSED_BLOCKS = {"image": "image content"}
"""Content blocks llama-server converts that spec-inspector serve does not serve (text only)."""


def _billing_header(text: str) -> str:
    """``normalize_anthropic_billing_header``: an ``x-anthropic-billing-header:`` system text's 5-character
    ``cch=`` stamp (followed by ``;``) written as ``fffff``, so the prompt cache gets past it."""
    head = "x-anthropic-billing-header:"
    if not text.startswith(head):
        return text
    i = text.find("cch=", len(head))
    if i < 0:
        return text
    at = i + 4
    if at + 5 < len(text) and text[at + 5] == ";":
        return text[:at] + "fffff" + text[at + 5:]
    return text


def _text_of(value, key: str) -> str:
    """llama-server's ``json_value(obj, key, std::string())``: the string, else ""."""
    v = value.get(key) if isinstance(value, dict) else None
    return v if isinstance(v, str) else ""


def _tool_result_text(content) -> str:
    """A ``tool_result`` block's content as the ``tool`` message's text: a string as it is, text blocks
    joined, anything else empty (an image in a result is refused: text only)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        if any(_text_of(c, "type") == "image" for c in content):
            raise ApiError("a 'tool_result' with an image is not supported by spec-inspector serve (text only)")
        return "".join(_text_of(c, "text") for c in content if _text_of(c, "type") == "text")
    return ""


def to_chat(body) -> dict:
    """The chat-completions body llama-server makes of an Anthropic Messages ``body``
    (``server_chat_convert_anthropic_to_oai``). Raises ``ApiError``."""
    body = body if isinstance(body, dict) else {}
    messages: list = []
    system = body.get("system")
    if system is not None:
        if isinstance(system, str):
            text = _billing_header(system)
        elif isinstance(system, list):
            text = "".join(_billing_header(_text_of(b, "text")) for b in system if _text_of(b, "type") == "text")
        else:
            text = ""
        messages.append({"role": "system", "content": text})
    if "messages" not in body:
        raise ApiError("'messages' is required", SERVER)
    given = body["messages"]
    for i, msg in enumerate(given if isinstance(given, list) else ()):
        role = _text_of(msg, "role")
        if not isinstance(msg, dict) or "content" not in msg:
            if role != "assistant":
                messages.append(msg)
            continue
        content = msg["content"]
        if not isinstance(content, list):
            messages.append(msg)
            continue
        parts, calls, results, reasoning = [], [], [], ""
        for block in content:
            kind = _text_of(block, "type")
            if kind == "text":
                parts.append(block)
            elif kind == "thinking":
                reasoning += _text_of(block, "thinking")
            elif kind == "tool_use":
                calls.append({"id": _text_of(block, "id"), "type": "function", "function": {
                    "name": _text_of(block, "name"), "arguments": json.dumps(
                        block.get("input", {}), ensure_ascii=False, separators=(",", ":"))}})
            elif kind == "tool_result":
                results.append({"role": "tool", "tool_call_id": _text_of(block, "tool_use_id"),
                                "content": _tool_result_text(block.get("content"))})
            elif kind in REFUSED_BLOCKS:
                raise ApiError(f"messages[{i}]: '{kind}' content blocks are not supported by spec-inspector serve "
                               f"(text only: {REFUSED_BLOCKS[kind]} are not served)")
        if parts or calls or reasoning:
            converted: dict = {"role": role, "content": parts if parts else ""}
            if calls:
                converted["tool_calls"] = calls
            if reasoning:
                converted["reasoning_content"] = reasoning
            messages.append(converted)
        messages.extend(results)
    chat: dict = {"messages": messages}
    tools = body.get("tools")
    if isinstance(tools, list):
        chat["tools"] = [{"type": "function", "function": {
            "name": _text_of(t, "name"), "description": _text_of(t, "description"),
            "parameters": t.get("input_schema", {}) if isinstance(t, dict) else {}}} for t in tools]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = _text_of(choice, "type")
        if kind == "auto":
            chat["tool_choice"] = "auto"
        elif kind in ("any", "tool"):
            chat["tool_choice"] = "required"
    if "stop_sequences" in body:
        chat["stop"] = body["stop_sequences"]
    chat["max_tokens"] = body["max_tokens"] if "max_tokens" in body else DEFAULT_MAX_TOKENS
    for key in PASSED:
        if key in body:
            chat[key] = body[key]
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        raise ApiError("'thinking' (extended thinking) is not supported by spec-inspector serve (text only); "
                       "leave it out or set it to {\"type\": \"disabled\"}")
    return chat


def count_reply(n_tokens: int) -> dict:
    """``/v1/messages/count_tokens``' reply (``handle_count_tokens``, server-context.cpp 0c1e570)."""
    return {"input_tokens": n_tokens}


def _input(arguments: str) -> dict:
    """A tool call's arguments as a ``tool_use`` block's ``input`` (text that is not JSON: {}, as llama-server)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class AnthropicRenderer(Renderer):
    """A Messages reply (``to_json_anthropic``) and its stream: ``message_start`` with the first token
    (llama-server's partial result with ``n_decoded == 1``), ``content_block_start`` (index 0, a text
    block) with the first visible text, a ``content_block_delta`` (``text_delta``) per token with text;
    at the end ``content_block_stop`` (when there was text), ``message_delta`` (stop reason, stop
    sequence, output tokens) and ``message_stop``; no ``[DONE]``."""

    def __init__(self, replies, job) -> None:
        super().__init__(replies, job)
        self.started = False
        self.text_started = False
        self.thinking = False
        """A thinking block was opened (index 0; the text block is then index 1)."""

    def _stop(self, r: JobResult, calls=()) -> tuple[str, str | None]:
        reason = ("tool_use" if calls else "end_turn") if r.stop_type in ("eos", "word") else "max_tokens"
        return reason, r.stopping_word or None

    def _usage(self, cache_n: int) -> dict:
        return {"cache_read_input_tokens": cache_n, "input_tokens": self.replies.prompt_n - cache_n}

    def final(self, r: JobResult, tokens: list[TokenOut]) -> dict:
        reasoning, content, calls = self.replies.chat_message(r)
        reason, sequence = self._stop(r, calls)
        blocks = [{"type": "thinking", "thinking": reasoning, "signature": ""}] if reasoning else []
        blocks += [{"type": "text", "text": content}] if content else []
        blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)} for c in calls]
        return {"id": self.replies.id, "type": "message", "role": "assistant", "content": blocks,
                "model": self.replies.model, "stop_reason": reason, "stop_sequence": sequence,
                "usage": {**self._usage(r.cache_n), "output_tokens": r.predicted_n}}

    def _start(self, cache_n: int) -> list[dict]:
        if self.started:
            return []
        self.started = True
        message = {"id": self.replies.id, "type": "message", "role": "assistant", "content": [],
                   "model": self.replies.model, "stop_reason": None, "stop_sequence": None,
                   "usage": {**self._usage(cache_n), "output_tokens": 0}}
        return [sse({"type": "message_start", "message": message}, "message_start")]

    def first(self) -> list[dict]:
        return []

    def chunk(self, t: TokenOut) -> list[dict]:
        out = self._start(self.job.cache_n)
        thought, text = self.replies.stream_parts(t.text)
        return out + self._thinking_events(thought) + self._text_events(text)

    def _thinking_events(self, thought: str) -> list[dict]:
        out = []
        if thought:
            if not self.thinking:
                self.thinking = True
                out.append(sse({"type": "content_block_start", "index": 0,
                                "content_block": {"type": "thinking", "thinking": ""}}, "content_block_start"))
            out.append(sse({"type": "content_block_delta", "index": 0,
                            "delta": {"type": "thinking_delta", "thinking": thought}}, "content_block_delta"))
        return out

    def _text_events(self, text: str) -> list[dict]:
        out = []
        index = 1 if self.thinking else 0
        if text:
            if not self.text_started:
                self.text_started = True
                out.append(sse({"type": "content_block_start", "index": index,
                                "content_block": {"type": "text", "text": ""}}, "content_block_start"))
            out.append(sse({"type": "content_block_delta", "index": index,
                            "delta": {"type": "text_delta", "text": text}}, "content_block_delta"))
        return out

    def last(self, r: JobResult) -> list[dict]:
        out = self._start(r.cache_n)  # the first token made no visible event of ours (an end of generation)
        reasoning, content, calls = self.replies.chat_message(r)
        p = self.replies.p
        if p.reasoning is not None:
            split = self.replies.split
            said = split.reasoning if split is not None else ""
            out += self._thinking_events(reasoning[len(said):] if reasoning.startswith(said) else "")
        parsed = p.tool_format is not None or p.reasoning is not None
        rest = content[len(self.replies.sent):] if parsed and content.startswith(self.replies.sent) else ""
        out += self._text_events(rest)
        if self.thinking:  # llama-server closes the thinking block with an empty signature
            out.append(sse({"type": "content_block_delta", "index": 0,
                            "delta": {"type": "signature_delta", "signature": ""}}, "content_block_delta"))
            out.append(sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        if self.text_started:
            out.append(sse({"type": "content_block_stop", "index": 1 if self.thinking else 0}, "content_block_stop"))
        first = (1 if self.thinking else 0) + (1 if self.text_started else 0)
        for i, c in enumerate(calls, start=first):  # each call: its own tool_use block
            out.append(sse({"type": "content_block_start", "index": i, "content_block": {
                "type": "tool_use", "id": c.id, "name": c.name, "input": {}}}, "content_block_start"))
            out.append(sse({"type": "content_block_delta", "index": i, "delta": {
                "type": "input_json_delta", "partial_json": c.arguments}}, "content_block_delta"))
            out.append(sse({"type": "content_block_stop", "index": i}, "content_block_stop"))
        reason, sequence = self._stop(r, calls)
        out.append(sse({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                        "usage": {"output_tokens": r.predicted_n}}, "message_delta"))
        out.append(sse({"type": "message_stop"}, "message_stop"))
        return out

    def error(self, err: ApiError) -> dict:
        return sse(err.body()["error"], "error")


Renderer = AnthropicRenderer
"""What ``inspector.serve.app`` writes this API's replies with."""
