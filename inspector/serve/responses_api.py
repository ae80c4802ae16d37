"""``POST /v1/responses`` (``/responses``; OpenAI's Responses API, what Codex-style agents speak) and
``POST /v1/responses/input_tokens``, as llama.cpp 0c1e570 serves them (issue 52).

llama-server converts the request to a chat-completions body (``server_chat_convert_responses_to_chatcmpl``,
``tools/server/server-chat.cpp``), runs it as ``/v1/chat/completions`` runs, and writes the result in the
Responses shape (``to_json_oaicompat_resp`` / ``to_json_oaicompat_resp_stream`` of the final result,
``to_json_oaicompat_resp`` of each partial one, ``tools/server/server-task.cpp``; events are
``format_oai_resp_sse``'s ``event: TYPE`` + ``data: JSON``, ``tools/server/server-common.cpp``). So do
we: ``to_chat`` is that conversion, then ``parse_request(body, "chat", ...)`` and the chat job path,
and ``ResponsesRenderer`` writes the replies.

The conversion, as llama-server's: the body is kept but ``input`` (required: ``'input' is required``) and
``instructions`` (a first system message); a string ``input`` is one user message; an item list is read
item by item with llama-server's rules and messages (``input_text`` parts of user / system / developer
messages, ``output_text`` parts of ``type: message`` assistant messages, merged into a preceding
assistant message); ``max_output_tokens`` becomes ``max_tokens``; ``reasoning.effort`` becomes
``reasoning_effort``; ``tools`` keeps only function tools (none left: removed). A non-empty
``previous_response_id`` is refused (``llama.cpp does not support 'previous_response_id'.``). Every
other field goes to the chat rules (``parse_request``), which refuse what they would not apply, naming
it (non-empty ``tools`` included). We drop ``model`` (llama-server ignores it: the reply names the
served model) and keep only each message's role and content. Errors are llama-server's
``{"error": {...}}``; one in a stream is a plain ``data: {"error": ...}`` event.

A reply on a template with reasoning blocks (``inspector.serve.reasoning``) has a ``reasoning`` output item
first (``rs_`` id, a ``reasoning_text`` part) when the answer has reasoning; its stream adds the item before its
``response.reasoning_text.delta`` events and ends it with ``response.output_item.done``.

Tool calls as llama-server converts them: a ``function_call`` item -> an assistant message's
``tool_calls`` (merged into the assistant message before it), a ``function_call_output`` item -> a
``tool`` message (its ``input_text`` parts as text). A ``reasoning`` item -> its assistant message's
``reasoning_content`` (merged into the assistant message before it), as llama-server converts it. Text only:
``input_image`` and ``refusal`` parts are refused (400, naming them).
"""

from __future__ import annotations

import time

from inspector.serve.errors import ApiError
from inspector.serve.job import JobResult, TokenOut
from inspector.serve.replies import Renderer, completion_id, sse

PATHS = ("/v1/responses", "/responses")
COUNT_PATHS = ("/v1/responses/input_tokens", "/responses/input_tokens")
INPUT_ROLES = ("user", "system", "developer")


def _is(item, key: str, kind: type) -> bool:
    return isinstance(item, dict) and isinstance(item.get(key), kind)


def _input_parts(item: dict) -> list[dict]:
    """The chat text parts of an input message (user, system, developer)."""
    parts = []
    for part in item["content"]:
        kind = part.get("type") if isinstance(part, dict) and isinstance(part.get("type"), str) else ""
        if kind == "input_text":
            if "text" not in part:
                raise ApiError("'Input text' requires 'text'")
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image":
            raise ApiError("'input_image' is not supported by spec-inspector serve (text only)")
        elif kind == "input_file":
            raise ApiError("'input_file' is not supported by llamacpp at this moment")
        else:
            raise ApiError("'type' must be one of 'input_text', 'input_image', or 'input_file'")
    return parts


def _output_parts(item: dict) -> list[dict]:
    """The chat text parts of an assistant ``message`` item."""
    content = item.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    parts = []
    for part in content if isinstance(content, list) else ():
        kind = part.get("type") if isinstance(part, dict) and isinstance(part.get("type"), str) else ""
        if kind in ("output_text", "input_text"):
            if not _is(part, "text", str):
                raise ApiError("'Output text' requires 'text'")
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            if not _is(part, "refusal", str):
                raise ApiError("'Refusal' requires 'refusal'")
            raise ApiError("'refusal' content is not supported by spec-inspector serve (text only)")
        else:
            raise ApiError("'type' must be one of 'output_text' or 'refusal'")
    return parts


def _call_output(output) -> str | list:
    """A ``function_call_output``'s output as the ``tool`` message's content: a string as it is, else its
    parts (``input_text`` -> text; an image refused: text only)."""
    if isinstance(output, str):
        return output
    parts = []
    for part in output:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind is None:
            raise ApiError("Output of tool call missing 'type' field")
        if kind not in ("input_text", "input_image"):
            raise ApiError("Output of tool call should be 'Input text' or 'Input image'")
        if kind == "input_image":
            raise ApiError("'input_image' in a tool call's output is not supported by spec-inspector serve (text only)")
        parts.append({**part, "type": "text"})
    return parts


def _messages(value) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise ApiError("'input' must be a string or array of objects")
    messages: list[dict] = []
    for item in value:
        merge = bool(messages) and messages[-1]["role"] == "assistant"
        if _is(item, "content", str):
            item = {**item, "content": [{"text": item["content"], "type": "input_text"}]}
        role = item.get("role") if _is(item, "role", str) else None
        kind = item.get("type") if _is(item, "type", str) else None
        if _is(item, "content", list) and role in INPUT_ROLES:
            messages.append({"role": role, "content": _input_parts(item)})
        elif role == "assistant" and kind == "message":
            parts = _output_parts(item)
            if merge:
                messages[-1]["content"] = list(messages[-1].get("content") or []) + parts
            else:
                messages.append({"role": "assistant", "content": parts})
        elif kind == "function_call" and _is(item, "call_id", str) and _is(item, "name", str) \
                and _is(item, "arguments", str):
            call = {"function": {"arguments": item["arguments"], "name": item["name"]}, "id": item["call_id"],
                    "type": "function"}
            if merge:
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "tool_calls": [call]})
        elif kind == "function_call_output" and _is(item, "call_id", str) and \
                (_is(item, "output", str) or _is(item, "output", list)):
            messages.append({"content": _call_output(item["output"]), "role": "tool", "tool_call_id": item["call_id"]})
        elif kind == "reasoning" and _is(item, "summary", list):
            parts = item.get("content")
            if not isinstance(parts, list):
                raise ApiError("item['content'] is not an array")
            if not parts:
                raise ApiError("item['content'] is empty")
            if not _is(parts[0], "text", str):
                raise ApiError("item['content']['text'] is not a string")
            if merge:
                messages[-1]["reasoning_content"] = parts[0]["text"]
            else:
                messages.append({"role": "assistant", "content": [], "reasoning_content": parts[0]["text"]})
        else:
            raise ApiError("Cannot determine type of 'item'")
    return messages


def to_chat(body) -> dict:
    """The chat-completions body llama-server makes of a Responses ``body``
    (``server_chat_convert_responses_to_chatcmpl``). Raises ``ApiError`` (400)."""
    if not isinstance(body, dict) or "input" not in body:
        raise ApiError("'input' is required")
    previous = body.get("previous_response_id")
    if isinstance(previous, str) and previous:
        raise ApiError("llama.cpp does not support 'previous_response_id'.")
    chat = {k: v for k, v in body.items() if k not in ("input", "instructions", "model", "previous_response_id",
                                                        "tools", "max_output_tokens", "reasoning")}
    messages = []
    if "instructions" in body:
        text = body["instructions"]
        messages.append({"role": "system", "content": text if isinstance(text, str) else ""})
    chat["messages"] = messages + _messages(body["input"])
    if "tools" in body:
        if not isinstance(body["tools"], list):
            raise ApiError("'tools' must be an array of objects")
        tools = [{"type": "function", "function": {"strict": True, **{k: v for k, v in t.items() if k != "type"}}}
                 for t in body["tools"] if isinstance(t, dict) and t.get("type") == "function"]
        if tools:
            chat["tools"] = tools
    if "max_output_tokens" in body:
        chat["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and "effort" in reasoning:
        chat["reasoning_effort"] = reasoning["effort"]
    return chat


def count_reply(n_tokens: int) -> dict:
    """``/v1/responses/input_tokens``' reply (``handle_count_tokens``, server-context.cpp 0c1e570)."""
    return {"input_tokens": n_tokens, "object": "response.input_tokens"}


class ResponsesRenderer(Renderer):
    """A ``response`` object (``to_json_oaicompat_resp``) and its stream: ``response.created`` and
    ``response.in_progress`` with the first token, ``response.output_item.added`` and
    ``response.content_part.added`` with the first visible text, ``response.output_text.delta`` per
    token with text; at the end (when there was text) ``response.output_text.done``,
    ``response.content_part.done``, ``response.output_item.done``, then ``response.completed`` (with
    ``timings``); no ``[DONE]``. Ids: ``resp_``, ``msg_`` and 32 letters and digits."""

    def __init__(self, replies, job) -> None:
        super().__init__(replies, job)
        self.id = completion_id("resp_")
        self.message_id = completion_id("msg_")
        self.created = False
        self.text_started = False
        self.reasoning_id = completion_id("rs_")
        self.reasoning_started = False

    def _usage(self, r: JobResult) -> dict:
        n = self.replies.prompt_n
        return {"input_tokens": n, "output_tokens": r.predicted_n, "total_tokens": n + r.predicted_n,
                "input_tokens_details": {"cached_tokens": r.cache_n}}

    @staticmethod
    def _part(text: str) -> dict:
        return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}

    @staticmethod
    def _call_item(c) -> dict:
        """A tool call as a ``function_call`` output item (server-task.cpp: ``fc_`` and ``call_`` + its id)."""
        return {"id": "fc_" + c.id, "type": "function_call", "status": "completed", "arguments": c.arguments,
                "call_id": "call_" + c.id, "name": c.name}

    def final(self, r: JobResult, tokens: list[TokenOut]) -> dict:
        output = []
        reasoning, content, calls = self.replies.chat_message(r)
        if reasoning:
            output.append({"id": completion_id("rs_"), "summary": [], "type": "reasoning",
                           "content": [{"text": reasoning, "type": "reasoning_text"}], "encrypted_content": "",
                           "status": "completed"})
        if content:
            output.append({"content": [self._part(content)], "id": completion_id("msg_"), "role": "assistant",
                           "status": "completed", "type": "message"})
        output += [self._call_item(c) for c in calls]
        t = int(time.time())
        return {"completed_at": t, "created_at": t, "id": self.id, "model": self.replies.model,
                "object": "response", "output": output, "status": "completed", "usage": self._usage(r)}

    def _start(self) -> list[dict]:
        if self.created:
            return []
        self.created = True
        response = {"id": self.id, "object": "response", "status": "in_progress"}
        return [sse({"type": name, "response": response}, name) for name in ("response.created",
                                                                              "response.in_progress")]

    def first(self) -> list[dict]:
        return []

    def chunk(self, t: TokenOut) -> list[dict]:
        out = self._start()
        thought, text = self.replies.stream_parts(t.text)
        return out + self._reasoning_events(thought) + self._text_events(text)

    def _reasoning_events(self, thought: str) -> list[dict]:
        """The reasoning item (added before its first text) and its ``response.reasoning_text.delta`` events."""
        out = []
        if thought:
            if not self.reasoning_started:
                self.reasoning_started = True
                item = {"id": self.reasoning_id, "summary": [], "type": "reasoning", "content": [],
                        "encrypted_content": "", "status": "in_progress"}
                out.append(sse({"type": "response.output_item.added", "item": item}, "response.output_item.added"))
            out.append(sse({"type": "response.reasoning_text.delta", "delta": thought, "item_id": self.reasoning_id},
                           "response.reasoning_text.delta"))
        return out

    def _text_events(self, text: str) -> list[dict]:
        """The events of ``text`` streamed: the message item and its part before the first text, then the delta."""
        out = []
        if text:
            if not self.text_started:
                self.text_started = True
                item = {"content": [], "id": self.message_id, "role": "assistant", "status": "in_progress",
                        "type": "message"}
                out.append(sse({"type": "response.output_item.added", "item": item}, "response.output_item.added"))
                out.append(sse({"type": "response.content_part.added", "item_id": self.message_id,
                                "part": {"type": "output_text", "text": ""}}, "response.content_part.added"))
            out.append(sse({"type": "response.output_text.delta", "item_id": self.message_id, "delta": text},
                           "response.output_text.delta"))
        return out

    def last(self, r: JobResult) -> list[dict]:
        out = self._start()  # the first token made no visible event of ours (an end of generation)
        output = []
        reasoning, content, calls = self.replies.chat_message(r)
        p = self.replies.p
        if p.reasoning is not None:
            split = self.replies.split
            said = split.reasoning if split is not None else ""
            out += self._reasoning_events(reasoning[len(said):] if reasoning.startswith(said) else "")
        parsed = p.tool_format is not None or p.reasoning is not None
        rest = content[len(self.replies.sent):] if parsed and content.startswith(self.replies.sent) else ""
        out += self._text_events(rest)  # content held back while it might have begun a tool call
        if reasoning:
            item = {"id": self.reasoning_id, "summary": [], "type": "reasoning",
                    "content": [{"text": reasoning, "type": "reasoning_text"}], "encrypted_content": ""}
            out.append(sse({"type": "response.output_item.done", "item": item}, "response.output_item.done"))
            output.append(item)
        if content:
            part = self._part(content)
            item = {"type": "message", "status": "completed", "id": self.message_id, "content": [part],
                    "role": "assistant"}
            for name, data in (("response.output_text.done", {"item_id": self.message_id, "text": content}),
                               ("response.content_part.done", {"item_id": self.message_id, "part": part}),
                               ("response.output_item.done", {"item": item})):
                out.append(sse({"type": name, **data}, name))
            output.append(item)
        for c in calls:
            item = self._call_item(c)
            out.append(sse({"type": "response.output_item.done", "item": item}, "response.output_item.done"))
            output.append(item)
        response = {"id": self.id, "object": "response", "created_at": int(time.time()), "status": "completed",
                    "model": self.replies.model, "output": output, "usage": self._usage(r)}
        out.append(sse({"type": "response.completed", "response": response, "timings": r.timings()},
                       "response.completed"))
        return out


Renderer = ResponsesRenderer
"""What ``inspector.serve.app`` writes this API's replies with."""
