"""``SessionRecord``: one request as every view and export reads it, live (no Qt).

A run fills it by ``apply`` of the records it appends (``inspector.session.run_records``); a receipts
document or an autosave fills it through ``inspector.session.record_from_file``, with ``apply`` and
the few public methods below (``add_token``, ``mark_end``, ``set_baseline``), and the three agree
on the same run (``tests/test_session_record.py``). Token outcomes are the engine's (each commit
event's ``detail``, ``inspector.engine.classify.token_outcome``); the views never classify.

The record only grows: ``version`` counts its changes and ``token_changes_since`` names the
lowest token changed in place after a version. Each view keeps the version it drew and redraws
what changed since; no view writes the record.
"""

from __future__ import annotations

import copy
from bisect import bisect_left
from pathlib import Path

from inspector.engine.classify import BONUS, FROM_PREFILL, TOKEN_OUTCOMES, token_outcome
from inspector.engine.deferred_figures import DeferredFigures
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
    Summary,
    WindowReceipt,
)
from inspector.engine.stats import slow_verification_threshold_us, summarize_receipts
from inspector.engine.text import ShownText, label_bytes
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

__all__ = ["END", "SessionRecord", "TokenInfo", "WindowEntry"]


class SessionRecord:
    """Everything known about one request (tokens, positions in tokens, times in microseconds).

    ``origin``: ``live`` (a run in this process), ``document`` or ``autosave``.
    Live records are changed on one thread only (the GUI thread, or the CLI's).

    Changed only by ``apply`` (a run's records; also receipts, discards and engine events read from
    a file), ``add_token``, ``mark_end`` and ``set_baseline`` (a file's tokens that carry no events,
    its end and its comparison), and by a builder setting the plain public attributes (prompt,
    model, settings, times: ``inspector.session.record_from_file``, before any view sees it). Each of
    the methods bumps ``version``.
    """

    def __init__(self) -> None:
        self.header: RunHeader | None = None
        """What the run is (live runs); None for a record read from a file."""
        self.end: RunEnd | None = None
        """How the live run ended, once it has."""
        self.receipts: list[WindowReceipt] = []
        self.discards: list[Discard] = []
        self._windows: list[WindowEntry] = []  # by window index (windows are numbered in order)
        self.events: list[EngineEvent] = []
        self.lock_ops: list[LockOperation] = []
        self.texts: dict[int, str] = {}
        self.tokens: list[TokenInfo] = []
        self._shown = ShownText()  # the token stream's text (``TokenInfo.shown``): bytes held back
        self._flushed = 0  # characters of held bytes' labels shown at the end (not in ``output_text``)
        self.step_probabilities: dict = {}
        """Plain steps' one-row ``WindowProbabilities`` by the KV position the step's token reached."""
        self.in_flight: ProposalStarted | None = None
        """The proposal of the window being verified (no receipt yet), else None."""
        self.main_session_id: int | None = None
        self.prompt_text = ""
        self.prompt_token_count = 0
        self.model_name = ""
        self.model_weights = ""
        self.model_stored_weights = ""
        """The weight type of the model file as stored (e.g. Q4_1), "" when unknown."""
        """The weight type the model ran in when it was converted from its file (its model block's
        ``converted_from``), else "" (the file as stored)."""
        self.source_name = ""
        self.finish_reason: str | None = None
        """The engine's finish reason (its ``finish`` event): None for a run stopped or failed."""
        self.ended_as: str | None = None
        """How the run ended as the user saw it: the finish reason, ``stopped`` or ``error``
        (a live run's ``RunEnd``, an autosave's ``end`` line); None while it runs or unknown."""
        self.errors: list[str] = []
        self.incomplete_utf8_bytes = 0
        """Bytes of a character the output ended inside, kept out of its text (``RunEnd``)."""
        """Every error of the run, in order (``RunError`` records live; the document's
        ``output.errors``; an autosave's failed windows)."""
        self.plain_steps = 0
        self.decode_elapsed_us = 0
        self.prefill_elapsed_us = 0
        self.prefill_done = 0
        self.prefill_total = 0
        """Prompt positions in the KV cache and the prompt's length (tokens), told during a long prefill."""
        self.kv_length: int | None = None
        self.canonical_position: int | None = None
        self.document: dict | None = None
        """The loaded receipts document, when it was not read from a file (else ``document_path``)."""
        self.document_path: str | None = None
        """The file this session was opened from (None for a live session)."""
        self.baseline: dict | None = None
        """The comparison with plain decoding in the document's ``baseline`` form (with token
        texts), or None when none ran."""
        self.baseline_result = None
        """The live run's ``BaselineResult``, or None."""
        self.baseline_error = ""
        self.settings: dict | None = None
        """The run's settings in the receipts document's ``settings`` form (limits, sampling,
        ``source`` name and options, ``raw``; ``faults`` that fired once known)."""
        self.background_sessions = 0
        """Other sessions that generated through the same runtime lock during the run."""
        self.conversation: dict | None = None
        """A conversation's turn: the receipts' ``conversation`` block (``turn``, ``turns``, ``history``,
        ``user_text``), else None."""
        self.unfinished = False
        """An autosave without its ``end`` record: the run stopped or was killed."""
        self.origin = "live"
        self.skipped_lines = 0
        """Autosave lines that were not complete records (torn or damaged), skipped."""
        self.header_problems: list[str] = []
        """What is wrong in an autosave's header record (``inspector.receipts.autosave.header_problems``)."""
        self.version = 0
        """Counts the changes (never goes down); a view keeps the version it drew and redraws when
        it differs."""
        self._token_changes: list[tuple[int, int]] = []  # (version, token index) of each token changed in place
        self._slow: tuple | None = None  # (receipts counted, slow verification threshold µs)

    # -- live input ------------------------------------------------------------
    def extend(self, items) -> None:
        """``apply`` each record of ``items`` in order."""
        for item in items:
            self.apply(item)

    def apply(self, item) -> None:
        """Append one record of a run (an engine record or one of ``inspector.session.run_records``).
        Lock operations count only between the run's header and its end. Raises ``TypeError``
        for anything else."""
        handler = _HANDLERS.get(type(item))
        if handler is None:
            raise TypeError(f"not a session record: {type(item).__name__}")
        self.version += 1
        handler(self, item)

    def _texts(self, item: TokenTexts) -> None:
        self.texts.update(item.texts)

    def _proposal(self, item: ProposalStarted) -> None:
        self.in_flight = item

    def _lock_op(self, op: LockOperation) -> None:
        if self.header is not None and self.end is None:
            self.lock_ops.append(op)

    def _progress(self, item: Progress) -> None:
        self.decode_elapsed_us = item.decode_elapsed_us
        self.prefill_elapsed_us = item.prefill_elapsed_us
        self.canonical_position = item.canonical_position
        if item.kv_length is not None:
            self.kv_length = item.kv_length
        if item.faults_fired and self.settings is not None:
            self.settings["faults"] = list(item.faults_fired)

    def _prefill_progress(self, item: PrefillProgress) -> None:
        self.prefill_done, self.prefill_total = item.done, item.total

    def _baseline_done(self, item: BaselineDone) -> None:
        self.baseline_error = item.error
        if item.result is not None:
            self.baseline_result = item.result
            self._set_baseline(item.result.to_json(self.text_of))

    def _start(self, h: RunHeader) -> None:
        self.header = h
        self.main_session_id = h.session_id
        self.prompt_text = h.prompt_text
        self.prompt_token_count = len(h.prompt_token_ids)
        self.model_name = Path(str(h.model.get("converted_from") or h.model.get("path", ""))).name
        self.model_weights = str(h.model.get("weights", "")) if h.model.get("converted_from") else ""
        self.model_stored_weights = stored_weights(h.model)
        self.settings = dict(h.settings)
        self.source_name = h.settings.get("source", {}).get("name", "")
        self.background_sessions = h.background_sessions
        self.conversation = dict(h.conversation) if h.conversation else None

    def _run_error(self, e: RunError) -> None:
        self.errors.append(e.message)
        if e.kind == STEP_FAILED:  # where the repair left the KV cache (None: the session was retired)
            self.kv_length = e.kv_length

    def _finish_run(self, e: RunEnd) -> None:
        self.end = e
        self._end_stream()
        self.incomplete_utf8_bytes = e.incomplete_utf8_bytes
        self.ended_as = e.reason
        self.errors = list(e.errors)
        self.in_flight = None
        self.decode_elapsed_us = e.decode_elapsed_us
        self.prefill_elapsed_us = e.prefill_elapsed_us
        self.kv_length = e.kv_length
        if e.canonical_position is not None:
            self.canonical_position = e.canonical_position
        self.background_sessions = max(self.background_sessions, e.background_sessions)
        if self.settings is not None:
            self.settings["faults"] = list(e.faults_fired)
            self.settings["background_sessions"] = self.background_sessions

    def _add_event(self, ev: EngineEvent) -> None:
        self.events.append(ev)
        kind = ev.kind
        if kind == COMMIT and ev.token is not None:
            outcome = ev.detail if ev.detail in TOKEN_OUTCOMES else None
            if ev.window is None and outcome != FROM_PREFILL:
                self.plain_steps += 1  # as the engine counts: a plain step whose token was committed
            self._append_token(ev.token, ev.window, ev.row or 0, ev.position or 0, outcome)
        elif kind in (STEP, PREFILL):
            self.kv_length = ev.position  # the current token's row (the prompt) joined the KV cache
            if ev.probabilities is not None and ev.position is not None:
                self.step_probabilities[ev.position] = ev.probabilities
        elif kind == FINISH:
            self.finish_reason = ev.detail or None
            self._mark_end()
        elif kind in (VERIFY, REPAIR) and ev.position is not None:  # a retired session's repair has none
            self.kv_length = ev.position

    @property
    def probabilities_state(self) -> str:
        """Whether this session can have per-row probabilities: ``"off"`` (turned off for the run),
        ``"v1"`` (read from a file written before them: no ``settings.probabilities``) or ``"on"``.
        The one rule the window's hover and Statistics tab use to say why figures are missing."""
        st = self.settings or {}
        if st.get("probabilities") is False:
            return "off"
        if self.origin != "live" and self.settings is not None and "probabilities" not in st:
            return "v1"
        return "on"

    def token_probabilities(self, info: TokenInfo):
        """The target's figures for one committed token's row (``inspector.engine.probabilities.
        RowProbabilities``: the proposed and predicted token with their probabilities, rank, top 5,
        entropy, margin, draft q), or None: probabilities turned off, a schema-1 file, or a window
        whose receipt has not arrived yet. A plain step's token has its step's one-row figures."""
        if info.window is None:
            p = self.step_probabilities.get(info.position)
            return None if p is None else p.row(0, (), (info.token,))
        r = self.receipt(info.window)
        return None if r is None else r.row_probabilities(info.row)

    def figures_pending(self, info: TokenInfo) -> bool:
        """True while a plain step's figures wait in their batch (``inspector.engine.deferred_figures``: up
        to 8 rows or 50 ms): reading them now would summarise the batch on the reader's thread. A view
        drawing on a timer shows the token without them and asks again at its next redraw."""
        if info.window is not None:
            return False
        p = self.step_probabilities.get(info.position)
        return isinstance(p, DeferredFigures) and not p.ready

    def _proposal_of(self, window: int) -> tuple | None:
        f = self.in_flight
        if f is not None and f.window == window:
            return f.token_ids
        e = self.window(window)
        return e.proposal if e is not None else None

    def _append_token(self, token: int, window: int | None, row: int, position: int, outcome: str | None) -> None:
        proposal = None if window is None else self._proposal_of(window)
        if outcome is None:  # receipts written before commit events named their outcome
            outcome = token_outcome(row, token, proposal) if window is None or proposal is not None else BONUS
        proposed = proposal[row] if proposal is not None and row < len(proposal) else None
        text = self.texts.get(token, "")
        index = len(self.tokens)
        self.tokens.append(TokenInfo(index, token, text, window, row, position, proposed, outcome,
                                     self._shown.push(index, label_bytes(text))))
        self.canonical_position = position

    def _mark_end(self) -> None:
        if self.tokens:
            self.tokens[-1].outcome = END
            self._token_changes.append((self.version, len(self.tokens) - 1))
        self._end_stream()

    def _end_stream(self) -> None:
        # No token follows: bytes held back for a character never completed are shown as their
        # labels (<0xNN>) with the tokens they came from, so every token has text in the stream.
        held = self._shown.flush()
        for i, label in held:
            self.tokens[i].shown += label
            self._flushed += len(label)
        if held:
            self._token_changes.append((self.version, held[0][0]))

    def _add_window(self, entry: WindowEntry) -> None:
        w = self._windows
        if not w or w[-1].window_index < entry.window_index:
            w.append(entry)
        else:
            w.insert(bisect_left([e.window_index for e in w], entry.window_index), entry)
        if self.in_flight is not None and self.in_flight.window == entry.window_index:
            self.in_flight = None

    def _add_receipt(self, r: WindowReceipt) -> None:
        self.receipts.append(r)
        self._add_window(WindowEntry(r.window_index, r, None))
        self.canonical_position = r.canonical_position

    def _add_discard(self, d: Discard) -> None:
        self.discards.append(d)
        if d.partial is not None:
            self._add_window(WindowEntry(d.partial.window_index, None, d))
            self.canonical_position = d.partial.canonical_position

    def _set_baseline(self, d: dict | None) -> None:
        before = self.divergence_index
        self.baseline = d
        for i in {before, self.divergence_index} - {None}:  # the mark moves off one token, onto another
            self._token_changes.append((self.version, i))

    # -- what a file adds (``inspector.session.record_from_file``) ---------------------
    def add_token(self, token: int, window: int | None, row: int, position: int, outcome: str | None) -> None:
        """Append one committed token read from a file whose lines carry no commit events.

        ``window``: 1-based window index, None for a plain step; ``row``: its verification row;
        ``position``: its position in the stream (tokens, = base_position + row + 1); ``outcome``:
        the engine's, or None to decide it from the window's proposal (``token_outcome``; the bonus
        row when the window is unknown). Its text is ``texts[token]`` ("" if not known yet)."""
        self.version += 1
        self._append_token(token, window, row, position, outcome)

    def mark_end(self) -> None:
        """The last token ended generation: its outcome becomes ``END`` (nothing without tokens)."""
        self.version += 1
        self._mark_end()

    def end_stream(self) -> None:
        """No token follows (a record read from a file): a character the tokens ended inside is
        shown as its bytes' labels (``TokenInfo.shown``); a live run's end does this itself."""
        self.version += 1
        self._end_stream()

    def set_baseline(self, baseline: dict | None) -> None:
        """Set the comparison with plain decoding, in the receipts document's ``baseline`` form
        (``divergence``: ``index`` of the first differing generated token, tokens, ``margin``;
        ``identical``; ``plain_token_ids``), or None when none ran."""
        self.version += 1
        self._set_baseline(baseline)

    def token_changes_since(self, version: int) -> int | None:
        """The lowest index of a token changed in place after ``version`` (its outcome became
        ``END``, or the divergence mark moved onto or off it), or None. Appended tokens are not
        changes: a view compares ``len(tokens)`` with what it drew."""
        low = None
        for v, i in reversed(self._token_changes):
            if v <= version:
                break
            low = i if low is None else min(low, i)
        return low

    def snapshot(self) -> "SessionRecord":
        """A copy that later records do not change (its lists and dicts are copied; the records in
        them are immutable): what an export on another thread writes while the run goes on."""
        s = copy.copy(self)
        for name in ("receipts", "discards", "_windows", "events", "lock_ops", "tokens", "errors",
                     "_token_changes"):
            setattr(s, name, list(getattr(self, name)))
        s.texts = dict(self.texts)
        s._shown = copy.copy(self._shown)
        s.step_probabilities = dict(self.step_probabilities)
        s.settings = dict(self.settings) if self.settings is not None else None
        return s

    # -- derived ---------------------------------------------------------------
    @property
    def divergence_index(self) -> int | None:
        """Generated-token index where the output first differs from plain decoding, or None."""
        div = (self.baseline or {}).get("divergence")
        return None if not div else int(div["index"])

    def text_of(self, token: int | None) -> str:
        if token is None:
            return ""
        return self.texts.get(token, f"<{token}>")

    @property
    def output_text(self) -> str:
        """The committed text: the engine's UTF-8-safe text once the run ended, else the stream's text
        (``TokenInfo.shown``, without a character the tokens ended inside and without the
        end-of-generation token's text, which the engine's text leaves out too)."""
        if self.end is not None:
            return self.end.output_text
        tokens = self.tokens[:-1] if self.finish_reason == "eog" and self.tokens else self.tokens
        text = "".join(t.shown for t in tokens)
        return text[: len(text) - self._flushed]

    def windows(self) -> list[WindowEntry]:
        """Verified and failed windows, by window index (do not modify the list)."""
        return self._windows

    def window(self, index: int) -> WindowEntry | None:
        """The window with 1-based ``index`` (verified or failed), or None."""
        w = self._windows
        if w and w[-1].window_index == index:
            return w[-1]
        i = bisect_left(w, index, key=lambda e: e.window_index)
        return w[i] if i < len(w) and w[i].window_index == index else None

    def receipt(self, index: int) -> WindowReceipt | None:
        """The receipt of window ``index``, or None (failed or unknown)."""
        e = self.window(index)
        return e.receipt if e is not None else None

    @property
    def failed_windows(self) -> dict[int, Discard]:
        """Window index -> the discard of each window that failed (a new dict)."""
        return {e.window_index: e.discard for e in self._windows if e.receipt is None}

    @property
    def generated_token_ids(self) -> list[int]:
        return [t.token for t in self.tokens]

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


_HANDLERS = {
    EngineEvent: SessionRecord._add_event, TokenTexts: SessionRecord._texts,
    ProposalStarted: SessionRecord._proposal, WindowReceipt: SessionRecord._add_receipt,
    Discard: SessionRecord._add_discard, LockOperation: SessionRecord._lock_op,
    Progress: SessionRecord._progress, PrefillProgress: SessionRecord._prefill_progress,
    RunHeader: SessionRecord._start, RunEnd: SessionRecord._finish_run, RunError: SessionRecord._run_error,
    BaselineDone: SessionRecord._baseline_done,
}
"""Record type -> how ``SessionRecord.apply`` files it."""


def stored_weights(model: dict) -> str:
    """The weight type of a receipts ``model`` block's file as stored: ``converted_from_weights`` when the
    run used a converted form, else its ``weights``; "" when the block does not say."""
    return str(model.get("converted_from_weights") or model.get("weights") or "") if model.get("converted_from") \
        else str(model.get("weights") or "")
