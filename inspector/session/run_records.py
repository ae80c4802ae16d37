"""The immutable records one run appends to its ``SessionRecord``, and how they travel.

A run produces the engine's own records (``EngineEvent``, ``WindowReceipt``,
``Discard``, ``LockOperation``, ``inspector.engine.records``) and a few of the
run's: ``RunHeader`` (what the run is: model, settings as applied, prompt),
``TokenTexts`` (texts of token ids, sent before the first record that needs
them), ``ProposalStarted`` (the valid proposal of the window being verified),
``Progress`` (decode counters after each step), ``BaselineDone`` and
``RunEnd``. ``SessionRecord.apply`` takes any of them.

``RecordingObserver`` turns a ``Generation``'s observer calls into these
records and hands them to a ``push`` callable: the CLI passes
``SessionRecord.apply`` (same thread); the window's worker passes
``RecordStream.push`` and the GUI thread drains the stream on its redraw tick,
so the GUI's work per tick is what is new, with no signal per token.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from inspector.engine.observer import GenerationObserver


class TokenTexts(NamedTuple):  # a NamedTuple: made on the hot path, cheaper than a frozen dataclass
    """Texts of token ids (id -> its label, ``inspector.engine.text.token_label``: the text of its
    piece, a byte that is not part of a whole character as ``<0xNN>``)."""

    texts: dict


class ProposalStarted(NamedTuple):
    """A valid proposal is being verified as window ``window`` (1-based); its receipt
    (or its failed-window discard) follows. ``token_ids``: the proposal, tokens."""

    window: int
    token_ids: tuple


class PrefillProgress(NamedTuple):
    """The prefill has ``done`` of the prompt's ``total`` positions in the KV cache (tokens)."""

    done: int
    total: int


class Progress(NamedTuple):
    """Counters after a decode step. Times in microseconds; positions in tokens."""

    decode_elapsed_us: int
    prefill_elapsed_us: int
    generated: int
    canonical_position: int
    kv_length: int | None = None
    """The session's KV length when it was read (after an error or at the end), else None."""
    faults_fired: tuple = ()
    """``KIND@WINDOW:TOKEN`` of every injected fault that fired so far, when one fired since the last
    ``Progress`` (else empty: nothing new)."""


@dataclass(frozen=True, slots=True)
class RunHeader:
    """What a run is, appended before its prefill.

    ``model``: ``LlamaRuntime.describe()`` (path, name, architecture, n_vocab, n_ctx, ...).
    ``settings``: the settings as applied, in the receipts document's ``settings``
    form (``GenerationSettings.to_json()`` plus ``raw`` and ``source`` {name, settings}:
    the source's own ``settings()``, after its defaults). ``prompt_token_ids``: the
    prompt after tokenization (and the chat template unless raw). ``started_us``: the
    request's start on the scheduler's clock (µs): event ``t_us`` counts from it.
    """

    session_id: int
    prompt_text: str
    templated_text: str | None
    prompt_token_ids: tuple
    model: dict
    settings: dict
    started_us: int
    autosave_path: str = ""
    background_sessions: int = 0
    """Other sessions generating through the same runtime lock when the run started."""
    conversation: dict | None = None
    """A conversation's turn: the receipts document's ``conversation`` block (``turn``, ``turns``,
    ``history``, ``user_text``; ``inspector.session.conversation.conversation_block``), else None."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """The run ended (finished, stopped, or an error it did not resume from).

    ``reason``: the generation's finish reason, or ``stopped`` / ``error``.
    ``output_text``: the committed text, UTF-8 safe (``CommittedText``).
    ``faults_fired``: ``KIND@WINDOW:TOKEN`` of each injected fault that fired.
    ``background_sessions``: the most background sessions that ran during the run.
    """

    reason: str
    output_text: str
    errors: tuple = ()
    kv_length: int | None = None
    canonical_position: int | None = None
    retired: bool = False
    faults_fired: tuple = ()
    background_sessions: int = 0
    decode_elapsed_us: int = 0
    prefill_elapsed_us: int = 0
    incomplete_utf8_bytes: int = 0
    """Bytes of a character the text ended inside (``CommittedText.incomplete_bytes``): kept out of
    ``output_text``; 0 when it ended on a whole character."""
    others_cpu_share: float | None = None
    """Other processes' share (0..1) of the machine's CPU during the run
    (``inspector.session.contention.others_cpu_share``); None where it cannot be measured."""


REFUSED = "refused"
"""``RunError.kind``: the run did not start (model, prompt, KV session); nothing was recorded."""
SPECULATION_REFUSED = "speculation"
"""``RunError.kind``: the model's cache cannot drop rejected rows, so it cannot speculate."""
STEP_FAILED = "step"
"""``RunError.kind``: a decode step failed after its repair; Resume continues from the canonical position."""


@dataclass(frozen=True, slots=True)
class RunError:
    """An error of a run as the window reports it (the worker's ``errorOccurred``).

    ``kind``: ``REFUSED``, ``SPECULATION_REFUSED`` or ``STEP_FAILED`` (a failed resume too).
    ``kv_length``: the session's KV length read after the repair (None when the session
    was retired or could not be read); ``canonical_position``: what it must be (tokens)."""

    message: str
    kind: str = STEP_FAILED
    kv_length: int | None = None
    canonical_position: int | None = None
    retired: bool = False
    ended: bool = False
    """The run ended with this error (its runtime is gone: ``RuntimeLost``): nothing to resume."""

    @property
    def repaired(self) -> bool:
        """The repair left the KV cache at the canonical position."""
        return not self.retired and self.kv_length is not None and self.kv_length == self.canonical_position


@dataclass(frozen=True, slots=True)
class BaselineDone:
    """The comparison with plain decoding ended: ``result`` is an
    ``inspector.engine.baseline.BaselineResult``, or None with ``error`` ("" = cancelled)."""

    result: object
    error: str = ""


class RecordStream:
    """A thread-safe queue of records: any thread ``push``es, one reader ``drain``s.

    The window's worker (engine thread) and the scheduler's lock listener (any
    thread, background sessions too) push; the GUI thread drains on its redraw
    tick and before it acts on a lifecycle signal, so records are applied in the
    order they were pushed and never split."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list = []

    def push(self, item) -> None:
        with self._lock:
            self._items.append(item)

    def drain(self) -> list:
        """Every record pushed since the last drain, oldest first (a new list)."""
        with self._lock:
            items, self._items = self._items, []
        return items


@dataclass
class RecordingObserver(GenerationObserver):
    """A ``GenerationObserver`` that pushes a generation's records to ``push``.

    ``token_text(id) -> str`` and ``n_vocab``: texts are pushed (once per id, as
    ``TokenTexts``) before the first record that holds the id. ``inner``: an
    observer every call is passed on to after the record is pushed (the CLI's
    text printer; its ``on_token`` answer is returned). ``before_commit``: called
    before each committed token (the window's Step token holds there).
    """

    push: Callable
    token_text: Callable[[int], str]
    n_vocab: int
    inner: GenerationObserver | None = None
    before_commit_hook: Callable | None = None
    _sent: set = field(default_factory=set)
    _waiting: list = field(default_factory=list)  # plain steps' figures not summarised yet: their top 5 later

    def texts(self, ids) -> None:
        """Push the texts of the ids in ``ids`` not pushed yet (out-of-vocabulary ids are skipped)."""
        sent = self._sent
        new = {t: self.token_text(t) for t in ids if t not in sent and 0 <= t < self.n_vocab}
        if new:
            sent.update(new)
            self.push(TokenTexts(new))

    def on_event(self, event) -> None:
        t = event.token
        if t is not None and t not in self._sent and 0 <= t < self.n_vocab:  # one token: no set building
            self._sent.add(t)
            self.push(TokenTexts({t: self.token_text(t)}))
        p = event.probabilities
        if p is not None:
            if getattr(p, "ready", True):
                self.texts(p.top_token_ids())
            else:  # a plain step's figures come with its batch (inspector.engine.deferred_figures): not forced here
                self._waiting.append(p)
        if self._waiting and self._waiting[0].ready:
            self._texts_of_ready()
        self.push(event)
        if self.inner is not None:
            self.inner.on_event(event)

    def on_proposal(self, window, proposal) -> None:
        self.texts(proposal.token_ids)
        self.push(ProposalStarted(window, tuple(proposal.token_ids)))
        if self.inner is not None:
            self.inner.on_proposal(window, proposal)

    def on_receipt(self, receipt) -> None:
        self.texts(receipt.verification_row_predictions)
        if receipt.probabilities is not None:
            self.texts(receipt.probabilities.top_token_ids())
        self.push(receipt)
        if self.inner is not None:
            self.inner.on_receipt(receipt)

    def on_discard(self, discard) -> None:
        self.texts(discard.proposal_token_ids)
        if discard.partial is not None:  # a failed window's rows show their predictions' texts
            self.texts(discard.partial.verification_row_predictions)
        self.push(discard)
        if self.inner is not None:
            self.inner.on_discard(discard)

    def on_token(self, token, text):
        return self.inner.on_token(token, text) if self.inner is not None else None

    def before_commit(self, window, row, token, position) -> None:
        if self.inner is not None:
            self.inner.before_commit(window, row, token, position)
        if self.before_commit_hook is not None:
            self.before_commit_hook(window, row, token, position)

    def flush_texts(self) -> None:
        """Push the top-5 texts of every plain step's figures still waiting (summarising them): a run that
        stopped, failed or was cancelled has no ``on_finish`` (``SessionRun.end`` calls this)."""
        if self._waiting:
            self._texts_of_ready(every=True)

    def _texts_of_ready(self, every: bool = False) -> None:
        """Push the top-5 texts of the waiting figures that are summarised (batches run in order, so the ready
        ones lead); ``every``: all of them, summarising what is still pending."""
        waiting = self._waiting
        n = 0
        while n < len(waiting) and (every or waiting[n].ready):
            self.texts(waiting[n].top_token_ids())
            n += 1
        del waiting[:n]

    def on_finish(self, reason) -> None:
        if self._waiting:
            self._texts_of_ready(every=True)
        if self.inner is not None:
            self.inner.on_finish(reason)

    def on_prefill(self, done, total) -> None:
        self.push(PrefillProgress(done, total))
        tell = getattr(self.inner, "on_prefill", None)  # an observer may predate the hook
        if tell is not None:
            tell(done, total)
