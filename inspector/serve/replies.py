"""Reply bodies and stream chunks in llama-server's shapes (``/completion``) and OpenAI's
(``/v1/completions``, ``/v1/chat/completions``), as llama.cpp 0c1e570 ``tools/server/server-task.cpp``
writes them (``to_json_non_oaicompat``, ``to_json_oaicompat``, ``to_json_oaicompat_chat``, their
``_stream`` forms, ``probs_to_json``) and ``LLAMA_SERVER_API.md`` captured them.

Probabilities: each token's ``logprob`` and ``top_logprobs`` come from its own verification row (an
accepted draft token's too): the raw softmax at temperature 0, after the sampler chain otherwise (the
row's ``basis``; llama-server's default is the raw softmax, ``post_sampling_probs`` false).
"""

from __future__ import annotations

import math
import secrets
import string
import time

from inspector.engine.text import utf8_complete_length
from inspector.serve.json_grammar import chat_content
from inspector.serve.params import SAMPLER_ORDER, CompletionParams
from inspector.serve.job import JobResult, TokenOut

FINGERPRINT = "b0-0c1e570"
"""``system_fingerprint``: the llama.cpp build our runtime is (``llama_build_info()`` of the reference)."""
_ALPHABET = string.ascii_letters + string.digits


def completion_id(prefix: str) -> str:
    """An OpenAI-style id: ``chatcmpl-`` / ``cmpl-`` and 32 random letters and digits."""
    return prefix + "".join(secrets.choice(_ALPHABET) for _ in range(32))


def _logprob(p: float | None) -> float:
    return math.log(p) if p and p > 0 else -1e9 if p is not None else 0.0


def _token_json(token: int, piece: bytes, p: float | None) -> dict:
    """llama-server's probability entry: ``token`` is the piece cut to its whole characters
    (``txt.resize(validate_utf8(txt))``, tools/server/server-task.cpp 0c1e570), ``bytes`` all of it."""
    text = piece[:utf8_complete_length(piece)].decode("utf-8", "replace")
    return {"id": token, "token": text, "bytes": list(piece), "logprob": _logprob(p)}


def piece_json(piece: bytes):
    """``/tokenize``'s ``with_pieces`` piece as llama-server writes it: the text when the piece is valid
    UTF-8, else the list of its byte values (tools/server/server-context.cpp 0c1e570)."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)


def probs_json(t: TokenOut, n_probs: int, piece_of) -> dict:
    """One token's probabilities as llama-server writes them: the token, its logprob and the row's top
    ``n_probs`` (``piece_of(token) -> bytes``)."""
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

    # -- /completion ---------------------------------------------------------------------
    def completion_chunk(self, t: TokenOut) -> dict:
        """A ``/completion`` stream event for one token."""
        self.sent_tokens += 1
        out = {"index": 0, "content": t.text, "tokens": [t.token], "stop": False, "id_slot": -1,
               "tokens_predicted": self.sent_tokens, "tokens_evaluated": self.prompt_n}
        if self.p.n_probs:
            out["completion_probabilities"] = [probs_json(t, self.p.n_probs, self.piece_of)]
        return out

    def completion_final(self, r: JobResult, tokens: list[TokenOut], stream: bool) -> dict:
        """The ``/completion`` reply (``stream``: the last stream event, without the text sent before)."""
        out = {"index": 0, "content": "" if stream else r.content,
               "tokens": [] if stream or not self.p.return_tokens else list(r.tokens), "id_slot": 0, "stop": True,
               "model": self.model, "tokens_predicted": r.predicted_n, "tokens_evaluated": self.prompt_n,
               "generation_settings": self.settings, "prompt": self.prompt_text,
               "has_new_line": "\n" in r.content, "truncated": False, "stop_type": r.stop_type,
               "stopping_word": r.stopping_word, "tokens_cached": self.prompt_n + max(0, r.predicted_n - 1),
               "timings": r.timings()}
        if self.p.n_probs and not stream:
            out["completion_probabilities"] = [probs_json(t, self.p.n_probs, self.piece_of) for t in tokens]
        return out

    # -- OpenAI ------------------------------------------------------------------------
    def _usage(self, r: JobResult) -> dict:
        return {"completion_tokens": r.predicted_n, "prompt_tokens": self.prompt_n,
                "total_tokens": self.prompt_n + r.predicted_n, "prompt_tokens_details": {"cached_tokens": r.cache_n}}

    def _logprobs(self, tokens: list[TokenOut]) -> dict | None:
        if not self.p.logprobs:
            return None
        return {"content": [probs_json(t, self.p.n_probs, self.piece_of) for t in tokens]}

    def _head(self, obj: str) -> dict:
        return {"created": self.created, "model": self.model, "system_fingerprint": FINGERPRINT, "object": obj,
                "id": self.id}

    def openai_final(self, r: JobResult, tokens: list[TokenOut]) -> dict:
        """The non-streamed ``chat.completion`` or ``text_completion``."""
        if self.p.endpoint == "chat":
            choice = {"finish_reason": r.finish_reason, "index": 0,
                      "message": {"role": "assistant", "content": chat_content(r.content, getattr(
                          self.p.constraints, "grammar", None), r.finish_reason != "length")}}
            obj = "chat.completion"
        else:
            choice = {"text": r.content, "index": 0, "finish_reason": r.finish_reason}
            obj = "text_completion"
        lp = self._logprobs(tokens)
        choice["logprobs"] = lp
        return {"choices": [choice], **self._head(obj), "usage": self._usage(r), "timings": r.timings()}

    def openai_first(self) -> dict | None:
        """The chat stream's first chunk (the assistant role), None for text completions."""
        if self.p.endpoint != "chat":
            return None
        return {"choices": [{"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}}],
                **self._head("chat.completion.chunk")}

    def openai_chunk(self, t: TokenOut) -> dict:
        """A stream chunk for one token."""
        lp = self._logprobs([t])
        if self.p.endpoint == "chat":
            choice = {"finish_reason": None, "index": 0, "delta": {"content": t.text}}
            obj = "chat.completion.chunk"
        else:
            choice = {"text": t.text, "index": 0, "logprobs": None, "finish_reason": None}
            obj = "text_completion"
        if lp is not None:
            choice["logprobs"] = lp
        return {"choices": [choice], **self._head(obj)}

    def openai_last(self, r: JobResult) -> list[dict]:
        """The stream's closing chunks: the finish reason with the timings, then the usage when asked
        (``stream_options.include_usage``)."""
        if self.p.endpoint == "chat":
            choice = {"finish_reason": r.finish_reason, "index": 0, "delta": {}}
            obj = "chat.completion.chunk"
        else:
            choice = {"text": "", "index": 0, "logprobs": None, "finish_reason": r.finish_reason}
            obj = "text_completion"
        out = [{"choices": [choice], **self._head(obj), "timings": r.timings()}]
        if self.p.include_usage:
            out.append({"choices": [], **self._head(obj), "usage": self._usage(r)})
        return out
