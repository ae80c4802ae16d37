"""A conversation's transcript: every turn's user message and the model's answer (issue 26).

Read from the turns' ``SessionRecord``s (``Conversation.records``, the running turn last): the user
message is the turn's ``conversation.user_text`` (a single run's prompt when it is no turn), the
answer its committed text (``turn_answer`` once the turn ended or was read from a file; the tokens
committed so far while it runs). Qt-free: the window's Conversation tab, its Copy transcript and
``run --turns`` (``message_text``) use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from inspector.session.conversation import turn_answer


@dataclass(frozen=True)
class TranscriptTurn:
    """One turn of a transcript. ``number``: 1-based. ``finished``: the answer is complete (the turn
    ended, or was read from a file); else it is what was committed so far. ``ended``: how the turn
    ended (``eog``, ``max_tokens``, ``stopped``, ...; "" while it runs or when not known)."""

    number: int
    user_text: str
    answer: str
    finished: bool
    ended: str = ""


def user_text_of(record) -> str:
    """The user message of a turn's record (a single run's prompt when it is no conversation turn)."""
    block = record.conversation or {}
    return block.get("user_text") or record.prompt_text or ""


def answer_of(record) -> tuple[str, bool]:
    """(the committed answer of a turn's record, whether it is complete)."""
    if record.end is not None or record.document is not None:
        return turn_answer(record), True
    return record.output_text, False


def system_message(records) -> str:
    """The system message the conversation (its first turn) began with, "" for none."""
    if not records:
        return ""
    first = records[0]
    for m in (first.conversation or {}).get("history", ()):
        if m.get("role") == "system":
            return m.get("content", "")
    return (first.settings or {}).get("system_prompt") or ""


def transcript_turns(records) -> list[TranscriptTurn]:
    """The transcript of ``records`` (the turns' ``SessionRecord``s, turn 1 first)."""
    out = []
    for k, r in enumerate(records, 1):
        answer, finished = answer_of(r)
        ended = (r.ended_as or r.finish_reason or "") if finished else ""
        out.append(TranscriptTurn(k, user_text_of(r), answer, finished, ended))
    return out


def message_text(role: str, text: str) -> str:
    """``user: text`` on one line, or ``user:`` then the text on the next lines when it has several."""
    return f"{role}:\n{text}" if "\n" in text.strip("\n") else f"{role}: {text.strip()}"


def transcript_text(records) -> str:
    """The transcript as plain text (what Copy transcript puts on the clipboard): the system message,
    then per turn ``turn N``, the user message and the answer (``(generating)`` while it runs)."""
    parts = []
    system = system_message(records)
    if system:
        parts.append(message_text("system", system))
    for t in transcript_turns(records):
        state = "" if t.finished else " (generating)"
        parts.append(f"turn {t.number}\n{message_text('user', t.user_text)}\n"
                     f"{message_text('answer' + state, t.answer)}")
    return "\n\n".join(parts) + ("\n" if parts else "")
