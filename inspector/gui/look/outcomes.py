"""Display colours of what happened to a token or a verification row.

The outcomes themselves are the engine's (``inspector.engine.classify``:
``token_outcome`` and ``row_outcomes``) plus ``END`` from the session record;
this module only gives each one colour, shared by the token stream, its
legend and the rows table.
"""

from __future__ import annotations

from inspector.engine.classify import (  # noqa: F401 - the outcomes views colour
    ACCEPTED,
    BONUS,
    BRANCH,
    CORRECTION,
    FROM_PREFILL,
    NOT_COMMITTED,
    PLAIN,
)
from inspector.session.entries import END  # noqa: F401

COLORS = {
    ACCEPTED: "#2e7d32",
    CORRECTION: "#c62828",
    BONUS: "#1565c0",
    PLAIN: "#424242",
    FROM_PREFILL: "#e65100",
    END: "#6a1b9a",
    BRANCH: "#9e9e9e",
    NOT_COMMITTED: "#9e9e9e",
}

BACKGROUNDS = {
    ACCEPTED: "#e8f5e9",
    CORRECTION: "#ffebee",
    BONUS: "#e3f2fd",
    PLAIN: "#ffffff",
    FROM_PREFILL: "#fff3e0",
    END: "#f3e5f5",
    BRANCH: "#fafafa",
    NOT_COMMITTED: "#fafafa",
}

LEGEND = (
    (ACCEPTED, "accepted proposal token"),
    (CORRECTION, "correction at a mismatch"),
    (BONUS, "bonus token after a full accept"),
    (FROM_PREFILL, "first token, from the prefill"),
    (PLAIN, "plain step"),
    (END, "end of generation"),
)

LEGEND_LABEL = dict(LEGEND)
