"""Why a generation ends: the finish reasons, and the rule that picks one after a commit."""

from __future__ import annotations

FINISH_LENGTH = "length"
"""``max_new_tokens`` were generated."""
FINISH_EOG = "eog"
"""The last committed token is an end-of-generation token."""
FINISH_STOP = "stop"
"""A stop string was found in the committed text."""
FINISH_CALLBACK_STOP = "callback_stop"
"""The token consumer (the observer's ``on_token``) asked to stop."""
FINISH_CONTEXT_FULL = "context_full"
"""No KV position is left for the next step."""


def finish_after_commit(stopped_by_text: bool, consumer_stop: bool, generated_count: int, last_is_eog: bool,
                        max_new_tokens: int) -> str | None:
    """The finish reason after a step committed its tokens, or None when the generation goes on. In this
    order: a stop string, the consumer's stop, an end-of-generation token (one generated at least),
    ``max_new_tokens`` reached (``generated_count`` tokens)."""
    if stopped_by_text:
        return FINISH_STOP
    if consumer_stop:
        return FINISH_CALLBACK_STOP
    if generated_count and last_is_eog:
        return FINISH_EOG
    if generated_count >= max_new_tokens:
        return FINISH_LENGTH
    return None
