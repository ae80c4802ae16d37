"""A receipts file read piece by piece (issue 37, 16), checked as ``load_document`` checks it.

``load_document`` holds the whole document as Python objects, 5-20 times the file's size; ``trace``
of a 200 MB file needed 4 GB. ``stream_document`` gives each window, discard, event and lock
operation to its caller as it is read (``inspector.receipts.json_stream``) and keeps only the rest
(model, settings, prompt, output, summary: small), with the same checks and the same one-line
errors: the schema (the rest as a document whose lists are empty, each item against its ``$defs``
entry), NaN and Infinity, and the relations of ``inspector.receipts.consistency``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from inspector.bounded_read import BoundedReadError
from inspector.receipts.consistency import InconsistentDocument, check_consistency, check_window, non_finite_message, \
    non_finite_path
from inspector.receipts.document import (MAX_FILE_BYTES, SCHEMA_ID, SCHEMA_VERSION, ReceiptsFileError,
                                         autosave_message, check_schema_field, is_autosave, json_problem, part_problem,
                                         validate_document)
from inspector.receipts.json_stream import JsonStream

STREAMED = {"windows": "receipt", "discards": "discard", "events": "event", "lock_operations": "lock_operation"}
"""A request's lists given one item at a time, and the schema's ``$defs`` entry of their items."""

Visit = Callable[[int | None, str, dict], None]
"""``visit(turn, key, item)``: ``turn`` None in a request document, else the turn's 0-based index."""


class _Reading:
    """One pass over a file: the first problem of each kind found in the items, and their counts."""

    def __init__(self, js: JsonStream, visit: Visit | None, check: bool) -> None:
        self.js, self.visit, self.check = js, visit, check
        self.non_finite: tuple[str, float] | None = None
        self.schema: str | None = None
        self.inconsistent: str | None = None
        self.counts: list[dict] = []
        """Items per streamed list of each request: the document's, or each turn's in order."""

    def document(self):
        """The file's value with its requests' streamed lists empty (an array: only its type, what the
        message needs, however long it is)."""
        first = self.js.peek()
        if first == "[":
            self.js.skip_rest()
            return []
        return self.request(None, "") if first == "{" else self.js.value()

    def request(self, turn: int | None, at: str) -> dict:
        """The object that comes next (a request, or a conversation whose turns are requests), its
        streamed lists empty (their items visited)."""
        js, rest = self.js, {}
        counts = {key: 0 for key in STREAMED}
        self.counts.append(counts)
        for key in js.members():
            if key in STREAMED and js.peek() == "[":
                rest[key] = []
                for i in js.elements():
                    self.item(turn, key, js.value(), f"{at}{key}/{i}")
                    counts[key] += 1
            elif key == "turns" and turn is None and js.peek() == "[":  # a conversation: a request per turn
                self.counts = [c for c in self.counts if c is not counts]
                rest[key] = []
                for k in js.elements():
                    if js.peek() == "{":
                        rest[key].append(self.request(k, f"turns/{k}/"))
                    else:
                        rest[key].append(js.value())
                        self.counts.append({key: 0 for key in STREAMED})
            else:
                rest[key] = js.value()
        return rest

    def item(self, turn: int | None, key: str, item, at: str) -> None:
        if self.check:
            if self.js.constants and self.non_finite is None:
                self.non_finite = non_finite_path(item, at)
            problem = part_problem(item, STREAMED[key], at)
            if problem and self.schema is None:
                self.schema = problem
            if not problem and key == "windows" and self.inconsistent is None:
                try:
                    check_window(item, at, None if turn is None else turn + 1)
                except InconsistentDocument as exc:
                    self.inconsistent = str(exc)
        if self.visit is not None:
            self.visit(turn, key, item)


def stream_document(path: str | os.PathLike, visit: Visit | None = None, check: bool = True) -> dict:
    """Read receipts file ``path`` as ``load_document`` does, never holding its windows, discards,
    events and lock operations: each goes to ``visit`` as it is read, then is dropped. Returns the
    rest of the document (those lists empty; a conversation's turns likewise). ``check``: the
    checks (a second pass over a file that passed them may leave them out). Raises
    ``ReceiptsFileError`` with ``load_document``'s messages."""
    p = Path(path)
    try:
        with JsonStream(p, MAX_FILE_BYTES, "receipts") as js:
            reading = _Reading(js, visit, check)
            try:
                doc = reading.document()
                trailing = 0 if js.at_end() else js.position()
            except (ValueError, RecursionError) as exc:  # not JSON (UnicodeDecodeError is a ValueError)
                if _starts_as_autosave(p):
                    raise ReceiptsFileError(autosave_message(p)) from None
                raise ReceiptsFileError(f"receipts {p} is not readable JSON: {json_problem(exc)}") from None
    except BoundedReadError as exc:
        raise ReceiptsFileError(str(exc)) from None
    except OSError as exc:
        raise ReceiptsFileError(f"cannot read receipts {p}: {exc.strerror or exc}") from None
    if (isinstance(doc, dict) and doc.get("kind") == "header") or (trailing and _starts_as_autosave(p)):
        raise ReceiptsFileError(autosave_message(p))
    if trailing:
        raise ReceiptsFileError(f"receipts {p} is not readable JSON: Extra data (character {trailing})")
    if not check:
        return doc
    check_schema_field(doc, p)
    found = non_finite_path(doc) if js.constants else None
    if found is not None or reading.non_finite is not None:
        raise ReceiptsFileError(f"receipts {p} holds an invalid JSON number {non_finite_message(*(found or reading.non_finite))}")
    try:
        validate_document(doc)
    except ReceiptsFileError as exc:
        raise ReceiptsFileError(f"{p}: {exc}") from None
    if reading.schema is not None:
        raise ReceiptsFileError(f"{p}: receipts document does not match schema {SCHEMA_ID} v{SCHEMA_VERSION} "
                                f"{reading.schema}")
    try:
        if reading.inconsistent is not None:
            raise InconsistentDocument(reading.inconsistent)
        check_consistency(doc, reading.counts)
    except InconsistentDocument as exc:
        raise ReceiptsFileError(f"receipts {p} is inconsistent {exc}") from None
    return doc


def _starts_as_autosave(p: Path) -> bool:
    """Whether the file's first line is an autosave's header (``is_autosave``), read up to 16 MiB."""
    try:
        with open(p, "rb") as fh:
            return is_autosave(fh.readline(16 << 20))
    except OSError:
        return False
