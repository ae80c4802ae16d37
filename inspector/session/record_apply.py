"""How each record of a run changes a ``SessionRecord`` (``inspector.session.session_record``).

``HANDLERS`` maps each record type ``SessionRecord.apply`` takes (an engine record or one of
``inspector.session.run_records``) to the function that files it, each taking the record and the
item; ``apply`` bumps ``version`` and makes one call. The growth steps a file's reader needs too
(``append_token``, ``mark_last_token_end``, ``flush_held_bytes``, ``change_baseline``) are here as well;
the record's public ``add_token``, ``mark_end``, ``end_stream`` and ``set_baseline`` bump ``version`` and
call them. None of these functions bumps ``version``. This module does not import the record's
(``session_record`` imports it): ``record`` is a ``SessionRecord`` throughout.
"""

from __future__ import annotations

from bisect import bisect_left
from pathlib import Path

from inspector.engine.classify import BONUS, FROM_PREFILL, TOKEN_OUTCOMES, token_outcome
from inspector.engine.records import (
    COMMIT,
    FINISH,
    PREFILL,
    REPAIR,
    STEP,
    VERIFY,
    Discard,
    EngineEvent,
    LockOperation,
    WindowReceipt,
)
from inspector.engine.text import label_bytes
from inspector.session.entries import END, TokenInfo, WindowEntry
from inspector.session.run_records import (
    STEP_FAILED,
    BaselineDone,
    PrefillProgress,
    Progress,
    ProposalStarted,
    RunEnd,
    RunError,
    RunHeader,
    TokenTexts,
)

__all__ = ["HANDLERS", "append_token", "change_baseline", "flush_held_bytes", "mark_last_token_end",
           "stored_weights"]


# -- growth steps (also what a file adds) -------------------------------------------------------
def _proposal_of(record, window: int) -> tuple | None:
    f = record.in_flight
    if f is not None and f.window == window:
        return f.token_ids
    e = record.window(window)
    return e.proposal if e is not None else None


def append_token(record, token: int, window: int | None, row: int, position: int, outcome: str | None) -> None:
    """Append one committed token to ``record.tokens`` (``SessionRecord.add_token`` says what the
    arguments are); an ``outcome`` of None is decided from the window's proposal."""
    proposal = None if window is None else _proposal_of(record, window)
    if outcome is None:  # receipts written before commit events named their outcome
        outcome = token_outcome(row, token, proposal) if window is None or proposal is not None else BONUS
    proposed = proposal[row] if proposal is not None and row < len(proposal) else None
    text = record.texts.get(token, "")
    tokens = record.tokens
    index = len(tokens)
    tokens.append(TokenInfo(index, token, text, window, row, position, proposed, outcome,
                            record.shown_text.push(index, label_bytes(text))))
    record.canonical_position = position


def mark_last_token_end(record) -> None:
    """The last token ended generation (its outcome becomes ``END``), and no token follows
    (``flush_held_bytes``)."""
    if record.tokens:
        record.tokens[-1].outcome = END
        record.token_changes.append((record.version, len(record.tokens) - 1))
    flush_held_bytes(record)


def flush_held_bytes(record) -> None:
    """No token follows: bytes held back for a character never completed are shown as their labels
    (<0xNN>) with the tokens they came from, so every token has text in the stream."""
    held = record.shown_text.flush()
    for i, label in held:
        record.tokens[i].shown += label
        record.flushed_chars += len(label)
    if held:
        record.token_changes.append((record.version, held[0][0]))


def change_baseline(record, baseline: dict | None) -> None:
    """Set ``record.baseline``; the divergence mark moves off one token and onto another (both
    noted as changed in place)."""
    before = record.divergence_index
    record.baseline = baseline
    for i in {before, record.divergence_index} - {None}:
        record.token_changes.append((record.version, i))


def _add_window(record, entry: WindowEntry) -> None:
    w = record.window_entries
    if not w or w[-1].window_index < entry.window_index:
        w.append(entry)
    else:
        w.insert(bisect_left([e.window_index for e in w], entry.window_index), entry)
    if record.in_flight is not None and record.in_flight.window == entry.window_index:
        record.in_flight = None


# -- one function a record type ------------------------------------------------------------------
def _texts(record, item: TokenTexts) -> None:
    record.texts.update(item.texts)


def _proposal(record, item: ProposalStarted) -> None:
    record.in_flight = item


def _lock_op(record, op: LockOperation) -> None:
    if record.header is not None and record.end is None:
        record.lock_ops.append(op)


def _progress(record, item: Progress) -> None:
    record.decode_elapsed_us = item.decode_elapsed_us
    record.prefill_elapsed_us = item.prefill_elapsed_us
    record.canonical_position = item.canonical_position
    if item.kv_length is not None:
        record.kv_length = item.kv_length
    if item.faults_fired and record.settings is not None:
        record.settings["faults"] = list(item.faults_fired)


def _prefill_progress(record, item: PrefillProgress) -> None:
    record.prefill_done, record.prefill_total = item.done, item.total


def _baseline_done(record, item: BaselineDone) -> None:
    record.baseline_error = item.error
    if item.result is not None:
        record.baseline_result = item.result
        change_baseline(record, item.result.to_json(record.text_of))


def _start(record, h: RunHeader) -> None:
    record.header = h
    record.main_session_id = h.session_id
    record.prompt_text = h.prompt_text
    record.prompt_token_count = len(h.prompt_token_ids)
    record.model_name = Path(str(h.model.get("converted_from") or h.model.get("path", ""))).name
    record.model_weights = str(h.model.get("weights", "")) if h.model.get("converted_from") else ""
    record.model_stored_weights = stored_weights(h.model)
    record.settings = dict(h.settings)
    record.source_name = h.settings.get("source", {}).get("name", "")
    record.background_sessions = h.background_sessions
    record.conversation = dict(h.conversation) if h.conversation else None


def _run_error(record, e: RunError) -> None:
    record.errors.append(e.message)
    if e.kind == STEP_FAILED:  # where the repair left the KV cache (None: the session was retired)
        record.kv_length = e.kv_length


def _finish_run(record, e: RunEnd) -> None:
    record.end = e
    flush_held_bytes(record)
    record.incomplete_utf8_bytes = e.incomplete_utf8_bytes
    record.ended_as = e.reason
    record.errors = list(e.errors)
    record.in_flight = None
    record.decode_elapsed_us = e.decode_elapsed_us
    record.prefill_elapsed_us = e.prefill_elapsed_us
    record.kv_length = e.kv_length
    if e.canonical_position is not None:
        record.canonical_position = e.canonical_position
    record.background_sessions = max(record.background_sessions, e.background_sessions)
    if record.settings is not None:
        record.settings["faults"] = list(e.faults_fired)
        record.settings["background_sessions"] = record.background_sessions


def _add_event(record, ev: EngineEvent) -> None:
    record.events.append(ev)
    kind = ev.kind
    if kind == COMMIT and ev.token is not None:
        outcome = ev.detail if ev.detail in TOKEN_OUTCOMES else None
        if ev.window is None and outcome != FROM_PREFILL:
            record.plain_steps += 1  # as the engine counts: a plain step whose token was committed
        append_token(record, ev.token, ev.window, ev.row or 0, ev.position or 0, outcome)
    elif kind in (STEP, PREFILL):
        record.kv_length = ev.position  # the current token's row (the prompt) joined the KV cache
        if ev.probabilities is not None and ev.position is not None:
            record.step_probabilities[ev.position] = ev.probabilities
    elif kind == FINISH:
        record.finish_reason = ev.detail or None
        mark_last_token_end(record)
    elif kind in (VERIFY, REPAIR) and ev.position is not None:  # a retired session's repair has none
        record.kv_length = ev.position


def _add_receipt(record, r: WindowReceipt) -> None:
    record.receipts.append(r)
    _add_window(record, WindowEntry(r.window_index, r, None))
    record.canonical_position = r.canonical_position


def _add_discard(record, d: Discard) -> None:
    record.discards.append(d)
    if d.partial is not None:
        _add_window(record, WindowEntry(d.partial.window_index, None, d))
        record.canonical_position = d.partial.canonical_position


HANDLERS = {
    EngineEvent: _add_event, TokenTexts: _texts, ProposalStarted: _proposal, WindowReceipt: _add_receipt,
    Discard: _add_discard, LockOperation: _lock_op, Progress: _progress, PrefillProgress: _prefill_progress,
    RunHeader: _start, RunEnd: _finish_run, RunError: _run_error, BaselineDone: _baseline_done,
}
"""Record type -> how ``SessionRecord.apply`` files it (called with the record and the item)."""


def stored_weights(model: dict) -> str:
    """The weight type of a receipts ``model`` block's file as stored: ``converted_from_weights`` when the
    run used a converted form, else its ``weights``; "" when the block does not say."""
    return str(model.get("converted_from_weights") or model.get("weights") or "") if model.get("converted_from") \
        else str(model.get("weights") or "")
