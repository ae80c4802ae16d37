"""``Runtime``: every ability a runtime offers, declared once (issue 55).

``inspector.llama.runtime.LlamaRuntime`` implements it over llama.cpp in this process and
``inspector.llama.remote.RemoteRuntime`` in a child process (a model split over RPC: llama.cpp's RPC client
aborts its process when a server goes away). The proxy forwards exactly ``RUNTIME_METHODS`` and copies
``RUNTIME_FACTS`` once after loading, both read from this protocol: a new runtime ability is written here
and in ``LlamaRuntime``, and the proxy has it (``tests/test_runtime_protocol.py`` checks both classes).

What the engine itself calls is the smaller part (``open_session``, ``kv_length``, ``decode_rows``,
``prefill_predict``, ``trim``, ``retire_checkpoint``, ``drop_session``, ``is_eog``, ``token_piece``, ...;
``tests/fake_runtime.py`` implements just that). Every method runs under the ``RuntimeScheduler`` lock
unless its documentation says otherwise; each member's units, errors and llama.cpp origin are documented where
``LlamaRuntime`` has it: its own methods, or the component that lends it (``request_abort``:
``inspector.llama.abort.AbortSwitch.request``; ``session_open``, ``grammar_rejection``:
``inspector.llama.sessions.SessionTable``; ``keep_branch``: ``inspector.llama.tree_batch.BranchSequences.keep``;
``last_logits``, ``row_logits``, ``row_logits_top2``: ``inspector.llama.logits.LogitsReader`` ``rows``, ``row``,
``top2``; the token ones and ``chat_template``: ``inspector.llama.vocab.Vocabulary``; ``save_sequence``,
``restore_sequence``: ``inspector.llama.sequence_state.SequenceState``).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable


class RuntimeFacts(Protocol):
    """What a runtime knows from its load on (a ``RemoteRuntime`` copies it from its child once), and its
    counters."""

    info: Any
    """``inspector.llama.model_file.ModelInfo`` of the model file."""
    model_path: str
    n_ctx: int
    """Context size (positions, shared by every session: the KV cache is unified)."""
    n_batch: int
    """Most rows per decode."""
    n_seq_max: int
    """Most sessions at once."""
    tree_branches: int
    """Most branches (leaves) of one tree window."""
    n_threads: int
    """CPU threads decoding (follows ``set_threads``)."""
    n_vocab: int
    vocab_type: int
    architecture: str
    swa_full: bool
    layers: str
    """Where the layers went (llama.cpp's load log), e.g. "31/31 layers on RPC0[127.0.0.1:50052]"."""
    offload: Any
    """``inspector.llama.devices.Offload`` as loaded, or None."""
    rpc_devices: Any
    offload_note: str
    converted_from: str | None

    decode_ns: int
    """Total time inside ``llama_decode`` (nanoseconds; benchmarks)."""
    predict_ns: int
    """Total time picking greedy predictions from the rows' logits (nanoseconds; benchmarks)."""


class RuntimeSessions(Protocol):
    """The runtime's life and its sessions: each a KV sequence with its own sampler."""

    def close(self) -> None: ...
    def request_abort(self, sid: int) -> None: ...
    def set_threads(self, n_threads: int) -> None: ...
    def describe(self) -> dict: ...

    def sample_in_graph(self, top: int = 5) -> None: ...
    def open_session(self, sampling=None) -> int: ...
    def reopen_session(self, sid: int, sampling, kept: int, tokens: Sequence[int], on_host: bool = False) -> int: ...
    def drop_session(self, sid: int) -> None: ...
    def constrain(self, sid: int, constraints, start: int, known: Sequence[int] = ()) -> None: ...
    def grammar_rejection(self, sid: int) -> int | None: ...
    def session_open(self, sid: int) -> bool: ...
    def kv_length(self, sid: int) -> int: ...
    def save_sequence(self, sid: int): ...
    def restore_sequence(self, sid: int, data) -> None: ...


class RuntimeDecoding(Protocol):
    """Decoding rows into sessions, and the last decode's rows (logits, predictions, figures)."""

    def prefill(self, sid: int, tokens: Sequence[int], position: int) -> None: ...
    def prefill_predict(self, sid: int, tokens: Sequence[int], position: int) -> int: ...
    def decode_rows(self, sid: int, tokens: Sequence[int], position: int, abort=None) -> list[int]: ...
    def decode_logits(self, sid: int, tokens: Sequence[int], position: int, abort=None): ...
    def decode_tree(self, sid: int, tokens: Sequence[int], parents: Sequence[int], position: int,
                    abort=None) -> list[int]: ...
    def decode_step(self, rows) -> None: ...
    def keep_branch(self, sid: int, branch: int, position: int) -> None: ...
    def trim(self, sid: int, position: int) -> bool: ...
    def retire_checkpoint(self, sid: int, start: int, count: int) -> None: ...

    def penalize_last_rows(self, sid: int, n: int, position: int) -> None: ...
    def row_probabilities(self, n: int, proposed: Sequence[int], predictions: Sequence[int], sampling=None,
                          rows: Sequence[int] | None = None, top: int = 5): ...
    def last_logits(self, n: int): ...
    def row_logits(self, row: int): ...
    def row_logits_top2(self, row: int) -> tuple[int, int, float]: ...


class RuntimeTokens(Protocol):
    """Tokens, their text and the chat template (``inspector.llama.vocab.Vocabulary``), and what the KV
    cache can do."""

    def is_eog(self, token: int) -> bool: ...
    def token_piece(self, token: int, special: bool = False) -> bytes: ...
    def token_text(self, token: int) -> str: ...
    def detokenize(self, tokens: Sequence[int]) -> str: ...
    def tokenize(self, text: str, add_special: bool = False, parse_special: bool = True) -> list[int]: ...
    def prompt_tokens(self, text: str, raw: bool = False, system_prompt: str = "") -> list[int]: ...
    def chat_prompt(self, user_text: str, system_prompt: str = "") -> str: ...
    def chat_messages_prompt(self, messages: list[dict], tools: list | None = None, extra: dict | None = None,
                             generation_prompt: bool = True) -> str: ...
    def chat_template(self) -> str | None: ...

    @property
    def rollback(self): ...
    def probe_rollback(self): ...


@runtime_checkable
class Runtime(RuntimeFacts, RuntimeSessions, RuntimeDecoding, RuntimeTokens, Protocol):
    """A loaded model and one context holding several sessions (KV sequences), as ``LlamaRuntime``: every
    ability of the four parts above."""


_PARTS = (RuntimeFacts, RuntimeSessions, RuntimeDecoding, RuntimeTokens)


def _members(kind: str) -> tuple[str, ...]:
    if kind == "facts":
        return tuple(RuntimeFacts.__annotations__)
    return tuple(n for part in _PARTS[1:] for n, v in vars(part).items()
                 if not n.startswith("_") and (callable(v) or isinstance(v, property)) and n != "rollback")


RUNTIME_FACTS: tuple[str, ...] = tuple(n for n in _members("facts") if n not in ("decode_ns", "predict_ns"))
"""The data a runtime has from its load on (a ``RemoteRuntime`` copies them from its child once)."""
RUNTIME_METHODS: tuple[str, ...] = _members("methods")
"""Every method of a runtime (a ``RemoteRuntime`` forwards each to its child unless it has its own)."""
