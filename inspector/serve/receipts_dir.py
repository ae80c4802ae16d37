"""Every served request recorded: one receipts document per request in a folder, crash-safe, bounded.

Each finished request is written as ``req-<server start>-<request id>.json`` (``write_document``: a
temporary file renamed into place, so a crash leaves whole files only) with a ``served`` block
(endpoint, arrival time, client, prompt tokens reused from the slot's cache, how it ended). After each
write the folder keeps the newest ``keep`` files and at most ``max_bytes`` (oldest removed first; the
removal is logged; the folder is listed once, at the first write, and then every ``RESCAN_WRITES`` writes, and the
documents written in between are counted as they are written: listing and opening every file after each write
took 37 ms a request in a folder of 1,000). Only this server's documents are ever removed: a file counts when its name is
``req-<YYYYmmdd-HHMMSS>-<request id>.json`` (``DOCUMENT_NAME``) and its tail holds the ``served`` block
(every run of serve wrote both); a user's own ``req-mine.json`` in the folder is left alone.
``check`` says at start when the folder cannot be written (a file, a path under a file, no permission),
so serve refuses to start instead of answering without records. ``session_document`` gathers one server run's requests into one conversation
document that ``view``, ``tune``, ``compare --turns`` and the window open.

The default folder is beside the window's autosave folder: ``<app data>/spec-inspector/served``
(``~/.local/share`` or ``$XDG_DATA_HOME`` on Linux, ``~/Library/Application Support`` on macOS,
``%LOCALAPPDATA%`` on Windows: the folder Qt's ``GenericDataLocation`` names, found here without Qt).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path

from inspector.receipts import ReceiptsFileError, write_document
from inspector.serve.concurrency import concurrency_block
from inspector.session.conversation import Conversation, conversation_document
from inspector.session.document import record_document
from inspector.session.record_from_file import record_from_document

log = logging.getLogger(__name__)

DEFAULT_KEEP = 1000
"""Request documents kept in the folder (``--receipts-keep``)."""
DEFAULT_MAX_MB = 500
"""Megabytes the folder's request documents may take (``--receipts-max-mb``)."""
ERROR_CHARS = 500
"""Most characters of ``served.error`` kept (the ``served`` block must stay in a document's last 4 KB, where
``is_served_document`` looks for it)."""
DOCUMENT_NAME = re.compile(r"req-(\d{8}-\d{6})-(\d{6,})\.json")
"""The name of a request document serve wrote: ``req-<server start stamp>-<request id>.json``."""
SERVED_MARK = b'"served": {'
"""What the tail of every request document holds (the ``served`` block is written last)."""
TAIL_BYTES = 4096
RESCAN_WRITES = 100
"""Writes between two listings of the folder (files other programs add or remove meanwhile count at the next)."""


class ReceiptsDirError(ValueError):
    """The receipts folder cannot be written (one line naming the folder and the problem)."""


def check_writable_folder(folder: str | os.PathLike, what: str = "--receipts-dir") -> Path:
    """Make ``folder`` if needed and write and remove a probe file in it; returns it. Raises
    ``ReceiptsDirError`` (one line: ``what``, the folder, the problem) when it is a file, sits under a
    file, or cannot be written (permission, read-only file system). Root passes permission checks, so
    the probe write is what decides."""
    f = Path(folder)
    if f.exists() and not f.is_dir():
        raise ReceiptsDirError(f"{what} {f}: is a file, not a folder")
    try:
        f.mkdir(parents=True, exist_ok=True)
        probe = f / f".spec-inspector-probe-{os.getpid()}"
        with open(probe, "wb"):
            pass
        probe.unlink()
    except OSError as exc:
        raise ReceiptsDirError(f"{what} {f}: cannot write there ({exc.strerror or exc})") from None
    return f


def is_served_document(path: Path) -> bool:
    """``path`` is a request document serve wrote (any run): its name is ``DOCUMENT_NAME`` and its last
    ``TAIL_BYTES`` bytes hold the ``served`` block. Unreadable files are not."""
    if not DOCUMENT_NAME.fullmatch(path.name):
        return False
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - TAIL_BYTES))
            return SERVED_MARK in fh.read()
    except OSError:
        return False


def app_data_folder() -> Path:
    """The per-user data folder of spec-inspector, as the window's ``app_data_dir`` names it."""
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "spec-inspector"


def default_receipts_dir() -> Path:
    """Where served requests are recorded when no ``--receipts-dir`` is given."""
    return app_data_folder() / "served"


class ReceiptsDir:
    """The request documents of one server run in ``folder`` (made when the first one is written).
    ``keep``: most files in the folder; ``max_bytes``: most bytes. ``on_log(line)``: where removals and
    write failures are said (the server's log). Writes happen on the engine thread."""

    def __init__(self, folder: str | os.PathLike, keep: int = DEFAULT_KEEP, max_bytes: int = DEFAULT_MAX_MB << 20,
                 on_log=None) -> None:
        self.folder = Path(folder)
        self.keep = keep
        self.max_bytes = max_bytes
        self.stamp = time.strftime("%Y%m%d-%H%M%S")
        self.on_log = on_log or (lambda line: log.info("%s", line))
        self.error = ""
        """The last write failure ("" when the last write worked)."""
        self._lock = threading.Lock()
        self._known: dict[Path, int] = {}
        """The folder's request documents, oldest first, with their sizes (bytes) as last listed or written."""
        self._writes_since_scan = RESCAN_WRITES

    def check(self, what: str = "receipts folder") -> None:
        """Raise ``ReceiptsDirError`` (one line: ``what``, the folder, the problem) when the folder cannot
        be written; made if missing."""
        check_writable_folder(self.folder, what)

    def path_of(self, request_id: int) -> Path:
        """The file of request ``request_id`` of this server run."""
        return self.folder / f"req-{self.stamp}-{request_id:06d}.json"

    def write(self, job, record, reused: int, ended_as: str, error: str = "") -> str:
        """Write the request document of ``job`` (a ``Job``) from its ``SessionRecord``; returns its path,
        or "" when it could not be written (``error`` says why; the server goes on). ``error``: why it
        was cancelled or failed (``served.error``: "the client went away", "the server stopped")."""
        doc = record_document(record)
        doc["served"] = {"request_id": job.id, "endpoint": job.endpoint, "client": job.client,
                         "arrived": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(job.arrived)),
                         "arrived_unix_s": job.arrived, "prompt_reused": reused,
                         "prompt_cache_restored": job.cache_restored, "ended_as": ended_as,
                         "stream": bool(job.params.stream), "server_stamp": self.stamp,
                         **({"error": error[:ERROR_CHARS]} if error else {}),
                         **({"concurrency": concurrency_block(job, record)} if job.slot >= 0 else {})}
        path = self.path_of(job.id)
        try:
            with self._lock:
                write_document(doc, path, compact=True)  # one line: written while other slots decode
                self.error = ""
                self.bound_after(path)
        except (OSError, ReceiptsFileError) as exc:
            self.error = f"cannot write {path}: {exc}"
            self.on_log(f"receipts: {self.error}")
            return ""
        return str(path)

    def files(self, this_run_only: bool = False) -> list[Path]:
        """The request documents serve wrote in the folder (``DOCUMENT_NAME``; any run, or with
        ``this_run_only`` this one's), oldest first."""
        pattern = f"req-{self.stamp}-*.json" if this_run_only else "req-*.json"
        try:
            found = [p for p in self.folder.glob(pattern) if DOCUMENT_NAME.fullmatch(p.name)]
            return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))
        except OSError:
            return []

    def bound_after(self, written: Path) -> None:
        """Count the document just ``written`` (the folder is listed again every ``RESCAN_WRITES`` writes, the
        first included) and remove the oldest documents beyond ``keep`` files or ``max_bytes``."""
        self._count(written)
        self._bound()

    def _count(self, written: Path) -> None:
        self._writes_since_scan += 1
        if self._writes_since_scan < RESCAN_WRITES:
            self._known.pop(written, None)
            try:
                self._known[written] = written.stat().st_size
            except OSError:
                pass
            return
        self._writes_since_scan = 0
        self._known = {}
        for p in self.files():
            if is_served_document(p):
                try:
                    self._known[p] = p.stat().st_size
                except OSError:
                    continue

    def _bound(self) -> None:
        files = list(self._known)
        sizes = self._known
        total = sum(sizes.values())
        removed = []
        while files and (len(files) > self.keep or total > self.max_bytes):
            old = files.pop(0)
            size = sizes.pop(old)
            try:
                old.unlink()
            except FileNotFoundError:  # removed by someone else: no longer counted
                total -= size
                continue
            except OSError:
                continue
            total -= size
            removed.append(old.name)
        if removed:
            self.on_log(f"receipts: removed the {len(removed)} oldest request document(s) ({removed[0]}"
                        f"{' ...' if len(removed) > 1 else ''}): the folder keeps {self.keep} files and "
                        f"{self.max_bytes >> 20} MB (--receipts-keep, --receipts-max-mb)")


def session_document(paths) -> dict:
    """One conversation document holding the request documents ``paths`` (oldest first), each a turn:
    a chat request's turn is its last user message with the messages before it as history; a
    ``/completion`` request's is its prompt. Raises ``ValueError`` when there is none to read."""
    conv = Conversation()
    for path in paths:
        try:
            doc = json.loads(Path(path).read_text("utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("skipping %s: %s", path, exc)
            continue
        block = doc.get("conversation") or {"history": [], "user_text": doc["prompt"]["text"]}
        n = len(conv.records) + 1
        doc["conversation"] = {**block, "turn": n, "turns": n}
        for w in doc.get("windows", []):  # a window names its turn of this document
            w["turn"] = n
        conv.records.append(record_from_document(doc))  # keeps the document itself for the export
    if not conv.records:
        raise ValueError("no served request has been recorded yet")
    return conversation_document(conv)
