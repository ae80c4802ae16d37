"""The receipts document of a ``SessionRecord`` (schema ``assets/receipts.schema.json``).

``record_document`` serialises what the record holds; the window's export,
``spec-inspector run --receipts`` and the tests all write through it, so the
file holds exactly what the window showed. ``record_of_generation`` builds the
record of a ``Generation`` that ran without one (benchmarks, tests).
Validation, writing and loading stay in ``inspector.receipts.document``.
"""

from __future__ import annotations

from datetime import datetime, timezone

import inspector
from inspector.engine.probabilities import with_top_texts
from inspector.receipts.document import DEFINITIONS, SCHEMA_ID, SCHEMA_VERSION, model_sha256
from inspector.session.session_record import SessionRecord
from inspector.session.run_records import BaselineDone, Progress, RunEnd, RunHeader, TokenTexts
from inspector.sources.registry import PLAIN


def record_document(record: SessionRecord, *, include_lock_operations: bool = True) -> dict:
    """The receipts document of a live ``record`` (one with a ``RunHeader``).

    ``lock_operations`` keep every session's operations that started between the
    request's start and its last event (µs on the scheduler's clock), so waits caused
    by background sessions keep their cause and nothing from other runs gets in
    (``sessions`` names the main and background ids). Token texts come from the
    record. Raises ``ValueError`` for a record without a header (read from a file:
    export its file instead).
    """
    h = record.header
    if h is None:
        raise ValueError("this session was read from a file: it has no run header to write "
                         "(export the file it came from)")
    text_of = record.text_of
    turn = record.conversation.get("turn") if record.conversation else None
    windows = []
    for r in record.receipts:
        d = r.to_json()
        if turn is not None:
            d["turn"] = turn
        d["proposal_token_texts"] = [text_of(t) for t in r.proposal_token_ids]
        d["verification_row_prediction_texts"] = [text_of(t) for t in r.verification_row_predictions]
        if "probabilities" in d:
            d["probabilities"] = with_top_texts(d["probabilities"], text_of)
        windows.append(d)
    model = dict(h.model)
    model["sha256"] = model_sha256(model["path"])
    summary = record.summary().to_json()
    summary["definitions"] = dict(DEFINITIONS)
    generated = record.generated_token_ids
    settings = dict(record.settings or h.settings)
    settings.setdefault("faults", [])
    settings["background_sessions"] = int(record.background_sessions)
    doc = {
        "schema": SCHEMA_ID,
        "schema_version": SCHEMA_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "tool": {"name": "spec-inspector", "version": inspector.__version__},
        "model": model,
        "settings": settings,
        "prompt": {"text": h.prompt_text, "templated_text": h.templated_text, "token_ids": list(h.prompt_token_ids)},
        "output": {
            "token_ids": generated,
            "token_texts": [text_of(t) for t in generated],
            "text": record.output_text,
            "finish_reason": record.finish_reason,
            **({"ended_as": record.ended_as} if record.ended_as else {}),
            **({"incomplete_utf8_bytes": record.incomplete_utf8_bytes} if record.incomplete_utf8_bytes else {}),
            "errors": list(record.errors),
        },
        "windows": windows,
        "discards": [d.to_json() for d in record.discards],
        "events": [_event_json(e, text_of) for e in record.events],
        "summary": summary,
        "timing": {"request_started_us": h.started_us,
                   "clock": "event t_us count from request_started_us; lock operation started_us from the scheduler's start"},
    }
    if record.baseline is not None:
        doc["baseline"] = record.baseline
    if record.conversation:
        doc["conversation"] = dict(record.conversation)
    end_us = h.started_us + max((e.t_us for e in record.events), default=0) + 1
    ops = [op for op in record.lock_ops if h.started_us <= op.started_us <= end_us]
    doc["sessions"] = {"main": h.session_id,
                       "background": sorted({op.session_id for op in ops if op.session_id != h.session_id
                                             and op.session_id >= 0})}
    if include_lock_operations:
        doc["lock_operations"] = [op.to_json() for op in ops]
    return doc


def _event_json(e, text_of) -> dict:
    d = e.to_json()
    if "probabilities" in d:
        d["probabilities"] = with_top_texts(d["probabilities"], text_of)
    return d


def record_of_generation(generation, runtime, *, prompt_text: str, templated_text: str | None, raw: bool,
                         source_settings: dict | None = None, faults: list[str] | None = None,
                         baseline=None, background_sessions: int = 0) -> SessionRecord:
    """The ``SessionRecord`` of a ``Generation`` that ran without one (its records read at the end).

    ``runtime``: the target (``describe()``, ``token_text``); ``faults``: ``KIND@WINDOW:TOKEN``
    of the faults that applied; ``baseline``: a ``BaselineResult`` or None."""
    g = generation
    rec = SessionRecord()
    source = {"name": g.source.name if g.source else PLAIN, "settings": source_settings or {}}
    rec.apply(RunHeader(g.session_id, prompt_text, templated_text, tuple(g.tokens[: g.prompt_token_count]),
                        runtime.describe(), {**g.settings.to_json(), "source": source, "raw": raw},
                        g.started_us, background_sessions=background_sessions))
    ids = {*g.generated}
    for r in g.receipts:
        ids.update(r.proposal_token_ids, r.verification_row_predictions)
        if r.probabilities is not None:
            ids.update(r.probabilities.top_token_ids())
    for e in g.events:
        if e.probabilities is not None:
            ids.update(e.probabilities.top_token_ids())
    for d in g.discards:
        ids.update(d.proposal_token_ids)
        if d.partial is not None:
            ids.update(d.partial.verification_row_predictions)
    d = baseline.divergence if baseline is not None else None
    if d is not None:
        ids.update((d.plain_token, d.speculative_token, d.top_token, d.second_token))
    rec.apply(TokenTexts({t: runtime.token_text(t) for t in ids if 0 <= t < runtime.n_vocab}))
    rec.extend(g.receipts)
    rec.extend(g.discards)
    rec.extend(g.events)
    rec.extend(g.scheduler.operations)
    rec.apply(Progress(g.decode_elapsed_us, g.prefill_elapsed_us, g.generated_count, g.canonical_position))
    rec.apply(RunEnd(g.finish_reason or "stopped", g.text.text, tuple(g.errors), None, g.canonical_position,
                     g.session_retired, tuple(faults or ()), background_sessions,
                     g.decode_elapsed_us, g.prefill_elapsed_us, g.text.incomplete_bytes))
    if baseline is not None:
        rec.apply(BaselineDone(baseline))
    return rec


def build_document(generation, runtime, *, prompt_text: str, templated_text: str | None, raw: bool,
                   source_settings: dict | None = None, faults: list[str] | None = None,
                   include_lock_operations: bool = True, baseline=None, background_sessions: int = 0) -> dict:
    """The receipts document of one ``Generation`` run on ``runtime``
    (``record_document`` of ``record_of_generation``; arguments as there)."""
    rec = record_of_generation(generation, runtime, prompt_text=prompt_text, templated_text=templated_text,
                               raw=raw, source_settings=source_settings, faults=faults, baseline=baseline,
                               background_sessions=background_sessions)
    return record_document(rec, include_lock_operations=include_lock_operations)
