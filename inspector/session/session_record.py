"""``SessionRecord``: one request as every view and export reads it, live (no Qt).

A run fills it by ``apply`` of the records it appends (``inspector.session.run_records``; how each
changes the record is ``inspector.session.record_apply``); a receipts
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

from inspector.engine.deferred_figures import DeferredFigures
from inspector.engine.records import Discard, EngineEvent, LockOperation, Summary, WindowReceipt
from inspector.engine.stats import slow_verification_threshold_us, summarize_receipts
from inspector.engine.text import ShownText
from inspector.session.entries import END, TokenInfo, WindowEntry
from inspector.session.record_apply import (
    HANDLERS,
    append_token,
    change_baseline,
    flush_held_bytes,
    mark_last_token_end,
)
from inspector.session.run_records import ProposalStarted, RunEnd, RunHeader

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
        self.window_entries: list[WindowEntry] = []
        """Verified and failed windows by window index (windows are numbered in order): ``windows()``."""
        self.events: list[EngineEvent] = []
        self.lock_ops: list[LockOperation] = []
        self.texts: dict[int, str] = {}
        self.tokens: list[TokenInfo] = []
        self.shown_text = ShownText()
        """The token stream's text (``TokenInfo.shown``): bytes held back."""
        self.flushed_chars = 0
        """Characters of held bytes' labels shown at the end (not in ``output_text``)."""
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
        self.token_changes: list[tuple[int, int]] = []
        """(version, token index) of each token changed in place: ``token_changes_since``."""
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
        handler = HANDLERS.get(type(item))
        if handler is None:
            raise TypeError(f"not a session record: {type(item).__name__}")
        self.version += 1
        handler(self, item)

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

    # -- what a file adds (``inspector.session.record_from_file``) ---------------------
    def add_token(self, token: int, window: int | None, row: int, position: int, outcome: str | None) -> None:
        """Append one committed token read from a file whose lines carry no commit events.

        ``window``: 1-based window index, None for a plain step; ``row``: its verification row;
        ``position``: its position in the stream (tokens, = base_position + row + 1); ``outcome``:
        the engine's, or None to decide it from the window's proposal (``token_outcome``; the bonus
        row when the window is unknown). Its text is ``texts[token]`` ("" if not known yet)."""
        self.version += 1
        append_token(self, token, window, row, position, outcome)

    def mark_end(self) -> None:
        """The last token ended generation: its outcome becomes ``END`` (nothing without tokens)."""
        self.version += 1
        mark_last_token_end(self)

    def end_stream(self) -> None:
        """No token follows (a record read from a file): a character the tokens ended inside is
        shown as its bytes' labels (``TokenInfo.shown``); a live run's end does this itself."""
        self.version += 1
        flush_held_bytes(self)

    def set_baseline(self, baseline: dict | None) -> None:
        """Set the comparison with plain decoding, in the receipts document's ``baseline`` form
        (``divergence``: ``index`` of the first differing generated token, tokens, ``margin``;
        ``identical``; ``plain_token_ids``), or None when none ran."""
        self.version += 1
        change_baseline(self, baseline)

    def token_changes_since(self, version: int) -> int | None:
        """The lowest index of a token changed in place after ``version`` (its outcome became
        ``END``, or the divergence mark moved onto or off it), or None. Appended tokens are not
        changes: a view compares ``len(tokens)`` with what it drew."""
        low = None
        for v, i in reversed(self.token_changes):
            if v <= version:
                break
            low = i if low is None else min(low, i)
        return low

    def snapshot(self) -> "SessionRecord":
        """A copy that later records do not change (its lists and dicts are copied; the records in
        them are immutable): what an export on another thread writes while the run goes on."""
        s = copy.copy(self)
        for name in ("receipts", "discards", "window_entries", "events", "lock_ops", "tokens", "errors",
                     "token_changes"):
            setattr(s, name, list(getattr(self, name)))
        s.texts = dict(self.texts)
        s.shown_text = copy.copy(self.shown_text)
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
        return text[: len(text) - self.flushed_chars]

    def windows(self) -> list[WindowEntry]:
        """Verified and failed windows, by window index (do not modify the list)."""
        return self.window_entries

    def window(self, index: int) -> WindowEntry | None:
        """The window with 1-based ``index`` (verified or failed), or None."""
        w = self.window_entries
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
        return {e.window_index: e.discard for e in self.window_entries if e.receipt is None}

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
