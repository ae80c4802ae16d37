"""The generation loop: prefill, then proposal windows or plain steps until a stop.

One ``Generation`` is one request on one session (a KV-cache sequence). ``start`` prefills the whole prompt and
commits the first generated token from the prefill's last row, as llama.cpp's server does (SPEC "Prefill and the first
token"; llama.cpp 0c1e570 ``tools/server/server-context.cpp``, ``update_slots``: the prompt's last batch row is the
only output and the slot samples it). Each decode step then asks the source for a proposal (SPEC step 1), validates it
(step 2), and runs ``execute_window`` (steps 3-8) or a plain one-token step. After an error the session is left at its
canonical position (or retired), and ``resume()`` + ``run()`` continue exactly where the canonical stream ends.

Invariant between steps: the session's KV length is ``len(tokens) - 1``; the last committed token (the current token)
is not yet in the KV cache.
"""

from __future__ import annotations

import logging
import threading
from time import perf_counter, perf_counter_ns
from typing import Sequence

import numpy as np

from inspector.engine import faults as F
from inspector.engine.classify import FROM_PREFILL, token_outcome
from inspector.engine.deferred_figures import figure_batch
from inspector.engine.constraints import Constraints
from inspector.engine.errors import DecodeAborted, InjectedCallbackError, RequestCancelled
from inspector.engine.failure_log import FailureLog
from inspector.engine.faults import FaultPlan
from inspector.engine.finish import FINISH_CONTEXT_FULL, FINISH_LENGTH, finish_after_commit
from inspector.engine.no_proposal import DISCARDED, NO_ROOM, PLAIN_DECODING, no_room_detail
from inspector.engine.observer import GenerationObserver
from inspector.engine.prefill import (SessionPlace, check_start, open_session, prefill, resync, trim_prompt,
                                     window_context)
from inspector.engine.proposal import POSITION_MISMATCH, Proposal, ProposalRequest, ProposalSource, max_proposal_tokens
from inspector.engine.records import (COMMIT, ERROR, FINISH, PREFILL, STEP, Discard, EngineEvent, WindowReceipt,
                                      failure_place)
from inspector.engine.runtime_calls import plain_step_call
from inspector.engine.scheduler import RuntimeScheduler
from inspector.engine.settings import GenerationSettings
from inspector.engine.source_query import query_source
from inspector.engine.stats import summarize
from inspector.engine.text import CommittedText
from inspector.engine.window import WindowContext, WindowTrace, execute_window, repair_to

log = logging.getLogger(__name__)


class Generation:
    """One request: prompt tokens in, committed tokens, receipts and events out.

    ``scheduler``: owns the runtime (see ``inspector.engine.window`` for the calls used). ``source``: a
    ``ProposalSource`` or None (plain decoding). ``prompt_tokens``: >= 1 token ids, all prefilled by ``start``, whose
    last row predicts the first generated token (the first current token). ``place``: the request's id, its KV session
    (None: open one) and the prompt tokens that session holds already (``SessionPlace``; default: request 1, a new
    session, nothing reused). ``faults``, ``observer``, ``constraints`` (grammar, logit bias): None for none.
    Raises ``ValueError`` for an empty prompt or a ``kv_reuse`` outside 0 .. prompt tokens - 1, and
    ``PromptTooLong`` from ``start`` when the prompt does not fit."""

    def __init__(
        self,
        scheduler: RuntimeScheduler,
        source: ProposalSource | None,
        prompt_tokens: Sequence[int],
        settings: GenerationSettings,
        *,
        place: SessionPlace | None = None,
        faults: FaultPlan | None = None,
        observer: GenerationObserver | None = None,
        constraints: Constraints | None = None,
    ) -> None:
        if not prompt_tokens:
            raise ValueError("the prompt is empty: expected at least 1 token, observed 0")
        self.scheduler = scheduler
        self.runtime = scheduler.runtime
        self.source = source
        self.settings = settings
        self.constraints = None if constraints is None or constraints.empty else constraints
        """Grammar and logit bias (``inspector.engine.constraints``), or None."""
        place = place if place is not None else SessionPlace()
        self.request_id = place.request_id
        self.session_id = place.session_id
        self.faults = faults if faults is not None else FaultPlan()
        self.observer = observer or GenerationObserver()
        self.tokens: list[int] = list(prompt_tokens)
        self.prompt_token_count = len(self.tokens)
        if not 0 <= place.kv_reuse < self.prompt_token_count:
            raise ValueError(f"reused prompt tokens must be 0 <= n < {self.prompt_token_count}, "
                             f"observed {place.kv_reuse}")
        self.kv_reuse = place.kv_reuse
        """Prompt tokens the session holds at positions 0.. (llama-server's ``cache_prompt``): kept by the prefill."""
        self.receipts: list[WindowReceipt] = []
        self.discards: list[Discard] = []
        self.figures = figure_batch(self.runtime, settings)
        """Plain steps' probability figures, summarised in batches (``inspector.engine.deferred_figures``), or None."""
        self.events: list[EngineEvent] = []
        self.plain_steps = 0
        self.decode_step = 0
        self.window_count = 0
        self.window_in_flight: tuple[int, Proposal, WindowTrace] | None = None
        """(window index, proposal, trace so far) while a window executes (its predictions are
        in the trace once verified), else None. Read by observers on the engine thread."""
        self.finish_reason: str | None = None
        self.session_retired = False
        self.errors: list[str] = []
        self._failures = FailureLog(self.errors, self.discards, lambda: self.source, lambda: self.observer,
                                    self._emit)
        self.cancel_event = threading.Event()
        self.text = CommittedText(self.runtime.token_piece, settings.stop)
        self.prefill_elapsed_us = 0
        self.decode_elapsed_us = 0
        """Time spent in decode steps (µs), without the time the observer held a commit."""
        self._held_ns = 0
        self._t0 = perf_counter_ns()
        self.started_us = (self._t0 - scheduler.epoch_ns) // 1000
        """When the request started, in microseconds on the scheduler's clock
        (``LockOperation.started_us``); event ``t_us`` values count from here."""
        self._started = False
        self._ctx: WindowContext | None = None
        self._commit_window: int | None = None
        self._rng = np.random.default_rng(settings.sampling.seed)
        self._consumer_stop = False

    # -- state ---------------------------------------------------------------
    @property
    def generated(self) -> list[int]:
        """Generated token ids (committed after the prompt)."""
        return self.tokens[self.prompt_token_count :]

    @property
    def generated_count(self) -> int:
        return len(self.tokens) - self.prompt_token_count

    @property
    def canonical_position(self) -> int:
        """The KV length the session must have between steps (tokens)."""
        return len(self.tokens) - 1

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def kv_length(self) -> int | None:
        """The session's KV length read from the runtime (under the lock), or None if retired."""
        if self.session_retired or self.session_id is None:
            return None
        sid = self.session_id
        return self.scheduler.execute("stats", sid, lambda rt: rt.kv_length(sid)).value

    def summary(self):
        """Acceptance figures of this request so far (``inspector.engine.stats.summarize``)."""
        return summarize(self)

    def close(self) -> None:
        """Drop the session from the KV cache (the request's records are kept). Idempotent."""
        if self.session_id is not None and not self.session_retired:
            sid = self.session_id
            self.scheduler.execute("drop", sid, lambda rt: rt.drop_session(sid))
        self.session_retired = True

    def cancel(self) -> None:
        """Ask the running step to stop: at the next commit token, or in the decode in flight
        (through the runtime's ``request_abort``, when it has one). Any thread."""
        self.cancel_event.set()
        abort = getattr(self.runtime, "request_abort", None)
        if abort is not None and self.session_id is not None:
            abort(self.session_id)

    # -- events --------------------------------------------------------------
    def _emit(self, kind, window=None, token=None, row=None, position=None, detail="", probabilities=None) -> None:
        ev = EngineEvent(
            len(self.events), (perf_counter_ns() - self._t0) // 1000, kind,
            -1 if self.session_id is None else self.session_id, window, token, row, position, detail,
            probabilities,
        )
        self.events.append(ev)
        self.observer.on_event(ev)

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> None:
        """Open the session if needed, prefill the whole prompt and commit the first generated
        token, the target's prediction from the prefill's last row (llama.cpp's schedule).

        The first token is committed like any other (``before_commit``, the token callback, stop strings,
        ``max_new_tokens``); its events are a ``prefill`` event carrying the token (and its row's probabilities) and a
        commit whose outcome is ``prefill``. It takes no decode step: ``decode_step`` stays 0 and its time counts as
        prefill time, as in llama-server's ``timings`` (``predicted_per_second``: the tokens after the first over the
        time after it).

        Raises ``PromptTooLong`` before any decode when the prompt needs more than ``n_ctx - 1`` positions, and
        ``SpeculationUnsupported`` when a proposal source is set but the runtime's KV cache cannot remove a partial
        suffix exactly (its ``rollback`` probe; plain decoding, with no source, still runs). A cancellation before the
        first token is committed raises ``RequestCancelled`` with nothing committed; ``resume()`` then starts over."""
        check_start(self.scheduler, self.prompt_token_count, self.source is not None)
        self._open_and_prefill(first=self.generated_count == 0)
        self._started = True

    def _open_and_prefill(self, first: bool = False) -> None:
        """Open a session when there is none and decode the stream into it from position 0.

        ``first``: the request's start: the whole prompt is decoded and its last row's prediction
        committed as the first generated token. Otherwise (a retired session replaced) every
        committed token but the current one is decoded, and nothing is predicted."""
        if self.session_id is None or self.session_retired:
            self.session_id = open_session(self.scheduler, self.settings.sampling)
            self.session_retired = False
        self._ctx = window_context(self.scheduler, self.session_id, self.request_id, self.cancel_event, self.faults,
                                   self._emit, self._before_commit, self.settings, self._rng, self.constraints)
        prefix = list(self.tokens) if first else self.tokens[:-1]
        kept, self.kv_reuse = (self.kv_reuse if first else 0), 0  # a later prefill starts from position 0
        kv, token, probs, elapsed_us = prefill(self._ctx, prefix, first, kept, self.settings, self.observer,
                                               (self.constraints, self.prompt_token_count), self.source)
        self.prefill_elapsed_us += elapsed_us
        self._emit(PREFILL, token=token, row=None if token is None else 0, position=kv,
                   detail=f"{len(prefix)} tokens" + (f", {kept} reused" if kept else ""), probabilities=probs)
        if token is not None:
            self._commit_first(token, kv)

    def _commit_first(self, token: int, kv: int) -> None:
        """Commit the prefill's prediction (``kv`` = prompt tokens, its position) as the first
        generated token. Cancelled before its commit: the prompt leaves the KV cache (trimmed to 0),
        so ``resume`` prefills it again. Injected faults aim at windows and plain steps, never at
        this token. Raises what ``_commit`` raises, and ``RequestCancelled``."""
        base = kv - 1
        self._commit_window = None
        self._before_commit(None, 0, token, kv)
        if self.cancel_event.is_set():
            trim_prompt(self._ctx)
            raise self._failures.cancelled()
        self._started = True  # from here the stream holds the token: resume() continues, it does not start over
        try:
            self._commit(token, 0, base, FROM_PREFILL)
        except BaseException as exc:
            self._failures.error(exc, None)
            raise
        self._check_finished()

    def resume(self) -> None:
        """Make the session canonical again after an error and clear the cancellation: a retired session is
        replaced by a new one prefilled with the canonical stream; otherwise the KV cache is trimmed (or
        refilled) to ``len(tokens) - 1``."""
        self.cancel_event.clear()
        self._consumer_stop = False
        if not self._started:
            self.start()
            return
        if self.session_retired:
            self._open_and_prefill()
        else:  # the KV length back to ``canonical_position`` (trim extra, decode missing)
            resync(self._ctx, self.tokens, self.kv_length())

    def run(self, max_steps: int | None = None) -> str | None:
        """Run decode steps until the request finishes (or ``max_steps`` ran). Returns the finish reason
        (None if ``max_steps`` ended it first). Raises whatever a step raises, after repair; call
        ``resume()`` then ``run()`` to continue from the canonical position."""
        if not self._started:
            self.start()
        n = 0
        while not self.finished and (max_steps is None or n < max_steps):
            self.step()
            n += 1
        return self.finish_reason

    # -- one decode step ------------------------------------------------------
    def step(self) -> None:
        """Run one decode step: a proposal window, or a plain one-token step."""
        if self.finished:
            return
        if self.cancel_event.is_set():
            raise RequestCancelled()
        t_step = perf_counter_ns()
        held = self._held_ns
        try:
            self._step(t_step)
            if self.figures is not None:  # after windows too: a batch's last plain rows wait at most MAX_AGE_MS
                self.figures.flush_if_due()
        finally:  # time the observer held a commit (Step token) is no decode time
            self.decode_elapsed_us += (perf_counter_ns() - t_step - (self._held_ns - held)) // 1000
            self.decode_step += 1

    def _before_commit(self, window, row, token, position) -> None:
        """The observer's ``before_commit``, timed: the time it blocks (Step token holds there) is
        kept out of ``decode_elapsed_us``."""
        t = perf_counter_ns()
        try:
            self.observer.before_commit(window, row, token, position)
        finally:
            self._held_ns += perf_counter_ns() - t

    def _step(self, started_ns: int) -> None:
        settings = self.settings
        base = self.canonical_position
        generated = self.generated_count
        remaining = settings.max_new_tokens - generated
        if remaining <= 0:
            self._finish(FINISH_LENGTH)
            return
        free = self.runtime.n_ctx - base
        if free <= 0:
            self._finish(FINISH_CONTEXT_FULL)
            return
        cap = max_proposal_tokens(remaining, self.runtime.n_batch, settings.draft_max, free)
        proposal, proposal_us, why = None, 0, PLAIN_DECODING
        if self.source is not None and cap > 0:
            proposal, proposal_us, why = self._query(cap)
        elif self.source is not None:
            why = f"{NO_ROOM}: {no_room_detail(remaining, self.runtime.n_batch, settings.draft_max, free)}"
        if proposal is None:
            self._plain_step(base, why)
            return

        window_index = self.window_count + 1
        self._commit_window = window_index
        self.observer.on_proposal(window_index, proposal)
        trace = WindowTrace()
        self.window_in_flight = (window_index, proposal, trace)
        try:
            receipt = execute_window(
                self._ctx, trace,
                window_index=window_index, decode_step=self.decode_step,
                source_name=self.source.name, current=self.tokens[-1], proposal=proposal,
                base_position=base, generated=generated, max_new_tokens=settings.max_new_tokens,
                on_commit=self._commit, proposal_elapsed_us=proposal_us, started_ns=started_ns,
            )
        except BaseException as exc:
            self.window_count = window_index
            if trace.session_retired:
                self.session_retired = True
            self._failures.window_failed(exc, self.decode_step, window_index, proposal, trace, base)
            raise
        finally:
            self.window_in_flight = None
        if receipt is None:
            self._failures.discard(self.decode_step, proposal, POSITION_MISMATCH, base)
            self._plain_step(base, f"{DISCARDED}: {POSITION_MISMATCH}")
            return
        self.window_count = window_index
        self.receipts.append(receipt)
        try:
            self.source.report(receipt)
        except Exception:  # SPEC step 9: a failing report is logged, never fatal
            log.exception("proposal source %s failed in report()", self.source.name)
        self.observer.on_receipt(receipt)
        self._check_finished()

    def _query(self, cap: int) -> tuple[Proposal | None, int, str]:
        """Ask the source (SPEC step 1) and validate its answer (step 2: ``query_source``): (the proposal
        or None, the source's time in microseconds, why there is none: ``inspector.engine.no_proposal``).
        A source that raised gives an error event; an invalid proposal is discarded."""
        deadline, sampling = perf_counter() + self.settings.proposal_deadline_ms / 1000.0, self.settings.sampling
        request = ProposalRequest(self.tokens, self.prompt_token_count, self.decode_step, cap, deadline)
        answer = query_source(self.source, request, self.faults, self.window_count + 1, self.tokens[-1], self.runtime.n_vocab,
                              getattr(self.runtime, "tree_branches", 1),
                              (sampling is not None and sampling.penalized) or self.constraints is not None)
        if answer.error is not None:
            self._emit(ERROR, detail=answer.error)
        if answer.invalid is not None:
            self._failures.discard(self.decode_step, answer.invalid, answer.reason, self.canonical_position)
        return answer.proposal, answer.elapsed_us, answer.why

    def _plain_step(self, base: int, why: str = "") -> None:
        """Decode the current token alone and commit the target's prediction; ``why``: the reason no
        window ran (the ``step`` event's detail, ``inspector.engine.no_proposal``).

        If the session's KV length is not ``base`` (e.g. after a ``position_mismatch`` discard) it is made
        canonical first."""
        sid = self.session_id
        cancel = self.cancel_event
        step = plain_step_call(sid, self.tokens[-1], base, cancel, self.settings.sampling, self.settings.probabilities,
                               self.figures, top=self.settings.top_probabilities)
        self._commit_window = None
        try:
            timed = self.scheduler.execute("step", sid, step)
            if timed.value is None:
                resync(self._ctx, self.tokens, self.kv_length())
                timed = self.scheduler.execute("step", sid, step)
        except DecodeAborted:
            repair_to(self._ctx, WindowTrace(), base, None, "after aborted step")
            self._failures.error(RequestCancelled(), None)
            raise RequestCancelled() from None
        except Exception as exc:  # a failed plain step (e.g. the runtime is gone): an error event, then up
            self._failures.error(exc, None)
            raise
        token, probs = timed.value
        self._emit(STEP, token=token, row=0, position=base + 1, detail=why, probabilities=probs)
        self._before_commit(None, 0, token, base + 1)
        if self.faults and self.faults.take(F.CANCEL, None, 1):
            cancel.set()
        if cancel.is_set():
            repair_to(self._ctx, WindowTrace(), base, None, "cancelled before commit")
            raise self._failures.cancelled()
        self.plain_steps += 1  # a plain step counts once its token is committed (a cancelled one is not)
        try:
            self._commit(token, 0, base)
        except BaseException as exc:
            self._failures.error(exc, None)
            raise
        self._check_finished()

    def _commit(self, token: int, row: int, base_position: int, outcome: str | None = None) -> bool:
        """Append a committed token, stream its text and ask the consumer (SPEC step 6).

        ``row``: the verification row whose prediction this is; the token's
        own position in the stream is ``base_position + row + 1``. ``outcome``: the commit
        event's detail when it is not ``token_outcome``'s (the first token: ``prefill``).
        Returns True to stop (a stop string was found, or the consumer asked).
        Raises the consumer's error, or an injected callback error.
        """
        self.tokens.append(token)
        window = self._commit_window
        flight = self.window_in_flight
        proposal = flight[1].token_ids if window is not None and flight is not None else None
        self._emit(COMMIT, window, token, row, base_position + row + 1,
                   outcome or token_outcome(row, token, proposal))
        delta = self.text.push(token)
        if self.faults and outcome is None and self.faults.take(F.CALLBACK_ERROR, window, row + 1):
            where = f"token {row + 1} of window {window}" if window else "a plain step"
            raise InjectedCallbackError(f"token callback failed (injected) at {where}")
        if self.observer.on_token(token, delta):
            self._consumer_stop = True
        return self._consumer_stop or self.text.stopped_by is not None

    def _check_finished(self) -> None:
        n = self.generated_count
        reason = finish_after_commit(self.text.stopped_by is not None, self._consumer_stop, n,
                                     bool(n) and self.runtime.is_eog(self.tokens[-1]), self.settings.max_new_tokens)
        if reason is not None:
            self._finish(reason)

    def _finish(self, reason: str) -> None:
        self.text.finish()
        self.finish_reason = reason
        if self.figures is not None:  # the last plain steps' figures, before the finish is told
            self.figures.flush()
        self._emit(FINISH, detail=reason)
        self.observer.on_finish(reason)

    def failure_place(self) -> str:
        """Where the last error happened, for messages (``inspector.engine.records.failure_place``)."""
        return failure_place(self.events, self.window_count)
