"""The token view's words (no Qt): a token's tooltip, the line about the comparison with plain
decoding, and the hold line of step-token mode. HTML, token texts escaped (``quoted``)."""

from __future__ import annotations

from inspector.engine.classify import token_outcome
from inspector.gui.look import outcomes as O
from inspector.gui.tokens.token_figures import figures_html, quoted
from inspector.session.session_record import SessionRecord

DIVERGENCE_COLOR = "#d50000"
DIVERGENCE_BACKGROUND = "#ffd600"
DIVERGENCE_NEAR_TIE_LOGITS = 1.0
"""A divergence from plain decoding whose top-2 logit margin is below this is explained as a near-tie
(batch arithmetic can flip it): fixed, unlike the user's marking threshold."""


def token_tooltip(s: SessionRecord, index: int, near_tie_margin: float) -> str:
    """Tooltip of generated token ``index`` of ``s`` ("" past its tokens): its outcome, window, row
    and KV position, proposed and committed token, the divergence from plain decoding when it is
    that token, and its row's figures (near-ties below ``near_tie_margin`` logits)."""
    if index >= len(s.tokens):
        return ""
    t = s.tokens[index]
    lines = [f"<b>{O.LEGEND_LABEL.get(t.outcome, t.outcome)}</b>"]
    # One position convention everywhere (rows table, hold banner, tooltip): the row's KV
    # position, where its input token sits (base + row); the committed token comes after it.
    if t.outcome == O.FROM_PREFILL:
        lines.append(f"the prefill's last row (the prompt's last token at KV position {t.position - 1}): "
                     "the first token, as llama.cpp takes it")
    elif t.window is None:
        lines.append(f"plain step (no proposal), row 0 at KV position {t.position - 1}")
    else:
        lines.append(f"window {t.window}, row {t.row} at KV position {t.position - 1}")
        proposed = "— (bonus row: no proposal token)" if t.proposed is None else \
            f"{quoted(s.text_of(t.proposed))} ({t.proposed})"
        lines.append(f"proposed: {proposed}")
        receipt = s.receipt(t.window)
        if receipt is not None and receipt.grammar_rejected_row == t.row and t.proposed is not None:
            lines.append("the grammar forbids the proposed token: a draft token it forbids is never accepted")
    lines.append(f"predicted (committed): {quoted(t.text)} ({t.token})")
    if t.shown != t.text:
        lines.append(stream_line(s, index))
    if index == s.divergence_index:
        lines.append(f"<span style='color:{DIVERGENCE_COLOR}'><b>first difference from plain decoding</b></span>")
        lines.extend(divergence_lines(s, s.baseline["divergence"]))
    return "<br>".join(lines) + figures_html(s, t, near_tie_margin)


def stream_line(s: SessionRecord, index: int) -> str:
    """What the stream shows for generated token ``index`` when it is not the token's own text
    (``TokenInfo.shown``): a character whose bytes other tokens began, or bytes held back."""
    t = s.tokens[index]
    if not t.shown:
        return "in the stream: nothing yet (its bytes begin a character a later token completes)"
    first = index
    while first > 0 and not s.tokens[first - 1].shown and s.tokens[first - 1].text:
        first -= 1
    if first < index:
        return (f"in the stream: {quoted(t.shown)}, with the bytes of token{'s' if index - first > 1 else ''} "
                f"{first}{f'–{index - 1}' if index - first > 1 else ''} before it (a character split over tokens, "
                "shown once complete)")
    return f"in the stream: {quoted(t.shown)}"


def divergence_lines(s: SessionRecord, d: dict) -> list[str]:
    """The divergence ``d`` (a baseline's ``divergence``) in three lines: plain decoding's token,
    the speculative one, the target's top-2 margin there (logits; a near-tie said so)."""

    def tok(key: str) -> str:
        t = d[key]
        if t < 0:
            return "— (that run had ended)"
        return f"{quoted(d.get(key.replace('_token', '_text')) or s.text_of(t))} ({t})"

    margin = float(d["margin"])
    tie = " — a near-tie: batch arithmetic can flip it" if margin < DIVERGENCE_NEAR_TIE_LOGITS else ""
    return [f"plain decoding: {tok('plain_token')}", f"speculative: {tok('speculative_token')}",
            f"target's top-2 margin there: {margin:.4f} logits{tie}"]


def baseline_html(s: SessionRecord | None) -> str:
    """The line above the text about the comparison with plain decoding ("" when none ran); when the
    output differs, with the "Audit this difference…" link (``TokenView.auditRequested``)."""
    b = s.baseline if s is not None else None
    if not b:
        return ""
    if b.get("identical"):
        return (f"<span style='color:#1b5e20'><b>Baseline:</b> identical to plain decoding "
                f"({len(b.get('plain_token_ids', []))} tokens)</span>")
    d = b["divergence"]
    return (f"<span style='color:{DIVERGENCE_COLOR}'><b>Baseline:</b> differs from plain decoding at generated "
            f"token {d['index']}</span> (marked <span style='background:{DIVERGENCE_BACKGROUND};"
            f"color:{DIVERGENCE_COLOR};font-weight:bold;text-decoration:underline'>&nbsp;so&nbsp;</span>): "
            + " · ".join(divergence_lines(s, d))
            + " · <a href='audit'>Audit this difference…</a> (every verify width; Analysis menu, Ctrl+Shift+A)")


def hold_html(s: SessionRecord | None, info: dict) -> str:
    """The hold line of step-token mode: the token about to be committed (``info``: the worker's
    hold, with ``token``, ``window`` (None or 0 for a plain step), ``row``, ``position`` and, for a
    window, its ``proposal``), what it will be, and its row's KV position."""
    text = quoted(s.text_of(info["token"])) if s else str(info["token"])
    where = f"window {info['window']}, row {info['row']}" if info["window"] else "plain step, row 0"
    kind = ""
    if info.get("window") and "proposal" in info:
        kind = {O.ACCEPTED: "an accepted proposal token", O.CORRECTION: "a correction (the proposal token "
                "was rejected)", O.BONUS: "the bonus token (every proposal token accepted)"}.get(
            token_outcome(info["row"], info["token"], info["proposal"]), "")
    elif not info.get("window") and s is not None and info["position"] == s.prompt_token_count:
        kind, where = "the first token, from the prefill's last row", "the prefill's last row"
    elif not info.get("window"):
        kind = "a plain step's token"
    return (f"Holding — about to commit: {text} (token {info['token']}){': ' + kind if kind else ''}"
            f" — {where} at KV position {info['position'] - 1}")
