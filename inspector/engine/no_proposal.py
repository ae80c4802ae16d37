"""Why a decode step ran without a proposal window (issue 28 "Why no proposal, per step").

Every plain step's ``step`` event carries its reason in ``detail``: a short code, optionally
``": "`` and words (``no_match: no 3-gram of the last tokens occurred before``). The engine decides
some reasons itself (``ENGINE_REASONS``); a source gives its own by answering
``NoProposal(reason, detail)`` instead of None, and declares its codes with their meanings
(``SourceDescriptor.reasons``), so the window and ``run`` can say them in words. ``count_reasons``
totals them over a run's events: plain steps + windows = decode steps.

llama.cpp's proposers return an empty draft in the same places without saying why
(``common/speculative.cpp``, ``common/ngram-map.cpp``, ``common/ngram-mod.cpp`` at 0c1e570); these
codes name those places.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

PLAIN_DECODING = "plain_decoding"
NO_ROOM = "no_room"
NOT_SAID = "not_said"
SOURCE_ERROR = "source_error"
DISCARDED = "discarded"
BUSY_SLOTS = "busy_slots"

ENGINE_REASONS = {
    PLAIN_DECODING: "plain decoding was chosen (source none): nothing is asked",
    NO_ROOM: "no room for a proposal: draft max 0, one token left, n_batch 1 or the context nearly full",
    NOT_SAID: "the source proposed nothing and did not say why",
    SOURCE_ERROR: "the source raised an error (logged); the step ran plainly",
    DISCARDED: "the source's proposal was discarded before verification (the discard names the reason)",
    BUSY_SLOTS: "serve --spec-max-active: more slots were generating than it allows, so the source was not asked",
}
"""The engine's own reasons -> their meaning."""


@dataclass(frozen=True, slots=True)
class NoProposal:
    """A source's answer when it proposes nothing, with why: ``reason`` one of the codes the source
    declares (``SourceDescriptor.reasons``: lowercase words joined by ``_``), ``detail`` optional words
    for this step (e.g. the key that had no match). The engine runs a plain step, as for None."""

    reason: str
    detail: str = ""

    def text(self) -> str:
        """``reason`` or ``reason: detail``: the ``step`` event's ``detail``."""
        return f"{self.reason}: {self.detail}" if self.detail else self.reason


def reason_code(detail: str) -> str:
    """The code of a ``step`` event's ``detail`` (the part before ``": "``); ``""`` stays ``""`` (a file
    recorded before reasons were kept)."""
    return detail.split(": ", 1)[0]


def count_reasons(events: Iterable) -> Counter:
    """Code -> plain steps with that reason, over ``events`` (``EngineEvent`` or their JSON dicts); the
    ``step`` events of files recorded before reasons were kept count under ``""``."""
    out: Counter = Counter()
    for e in events:
        kind = e.get("kind") if isinstance(e, dict) else e.kind
        if kind == "step":
            out[reason_code((e.get("detail") if isinstance(e, dict) else e.detail) or "")] += 1
    return out


def no_room_detail(remaining_new_tokens: int, n_batch: int, draft_max: int, free_positions: int) -> str:
    """Which limit made the proposal cap 0 (``inspector.engine.proposal.max_proposal_tokens``'s terms), in
    words; the first that applies of draft max, tokens left, n_batch and the context."""
    if draft_max <= 0:
        return "draft max is 0"
    if remaining_new_tokens <= 1:
        return "the last token of max tokens"
    if n_batch <= 1:
        return "n_batch 1 leaves no proposal row"
    return f"{free_positions} free context position{'s' if free_positions != 1 else ''}"
