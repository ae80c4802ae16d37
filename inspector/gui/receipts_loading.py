"""Reading a receipts file into a ``SessionData`` on a background thread.

``inspector.receipts.load_document`` parses the file with one ``json.loads``
call, which holds the GIL for its whole duration (over a second for a
20,000-window file), so the GUI thread could not run Python meanwhile even
with the load on another thread. ``load_document_yielding`` makes the same
checks with the same messages (size limit, readable JSON, schema id, schema
validation by ``validate_document``) but parses with an object hook: a Python
call per JSON object, at which the interpreter can hand the GIL to the GUI
thread (every ``sys.getswitchinterval()`` seconds).
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

from inspector.gui.session_model import SessionData


def _yield(obj: dict) -> dict:
    """``json`` object hook: returns the object unchanged (its call lets other threads take the GIL)."""
    return obj


def load_document_yielding(path: str | os.PathLike) -> dict:
    """``inspector.receipts.load_document`` (same checks and ``ReceiptsFileError`` messages),
    parsed so that other Python threads keep running."""
    from inspector.receipts.document import MAX_FILE_BYTES, SCHEMA_ID, ReceiptsFileError, validate_document

    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise ReceiptsFileError(f"cannot read receipts {p}: {exc.strerror or exc}") from None
    if size > MAX_FILE_BYTES:
        raise ReceiptsFileError(f"receipts {p} is {size} bytes, more than the {MAX_FILE_BYTES}-byte limit")
    try:
        doc = json.loads(p.read_text("utf-8"), object_hook=_yield)
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON, bad UTF-8, huge ints
        raise ReceiptsFileError(f"receipts {p} is not readable JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_ID:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise ReceiptsFileError(f"receipts {p} has schema {got!r}, expected {SCHEMA_ID!r}")
    try:
        validate_document(doc)
    except ReceiptsFileError as exc:
        raise ReceiptsFileError(f"{p}: {exc}") from None
    return doc


def read_session(path: str) -> tuple[SessionData | None, str]:
    """(session, "") from a receipts document (``.json``) or an autosave (``.jsonl``),
    or (None, message) naming the file and the problem. Safe on any thread (no Qt)."""
    from inspector.receipts import ReceiptsFileError

    # The load makes millions of objects: with the cyclic GC on, its full collections
    # (a second each, holding the GIL) would freeze the GUI thread. The records hold no
    # cycles, so the GC waits; afterwards they move to the permanent generation
    # (gc.freeze), so no later collection scans them again. Reference counting still
    # frees them when the session is closed.
    gc.disable()
    try:
        if str(path).endswith(".jsonl"):
            session = SessionData.from_autosave(path)
        else:
            session = SessionData.from_document(load_document_yielding(path), path=path)
        session.windows()  # sorted and cached here, not on the GUI thread
        return session, ""
    except ReceiptsFileError as exc:
        return None, str(exc)
    except (OSError, KeyError, TypeError, ValueError, RecursionError) as exc:
        return None, f"{path}: {exc}"
    finally:
        gc.freeze()
        gc.enable()
