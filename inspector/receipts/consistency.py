"""Checks of a receipts document beyond its schema (issue 25, item 6): what the schema cannot say.

A document the schema accepts can still be damaged: a turn deleted from a conversation (it still
says 2 turns and its summary sums both), a window whose ``position_after_verification`` is below
its base, counts that disagree with the lists they count. The engine writes every relation checked
here (``inspector.engine.window``: after = base + verification rows, canonical = base + committed
tokens, trimmed rows = after - canonical), so a file that breaks one was edited or damaged.
Also: NaN and Infinity (Python's ``json`` reads them; strict JSON has neither), found with their path.
"""

from __future__ import annotations

import math

from inspector.engine.tree import branch_rows, tree_shape_error


class InconsistentDocument(ValueError):
    """The document breaks a relation its writer keeps; the message names the JSON path."""


def non_finite_path(value, path: str = "") -> tuple[str, float] | None:
    """The JSON path (``settings/proposal_deadline_ms``) and value of the first NaN or Infinity in
    ``value`` (nested dicts and lists), or None."""
    stack = [(value, path)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                return p or "(document root)", v
        elif isinstance(v, dict):
            stack.extend((x, f"{p}/{k}" if p else str(k)) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, f"{p}/{i}" if p else str(i)) for i, x in reversed(list(enumerate(v))))
    return None


def non_finite_message(path: str, value: float) -> str:
    """``at P: NaN is not a finite number ...``: the one line for a NaN/Infinity at ``path``."""
    shown = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return (f"at {path}: {shown} is not a finite number (strict JSON has no NaN or Infinity; "
            f"expected a finite number there)")


def check_consistency(doc: dict, counts: list[dict] | None = None) -> None:
    """Raise ``InconsistentDocument`` for the first relation ``doc`` (schema-valid: a request or a
    conversation document) breaks: each window's positions and counts, the summary's window,
    discard and token counts, and for a conversation its turn count, each window's turn number and
    the summary as the sum of its turns'.

    ``counts``: for a document read piece by piece (``inspector.receipts.document_stream``), whose
    windows were checked one at a time (``check_window``) and are not in ``doc``: each request's (each
    turn's, in order) ``{"windows": n, "discards": n}``."""
    if doc.get("kind") == "conversation":
        _check_conversation(doc, counts)
    else:
        _check_request(doc, "", counts=None if counts is None else counts[0])


def _check_request(doc: dict, at: str, turn: int | None = None, counts: dict | None = None) -> None:
    block = doc.get("conversation")  # a turn of a conversation: its number fits it
    if isinstance(block, dict) and block["turn"] > block["turns"]:
        raise InconsistentDocument(f"at {at}conversation/turn: turn {block['turn']} of {block['turns']} turns does "
                                   "not fit the conversation")
    if isinstance(block, dict) and turn is not None and block["turn"] != turn:
        raise InconsistentDocument(f"at {at}conversation/turn: the turn says it is turn {block['turn']}, expected "
                                   f"{turn} (it is the file's turn {turn})")
    if counts is None:
        for i, w in enumerate(doc["windows"]):
            check_window(w, f"{at}windows/{i}", turn)
        counts = {"windows": len(doc["windows"]), "discards": len(doc["discards"])}
    s = doc["summary"]
    for field, observed, what in (("windows", counts["windows"], "windows"),
                                  ("discards", counts["discards"], "discards"),
                                  ("generated_tokens", len(doc["output"]["token_ids"]), "output/token_ids")):
        if s[field] != observed:
            raise InconsistentDocument(f"at {at}summary/{field}: the summary counts {s[field]}, the file holds "
                                       f"{observed} ({at}{what}); a part was removed or edited")


def check_window(w: dict, at: str, turn: int | None) -> None:
    """Raise ``InconsistentDocument`` for the first relation window ``w`` (at JSON path ``at``; of
    conversation turn ``turn``, 1-based, or None) breaks."""
    base, after, canonical = w["base_position"], w["position_after_verification"], w["canonical_position"]
    if after < base:
        raise InconsistentDocument(f"at {at}: position_after_verification {after} is below base_position {base} "
                                   f"(verification adds rows after the base)")
    if after != base + w["verification_rows"]:
        raise InconsistentDocument(f"at {at}: position_after_verification {after} is not base_position {base} + "
                                   f"verification_rows {w['verification_rows']}")
    if canonical != base + len(w["committed_tokens"]):
        raise InconsistentDocument(f"at {at}: canonical_position {canonical} is not base_position {base} + "
                                   f"{len(w['committed_tokens'])} committed_tokens")
    if w["trimmed_rows"] != after - canonical:
        raise InconsistentDocument(f"at {at}: trimmed_rows {w['trimmed_rows']} is not position_after_verification "
                                   f"{after} - canonical_position {canonical}")
    if w["proposal_token_count"] != len(w["proposal_token_ids"]):
        raise InconsistentDocument(f"at {at}: proposal_token_count {w['proposal_token_count']} but "
                                   f"{len(w['proposal_token_ids'])} proposal_token_ids")
    if len(w["verification_row_predictions"]) != w["verification_rows"]:
        raise InconsistentDocument(f"at {at}: verification_rows {w['verification_rows']} but "
                                   f"{len(w['verification_row_predictions'])} verification_row_predictions")
    if "tree" in w:
        check_tree(w, f"{at}/tree")
    if turn is not None and "turn" in w and w["turn"] != turn:
        raise InconsistentDocument(f"at {at}/turn: the window says turn {w['turn']}, expected {turn} "
                                   f"(it is in the file's turn {turn})")


def check_tree(w: dict, at: str) -> None:
    """Raise ``InconsistentDocument`` when a tree window's ``tree`` (at ``at``) is not a tree or does not
    hold the branch the window's own fields describe (``inspector.engine.tree``)."""
    tree = w["tree"]
    nodes, parents, predictions, branch = (tree["node_token_ids"], tree["node_parents"], tree["row_predictions"],
                                           tree["branch_rows"])
    why = tree_shape_error(nodes, parents)
    if why is not None:
        raise InconsistentDocument(f"at {at}: not a tree: {why}")
    if len(predictions) != 1 + len(nodes):
        raise InconsistentDocument(f"at {at}: {len(predictions)} row_predictions for {1 + len(nodes)} rows")
    if not branch or any(not 1 <= r <= len(nodes) for r in branch) or list(branch) != branch_rows(parents, branch[-1]):
        raise InconsistentDocument(f"at {at}/branch_rows: {list(branch)} is not a branch from the root")
    if [nodes[r - 1] for r in branch] != list(w["proposal_token_ids"]):
        raise InconsistentDocument(f"at {at}/branch_rows: the branch's tokens are not the window's "
                                   f"proposal_token_ids")
    if [predictions[r] for r in (0, *branch)] != list(w["verification_row_predictions"]):
        raise InconsistentDocument(f"at {at}/row_predictions: the branch's predictions are not the window's "
                                   f"verification_row_predictions")


SUMMED = ("windows", "plain_steps", "discards", "proposed_tokens", "accepted_tokens", "generated_tokens")
"""Summary counts a conversation's summary has as the sum of its turns'."""


def _check_conversation(doc: dict, counts: list[dict] | None = None) -> None:
    said, held = doc["conversation"]["turns"], len(doc["turns"])
    if said != held:
        raise InconsistentDocument(f"at conversation/turns: the conversation says {said} turns, the file holds "
                                   f"{held} (turns); a turn was removed or added")
    for k, t in enumerate(doc["turns"]):
        _check_request(t, f"turns/{k}/", turn=k + 1, counts=None if counts is None else counts[k])
    for field in SUMMED:
        total = sum(t["summary"][field] for t in doc["turns"])
        if doc["summary"][field] != total:
            raise InconsistentDocument(f"at summary/{field}: the conversation's summary counts "
                                       f"{doc['summary'][field]}, its turns sum to {total}")
