"""Validate, write and load receipts documents (``inspector.session.document`` builds them).

The document layout is ``assets/receipts.schema.json`` (JSON Schema 2020-12,
validated with ``jsonschema-rs``). Token texts are stored next to token ids so a
file can be read without the model.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

import jsonschema_rs

import inspector
from inspector.bounded_read import BoundedReadError, read_bounded
from inspector.llama.model_file import file_sha256
from inspector.receipts.consistency import InconsistentDocument, check_consistency, non_finite_message, non_finite_path

SCHEMA_ID = "spec-inspector/receipts"
SCHEMA_VERSION = 4
"""Version written. 2 adds per-row probabilities (``inspector.engine.probabilities``); 3 adds a window's
optional ``grammar_rejected_row`` (``inspector.engine.constraints``); 4 the model's ``machine`` block
(``inspector.llama.machine``) and ``llama_cpp.backend_sampling``; files of versions 1-3 still validate and open
(``READABLE_VERSIONS``)."""
READABLE_VERSIONS = (1, 2, 3, 4)
MAX_FILE_BYTES = 256 * 1024 * 1024

DEFINITIONS = {
    "acceptance_rate": "accepted_proposal_tokens / proposal_token_count, summed over verified windows",
    "mean_accepted_length": "1 + accepted_proposal_tokens / windows (tokens committed per window when accepted tokens are followed by one target token)",
    "acceptance_by_position": "per proposal index i: windows that accepted index i / windows whose proposal had index i",
    "decode_tokens_per_s": "generated tokens / decode time (prefill excluded)",
    "end_to_end_tokens_per_s": "generated tokens / (prefill time + decode time)",
    "accepted_length_histogram": "entry n: windows that accepted exactly n proposal tokens",
}


CONVERSATION_KIND = "conversation"
"""``kind`` of a conversation document (``$defs/conversation_document``: one request document per turn)."""


def is_conversation(doc) -> bool:
    """Whether a loaded receipts document is a conversation (``"kind": "conversation"``, its request
    documents under ``turns``) rather than one request: the one test every reader uses."""
    return isinstance(doc, dict) and doc.get("kind") == CONVERSATION_KIND


def json_problem(exc: Exception) -> str:
    """What ``json.loads`` refused, in the words of a user who cannot change Python: its own message,
    except for an integer of more than 4300 digits (Python's words suggest ``sys.set_int_max_str_digits()``)
    and a ``RecursionError`` (arrays or objects nested deeper than Python reads)."""
    if isinstance(exc, RecursionError):
        return "arrays or objects are nested too deeply to read"
    text = str(exc)
    if "set_int_max_str_digits" in text:
        digits = re.search(r"value has (\d+) digits", text)
        return (f"a number of {digits.group(1) + ' digits' if digits else 'too many digits'} "
                f"(at most {sys.get_int_max_str_digits()} digits are read)")
    return text


class ReceiptsFileError(Exception):
    """A receipts file that cannot be read or does not match the schema; the message says where."""


@lru_cache(maxsize=1)
def schema() -> dict:
    """The receipts JSON Schema from ``assets/receipts.schema.json``."""
    return json.loads(inspector.asset_path("receipts.schema.json").read_text("utf-8"))


@lru_cache(maxsize=1)
def _validator():
    # jsonschema-rs (Rust): a 20,000-window document validates in about 50 ms,
    # where the pure-Python jsonschema took about 30 s (issue 6, large files).
    return jsonschema_rs.Draft202012Validator(schema())


@lru_cache(maxsize=None)
def _part_validator(name: str):
    return jsonschema_rs.Draft202012Validator({"$defs": schema()["$defs"], "$ref": f"#/$defs/{name}"})


def part_problem(value: object, name: str, at: str = "") -> str | None:
    """Where ``value`` (at JSON path ``at`` of its document) breaks the schema's ``$defs/NAME``
    (``receipt``, ``discard``, ``event``, ``lock_operation``: an autosave line's parts, a document
    read piece by piece), as "at PATH: message"; None when it matches."""
    v = _part_validator(name)
    try:
        if v.is_valid(value):
            return None
        err = next(iter(v.iter_errors(value)), None)
    except (ValueError, OverflowError, RecursionError) as exc:
        return f"cannot be checked: {exc}"
    where = "/".join([at] * bool(at) + [str(p) for p in err.instance_path]) if err is not None else ""
    return None if err is None else f"at {where or '(root)'}: {err.message}"


def validate_document(doc: object) -> None:
    """Raise ``ReceiptsFileError`` naming the first schema violation (JSON path and message), or the
    path of a NaN or Infinity (which the schema's validator would misname as null)."""
    v = _validator()
    try:
        if v.is_valid(doc):
            return
        err = next(iter(v.iter_errors(doc)), None)
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. an integer beyond 64 bits
        raise ReceiptsFileError(f"receipts document cannot be checked against schema {SCHEMA_ID}: {exc}") from None
    found = non_finite_path(doc)  # jsonschema-rs sees NaN as null: "null is not of types ..." would mislead
    if found is not None:
        raise ReceiptsFileError(f"receipts document holds an invalid JSON number {non_finite_message(*found)}")
    if err is not None:
        where = "/".join(str(p) for p in err.instance_path) or "(document root)"
        raise ReceiptsFileError(f"receipts document does not match schema {SCHEMA_ID} v{SCHEMA_VERSION} at {where}: {err.message}")


def version_note(doc: dict) -> str:
    """Which schema version a loaded document is, as the window and ``view`` say it, e.g. "receipts
    schema v1 (no per-row probabilities)"."""
    v = doc.get("schema_version")
    if v == 1:
        return "receipts schema v1 (no per-row probabilities)"
    if v in (2, 3, 4) and not doc.get("settings", {}).get("probabilities", True):
        return f"receipts schema v{v} (probabilities were turned off for this run)"
    return f"receipts schema v{v}"


@lru_cache(maxsize=8)
def _hash(path: str, size: int, mtime: float) -> str:
    return file_sha256(path)


def model_sha256(path: str) -> str:
    """SHA-256 of the model file, cached by (path, size, mtime)."""
    st = os.stat(path)
    return _hash(path, st.st_size, st.st_mtime)


def write_document(doc: dict, path: str | os.PathLike, compact: bool = False) -> Path:
    """Validate ``doc`` and write it atomically (temp file + rename), indented for a reader, or on one line
    when ``compact`` (``serve``'s receipt per request: Python's C encoder writes it 3-4x faster than the
    indenting one, ~1.3 against ~4.7 ms for a 60 KB document, time the serving thread holds the interpreter
    lock while the other slots' steps wait). Returns the path. Raises
    ``ReceiptsFileError`` for a document the schema refuses or that holds NaN or Infinity (strict
    JSON has neither: such a file would not open elsewhere), ``OSError`` when writing fails."""
    validate_document(doc)
    try:
        text = json.dumps(doc, ensure_ascii=False, indent=None if compact else 1, allow_nan=False)
    except ValueError as exc:
        raise ReceiptsFileError(f"receipts document holds a value strict JSON cannot hold ({exc}); "
                                "expected finite numbers only") from None
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # as open() would make it (mkstemp's file is owner-only)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.write("\n")
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def _read_umask() -> int:
    mask = os.umask(0o022)  # read by setting it and putting it back: once, at import (threads write files later)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def _umask() -> int:
    """The process's file creation mask, as it was when this module was imported."""
    return _UMASK


def _object_hook(obj: dict) -> dict:
    """``json`` object hook that returns the object unchanged: its Python call per
    JSON object lets the interpreter hand the GIL to other threads."""
    return obj


_JSON_TYPE_NAMES = {list: "a JSON array", str: "a JSON string", int: "a JSON number", float: "a JSON number",
                    bool: "a JSON boolean", type(None): "JSON null"}


def check_schema_field(doc, p: Path) -> None:
    """Raise ``ReceiptsFileError`` unless ``doc`` is an object whose ``schema`` is ``SCHEMA_ID``:
    the message says what is there instead (not an object, no ``schema`` field, another schema)."""
    if not isinstance(doc, dict):
        what = _JSON_TYPE_NAMES.get(type(doc), type(doc).__name__)
        raise ReceiptsFileError(f"receipts {p} is {what}, not a JSON object with \"schema\": \"{SCHEMA_ID}\"")
    if "schema" not in doc:
        raise ReceiptsFileError(f"receipts {p} has no \"schema\" field, expected \"schema\": \"{SCHEMA_ID}\" "
                                f"(not a spec-inspector receipts document)")
    got = doc["schema"]
    if got != SCHEMA_ID:
        shown = repr(got) if isinstance(got, str) else json.dumps(got)  # JSON spelling: null, 3, [...]
        if len(shown) > 80:
            shown = shown[:77] + "..."
        raise ReceiptsFileError(f"receipts {p} has schema {shown}, expected {SCHEMA_ID!r}")


def load_document(path: str | os.PathLike, *, yield_gil: bool = False) -> dict:
    """Read and validate a receipts file. Raises ``ReceiptsFileError`` with the file and the problem.

    ``yield_gil``: parse with an object hook so other Python threads keep running
    (one ``json.loads`` holds the GIL for over a second on a 20,000-window file;
    the window loads on a background thread with this set). Slower in total.
    """
    p = Path(path)
    try:  # the bytes read count, not the size reported (/dev/zero reports 0); a FIFO is refused, not waited on
        raw = read_bounded(p, MAX_FILE_BYTES, "receipts")
    except BoundedReadError as exc:
        raise ReceiptsFileError(str(exc)) from None
    except OSError as exc:
        raise ReceiptsFileError(f"cannot read receipts {p}: {exc.strerror or exc}") from None
    constants: list[str] = []

    def constant(name: str) -> float:  # NaN, Infinity, -Infinity: Python reads them, strict JSON has none
        constants.append(name)
        return float(name)

    try:
        doc = json.loads(raw.decode("utf-8"), object_hook=_object_hook if yield_gil else None,
                         parse_constant=constant)
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON, bad UTF-8, huge ints
        if is_autosave(raw):
            raise ReceiptsFileError(autosave_message(p)) from None
        raise ReceiptsFileError(f"receipts {p} is not readable JSON: {json_problem(exc)}") from None
    if isinstance(doc, dict) and doc.get("kind") == "header":  # an autosave of its header line only
        raise ReceiptsFileError(autosave_message(p))
    check_schema_field(doc, p)
    found = non_finite_path(doc) if constants else None
    if found is not None:
        raise ReceiptsFileError(f"receipts {p} holds an invalid JSON number {non_finite_message(*found)}")
    try:
        validate_document(doc)
    except ReceiptsFileError as exc:
        raise ReceiptsFileError(f"{p}: {exc}") from None
    try:
        check_consistency(doc)
    except InconsistentDocument as exc:
        raise ReceiptsFileError(f"receipts {p} is inconsistent {exc}") from None
    return doc


def autosave_message(p: Path) -> str:
    return (f"receipts {p} is an autosave (JSON Lines of a run), not a receipts document: open it with "
            f"spec-inspector view {p} (or the window), and export receipts from the window to trace or replay it")


def is_autosave(raw: bytes) -> bool:
    """Whether ``raw`` (a file's bytes) starts as an autosave does: a first line that is a JSON
    object with ``"kind": "header"`` (``inspector.receipts.autosave``)."""
    first = raw.split(b"\n", 1)[0]
    try:
        head = json.loads(first.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    return isinstance(head, dict) and head.get("kind") == "header"
