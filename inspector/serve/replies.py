"""Reply bodies and stream chunks in llama-server's shapes (``/completion``) and OpenAI's
(``/v1/completions``, ``/v1/chat/completions``), as llama.cpp 0c1e570 ``tools/server/server-task.cpp``
writes them (``to_json_non_oaicompat``, ``to_json_oaicompat``, ``to_json_oaicompat_chat``, their
``_stream`` forms, ``probs_to_json``) and ``LLAMA_SERVER_API.md`` captured them.

Reasoning: on a template with reasoning blocks (``inspector.serve.reasoning``) a chat message carries the
block's text as ``reasoning_content`` (only when not empty) and its stream sends ``reasoning_content`` deltas
while the block is open, ``content`` deltas after (one chunk per part that grew, as llama-server's message
diffs, ``server_chat_msg_diff_to_json_oaicompat`` in ``tools/server/server-chat.cpp``).

Probabilities: each token's ``logprob`` and ``top_logprobs`` come from its own verification row (an
accepted draft token's too): the raw softmax at temperature 0, after the sampler chain otherwise (the
row's ``basis``; llama-server's default is the raw softmax, ``post_sampling_probs`` false).
"""

from __future__ import annotations

import json
import math
import secrets
import string
import time

from inspector.engine.text import utf8_complete_length
from inspector.serve.errors import ApiError
from inspector.serve.json_grammar import CHAT_ROOT, chat_content
from inspector.serve.params import SAMPLER_ORDER, CompletionParams
from inspector.serve.job import JobResult, TokenOut
from inspector.serve.reasoning import ReasoningSplit
from inspector.serve.tool_calls import ToolCall, parse_tool_calls, visible_content

FINGERPRINT = "b0-0c1e570"
"""``system_fingerprint``: the llama.cpp build our runtime is (``llama_build_info()`` of the reference)."""
_ALPHABET = string.ascii_letters + string.digits


def completion_id(prefix: str) -> str:
    """An OpenAI-style id: ``chatcmpl-`` / ``cmpl-`` and 32 random letters and digits."""
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(32))


def _logprob(p: float | None) -> float:
    return math.log(p) if p and p > 0 else -1e9 if p is not None else 0.0


def _token_json(token: int, piece: bytes, p: float | None, post: bool = False) -> dict:
    """llama-server's probability entry: ``token`` is the piece cut to its whole characters
    (``txt.resize(validate_utf8(txt))``, tools/server/server-task.cpp 0c1e570), ``bytes`` all of it;
    ``post`` (``post_sampling_probs``): the probability itself as ``prob``, not its log."""
    text = piece[:utf8_complete_length(piece)].decode("utf-8", "replace")
    if post:
        return {"id": token, "token": text, "bytes": list(piece), "prob": p if p is not None else 0.0}
    return {"id": token, "token": text, "bytes": list(piece), "logprob": _logprob(p)}


def piece_json(piece: bytes):
    """``/tokenize``'s ``with_pieces`` piece as llama-server writes it: the text when the piece is valid
    UTF-8, else the list of its byte values (tools/server/server-context.cpp 0c1e570)."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)


def probs_json(t: TokenOut, n_probs: int, piece_of, post: bool = False, greedy: bool = False) -> dict:
    """One token's probabilities as llama-server writes them: the token, its logprob and the row's top
    ``n_probs`` (``piece_of(token) -> bytes``). ``post`` (``post_sampling_probs``): the probabilities after
    the sampler chain, as ``prob`` / ``top_probs``, the candidates the chain left (p > 0) only
    (llama.cpp 0c1e570 ``tools/server/server-context.cpp`` ``populate_token_probs``): ``greedy`` (temperature
    0: llama.cpp's temperature stage keeps the largest logit alone) leaves the token alone at 1."""
    if post:
        top = [(t.token, 1.0)] if greedy else [(tok, p) for tok, p in t.top[:n_probs] if p > 0.0]
        out = _token_json(t.token, t.piece, 1.0 if greedy else t.p, True)
        out["top_probs"] = [_token_json(tok, piece_of(tok), p, True) for tok, p in top[:n_probs]]
        return out
    out = _token_json(t.token, t.piece, t.p)
    out["top_logprobs"] = [_token_json(tok, piece_of(tok), p) for tok, p in t.top[:n_probs]]
    return out


def generation_settings(p: CompletionParams, n_ctx: int, source: str, max_tokens: int) -> dict:
    """``generation_settings`` of a ``/completion`` reply: the request's settings as applied."""
    s = p.sampling
    return {"n_predict": p.n_predict, "max_tokens": max_tokens, "seed": s.seed, "temperature": s.temperature,
            "top_k": s.top_k, "top_p": s.top_p, "min_p": s.min_p, "repeat_last_n": s.repeat_last_n,
            "repeat_penalty": s.repeat_penalty, "presence_penalty": s.presence_penalty,
            "frequency_penalty": s.frequency_penalty, "stop": list(p.stop), "n_probs": p.n_probs,
            "stream": p.stream, "n_ctx": n_ctx, "samplers": list(SAMPLER_ORDER),
            "speculative.types": "none" if source == "none" else f"none,{source}", "cache_prompt": p.cache_prompt}


def nested_values(paths, body: dict) -> dict:
    """The fields of ``body`` that ``paths`` name (``response_fields``): each path a key or keys joined by
    ``/`` (``generation_settings/n_predict``), kept under the path as its key; a path that names nothing is
    left out (llama.cpp 0c1e570 ``tools/server/server-common.cpp`` ``json_get_nested_values``)."""
    out = {}
    for path in paths:
        current, found = body, True
        for key in path.split("/"):
            if found and isinstance(current, dict) and key in current:
                current = current[key]
            else:
                found = False
        if found:
            out[path] = current
    return out


class Replies:
    """Builds the replies of one request. ``model``: the name the server answers with (its alias or the
    model path); ``prompt_text``/``prompt_n``: the request's prompt and its token count."""

    def __init__(self, params: CompletionParams, model: str, prompt_text: str, prompt_n: int, piece_of,
                 settings: dict) -> None:
        self.p = params
        self.model = model
        self.prompt_text = prompt_text
        self.prompt_n = prompt_n
        self.piece_of = piece_of
        self.settings = settings
        self.created = int(time.time())
        self.id = completion_id("chatcmpl-" if params.endpoint == "chat" else "cmpl-")
        self.sent_tokens = 0
        self._raw = ""
        self.sent = ""
        """The content streamed so far (an answer with tool calls or a JSON value, held back in parts)."""
        self._call_ids: dict[int, str] = {}
        self.split = None
        """A template with reasoning blocks: the stream's ``ReasoningSplit`` once it began."""

    # -- /completion ---------------------------------------------------------------------
    def completion_chunk(self, t: TokenOut) -> dict:
        """A ``/completion`` stream event for one token."""
        self.sent_tokens += 1
        out = {"index": self.p.index, "content": t.text, "tokens": [t.token], "stop": False, "id_slot": -1,
               "tokens_predicted": self.sent_tokens, "tokens_evaluated": self.prompt_n}
        if t.timings is not None:
            out["timings"] = t.timings
        if self.p.n_probs:
            out["completion_probabilities"] = [self._probs(t)]
        return out

    def completion_final(self, r: JobResult, tokens: list[TokenOut], stream: bool) -> dict:
        """The ``/completion`` reply (``stream``: the last stream event, without the text sent before)."""
        out = {"index": self.p.index, "content": "" if stream else r.content,
               "tokens": [] if stream or not self.p.return_tokens else list(r.tokens), "id_slot": r.slot, "stop": True,
               "model": self.model, "tokens_predicted": r.predicted_n, "tokens_evaluated": self.prompt_n,
               "generation_settings": self.settings, "prompt": self.prompt_text,
               "has_new_line": "\n" in r.content, "truncated": False, "stop_type": r.stop_type,
               "stopping_word": r.stopping_word, "tokens_cached": self.prompt_n + max(0, r.predicted_n - 1),
               "timings": r.timings()}
        if self.p.n_probs and not stream:
            out["completion_probabilities"] = [self._probs(t) for t in tokens]
        return nested_values(self.p.response_fields, out) if self.p.response_fields else out

    # -- OpenAI ------------------------------------------------------------------------
    def _usage(self, r: JobResult) -> dict:
        return {"completion_tokens": r.predicted_n, "prompt_tokens": self.prompt_n,
                "total_tokens": self.prompt_n + r.predicted_n, "prompt_tokens_details": {"cached_tokens": r.cache_n}}

    def _logprobs(self, tokens: list[TokenOut]) -> dict | None:
        if not self.p.logprobs:
            return None
        return {"content": [self._probs(t) for t in tokens]}

    def _probs(self, t: TokenOut) -> dict:
        return probs_json(t, self.p.n_probs, self.piece_of, self.p.post_sampling_probs, self.p.sampling.greedy)

    def _head(self, obj: str) -> dict:
        return {"created": self.created, "model": self.model, "system_fingerprint": FINGERPRINT, "object": obj,
                "id": self.id}

    def chat_message(self, r: JobResult) -> tuple[str, str, list[ToolCall]]:
        """A chat answer's reasoning (``inspector.serve.reasoning``; "" when the template has no reasoning
        blocks or it is kept in the content), content and tool calls (``parse_tool_calls``; none when the
        request's calls are not parsed back), each call with its id (the model's, else a new ``call_`` id,
        kept for the stream)."""
        complete = r.finish_reason != "length"
        grammar = getattr(self.p.constraints, "grammar", None)
        if self.p.reasoning is None:
            reasoning, rest = "", r.content
        else:
            reasoning, rest = self.p.reasoning.split(r.content)
        if self.p.tool_format is None:
            if self.p.reasoning is not None and self._chat_json() is None:
                return reasoning, rest, []
            return reasoning, chat_content(rest, grammar, complete), []
        content, calls = parse_tool_calls(rest, self.p.tool_format, self.p.tools)
        for i, c in enumerate(calls):
            c.id = c.id or self._call_ids.setdefault(i, completion_id(""))
        return reasoning, content, calls

    def tool_message(self, r: JobResult) -> tuple[str, list[ToolCall]]:
        """A chat answer's content and tool calls (``chat_message`` without the reasoning)."""
        return self.chat_message(r)[1:]

    def finish_reason(self, r: JobResult, calls: list) -> str:
        """llama-server's: ``tool_calls`` when the answer ended on its own with calls (server-task.cpp)."""
        return "tool_calls" if calls and r.finish_reason != "length" else r.finish_reason

    def openai_final(self, r: JobResult, tokens: list[TokenOut]) -> dict:
        """The non-streamed ``chat.completion`` or ``text_completion``."""
        if self.p.endpoint == "chat":
            reasoning, content, calls = self.chat_message(r)
            message = {"role": "assistant", "content": content}
            if reasoning:
                message["reasoning_content"] = reasoning
            if calls:
                message["tool_calls"] = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments},
                                          "id": c.id} for c in calls]
            choice = {"finish_reason": self.finish_reason(r, calls), "index": self.p.index, "message": message}
            obj = "chat.completion"
        else:
            choice = {"text": r.content, "index": self.p.index, "finish_reason": r.finish_reason}
            obj = "text_completion"
        lp = self._logprobs(tokens)
        if lp is not None or self.p.endpoint != "chat":  # llama-server: a chat choice has them only when asked
            choice["logprobs"] = lp
        return {"choices": [choice], **self._head(obj), "usage": self._usage(r), "timings": r.timings()}

    def openai_first(self) -> dict | None:
        """The chat stream's first chunk (the assistant role), None for text completions."""
        if self.p.endpoint != "chat":
            return None
        return {"choices": [{"finish_reason": None, "index": self.p.index, "delta": {"role": "assistant", "content": None}}],
                **self._head("chat.completion.chunk")}

    def _chat_json(self) -> str | None:
        """The request's grammar when it is a chat ``response_format``'s (its answer is a JSON value)."""
        g = getattr(self.p.constraints, "grammar", None)
        return g if self.p.endpoint == "chat" and g is not None and ("\n" + CHAT_ROOT) in ("\n" + g) else None

    def _json_delta(self, text: str, grammar: str, complete: bool | None = None) -> str:
        """The part of the extracted JSON value (``chat_content``) not streamed yet, after ``text``: the
        spaces around the value and a ```` ```json ```` fence are held back while they may still be that, as
        llama-server's stream carries its chat parser's diffs. ``complete``: the answer ended (True: whole;
        False: cut by the limit, its trailing spaces kept as the reply keeps them)."""
        self._raw += text
        return self._advance(self._json_visible(self._raw, grammar, complete))

    @staticmethod
    def _json_visible(raw: str, grammar: str, complete: bool | None) -> str:
        if complete is not None:
            return chat_content(raw, grammar, complete)
        visible = chat_content(raw, grammar, True)
        head = raw.lstrip(" \t\n")
        if "```json".startswith(head):
            visible = ""
        elif head.startswith("```json"):
            visible = visible.rstrip("`")
        return visible

    def _advance(self, visible: str) -> str:
        """The part of ``visible`` (the content so far) not sent yet ("" when it no longer extends it)."""
        if not visible.startswith(self.sent):
            return ""
        delta, self.sent = visible[len(self.sent):], visible
        return delta

    def reasoning_delta(self, text: str) -> tuple[str, str]:
        """(reasoning, content) not streamed yet after ``text`` on a template with reasoning blocks: the
        content part as the answer's kind shows it (a tool answer's visible content, a JSON value's)."""
        if self.split is None:
            self.split = ReasoningSplit(self.p.reasoning)
        reasoning, rest = self.split.feed(text)
        grammar = self._chat_json()
        if self.p.tool_format is not None:
            visible = visible_content(rest, self.p.tool_format)
        elif grammar is not None:
            visible = self._json_visible(rest, grammar, None)
        else:
            visible = rest
        return reasoning, self._advance(visible)

    def stream_parts(self, text: str) -> tuple[str, str]:
        """(reasoning, content) a token's ``text`` adds to a chat stream, as the answer's kind shows it: split at
        the reasoning block (``reasoning_delta``), a tool answer's visible content (``tool_delta``), or as is."""
        if self.p.reasoning is not None:
            return self.reasoning_delta(text)
        return "", text if self.p.tool_format is None else self.tool_delta(text)

    def tool_delta(self, text: str) -> str:
        """The content not streamed yet of an answer whose tool calls are parsed back (``visible_content``)."""
        self._raw += text
        return self._advance(visible_content(self._raw, self.p.tool_format))

    def openai_chunks(self, t: TokenOut) -> list[dict]:
        """A token's stream chunks: ``openai_chunk``'s, or on a template with reasoning blocks one chunk per
        part that grew (``reasoning_content``, then ``content``: llama-server's diffs, one chunk each)."""
        if self.p.endpoint != "chat" or self.p.reasoning is None:
            one = self.openai_chunk(t)
            return [] if one is None else [one]
        lp = self._logprobs([t])
        out = []
        for key, text in zip(("reasoning_content", "content"), self.reasoning_delta(t.text)):
            if text:
                choice = {"finish_reason": None, "index": self.p.index, "delta": {key: text}}
                if lp is not None and not out:
                    choice["logprobs"] = lp
                out.append({"choices": [choice], **self._head("chat.completion.chunk")})
                if t.timings is not None:
                    out[-1]["timings"] = t.timings
        return out

    def openai_chunk(self, t: TokenOut) -> dict | None:
        """A stream chunk for one token (None: nothing to send yet, a chat JSON answer's held-back spaces)."""
        lp = self._logprobs([t])
        if self.p.endpoint == "chat":
            grammar = self._chat_json()
            if self.p.tool_format is not None:
                text = self.tool_delta(t.text)
            else:
                text = t.text if grammar is None else self._json_delta(t.text, grammar)
            if (grammar is not None or self.p.tool_format is not None) and not text:
                return None
            choice = {"finish_reason": None, "index": self.p.index, "delta": {"content": text}}
            obj = "chat.completion.chunk"
        else:
            choice = {"text": t.text, "index": self.p.index, "logprobs": None, "finish_reason": None}
            obj = "text_completion"
        if lp is not None:
            choice["logprobs"] = lp
        out = {"choices": [choice], **self._head(obj)}
        if t.timings is not None:
            out["timings"] = t.timings
        return out

    def openai_last(self, r: JobResult) -> list[dict]:
        """The stream's closing chunks: the finish reason with the timings, then the usage when asked
        (``stream_options.include_usage``)."""
        out = []
        if self.p.endpoint == "chat":
            grammar = self._chat_json()
            rest, calls = "" if grammar is None else self._json_delta("", grammar, r.finish_reason != "length"), []
            if self.p.tool_format is not None or self.p.reasoning is not None:
                reasoning, content, calls = self.chat_message(r)
                rest = content[len(self.sent):] if content.startswith(self.sent) else ""
                said = self.split.reasoning if self.split is not None else ""
                more = reasoning[len(said):] if reasoning.startswith(said) else ""
                if more:
                    out.append({"choices": [{"finish_reason": None, "index": self.p.index,
                                             "delta": {"reasoning_content": more}}], **self._head("chat.completion.chunk")})
            if rest:  # a cut answer's trailing spaces, held back while more might follow
                out.append({"choices": [{"finish_reason": None, "index": self.p.index, "delta": {"content": rest}}],
                            **self._head("chat.completion.chunk")})
            for i, c in enumerate(calls):  # llama-server sends a call's name, then its arguments as they grow
                delta = {"tool_calls": [{"index": i, "id": c.id, "type": "function",
                                         "function": {"name": c.name, "arguments": c.arguments}}]}
                out.append({"choices": [{"finish_reason": None, "index": self.p.index, "delta": delta}],
                            **self._head("chat.completion.chunk")})
            choice = {"finish_reason": self.finish_reason(r, calls), "index": self.p.index, "delta": {}}
            obj = "chat.completion.chunk"
        else:
            choice = {"text": "", "index": self.p.index, "logprobs": None, "finish_reason": r.finish_reason}
            obj = "text_completion"
        out.append({"choices": [choice], **self._head(obj), "timings": r.timings()})
        if self.p.include_usage:
            out.append({"choices": [], **self._head(obj), "usage": self._usage(r)})
        return out


def sse(data, event: str | None = None) -> dict:
    """One Server-Sent Event (``inspector.serve.event_stream.encode_event`` writes it): ``data: JSON`` (a string
    is sent as it is), after ``event: NAME`` when named (llama-server's ``format_anthropic_sse`` / ``format_oai_resp_sse``)."""
    out = {"data": data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)}
    if event is not None:
        out["event"] = event
    return out


class Renderer:
    """How one API writes a request's reply: ``final`` (the non-streamed body), and the stream's events
    (``first`` before any token, ``chunk`` per token, ``last`` at the end, ``error`` for a failure
    after the stream began), each a list of ``sse`` events. This one is llama-server's ``/completion``
    and OpenAI's ``/v1/completions`` and ``/v1/chat/completions`` (``Replies``); the Anthropic and
    Responses APIs have their own (``inspector.serve.anthropic_api``, ``inspector.serve.responses_api``).
    ``job``: the request (``Job.cache_n``: the prompt tokens the slot reused, once it runs)."""

    def __init__(self, replies: Replies, job) -> None:
        self.replies = replies
        self.job = job
        self.plain = replies.p.endpoint == "completion"

    def final(self, r: JobResult, tokens: list[TokenOut]) -> dict:
        return self.replies.completion_final(r, tokens, False) if self.plain else self.replies.openai_final(r, tokens)

    def first(self) -> list[dict]:
        first = None if self.plain else self.replies.openai_first()
        return [] if first is None else [sse(first)]

    def chunk(self, t: TokenOut) -> list[dict]:
        if self.plain:
            return [sse(self.replies.completion_chunk(t))]
        return [sse(event) for event in self.replies.openai_chunks(t)]

    def last(self, r: JobResult) -> list[dict]:
        if self.plain:
            return [sse(self.replies.completion_final(r, [], True))]
        return [sse(last) for last in self.replies.openai_last(r)] + [sse("[DONE]")]

    def error(self, err: ApiError) -> dict:
        """The stream's event for a failure after it began (a stop: llama-server's 503 unavailable)."""
        return sse(err.body())


SLOT_PARAMS = ("seed", "temperature", "top_k", "top_p", "min_p", "repeat_last_n", "repeat_penalty",
               "presence_penalty", "frequency_penalty", "max_tokens", "n_predict", "stream", "n_probs", "samplers",
               "speculative.types")
"""The request settings ``/slots`` shows of a slot's task (llama-server's ``to_json(only_metrics)`` has
these and the settings of samplers spec-inspector does not run)."""


def slots_json(slots, n_ctx: int) -> list[dict]:
    """``GET /slots``: every slot as llama.cpp 0c1e570 ``tools/server/server-context.cpp``
    ``server_slot::to_json(only_metrics=true)`` writes it: ``id``, ``n_ctx`` (tokens), ``speculative``,
    ``is_processing``, and once a request ran on it, its task's prompt counts, settings and ``next_token``
    (``n_decoded``, ``n_remain``: tokens). ``slots``: the ``ServeSlots``."""
    return [slot_json(slot, slots.source, n_ctx) for slot in slots.slots]


def slot_json(slot, source: str, n_ctx: int) -> dict:
    """One slot of ``slots_json`` (``slot``: a ``ServeSlot``; ``source``: the server's proposal source)."""
    job = slot.last_job
    running = slot.busy
    out = {"id": slot.id, "n_ctx": n_ctx, "speculative": source != "none", "is_processing": running}
    if job is None:
        return out
    p, r, gen = job.params, job.result, job.generation
    decoded = gen.generated_count if gen is not None else (r.predicted_n if r is not None else 0)
    max_tokens = p.n_predict if p.n_predict >= 0 else n_ctx - len(job.prompt_tokens)
    settings = generation_settings(p, n_ctx, source, max_tokens)
    out.update({
        "id_task": job.id, "n_prompt_tokens": len(job.prompt_tokens),
        "n_prompt_tokens_processed": r.prompt_n if r is not None else 0,
        "n_prompt_tokens_cache": r.cache_n if r is not None else 0,
        "params": {name: settings[name] for name in SLOT_PARAMS},
        "next_token": [{"has_next_token": running, "has_new_line": "\n" in (r.content if r is not None else ""),
                        "n_remain": -1 if p.n_predict < 0 else max(0, p.n_predict - decoded),
                        "n_decoded": decoded}]})
    return out
