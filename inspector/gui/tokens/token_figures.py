"""The target's probability figures of a committed token's verification row, as the views show them.

The token view's tooltip (``figures_html``) and the Windows tab's rows table
(``probability_text``, ``margin_text``) read ``SessionRecord.token_probabilities`` /
``WindowReceipt.probabilities`` (``inspector.engine.probabilities``): the proposed
and predicted token's probability (0..1), the proposed token's rank (1 = the
target's top choice by logits), the top 5, the entropy (nats), the top-2 logit
margin (logits) and the draft's q. Basis: the softmax of the logits at T=0, the
distribution after the sampler chain at T>0. No Qt here: only text.
"""

from __future__ import annotations

import html
import math

from inspector.engine.classify import FROM_PREFILL
from inspector.engine.probabilities import SAMPLER
from inspector.session.entries import TokenInfo
from inspector.session.session_record import SessionRecord

NEAR_TIE_COLOR = "#ef6c00"
"""Colour of the near-tie mark (the token view's dotted underline, the tooltip's word)."""


def quoted(text: str) -> str:
    """A token's text for a tooltip: quoted, whitespace made visible, HTML-escaped."""
    return html.escape("'" + text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r") + "'")


def probability_text(p: float | None) -> str:
    """A probability (0..1) for a table or tooltip: 3 decimals, or 2 significant digits below 0.001
    ("3.2e-05"); "—" for None."""
    if p is None:
        return "—"
    return f"{p:.3f}" if p == 0 or p >= 0.001 else f"{p:.1e}"


def margin_text(m: float) -> str:
    """A top-2 logit margin (logits) with 3 decimals; "∞" when the row had one candidate."""
    return "∞" if math.isinf(m) else f"{m:.3f}"


def basis_text(session: SessionRecord, basis: str) -> str:
    """The basis of the figures in words: "softmax of the logits, T=0" or "after the sampler chain, T=0.8"."""
    if basis != SAMPLER:
        return "softmax of the logits, T=0"
    temp = ((session.settings or {}).get("sampling") or {}).get("temperature")
    return "after the sampler chain" + (f", T={temp:g}" if isinstance(temp, (int, float)) else "")


def no_figures_reason(session: SessionRecord, t: TokenInfo) -> str:
    """Why token ``t`` has no probability figures: a schema v1 file, turned off for the run, its
    window not verified yet, or failed."""
    state = session.probabilities_state
    if state == "off":
        return "no probability figures (turned off for this run)"
    if state == "v1":
        return "no probability figures (schema v1 file)"
    if t.window is not None:
        e = session.window(t.window)
        if e is None:
            return "no probability figures (window not verified yet)"
        if e.receipt is None:
            return "no probability figures (the window failed: no receipt)"
    return "no probability figures"


def figures_html(session: SessionRecord, t: TokenInfo, near_tie_margin: float) -> str:
    """The tooltip's part about token ``t``'s row (starting with a rule): proposed and predicted p,
    rank, draft q, entropy, margin (a near-tie below ``near_tie_margin`` logits), basis and a
    top-5 table; or one line saying why there are no figures."""
    p = session.token_probabilities(t)
    if p is None:
        return f"<br><span style='color:#555'>{no_figures_reason(session, t)}</span>"
    text_of = session.text_of
    if p.proposed is None:
        head = "proposed — (bonus row)" if t.window is not None else (
            "prefill: no proposal" if t.outcome == FROM_PREFILL else "plain step: no proposal")
    else:
        head = f"proposed {quoted(text_of(p.proposed))} p={probability_text(p.proposed_p)} (rank {p.proposed_rank})"
    picked = "sampled" if p.basis == "sampler" else "predicted"  # at T > 0 the target samples its row
    head += f" · {picked} {quoted(text_of(p.predicted))} p={probability_text(p.predicted_p)}"
    lines = [f"<hr><b>target's figures</b> ({basis_text(session, p.basis)})<br>{head}"]
    if p.draft_q is not None:
        lines.append(f"draft q={probability_text(p.draft_q)} (the draft's probability of the proposed token)")
    tie = ""
    if p.near_tie(near_tie_margin):
        tie = f" — <span style='color:{NEAR_TIE_COLOR}'><b>near-tie</b></span> (&lt; {near_tie_margin:g})"
    raw = " raw" if p.basis == "sampler" else ""  # the margin is before the sampler chain, p after it
    lines.append(f"entropy {p.entropy:.3f} nats · margin {margin_text(p.margin)}{raw} logits (top 2){tie}")
    cells = []
    for rank, (tok, prob) in enumerate(p.top, 1):
        name = f"{quoted(text_of(tok))} ({tok})"
        if tok == p.predicted:
            name = f"<b>{name}</b>"
        cells.append(f"<tr><td align='right'>{rank}&nbsp;</td><td>{name}</td>"
                     f"<td align='right'>&nbsp;{probability_text(prob)}</td></tr>")
    lines.append(f"<span style='color:#555'>top {len(p.top)} (rank, token, p):</span>")
    return "<br>".join(lines) + f"<table cellspacing='0' cellpadding='0'>{''.join(cells)}</table>"
