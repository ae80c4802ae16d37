"""A ``SessionRecord`` read from a file (no Qt): a receipts document or an autosave.

Beside the loaders (``inspector.receipts.load_document``, ``inspector.receipts.autosave.read_autosave``):
they check and parse a file; these turn what they return into the record a live run would have
built (``tests/test_session_record.py`` checks the three agree). They fill the record through its
public interface only: ``apply`` for the receipts, discards and engine events, ``add_token`` for
the tokens of an autosave whose lines carry no events, ``mark_end``, ``set_baseline``, and the
record's plain attributes (prompt, model, settings, times).
"""

from __future__ import annotations

from pathlib import Path

from inspector.engine.classify import FROM_PREFILL
from inspector.engine.probabilities import top_texts_of
from inspector.engine.records import LockOperation, discard_from_json, event_from_json, receipt_from_json
from inspector.receipts.autosave import header_problems, read_autosave, read_autosave_turns
from inspector.session.record_apply import stored_weights
from inspector.session.session_record import SessionRecord


def record_from_document(doc: dict, path: str | Path | None = None) -> SessionRecord:
    """A session from a validated receipts document (``inspector.receipts.load_document``).

    ``path``: the file it came from; the session then keeps the path, not the document (a long
    session's parsed JSON would double its memory), and an export reads the file again. Raises
    ``KeyError`` / ``TypeError`` / ``ValueError`` for a document the schema would have refused."""
    s = SessionRecord()
    s.document = doc if path is None else None
    s.document_path = None if path is None else str(path)
    s.origin = "document"
    out = doc["output"]
    texts = s.texts
    for w in doc["windows"]:
        texts.update(zip(w["proposal_token_ids"], w.get("proposal_token_texts", [])))
        texts.update(zip(w["verification_row_predictions"], w.get("verification_row_prediction_texts", [])))
        texts.update(top_texts_of(w.get("probabilities")))
    for e in doc["events"]:
        texts.update(top_texts_of(e.get("probabilities")))
    texts.update(zip(out["token_ids"], out.get("token_texts", [])))
    s.prompt_text = doc["prompt"]["text"]
    s.prompt_token_count = len(doc["prompt"]["token_ids"])
    s.settings = doc["settings"]
    s.background_sessions = int(doc["settings"].get("background_sessions", 0))
    s.model_name = doc["model"].get("name") or Path(doc["model"].get("converted_from") or doc["model"]["path"]).name
    s.model_weights = str(doc["model"].get("weights", "")) if doc["model"].get("converted_from") else ""
    s.model_stored_weights = stored_weights(doc["model"])
    s.source_name = doc["settings"]["source"]["name"]
    for w in doc["windows"]:
        s.apply(receipt_from_json(w))
    for d in doc["discards"]:
        s.apply(discard_from_json(d))
    s.errors = list(out.get("errors", []))
    for e in doc["events"]:
        s.apply(event_from_json(e))
    if s.events:
        s.main_session_id = s.events[0].session_id
    s.lock_ops = [LockOperation(**op) for op in doc.get("lock_operations", [])]
    summ = doc["summary"]
    s.decode_elapsed_us = summ.get("decode_elapsed_us", 0)
    s.prefill_elapsed_us = summ.get("prefill_elapsed_us", 0)
    s.finish_reason = out.get("finish_reason")
    s.ended_as = out.get("ended_as") or s.finish_reason
    s.incomplete_utf8_bytes = int(out.get("incomplete_utf8_bytes", 0))
    s.set_baseline(doc.get("baseline"))
    s.conversation = doc.get("conversation")
    s.end_stream()
    return s


def record_from_autosave(path: str | Path, turn: int | None = None) -> SessionRecord:
    """A session from an autosave JSON Lines file (``inspector.receipts.autosave``): its run, or
    turn ``turn`` of a conversation's autosave (``run --turns``; None: its last turn).

    Every complete record is shown; a line that is not one (torn by a kill, or damaged) is
    skipped and counted in ``skipped_lines`` (a partial view). The events are the ones the run
    emitted (each line carries those since the line before); an autosave written before lines
    carried events shows its windows and tokens and no events. Raises ``ReceiptsFileError`` when
    the file is too large, unreadable, has no header or no turn ``turn``."""
    return _record_of(read_autosave(path, turn))


def records_from_autosave(path: str | Path) -> list[SessionRecord]:
    """One session per run an autosave file holds (``record_from_autosave``): one for a run, a
    conversation's turns in order (``run --turns``). Raises as ``record_from_autosave``."""
    return [_record_of(run) for run in read_autosave_turns(path)]


def _record_of(run) -> SessionRecord:
    s = SessionRecord()
    s.origin = "autosave"
    s.document_path = str(run.path)
    h = run.header
    s.prompt_text = str(h.get("prompt", ""))
    s.model_name = str(h.get("model", ""))
    s.model_stored_weights = str(h.get("model_stored_weights") or "")
    ran_in = str(h.get("model_weights") or "")
    s.model_weights = ran_in if ran_in and ran_in != s.model_stored_weights else ""
    s.source_name = str(h.get("source", ""))
    block = h.get("conversation")  # a turn of run --turns: its number and message
    s.conversation = dict(block) if isinstance(block, dict) else None
    s.main_session_id = h.get("session_id")
    s.skipped_lines = run.bad_lines
    s.header_problems = header_problems(h)
    s.unfinished = not run.clean
    settings = h.get("settings")
    s.settings = dict(settings) if isinstance(settings, dict) else {}
    if not isinstance(s.settings.get("source"), dict):  # autosaves before the source's options were kept
        s.settings["source"] = {"name": s.source_name, "settings": {}}
    count = h.get("background_sessions")
    s.background_sessions = count if type(count) is int and count >= 0 else 0
    prefill = run.prefill or {}
    prompt_tokens = prefill.get("prompt_tokens", h.get("prompt_tokens"))
    if type(prompt_tokens) is int and prompt_tokens >= 0:
        s.prompt_token_count = prompt_tokens
    elif type(prefill.get("kv_length")) is int:
        # Files too old to name it: their schedule left the last prompt token out of the prefill.
        s.prompt_token_count = prefill["kv_length"] + 1
    if type(prefill.get("elapsed_us")) is int:
        s.prefill_elapsed_us = prefill["elapsed_us"]
    s.texts.update(run.texts)
    first_positions = {st.get("position") for st in run.steps if st.get("outcome") == FROM_PREFILL}
    for kind, value, _texts, events in run.records:
        if kind in ("receipt", "discard"):
            s.apply(value)
        if events is not None:
            for ev in events:
                s.apply(ev)
        elif kind == "receipt":  # an autosave from before lines carried events: tokens from the records
            for row, tok in enumerate(value.committed_tokens):
                s.add_token(tok, value.window_index, row, value.base_position + row + 1, None)
            s.kv_length = value.canonical_position
        elif kind == "discard" and value.partial is not None:
            p = value.partial
            for row, tok in enumerate(p.committed_tokens):
                s.add_token(tok, p.window_index, row, p.base_position + row + 1, None)
            s.kv_length = p.canonical_position
        elif kind == "step":
            token, position = value
            first = position in first_positions  # the prefill's token (llama.cpp's schedule), not a step
            s.plain_steps += 0 if first else 1
            s.kv_length = position
            s.add_token(token, None, 0, position, FROM_PREFILL if first else None)
        elif kind == "end":
            s.finish_reason = value.get("finish_reason") or None
            s.mark_end()
        if kind == "discard" and value.error:
            s.errors.append(value.error)
    if run.end is not None:
        s.ended_as = run.end.get("finish_reason") or None
        if s.finish_reason is None and s.ended_as not in (None, "stopped", "error"):
            s.finish_reason = s.ended_as  # an end line whose finish event was not kept
        us = run.end.get("decode_elapsed_us")
        s.decode_elapsed_us = us if type(us) is int and us >= 0 else 0
    s.end_stream()
    return s
