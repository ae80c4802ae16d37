"""The records of one session as the views read them (no Qt).

A ``SessionData`` is filled either live, from the worker's signals (events,
receipts, discards, lock operations, token texts, proposals), or at once from
a saved receipts document or an autosave file. Views never talk to the
engine; they read this object on their redraw timer and use ``version`` /
``tokens_dirty_from`` to redraw only what changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inspector.engine.receipt import (
    COMMIT,
    FINISH,
    PREFILL,
    REPAIR,
    STEP,
    VERIFY,
    Discard,
    EngineEvent,
    LockOperation,
    Summary,
    WindowReceipt,
    discard_from_json,
    receipt_from_json,
)
from inspector.engine.stats import slow_verification_threshold_us, summarize_receipts
from inspector.gui import outcomes as O


@dataclass(slots=True)
class TokenInfo:
    """One committed (output) token.

    ``index``: 0-based index among generated tokens. ``window``: 1-based window
    index, None for a plain step. ``row``: its verification row. ``position``:
    its position in the stream (= base_position + row + 1, tokens).
    ``proposed``: the proposal token of that row (None for the bonus token
    and plain steps). ``outcome``: one of ``inspector.gui.outcomes``.
    """

    index: int
    token: int
    text: str
    window: int | None
    row: int
    position: int
    proposed: int | None
    outcome: str


@dataclass(slots=True)
class WindowEntry:
    """A window as the window list shows it: a receipt, or a failed window."""

    window_index: int
    receipt: WindowReceipt | None
    discard: Discard | None

    @property
    def failed(self) -> bool:
        return self.receipt is None


class SessionData:
    """Everything the views show about one request (tokens, positions in tokens, times in microseconds)."""

    def __init__(self) -> None:
        self.receipts: list[WindowReceipt] = []
        self.receipts_by_window: dict[int, WindowReceipt] = {}
        self.discards: list[Discard] = []
        self.failed_windows: dict[int, Discard] = {}
        self.events: list[EngineEvent] = []
        self.lock_ops: list[LockOperation] = []
        self.texts: dict[int, str] = {}
        self.proposals: dict[int, tuple[int, ...]] = {}
        self.tokens: list[TokenInfo] = []
        self.main_session_id: int | None = None
        self.prompt_text = ""
        self.prompt_token_count = 0
        self.model_name = ""
        self.source_name = ""
        self.finish_reason: str | None = None
        self.errors: list[str] = []
        self.plain_steps = 0
        self.decode_elapsed_us = 0
        self.prefill_elapsed_us = 0
        self.kv_length: int | None = None
        self.canonical_position: int | None = None
        self.document: dict | None = None
        """The loaded receipts document, when it was not read from a file (else ``document_path``)."""
        self.document_path: str | None = None
        """The receipts file this session was opened from (None for a live session)."""
        self.baseline: dict | None = None
        """The comparison with plain decoding in the document's ``baseline`` form
        (``BaselineResult.to_json`` with token texts), or None when none ran."""
        self.baseline_result = None
        """The live run's ``BaselineResult`` (exported with the receipts), or None."""
        self.settings: dict | None = None
        """The run's settings as a receipts document stores them (``settings``: limits, sampling,
        ``source`` name and options, ``raw``), for a session read from a file; None when live."""
        self.background_sessions = 0
        """Other sessions that generated through the same runtime lock during the run."""
        self.unfinished = False
        """An autosave without its ``end`` record: the run stopped or was killed."""
        self.origin = "live"
        """``live``, ``document`` or ``autosave``."""
        self.skipped_lines = 0
        """Autosave lines that were not complete records (torn or damaged), skipped."""
        self.version = 0
        """Bumped on every change; views compare it with what they drew."""
        self.tokens_dirty_from = 0
        """Smallest token index changed since the token view last drew."""
        self._windows: tuple | None = None  # ((receipts, failed windows), windows()) cache
        self._slow: tuple | None = None  # (receipts counted, slow verification threshold µs)

    # -- live input ------------------------------------------------------------
    def _touch(self) -> None:
        self.version += 1

    def add_texts(self, texts: dict[int, str]) -> None:
        self.texts.update(texts)

    def add_proposal(self, window: int, token_ids: tuple[int, ...]) -> None:
        """The valid proposal about to be verified as window ``window``
        (the engine's ``GenerationObserver.on_proposal``)."""
        self.proposals[window] = tuple(token_ids)

    def add_event(self, ev: EngineEvent) -> None:
        self.events.append(ev)
        if ev.kind == STEP:
            self.plain_steps += 1
        elif ev.kind == COMMIT and ev.token is not None:
            self._add_token(ev)
        elif ev.kind == FINISH:
            self.finish_reason = ev.detail or None
            if self.tokens:
                self.tokens[-1].outcome = O.END
                self.tokens_dirty_from = min(self.tokens_dirty_from, len(self.tokens) - 1)
        if ev.kind in (VERIFY, REPAIR) and ev.position is not None and ev.detail != "trim failed; session retired":
            self.kv_length = ev.position
        self._touch()

    def _add_token(self, ev: EngineEvent) -> None:
        row = ev.row or 0
        if ev.window is None:
            proposed, outcome = None, O.PLAIN
        else:
            prop = self.proposals.get(ev.window)
            outcome = O.classify_row(row, ev.token, prop)
            proposed = prop[row] if prop is not None and row < len(prop) else None
        position = ev.position if ev.position is not None else 0
        self.tokens.append(TokenInfo(len(self.tokens), ev.token, self.texts.get(ev.token, ""),
                                     ev.window, row, position, proposed, outcome))
        self.canonical_position = position

    def add_receipt(self, r: WindowReceipt) -> None:
        self.receipts.append(r)
        self.receipts_by_window[r.window_index] = r
        self._set_proposal(r.window_index, r.proposal_token_ids)
        self.canonical_position = r.canonical_position
        self._touch()

    def add_discard(self, d: Discard) -> None:
        self.discards.append(d)
        if d.partial is not None:
            self.failed_windows[d.partial.window_index] = d
            self._set_proposal(d.partial.window_index, d.proposal_token_ids)
            self.canonical_position = d.partial.canonical_position
        if d.error:
            self.errors.append(d.error)
        self._touch()

    def add_lock_operation(self, op: LockOperation) -> None:
        self.lock_ops.append(op)
        self._touch()

    def set_progress(self, p: dict) -> None:
        """Counters the worker sends after each step (``decode_elapsed_us`` etc.)."""
        self.decode_elapsed_us = p.get("decode_elapsed_us", self.decode_elapsed_us)
        self.prefill_elapsed_us = p.get("prefill_elapsed_us", self.prefill_elapsed_us)
        if "kv_length" in p:
            self.kv_length = p["kv_length"]
        if "canonical_position" in p:
            self.canonical_position = p["canonical_position"]
        self._touch()

    def set_baseline(self, result) -> None:
        """Keep a ``BaselineResult`` of this run; the divergent token is redrawn with its mark."""
        self.baseline_result = result
        self._set_baseline_json(result.to_json(self.text_of))

    def _set_baseline_json(self, d: dict | None) -> None:
        self.baseline = d
        i = self.divergence_index
        if i is not None:
            self.tokens_dirty_from = min(self.tokens_dirty_from, i)
        self._touch()

    @property
    def divergence_index(self) -> int | None:
        """Generated-token index where the output first differs from plain decoding, or None."""
        div = (self.baseline or {}).get("divergence")
        return None if not div else int(div["index"])

    def _set_proposal(self, window: int, ids: tuple[int, ...]) -> None:
        self.proposals[window] = tuple(ids)
        # Tokens of ``window`` are the newest ones: look back only to the previous window's.
        for t in reversed(self.tokens):
            if t.window is not None and t.window < window:
                break
            if t.window == window and t.outcome == O.PENDING:
                t.outcome = O.classify_row(t.row, t.token, self.proposals[window])
                t.proposed = ids[t.row] if t.row < len(ids) else None
                self.tokens_dirty_from = min(self.tokens_dirty_from, t.index)

    # -- derived ---------------------------------------------------------------
    def text_of(self, token: int | None) -> str:
        if token is None:
            return ""
        return self.texts.get(token, f"<{token}>")

    @property
    def output_text(self) -> str:
        return "".join(t.text for t in self.tokens)

    def windows(self) -> list[WindowEntry]:
        """Verified windows and failed windows, by window index (cached until a window is added;
        do not modify the list)."""
        key = (len(self.receipts_by_window), len(self.failed_windows))
        if self._windows is None or self._windows[0] != key:
            idx = sorted(set(self.receipts_by_window) | set(self.failed_windows))
            self._windows = (key, [WindowEntry(w, self.receipts_by_window.get(w), self.failed_windows.get(w))
                                   for w in idx])
        return self._windows[1]

    def slow_verification_us(self) -> float | None:
        """Verification time (µs) above which a window of this session is slow
        (``inspector.engine.stats.slow_verification_threshold_us``); recomputed when the
        number of receipts changed (up to 256 windows), then when it has grown by a quarter
        (cheap for 20,000 windows)."""
        n = len(self.receipts)
        cached = self._slow
        if cached is None or (n != cached[0] and (n < 256 or n > cached[0] * 1.25 or n < cached[0])):
            self._slow = cached = (n, slow_verification_threshold_us(r.verification_elapsed_us for r in self.receipts))
        return cached[1]

    def summary(self) -> Summary:
        """Acceptance figures (``inspector.engine.stats.summarize_receipts``)."""
        return summarize_receipts(
            self.receipts, plain_steps=self.plain_steps, discards=len(self.discards),
            generated_tokens=len(self.tokens), decode_elapsed_us=self.decode_elapsed_us,
            prefill_elapsed_us=self.prefill_elapsed_us, finish_reason=self.finish_reason,
        )

    # -- loading ----------------------------------------------------------------
    @classmethod
    def from_document(cls, doc: dict, path: str | Path | None = None) -> "SessionData":
        """A session from a validated receipts document (``load_document``).

        ``path``: the file it came from; the session then keeps the path, not the
        document (a long session's parsed JSON would double its memory), and an
        export reads the file again."""
        s = cls()
        s.document = doc if path is None else None
        s.document_path = None if path is None else str(path)
        s.origin = "document"
        out = doc["output"]
        for tid, text in zip(out["token_ids"], out.get("token_texts", [])):
            s.texts[tid] = text
        for w in doc["windows"]:
            for tid, text in zip(w["proposal_token_ids"], w.get("proposal_token_texts", [])):
                s.texts.setdefault(tid, text)
            for tid, text in zip(w["verification_row_predictions"], w.get("verification_row_prediction_texts", [])):
                s.texts.setdefault(tid, text)
        s.prompt_text = doc["prompt"]["text"]
        s.prompt_token_count = len(doc["prompt"]["token_ids"])
        s.settings = doc["settings"]
        s.background_sessions = int(doc["settings"].get("background_sessions", 0))
        s.model_name = doc["model"].get("name") or Path(doc["model"]["path"]).name
        s.source_name = doc["settings"]["source"]["name"]
        for w in doc["windows"]:
            s.add_receipt(receipt_from_json(w))
        for d in doc["discards"]:
            s.add_discard(discard_from_json(d))
        s.errors = list(out.get("errors", []))
        s.plain_steps = 0
        for e in doc["events"]:
            s.add_event(EngineEvent(**e))
        if s.events:
            s.main_session_id = s.events[0].session_id
        for op in doc.get("lock_operations", []):
            s.lock_ops.append(LockOperation(**op))
        summ = doc["summary"]
        s.decode_elapsed_us = summ.get("decode_elapsed_us", 0)
        s.prefill_elapsed_us = summ.get("prefill_elapsed_us", 0)
        s.finish_reason = out.get("finish_reason")
        s._set_baseline_json(doc.get("baseline"))
        return s

    @classmethod
    def from_autosave(cls, path: str | Path) -> "SessionData":
        """A session from an autosave JSON Lines file (``inspector.receipts.autosave``).

        Lines: ``header``, then ``receipt`` / ``discard`` / ``step`` in the
        order they happened, and ``end`` after a clean finish. Every complete
        record is shown; a line that is not one (torn by a kill, or damaged) is
        skipped and counted in ``skipped_lines`` (a partial view). Raises
        ``ReceiptsFileError`` when the file is too large, unreadable or has no header.
        """
        from inspector.receipts.autosave import read_autosave

        run = read_autosave(path)  # raises ReceiptsFileError (too large, unreadable, no header)
        s = cls()
        s.origin = "autosave"
        s.document_path = str(run.path)
        h = run.header
        s.prompt_text = str(h.get("prompt", ""))
        s.model_name = str(h.get("model", ""))
        s.source_name = str(h.get("source", ""))
        s.main_session_id = h.get("session_id")
        s.skipped_lines = run.bad_lines
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
            s.prompt_token_count = prefill["kv_length"] + 1  # the last prompt token is not prefilled
        if type(prefill.get("elapsed_us")) is int:
            s.prefill_elapsed_us = prefill["elapsed_us"]
        s.texts.update(run.texts)
        seq = 0

        def ev(kind, window=None, token=None, row=None, position=None, detail=""):
            nonlocal seq
            s.add_event(EngineEvent(seq, 0, kind, s.main_session_id or 0, window, token, row, position, detail))
            seq += 1

        for kind, value, _texts in run.records:
            if kind == "receipt":
                r = value
                s.proposals[r.window_index] = tuple(r.proposal_token_ids)
                ev(VERIFY, r.window_index, position=r.position_after_verification, detail=f"{r.verification_rows} rows")
                for row, tok in enumerate(r.committed_tokens):
                    ev(COMMIT, r.window_index, tok, row, r.base_position + row + 1)
                ev(REPAIR, r.window_index, position=r.canonical_position, detail=r.repair)
                s.add_receipt(r)
            elif kind == "discard":
                d = value
                if d.partial is not None:
                    s.proposals[d.partial.window_index] = tuple(d.proposal_token_ids)
                    for row, tok in enumerate(d.partial.committed_tokens):
                        ev(COMMIT, d.partial.window_index, tok, row, d.base_position + row + 1)
                s.add_discard(d)
                ev("discard", d.partial.window_index if d.partial else None, detail=d.reason)
            elif kind == "step":
                token, position = value
                ev(STEP, token=token, row=0, position=position)
                ev(COMMIT, None, token, 0, position)
            elif kind == "prefill":
                ev(PREFILL, position=value.get("kv_length"), detail=f"{s.prompt_token_count} prompt tokens")
            elif kind == "end":
                ev(FINISH, detail=value.get("finish_reason") or "")
                us = value.get("decode_elapsed_us")
                s.decode_elapsed_us = us if type(us) is int and us >= 0 else 0
        s._touch()
        return s

