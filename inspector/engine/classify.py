"""Pure decision functions of one proposal window (SPEC steps 5 and 8).

Both functions take plain token lists and return small frozen values, so they
are tested on tiny lists without any model (``tests/test_classify.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

FULL_ACCEPT = "full_accept"
FIRST_MISMATCH = "first_mismatch"
STOPPED = "stopped"
DISPOSITIONS = (FULL_ACCEPT, FIRST_MISMATCH, STOPPED)


@dataclass(frozen=True, slots=True)
class WindowDecision:
    """What the classifier decided for one verified window (SPEC step 5).

    ``accepted``: proposal tokens that matched the target's row predictions
    (tokens, 0..len(proposal)).
    ``commit_count``: how many row predictions enter the output (tokens, >= 1).
    ``rejected``: True when the walk stopped at a mismatch; the prediction at
    index ``accepted`` is then the correction.
    """

    accepted: int
    commit_count: int
    rejected: bool


def classify_window(
    proposal: Sequence[int],
    predictions: Sequence[int],
    generated: int,
    max_new_tokens: int,
    is_eog: Callable[[int], bool],
) -> WindowDecision:
    """Classify a verified window by walking the proposal (SPEC step 5).

    ``proposal``: the proposal's token ids, length P >= 1.
    ``predictions``: the target's prediction for every verification row,
    length >= P + 1 (row 0 is the current token's row).
    ``generated``: tokens generated before this window.
    ``max_new_tokens``: the request's limit on generated tokens.
    ``is_eog``: end-of-generation test (llama.cpp ``llama_vocab_is_eog``).

    Raises ``ValueError`` when there are fewer predictions than P + 1 or the
    proposal is empty.
    """
    n = len(proposal)
    if n == 0:
        raise ValueError("cannot classify an empty proposal: expected 1 or more tokens, observed 0")
    if len(predictions) < n + 1:
        raise ValueError(
            f"too few row predictions: observed {len(predictions)}, expected {n + 1} "
            f"(one per verification row)"
        )
    accepted = 0
    for i in range(n):
        if predictions[i] != proposal[i]:
            return WindowDecision(accepted=i, commit_count=i + 1, rejected=True)
        accepted += 1
        if is_eog(proposal[i]) or generated + i + 1 >= max_new_tokens:
            return WindowDecision(accepted=accepted, commit_count=i + 1, rejected=False)
    return WindowDecision(
        accepted=accepted,
        commit_count=min(n + 1, max_new_tokens - generated),
        rejected=False,
    )


def window_disposition(
    decision: WindowDecision,
    proposal_token_count: int,
    committed_token_count: int,
    reached_stop: bool,
) -> str:
    """Name how a window ended (SPEC step 8).

    Returns ``"stopped"`` when the token callback stopped, or when a window that
    was not rejected did not accept every proposal token plus the bonus token;
    ``"first_mismatch"`` when it was rejected; else ``"full_accept"``.
    """
    if reached_stop or (
        not decision.rejected
        and (
            decision.accepted != proposal_token_count
            or committed_token_count != proposal_token_count + 1
        )
    ):
        return STOPPED
    if decision.rejected:
        return FIRST_MISMATCH
    return FULL_ACCEPT


# -- what happened to one committed token (the token stream's colours come from these) ------------
ACCEPTED = "accepted"
"""A proposal token the target predicted too (committed)."""
CORRECTION = "correction"
"""The target's prediction at the first mismatch (committed instead of the proposal token)."""
BONUS = "bonus"
"""The extra token predicted from the last row after a full accept."""
PLAIN = "plain"
"""A plain one-token decode step (no proposal)."""
FROM_PREFILL = "prefill"
"""The first generated token: the target's prediction from the prefill's last row (llama.cpp's
schedule, SPEC "Prefill and the first token"); no decode step of its own."""
TOKEN_OUTCOMES = (ACCEPTED, CORRECTION, BONUS, PLAIN, FROM_PREFILL)


def token_outcome(row: int, token: int, proposal: Sequence[int] | None) -> str:
    """What the committed prediction ``token`` of verification row ``row`` is (SPEC step 5).

    ``proposal``: the window's proposal token ids, or None for a plain step.
    Row i's prediction is checked against proposal token i: equal means the
    proposal token was accepted; different means it is the correction; row
    ``len(proposal)`` (past the last proposal token) is the bonus token.
    The engine writes this into every commit event's ``detail``
    (``Generation._commit``); readers of older receipts call it themselves.
    """
    if proposal is None:
        return PLAIN
    if row < len(proposal):
        return ACCEPTED if proposal[row] == token else CORRECTION
    return BONUS


BRANCH = "branch"
"""A verification row past the first mismatch: its prediction is branch-conditioned, never output."""
NOT_COMMITTED = "not committed"
"""A verified row whose prediction was not committed (stop, cancellation, error, length limit)."""
NOT_COMMITTED_YET = "not committed yet"
"""A verified row after the row Step token holds before (the window is still committing)."""
NOT_VERIFIED = "not verified"
"""A row the window never verified (its verification failed)."""


def row_outcomes(proposal: Sequence[int], predictions: Sequence[int], committed: int,
                 held_row: int | None = None) -> list[str]:
    """What each of the ``len(proposal) + 1`` verification rows of a window became.

    ``predictions``: the rows verified so far (shorter, or empty, when verification
    failed); ``committed``: how many rows' predictions were committed (tokens);
    ``held_row``: the row Step token holds before (shown as its outcome-to-be), or None.
    Committed (and held) rows get ``token_outcome``; then ``not verified`` rows without a
    prediction, ``branch`` rows past the first mismatch, ``not committed yet`` rows while
    a row is held, and ``not committed`` otherwise.
    """
    n = len(proposal)
    first_mismatch = next((i for i in range(min(len(predictions), n)) if predictions[i] != proposal[i]), None)
    out = []
    for i in range(n + 1):
        pred = predictions[i] if i < len(predictions) else None
        if pred is not None and (i < committed or i == held_row):
            out.append(token_outcome(i, pred, proposal))
        elif pred is None:
            out.append(NOT_VERIFIED)
        elif first_mismatch is not None and i > first_mismatch:
            out.append(BRANCH)
        elif held_row is not None:
            out.append(NOT_COMMITTED_YET)
        else:
            out.append(NOT_COMMITTED)
    return out
