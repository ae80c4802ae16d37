"""Conversations: several user turns, each a request whose prompt is the whole chat so far (issue 16).

A turn's prompt is the chat history (every earlier user message and the model's answer to
it, in order) plus the next user message, rendered through the model's chat template
(``LlamaRuntime.chat_messages_prompt``). Each turn is one request (a fresh KV session,
prefilled with the history); proposal sources keep what they remember across the turns
through one ``RunRequest.source_memory`` dict (``SourceContext.memory``), as agent loops
that repeat earlier content need.

Turns files (``read_turns``): a JSON list of strings (or of ``{"role": "user", "content":
...}`` objects), plain text with the turns separated by lines holding only ``---``, or a conversation
receipts document (``run --turns --receipts``, ``serve --session``): its turns' user messages.
Qt-free; the CLI (``run --turns``, ``compare --turns``) and tests use it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import inspector
from inspector.bounded_read import BoundedReadError, read_bounded_text
from inspector.engine.stats import summarize_receipts
from inspector.receipts.document import (CONVERSATION_KIND, DEFINITIONS, MAX_FILE_BYTES, SCHEMA_ID, SCHEMA_VERSION,
                                         json_problem)
from inspector.session.document import record_document
from inspector.session.record_from_file import record_from_document

TURN_SEPARATOR = "---"
"""A line holding only this separates two turns of a plain-text turns file."""
MAX_TURNS_FILE_BYTES = MAX_FILE_BYTES
"""A turns file may be a conversation receipts document: as large as any receipts file."""
MAX_TURNS = 1000
"""Most turns a conversation runs (every turn prefills the whole chat so far: ``bench --turns`` runs each
of its sources over all of them)."""


class TurnsFileError(ValueError):
    """A turns file that cannot be used; the message names the file and, where it applies, the turn."""


def parse_turns(text: str, where: str = "turns") -> list[str]:
    """The user messages of a turns file's text (see the module docstring).

    ``where``: the file name for messages. Raises ``TurnsFileError`` for no turns, invalid
    JSON (text starting with ``[``), a JSON object that is not a conversation document, an item that
    is not a string or a user message, an empty turn or one that is not text (a lone surrogate,
    named by its 1-based number), or more than ``MAX_TURNS`` turns."""
    text = text[1:] if text.startswith("\ufeff") else text  # a byte order mark is no part of a turn
    stripped = text.strip()
    if not stripped:
        raise TurnsFileError(f"{where} holds no turns (expected a JSON list of messages, or messages "
                             f"separated by lines with only {TURN_SEPARATOR})")
    if stripped.startswith("{"):  # a conversation receipts document: its turns' user messages
        try:
            doc = json.loads(stripped)
        except (ValueError, RecursionError) as exc:
            raise TurnsFileError(f"{where} is not valid JSON: {json_problem(exc)}") from None
        if not isinstance(doc, dict) or doc.get("kind") != CONVERSATION_KIND or not isinstance(doc.get("turns"), list):
            raise TurnsFileError(f"{where} is a JSON object but not a conversation receipts document (expected a "
                                 "JSON list of messages, messages separated by ---, or a conversation document)")
        stripped = json.dumps([(t.get("conversation") or {}).get("user_text") for t in doc["turns"]])
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except (ValueError, RecursionError) as exc:
            raise TurnsFileError(f"{where} is not valid JSON: {json_problem(exc)}") from None
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
    if len(turns) > MAX_TURNS:
        raise TurnsFileError(f"{where} holds {len(turns)} turns, more than {MAX_TURNS}, the most a conversation runs")
    for i, t in enumerate(turns, 1):
        if not t.strip():
            raise TurnsFileError(f"{where}: turn {i} is empty")
        try:
            t.encode("utf-8")
        except UnicodeEncodeError as exc:  # JSON's "\ud800" escape: no UTF-8 text holds it, nor can a tokenizer
            raise TurnsFileError(f"{where}: turn {i} holds a lone surrogate ({t[exc.start]!r} at character "
                                 f"{exc.start + 1}), which is not text: write the character itself, or its "
                                 "surrogate pair") from None
    return turns


def read_turns(path: str | os.PathLike) -> list[str]:
    """``parse_turns`` of a UTF-8 file. Raises ``TurnsFileError`` when it cannot be read, is larger
    than ``MAX_TURNS_FILE_BYTES``, is not UTF-8, or holds no usable turns."""
    p = Path(path)
    try:
        text = read_bounded_text(p, MAX_TURNS_FILE_BYTES, "turns file")  # read, not reported, bytes count
    except BoundedReadError as exc:
        raise TurnsFileError(str(exc)) from None
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


def chat_prompt(runtime, messages) -> tuple[str, list[int]]:
    """The prompt of a chat: ``messages`` (``{"role", "content"}`` dicts, in order) rendered through the
    model's chat template with the assistant's turn opened, and its token ids (special tokens parsed,
    no extra BOS: the template writes its own). Raises what ``runtime.chat_messages_prompt`` raises
    (``EngineError`` for a model without a chat template)."""
    text = runtime.chat_messages_prompt([dict(m) for m in messages])
    return text, runtime.tokenize(text, add_special=False, parse_special=True)


def conversation_block(turn: int, turns: int, history: ChatHistory, user_text: str) -> dict:
    """The receipts document's ``conversation`` block of turn ``turn`` (1-based) of ``turns`` (the turns
    known so far: a turns file's count, or ``turn`` itself when the next ones come one at a time): the
    messages before it and this turn's message."""
    return {"turn": turn, "turns": turns, "history": [dict(m) for m in history.messages], "user_text": user_text}


def turn_answer(record) -> str:
    """The committed text of a turn's ``SessionRecord`` (its ``RunEnd`` text when it ran here; the
    document's ``output.text`` when read from a file): what joins the chat history as the answer."""
    end = getattr(record, "end", None)
    if end is not None:
        return end.output_text
    doc = getattr(record, "document", None)
    return doc["output"]["text"] if doc else record.output_text


@dataclass
class Conversation:
    """A conversation: its turns' records (turn 1 first), the history the next turn starts from, and
    what proposal sources remember across the turns (``memory``: pass it as ``RunRequest.source_memory``).

    The window keeps one per live session (its Next turn input); ``run --turns`` one per run;
    ``compare --turns`` and ``bench --turns`` one per configuration (``inspector.bench.compare.TurnsRun``);
    ``records_of_conversation`` makes one from a conversation receipts file (no memory then). Every one
    asks ``next_turn`` for the next request, so a turn's prompt is made one way everywhere."""

    records: list = field(default_factory=list)
    """What is kept of each turn, turn 1 first: its ``SessionRecord`` (``add_turn``; what
    ``conversation_document`` reads), or compare's ``Generation`` (``add_answered``)."""
    history: ChatHistory = field(default_factory=ChatHistory)
    memory: dict = field(default_factory=dict)
    planned_turns: int | None = None
    """The turns file's number of turns (``run --turns``); None when turns come one at a time."""
    stopped_at: str = ""
    """Why the conversation ended before ``planned_turns`` ("" when it did not)."""

    @classmethod
    def opened(cls, system_prompt: str = "", planned_turns: int | None = None) -> "Conversation":
        """A conversation without turns whose chat starts with ``system_prompt`` (llama.cpp's ``-sys``;
        "" for none): every turn's prompt then holds it first."""
        conv = cls(planned_turns=planned_turns)
        if system_prompt:
            conv.history.messages.append({"role": "system", "content": system_prompt})
        return conv

    @property
    def turns(self) -> int:
        """Turns recorded so far."""
        return len(self.records)

    def next_turn(self, user_text: str) -> dict:
        """The ``RunRequest`` fields of the next turn: ``chat_messages`` (the history plus ``user_text``),
        ``conversation`` (its receipts block) and ``source_memory``. Raises ``ValueError`` for an empty
        message."""
        if not user_text.strip():
            raise ValueError("the next turn's message is empty")
        n = self.turns + 1
        block = conversation_block(n, max(n, self.planned_turns or 0), self.history, user_text)
        return {"chat_messages": tuple(self.history.prompt_messages(user_text)), "conversation": block,
                "source_memory": self.memory}

    def add_turn(self, record) -> None:
        """Record a finished turn (a ``SessionRecord`` whose ``conversation`` block names its message): its
        message and committed answer join the history. Raises ``ValueError`` for a record without a block."""
        block = record.conversation
        if not block or "user_text" not in block:
            raise ValueError("this run is not a turn of the conversation (no conversation block)")
        self.add_answered(record, block["user_text"], turn_answer(record))

    def add_answered(self, turn, user_text: str, answer: str) -> None:
        """Record a finished turn kept as ``turn`` (a ``SessionRecord``, or compare's ``Generation``, which
        has no conversation block): ``user_text`` and the committed ``answer`` join the history."""
        self.records.append(turn)
        self.history.add_turn(user_text, answer)


def conversation_document(conversation: Conversation) -> dict:
    """The receipts document of a whole conversation (schema ``$defs/conversation_document``): every
    turn's request document (``record_document``, or the document a record was read from), the whole
    chat, and a summary summing every turn's windows, tokens and times. Raises ``ValueError`` for a
    conversation without turns."""
    records = conversation.records
    if not records:
        raise ValueError("the conversation has no turns yet")
    turns = [record_document(r) if r.header is not None else r.document for r in records]
    if any(d is None for d in turns):
        raise ValueError("a turn of this conversation has no document to write")
    for d in turns:  # a turn written before the next ones were asked for counts them now
        block = d.get("conversation")
        if block is not None and block.get("turns", 0) < len(turns):
            d["conversation"] = {**block, "turns": len(turns)}
    summary = summarize_receipts(
        [w for r in records for w in r.receipts], plain_steps=sum(r.plain_steps for r in records),
        discards=sum(len(r.discards) for r in records), generated_tokens=sum(len(r.tokens) for r in records),
        decode_elapsed_us=sum(r.decode_elapsed_us for r in records),
        prefill_elapsed_us=sum(r.prefill_elapsed_us for r in records),
        finish_reason=records[-1].finish_reason).to_json()
    summary["definitions"] = dict(DEFINITIONS)
    # The chat from the turns themselves (a turn still running has not joined the history yet).
    # A system message (--system-prompt) opens the first turn's history and stays first.
    system = [dict(m) for m in records[0].conversation.get("history", []) if m.get("role") == "system"]
    messages = system + [m for r in records for m in ({"role": "user", "content": r.conversation["user_text"]},
                                                      {"role": "assistant", "content": turn_answer(r)})]
    block = {"turns": len(records), "messages": messages}
    if conversation.planned_turns:
        block["planned_turns"] = conversation.planned_turns
    if conversation.stopped_at:
        block["stopped_at"] = conversation.stopped_at
    return {"schema": SCHEMA_ID, "schema_version": SCHEMA_VERSION, "kind": CONVERSATION_KIND,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "tool": {"name": "spec-inspector", "version": inspector.__version__},
            "conversation": block, "summary": summary, "turns": turns}


def records_of_conversation(doc: dict) -> Conversation:
    """The ``Conversation`` of a loaded conversation document (``load_document``): one
    ``record_from_document`` per turn (each keeps its turn's document for export), the history
    from the file's messages, no source memory."""
    conv = Conversation(planned_turns=doc["conversation"].get("planned_turns"),
                        stopped_at=doc["conversation"].get("stopped_at", ""))
    conv.records = [record_from_document(d) for d in doc["turns"]]
    conv.history.messages = [dict(m) for m in doc["conversation"]["messages"]]
    return conv
