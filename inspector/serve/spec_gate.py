"""``serve --spec-max-active M``: drafts off while more than M slots are generating.

A speculative window costs rows the batch could have spent on other slots' tokens: with many slots
generating at once the joined decode is already wide, and a draft's rejected rows are pure cost. vLLM
(``--speculative-config``'s ``disable_by_batch_size``: speculation off for new requests while more
requests than that are running) and SGLang turn speculation off past a batch size; llama-server
(llama.cpp 0c1e570 ``tools/server/server-context.cpp``) has no such rule: every slot drafts whenever its
source proposes. Ours is decided per window, at the source query: ``SpecGate`` wraps a request's source
and answers ``NoProposal(BUSY_SLOTS)`` (a plain step, its reason recorded in the step's ``detail``)
while ``generating()`` (the slots running a request) is above the limit; otherwise it asks the source.
The source is not asked at a gated step, so a source that learns only from its queries (none of the
llama.cpp n-gram sources: they read the whole context each query) sees fewer of them.
"""

from __future__ import annotations

from typing import Callable

from inspector.engine.no_proposal import BUSY_SLOTS, NoProposal


class SpecGate:
    """A proposal source (``inner``) asked only while ``generating()`` (slots, a count) is at most ``limit``
    (slots); above it, ``propose`` answers ``NoProposal(BUSY_SLOTS, ...)``. ``gated``: steps answered so.
    Every other attribute (``name``, ``report``, ``discard``, ``begin``, ``settings``, ``close``, ``draft``,
    ...) is the inner source's, so the engine, the receipts and ``close_source`` see the source itself."""

    def __init__(self, inner, generating: Callable[[], int], limit: int) -> None:
        self.inner = inner
        self.generating = generating
        self.limit = limit
        self.gated = 0

    def propose(self, request):
        """The inner source's proposal for ``request`` (``ProposalRequest``), or ``NoProposal`` while more than
        ``limit`` slots generate."""
        busy = self.generating()
        if busy > self.limit:
            self.gated += 1
            return NoProposal(BUSY_SLOTS, f"{busy} slots generating, --spec-max-active {self.limit}")
        return self.inner.propose(request)

    def __getattr__(self, name: str):
        if name == "inner":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)
