"""What one served request is on its way through the slot: the ``Job`` the HTTP side submits, each
``TokenOut`` and the final ``JobResult`` it gets back, and the ``ServedRequest`` row the traffic list
and the receipts folder show (``inspector.serve.slot`` fills them)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from inspector.serve.params import CompletionParams
from inspector.session.session_record import SessionRecord
from inspector.session.run_records import RecordStream


@dataclass(frozen=True)
class TokenOut:
    """One generated token for the client: ``text`` is what it made visible (a stop string's possible
    start is held back, so the streamed text always equals the final one), ``piece`` its bytes, ``p``
    the target's probability of it on its own row and ``top`` that row's (token, p) best first, up to 5
    (None / () when probabilities are off)."""

    token: int
    text: str
    piece: bytes
    p: float | None
    top: tuple = ()
    timings: dict | None = None
    """llama-server's ``timings`` so far, when the request asked ``timings_per_token``."""


@dataclass
class JobResult:
    """How a request ended, in the units llama-server's ``timings`` use (tokens, milliseconds)."""

    tokens: list[int] = field(default_factory=list)
    content: str = ""
    stop_type: str = "none"
    """llama-server's ``stop_type``: ``eos``, ``limit``, ``word`` or ``none`` (cancelled, failed)."""
    stopping_word: str = ""
    ended_as: str = ""
    error: str = ""
    prompt_n: int = 0
    cache_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    draft_n: int = 0
    draft_n_accepted: int = 0
    drafts: int = 0
    decodes: int = 0
    """Target ``llama_decode`` calls: the prompt's batches and every decode step (a window is one)."""
    accepted_per_position: tuple[int, ...] = ()
    """Accepted draft tokens per draft position, as llama-server counts them (``server_counted_accepted``)."""
    receipts_path: str = ""
    slot: int = 0
    """The slot that ran it (llama-server's ``id_slot`` in the reply)."""
    stopped: bool = False
    """Cancelled because the server stopped (its client is told so: 503 ``unavailable_error``)."""

    @property
    def finish_reason(self) -> str:
        """OpenAI's ``finish_reason``: ``length`` at the token limit or a full context, else ``stop``."""
        return "length" if self.stop_type == "limit" else "stop"

    @property
    def decode_steps(self) -> int:
        """Generated tokens that cost a decode: all but the first, which comes from the prompt's last row
        (llama.cpp 0c1e570 ``tools/server/server-common.h`` ``n_gen_steps``)."""
        return max(0, self.predicted_n - 1)

    def timings(self) -> dict:
        """llama-server's ``timings`` object (``draft_n`` / ``draft_n_accepted`` only when it drafted). The
        per-token figures divide by ``decode_steps``, not the generated count, as llama-server's
        ``t_gen_per_token_ms`` / ``n_gen_tps`` do."""
        steps = self.decode_steps
        t = {"cache_n": self.cache_n, "prompt_n": self.prompt_n, "prompt_ms": self.prompt_ms,
             "prompt_per_token_ms": self.prompt_ms / self.prompt_n if self.prompt_n else 0.0,
             "prompt_per_second": 1e3 * self.prompt_n / self.prompt_ms if self.prompt_ms else 0.0,
             "predicted_n": self.predicted_n, "predicted_ms": self.predicted_ms,
             "predicted_per_token_ms": self.predicted_ms / steps if steps else 0.0,
             "predicted_per_second": 1e3 * steps / self.predicted_ms if self.predicted_ms else 0.0}
        if self.draft_n:
            t.update(draft_n=self.draft_n, draft_n_accepted=self.draft_n_accepted)
        return t


@dataclass(frozen=True)
class JobPrompt:
    """A request's prompt as the slot runs and records it (``inspector.serve.app`` prepares it under the
    runtime's lock)."""

    tokens: Sequence[int]
    """The prompt's token ids, all prefilled (at least 1; fewer than the slot's context)."""
    text: str
    """The prompt the receipts keep: a chat's last message, else the prompt text."""
    templated_text: str | None = None
    """A chat's whole prompt after the model's chat template (None: not a chat)."""
    conversation: dict | None = None
    """The receipts' ``conversation`` block of a chat whose last message is the user's (``RunRequest``), or None."""


class Job:
    """One accepted HTTP request waiting for or using the slot. ``prompt``: its ``JobPrompt`` (kept as
    ``prompt_tokens``, ``prompt_text``, ``templated_text``, ``conversation``); ``client``: ``HOST:PORT`` ("":
    unknown); ``arrived``: seconds since the epoch (None: now). ``deliver(item)`` is called on the
    engine thread with each ``TokenOut`` and finally the ``JobResult`` (it must not block: the HTTP
    side hands them to its event loop); a request that is not streamed gets its tokens together, just
    before its result (``held``: one wake-up of the HTTP side per request, not one per token)."""

    def __init__(self, endpoint: str, params: CompletionParams, prompt: JobPrompt,
                 deliver: Callable[[object], None], *, client: str = "", arrived: float | None = None) -> None:
        self.id = 0
        self.endpoint = endpoint
        self.params = params
        self.prompt_tokens = list(prompt.tokens)
        self.prompt_text = prompt.text
        self.templated_text = prompt.templated_text
        self.conversation = prompt.conversation
        self.client = client
        self.deliver = deliver
        self.arrived = time.time() if arrived is None else arrived
        """When the request arrived (seconds since the epoch): before its body was read and its prompt
        tokenized, so its wait counts the time tokenizing waited for the runtime lock."""
        self.cancelled = threading.Event()
        self.generation = None
        """The running ``Generation`` (engine thread sets it), for ``ServeSlot.cancel``."""
        self.row: ServedRequest | None = None
        """The request's traffic row (``ServeSlot.submit`` sets it)."""
        self.result: JobResult | None = None
        """How it ended (set on the engine thread just before it is delivered)."""
        self.slot = -1
        """The slot that ran it (``ServeSlots`` sets it when a slot takes it; -1 while it waits)."""
        self.steps: list = []
        """The batched schedule's steps its rows rode in (``StepRecord``, in order), or none."""
        self.cache_n = 0
        """Prompt tokens reused from the slot's cache (the engine thread sets it when the request starts to
        run, before its first token: the Anthropic stream's ``message_start`` reports it)."""
        self.held: list = []
        """A request that is not streamed: its ``TokenOut`` so far, delivered with its result."""
        self.direct = None
        """A stream the slot's thread may write itself (``inspector.serve.direct_stream.DirectStream``), or None."""
        self.cache_restored = 0
        """Tokens of the cached prompt restored into the slot for it (llama-server's ``--cache-ram`` prompt cache,
        ``inspector.serve.prompt_cache``; 0: none)."""


@dataclass
class ServedRequest:
    """One row of the traffic: what the window's Requests list and ``--receipts-dir`` show. Token counts
    in tokens; ``arrived`` in seconds since the epoch; ``tokens_per_s`` decode tokens/s."""

    id: int
    endpoint: str
    arrived: float
    prompt_tokens: int
    client: str = ""
    state: str = "waiting"
    """``waiting``, ``running`` or ``done``."""
    reused: int = 0
    output_tokens: int = 0
    windows: int = 0
    proposed: int = 0
    accepted: int = 0
    tokens_per_s: float | None = None
    warm: str = ""
    """What the source remembered when the request began ("" = cold)."""
    ended_as: str = ""
    error: str = ""
    receipts_path: str = ""
    record: SessionRecord | None = None
    """The request's live record (None once evicted: read ``receipts_path``)."""
    feed: RecordStream | None = None
    """Every record of the request as it runs, for a viewer that builds its own ``SessionRecord``."""
    context_at_windows: tuple = ()
    """(base position, accepted, proposed) of each window: where speculation pays against the context."""
    slot: int = -1
    """The slot that ran it (-1: none yet)."""
    started: float | None = None
    """When a slot began it (seconds since the epoch)."""
    first_token_at: float | None = None
    """When its first token was handed to the client (seconds since the epoch)."""
    ended: float | None = None
    """When it ended (seconds since the epoch)."""

    @property
    def waiting_s(self) -> float | None:
        """Seconds between its arrival and a slot taking it (None while it waits)."""
        return None if self.started is None else max(0.0, self.started - self.arrived)

    @property
    def acceptance(self) -> float | None:
        """Accepted / proposed tokens, None when nothing was proposed."""
        return self.accepted / self.proposed if self.proposed else None
