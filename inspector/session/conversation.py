"""Conversations: several user turns, each a request whose prompt is the whole chat so far (issue 16).

A turn's prompt is the chat history (every earlier user message and the model's answer to
it, in order) plus the next user message, rendered through the model's chat template
(``LlamaRuntime.chat_messages_prompt``). Each turn is one request (a fresh KV session,
prefilled with the history); proposal sources keep what they remember across the turns
through one ``RunRequest.source_memory`` dict (``SourceContext.memory``), as agent loops
that repeat earlier content need.

Turns files (``read_turns``): a JSON list of strings (or of ``{"role": "user", "content":
...}`` objects), or plain text with the turns separated by lines holding only ``---``.
Qt-free; the CLI (``run --turns``, ``compare --turns``) and tests use it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

TURN_SEPARATOR = "---"
"""A line holding only this separates two turns of a plain-text turns file."""
MAX_TURNS_FILE_BYTES = 4 * 1024 * 1024


class TurnsFileError(ValueError):
    """A turns file that cannot be used; the message names the file and, where it applies, the turn."""


def parse_turns(text: str, where: str = "turns") -> list[str]:
    """The user messages of a turns file's text (see the module docstring).

    ``where``: the file name for messages. Raises ``TurnsFileError`` for no turns, invalid
    JSON (text starting with ``[``), an item that is not a string or a user message, or an
    empty turn (named by its 1-based number)."""
    stripped = text.strip()
    if not stripped:
        raise TurnsFileError(f"{where} holds no turns (expected a JSON list of messages, or messages "
                             f"separated by lines with only {TURN_SEPARATOR})")
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except ValueError as exc:
            raise TurnsFileError(f"{where} is not valid JSON: {exc}") from None
        if not isinstance(items, list) or not items:
            raise TurnsFileError(f"{where} holds no turns (an empty JSON list)")
        turns = []
        for i, item in enumerate(items, 1):
            if isinstance(item, dict) and item.get("role", "user") == "user" and isinstance(item.get("content"), str):
                item = item["content"]
            if not isinstance(item, str):
                raise TurnsFileError(f"{where}: turn {i} is not a string or a {{\"role\": \"user\", \"content\": "
                                     f"...}} object (observed {type(item).__name__})")
            turns.append(item)
    else:
        turns, block = [], []
        for line in text.splitlines():
            if line.strip() == TURN_SEPARATOR:
                turns.append("\n".join(block))
                block = []
            else:
                block.append(line)
        turns.append("\n".join(block))
        turns = [t.strip("\n") for t in turns]
    for i, t in enumerate(turns, 1):
        if not t.strip():
            raise TurnsFileError(f"{where}: turn {i} is empty")
    return turns


def read_turns(path: str | os.PathLike) -> list[str]:
    """``parse_turns`` of a UTF-8 file. Raises ``TurnsFileError`` when it cannot be read, is larger
    than ``MAX_TURNS_FILE_BYTES``, is not UTF-8, or holds no usable turns."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_TURNS_FILE_BYTES:
            raise TurnsFileError(f"turns file {p} is larger than {MAX_TURNS_FILE_BYTES} bytes")
        text = p.read_text("utf-8")
    except OSError as exc:
        raise TurnsFileError(f"cannot read turns file {p}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TurnsFileError(f"turns file {p} is not UTF-8 text: {exc}") from None
    return parse_turns(text, f"turns file {p}")


@dataclass
class ChatHistory:
    """The messages of a conversation so far (``{"role": ..., "content": ...}`` dicts, in order)."""

    messages: list[dict] = field(default_factory=list)

    @property
    def turns(self) -> int:
        """User turns so far."""
        return sum(1 for m in self.messages if m["role"] == "user")

    def prompt_messages(self, user_text: str) -> list[dict]:
        """The messages of the next turn's prompt: the history plus ``user_text``."""
        return [*self.messages, {"role": "user", "content": user_text}]

    def add_turn(self, user_text: str, answer: str) -> None:
        """Record a finished turn: its user message and the model's committed answer."""
        self.messages += [{"role": "user", "content": user_text}, {"role": "assistant", "content": answer}]


def turn_prompt_tokens(runtime, history: ChatHistory, user_text: str) -> list[int]:
    """Token ids of the next turn's prompt (the chat template of the history plus ``user_text``).
    Raises what ``runtime.chat_messages_prompt`` raises (``EngineError`` without a template)."""
    text = runtime.chat_messages_prompt(history.prompt_messages(user_text))
    return runtime.tokenize(text, add_special=False, parse_special=True)


def conversation_block(turn: int, turns: list[str], history: ChatHistory) -> dict:
    """The receipts document's ``conversation`` block of turn ``turn`` (1-based) of ``turns``:
    which turn, how many there are, and the messages before it."""
    return {"turn": turn, "turns": len(turns), "history": [dict(m) for m in history.messages],
            "user_text": turns[turn - 1]}
