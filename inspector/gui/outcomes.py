"""What happened to a token or a verification row, with its display color.

Shared by the token stream, its legend and the rows table so one outcome
always has one color.
"""

from __future__ import annotations

ACCEPTED = "accepted"
"""A proposal token the target predicted too (committed)."""
CORRECTION = "correction"
"""The target's prediction at the first mismatch (committed instead of the proposal token)."""
BONUS = "bonus"
"""The extra token predicted from the last row after a full accept."""
PLAIN = "plain"
"""A plain one-token decode step (no proposal)."""
END = "end"
"""The token that ended generation (end-of-generation token, stop, or the length limit)."""
PENDING = "pending"
"""Committed in a window whose proposal is not known yet."""
BRANCH = "branch"
"""A branch-conditioned prediction past the first mismatch: never output."""
NOT_COMMITTED = "not committed"
"""A row whose prediction was not committed (stop, cancellation, error)."""

COLORS = {
    ACCEPTED: "#2e7d32",
    CORRECTION: "#c62828",
    BONUS: "#1565c0",
    PLAIN: "#424242",
    END: "#6a1b9a",
    PENDING: "#9e9e9e",
    BRANCH: "#9e9e9e",
    NOT_COMMITTED: "#9e9e9e",
}

BACKGROUNDS = {
    ACCEPTED: "#e8f5e9",
    CORRECTION: "#ffebee",
    BONUS: "#e3f2fd",
    PLAIN: "#ffffff",
    END: "#f3e5f5",
    PENDING: "#f5f5f5",
    BRANCH: "#fafafa",
    NOT_COMMITTED: "#fafafa",
}

LEGEND = (
    (ACCEPTED, "accepted proposal token"),
    (CORRECTION, "correction at a mismatch"),
    (BONUS, "bonus token after a full accept"),
    (PLAIN, "plain step"),
    (END, "token that ended generation"),
)


def classify_row(row: int, token: int, proposal: tuple[int, ...] | None) -> str:
    """Outcome of the committed prediction ``token`` of verification row ``row``.

    Row i's prediction is checked against proposal token i: equal means the
    proposal token was accepted; different means it is the correction; row
    ``len(proposal)`` (past the last proposal token) is the bonus token.
    """
    if proposal is None:
        return PENDING
    if row < len(proposal):
        return ACCEPTED if proposal[row] == token else CORRECTION
    return BONUS

LEGEND_LABEL = dict(LEGEND)
LEGEND_LABEL[PENDING] = "committed (window in progress)"
