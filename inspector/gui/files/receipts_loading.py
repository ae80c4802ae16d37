"""Reading a receipts file into a ``SessionRecord`` on a background thread.

``inspector.receipts.load_document`` parses the file with one ``json.loads``
call, which holds the GIL for its whole duration (over a second for a
20,000-window file), so the GUI thread could not run Python meanwhile even
with the load on another thread; ``load_document(path, yield_gil=True)``
parses with an object hook at which the interpreter can hand the GIL to the
GUI thread (every ``sys.getswitchinterval()`` seconds).
"""

from __future__ import annotations

import gc

from inspector.receipts import ReceiptsFileError, load_document
from inspector.receipts.document import is_conversation, version_note
from inspector.session.conversation import records_of_conversation
from inspector.session.session_record import SessionRecord
from inspector.session.record_from_file import record_from_autosave, record_from_document


def read_session(path: str) -> tuple[SessionRecord | None, str, str, object]:
    """(session, "", note, conversation) from a receipts document (``.json``) or an autosave
    (``.jsonl``), or (None, message, "", None) naming the file and the problem. ``note``: the
    document's schema version as ``inspector.receipts.document.version_note`` says it (e.g.
    "receipts schema v1 (no per-row probabilities)"), "" for an autosave. A conversation document
    gives its ``Conversation`` (``inspector.session.conversation.records_of_conversation``) and its
    last turn as the session; else ``conversation`` is None.
    Safe on any thread (no Qt)."""
    # The load makes millions of objects: with the cyclic GC on, its full collections
    # (a second each, holding the GIL) would freeze the GUI thread. The records hold no
    # cycles, so the GC waits; afterwards they move to the permanent generation
    # (gc.freeze), so no later collection scans them again. Reference counting still
    # frees them when the session is closed.
    gc.disable()
    try:
        note, conversation = "", None
        if str(path).endswith(".jsonl"):
            session = record_from_autosave(path)
        else:
            doc = load_document(path, yield_gil=True)
            if is_conversation(doc):
                conversation = records_of_conversation(doc)
                session = conversation.records[-1]
                note = f"conversation of {len(conversation.records)} turns · {version_note(doc['turns'][-1])}"
            else:
                note = version_note(doc)
                session = record_from_document(doc, path=path)
            del doc
        for s in conversation.records if conversation is not None else (session,):
            s.windows()  # sorted and cached here, not on the GUI thread
        return session, "", note, conversation
    except ReceiptsFileError as exc:
        return None, str(exc), "", None
    except (OSError, KeyError, TypeError, ValueError, RecursionError) as exc:
        return None, f"{path}: {exc}", "", None
    finally:
        gc.freeze()
        gc.enable()
