"""A loaded model's vocabulary and chat template: token bytes and text, tokenizing, end-of-generation
tests, and prompts rendered through the model's chat template (LLAMA_CPP_NOTES "Chat template").

``Vocabulary`` is what ``LlamaRuntime`` answers its token and prompt calls with. Reading it takes no
KV cache and no decode: token pieces are cached per token (callers may be on several threads).
"""

from __future__ import annotations

import ctypes
from typing import Sequence

import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from inspector.engine.errors import NoChatTemplate
from inspector.engine.text import token_label


class Vocabulary:
    """The vocabulary of ``model`` (a loaded ``llama_model`` pointer; ``model_path`` names it in messages)."""

    def __init__(self, model, model_path) -> None:
        self.model = model
        self.model_path = model_path
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self.vocab_type = int(llama_cpp.llama_vocab_type(self.vocab))
        self._pieces: dict[int, bytes] = {}
        self._special_pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._formatters: dict[tuple[str, bool], Jinja2ChatFormatter] = {}
        self.template_override: str | None = None
        """A chat template given by the user (llama.cpp's ``--chat-template``), used instead of the GGUF's."""

    def is_eog(self, token: int) -> bool:
        """End-of-generation test (``llama_vocab_is_eog``), cached."""
        v = self._eog.get(token)
        if v is None:
            v = self._eog[token] = bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))
        return v

    def token_piece(self, token: int, special: bool = False) -> bytes:
        """The token's bytes (``llama_token_to_piece``); may be a partial UTF-8 sequence; b"" for an id
        outside the vocabulary. ``special``: render control tokens (``<|im_end|>``) instead of b""."""
        cache = self._special_pieces if special else self._pieces
        b = cache.get(token)
        if b is None:
            if token < 0 or token >= self.n_vocab:
                return b""
            buf = ctypes.create_string_buffer(64)  # per call: callers may be on several threads
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
            b = cache[token] = buf.raw[:n]
        return b

    def token_text(self, token: int) -> str:
        """Display text of one token, its label (``inspector.engine.text.token_label``: special tokens
        rendered; a byte that is not part of a whole character shown as ``<0xNN>``)."""
        return token_label(self.token_piece(token, True))

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Join the tokens' bytes and decode once (UTF-8 safe; special tokens not rendered)."""
        return b"".join(self.token_piece(t) for t in tokens).decode("utf-8", errors="replace")

    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """Text -> token ids (``llama_tokenize``). ``add_special`` adds BOS if the model wants it."""
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        return list(buf[:n])

    def chat_template(self) -> str | None:
        """The model's chat template: the user's (``template_override``), else its GGUF's
        ``tokenizer.chat_template``; None when it has none."""
        if self.template_override is not None:
            return self.template_override
        raw = llama_cpp.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8") if raw else None

    def chat_prompt(self, user_text: str, system_prompt: str = "") -> str:
        """Render ``user_text`` as one user message through the model's chat template, after a system
        message when ``system_prompt`` is given (llama.cpp's ``-sys``/``--system-prompt``). Raises
        ``NoChatTemplate`` (an ``EngineError``) if the model has none."""
        system = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return self.chat_messages_prompt([*system, {"role": "user", "content": user_text}])

    def chat_messages_prompt(self, messages: list[dict], tools: list | None = None,
                             extra: dict | None = None, generation_prompt: bool = True) -> str:
        """Render a chat (``{"role", "content"}`` dicts in order; an assistant message may carry
        ``tool_calls``, a ``tool`` message ``tool_call_id``) through the model's chat template with the
        generation prompt added: a conversation's next turn (``inspector.session.conversation``), a served
        request. ``tools``: the request's tool definitions, given to the template as ``tools`` (a template
        that does not read them renders as without; llama-server ``--jinja``); ``extra``: more template
        variables (``chat_template_kwargs``); ``generation_prompt`` False: without the assistant's opening (the
        template's ``add_generation_prompt``). Raises ``NoChatTemplate`` if the model has none, and the
        template's own error (``ValueError``, a Jinja error) for a chat it refuses."""
        fmt = self._formatter(generation_prompt)
        return fmt(messages=list(messages), tools=tools or None, **(extra or {})).prompt

    def _formatter(self, generation_prompt: bool = True) -> Jinja2ChatFormatter:
        """The chat template compiled once per template text and ``generation_prompt`` (compiling takes
        ~10 ms of Python, holding the interpreter lock while serve's slots decode); rendering a compiled
        template is safe from several threads."""
        template = self.chat_template()
        if not template:
            raise NoChatTemplate(f"model {self.model_path} has no chat template; use --raw")
        key = (template, generation_prompt)
        kept = self._formatters.get(key)
        if kept is None:
            kept = self._formatters[key] = self._compile(template, generation_prompt)
        return kept

    def _compile(self, template: str, generation_prompt: bool) -> Jinja2ChatFormatter:
        bos = self.token_piece(llama_cpp.llama_vocab_bos(self.vocab), True).decode("utf-8", "replace")
        eos = self.token_piece(llama_cpp.llama_vocab_eos(self.vocab), True).decode("utf-8", "replace")
        return Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos, add_generation_prompt=generation_prompt)

    def prompt_tokens(self, text: str, raw: bool = False, system_prompt: str = "") -> list[int]:
        """Token ids of a prompt: through the chat template (no extra BOS; after a system message
        when ``system_prompt`` is given), or as is with the model's BOS when ``raw`` (which takes
        no system prompt: ``ValueError``)."""
        if raw:
            if system_prompt:
                raise ValueError("a system prompt goes through the chat template: it cannot go with a raw prompt")
            return self.tokenize(text, add_special=True, parse_special=False)
        return self.tokenize(self.chat_prompt(text, system_prompt), add_special=False, parse_special=True)

