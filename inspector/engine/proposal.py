"""Proposals, the request a source answers, and proposal validation (SPEC steps 1-2)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Sequence, runtime_checkable

from inspector.engine.tree import INVALID_TREE, branch_rows, is_chain, leaves, tree_shape_error

# Discard reasons (SPEC step 2, step 3 and step 9). Exact strings appear in receipts.
DEADLINE_EXCEEDED = "deadline_exceeded"
INVALID_TOKEN_COUNT = "invalid_token_count"
INVALID_TOKEN_ID = "invalid_token_id"
INVALID_DECISION_ID = "invalid_decision_id"
POSITION_MISMATCH = "position_mismatch"
EXECUTION_FAILED = "execution_failed"
DISCARD_REASONS = (
    DEADLINE_EXCEEDED,
    INVALID_TOKEN_COUNT,
    INVALID_TOKEN_ID,
    INVALID_DECISION_ID,
    INVALID_TREE,
    POSITION_MISMATCH,
    EXECUTION_FAILED,
)

MAX_DECISION_ID_BYTES = 64


@dataclass(frozen=True, slots=True)
class Proposal:
    """Continuation tokens suggested by a proposal source (SPEC "proposal").

    ``decision_id``: opaque id chosen by the source, 1..64 bytes; the engine
    hands it back in ``report`` (through the receipt) or ``discard``.
    ``token_ids``: 1..max_proposal_tokens token ids, each in [0, n_vocab).
    ``draft_probabilities``: optional, one distribution (numpy array of
    n_vocab floats) per token, the draft's q that the token was sampled from;
    the ``rejection`` verification rule needs it (``inspector.engine.sampling``).
    ``draft_token_probabilities``: optional, the draft's probability q (0..1) of each
    proposed token, kept in the window's probability figures (``draft_q``).
    ``parents``: None for a chain; for a tree (``inspector.engine.tree``), each token's parent row (0:
    the current token; token i sits on row i + 1), verified in one batch. A tree that is one chain
    runs as the chain. Trees take neither draft probabilities nor the ``rejection`` rule.
    """

    decision_id: bytes
    token_ids: tuple[int, ...]
    draft_probabilities: Any = field(default=None, compare=False, repr=False)
    draft_token_probabilities: tuple[float, ...] | None = field(default=None, compare=False, repr=False)
    parents: tuple[int, ...] | None = None

    @property
    def is_tree(self) -> bool:
        """True for a proposal with more than one branch."""
        return self.parents is not None and not is_chain(self.parents)

    def first_branch(self) -> "Proposal":
        """A tree's first branch (the current token's first child down to its first leaf) as a chain
        proposal; a chain as it is."""
        if not self.is_tree:
            return self
        rows = branch_rows(self.parents, leaves(self.parents)[0])
        return replace(self, token_ids=tuple(self.token_ids[r - 1] for r in rows), parents=None)


@dataclass(frozen=True, slots=True)
class ProposalRequest:
    """What the engine gives a source when it asks for a proposal (SPEC step 1).

    ``tokens``: the committed stream, prompt then generated tokens (read only;
    the last one is the current token, not yet in the KV cache).
    ``prompt_token_count``: how many of ``tokens`` are the prompt.
    ``decode_step``: 0-based count of decode steps (windows and plain steps) so far.
    ``max_proposal_tokens``: the cap; a longer proposal is discarded.
    ``deadline_s``: ``time.perf_counter()`` value after which an answer is
    discarded as ``deadline_exceeded`` (advisory: the source is not interrupted).
    """

    tokens: Sequence[int]
    prompt_token_count: int
    decode_step: int
    max_proposal_tokens: int
    deadline_s: float


@runtime_checkable
class ProposalSource(Protocol):
    """The protocol every proposal source follows.

    ``propose`` returns a ``Proposal`` or ``None`` (then the engine runs a plain
    one-token step). ``report`` receives the ``WindowReceipt`` of each verified
    proposal; ``discard`` receives the decision id and a reason from
    ``DISCARD_REASONS`` for each proposal that produced no receipt. Exceptions
    raised by ``report`` or ``discard`` are logged and ignored (SPEC step 9).

    Optional: ``begin(prompt_tokens)``, called once per request right after the prompt's
    prefill, before the first query, with the prompt's token ids; its time counts as
    prefill time. llama.cpp's speculative sources have the same hook
    (``common_speculative_begin``, llama.cpp 0c1e570 ``tools/server/server-context.cpp``,
    called when the prompt is done, inside llama-server's prompt time): a draft model
    prefills the prompt there, ngram-map and ngram-mod index it. Its exceptions are logged
    and ignored too; a source may also do that work at its first query (engines without the hook).
    """

    name: str

    def propose(self, request: ProposalRequest) -> Proposal | None: ...

    def report(self, receipt) -> None: ...

    def discard(self, decision_id: bytes, reason: str) -> None: ...


def max_proposal_tokens(
    remaining_new_tokens: int, n_batch: int, draft_max: int, free_positions: int
) -> int:
    """The proposal cap of SPEC step 1, extended to the context size.

    ``min(remaining_new_tokens - 1, n_batch - 1, draft_max, free_positions - 1)``
    floored at 0, where ``free_positions = n_ctx - base_position`` (positions)
    so that a verify batch of 1 + cap rows never exceeds the context.
    0 means: do not query the source, run a plain step.
    """
    return max(0, min(remaining_new_tokens - 1, n_batch - 1, draft_max, free_positions - 1))


def validate_proposal(
    proposal: Proposal, cap: int, n_vocab: int, answered_s: float, deadline_s: float, max_branches: int = 1
) -> str | None:
    """Return the discard reason for ``proposal``, or ``None`` when it is valid.

    Checks in SPEC step 2 order: deadline (``answered_s > deadline_s``, seconds
    on ``time.perf_counter``), token count (1..cap: a tree's nodes), token ids (0 <= id < n_vocab).
    A decision id outside 1..64 bytes is ``invalid_decision_id``; a tree whose ``parents`` are not a
    tree (``tree_shape_error``) or that has more than ``max_branches`` leaves, ``invalid_tree``.
    """
    if answered_s > deadline_s:
        return DEADLINE_EXCEEDED
    tokens = proposal.token_ids
    if not tokens or len(tokens) > cap:
        return INVALID_TOKEN_COUNT
    for t in tokens:
        if t < 0 or t >= n_vocab:
            return INVALID_TOKEN_ID
    if not isinstance(proposal.decision_id, (bytes, bytearray)) or not (
        1 <= len(proposal.decision_id) <= MAX_DECISION_ID_BYTES
    ):
        return INVALID_DECISION_ID
    parents = proposal.parents
    if parents is not None and (tree_shape_error(tokens, parents) is not None or len(leaves(parents)) > max_branches):
        return INVALID_TREE
    return None
