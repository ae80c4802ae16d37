"""Scripted proposals, taken from a given token list or text (tests, demonstrations)."""

from __future__ import annotations

from typing import Sequence

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest
from inspector.sources.descriptors import Option, SourceDescriptor

SCRIPT_DONE = "script_done"
LEFT_SCRIPT = "left_script"
REASONS = {
    SCRIPT_DONE: "every scripted proposal was handed out, or the output reached the script's end",
    LEFT_SCRIPT: "the output left the script (a correction differed from it): nothing more is proposed",
}
"""Why the scripted source proposes nothing (its declaration's ``reasons``)."""


class ScriptedSource:
    """Proposes from a script, in one of two modes.

    ``continuation`` (tokens given): while the generated tokens equal the
    script's first tokens, propose the next script tokens (up to the cap);
    once generation leaves the script, propose nothing.
    ``proposals`` (a list of token lists): hand out one proposal per query,
    in order, truncated to nothing (None) when exhausted; proposals longer than
    the cap are proposed as given (and discarded by the engine) unless
    ``clip`` is True.

    Build from text with ``ScriptedSource.from_text(runtime.tokenize, text)``.
    """

    name = "scripted"

    def __init__(
        self,
        continuation: Sequence[int] | None = None,
        proposals: Sequence[Sequence[int]] | None = None,
        clip: bool = True,
    ) -> None:
        if (continuation is None) == (proposals is None):
            raise ValueError("give exactly one of continuation= or proposals=")
        self.continuation = tuple(continuation) if continuation is not None else None
        self.proposals = [tuple(p) for p in proposals] if proposals is not None else None
        self.clip = clip
        self._next = 0
        self.reported: list = []
        self.discarded: list[tuple[bytes, str]] = []

    @classmethod
    def from_text(cls, tokenize, text: str) -> "ScriptedSource":
        """A continuation script from text; ``tokenize(text) -> list[int]`` without BOS."""
        return cls(continuation=tokenize(text))

    def settings(self) -> dict:
        if self.continuation is not None:
            return {"mode": "continuation", "tokens": list(self.continuation)}
        return {"mode": "proposals", "proposals": [list(p) for p in self.proposals]}

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        cap = request.max_proposal_tokens
        if self.proposals is not None:
            if self._next >= len(self.proposals):
                return NoProposal(SCRIPT_DONE)
            ids = self.proposals[self._next]
            self._next += 1
            if self.clip:
                ids = ids[:cap]
            return Proposal(b"script:%d" % self._next, ids) if ids else NoProposal(SCRIPT_DONE, "an empty proposal")
        g0 = request.prompt_token_count
        tokens = request.tokens
        g = len(tokens) - g0
        script = self.continuation
        if g >= len(script):
            return NoProposal(SCRIPT_DONE)
        if tuple(tokens[g0:]) != script[:g]:
            return NoProposal(LEFT_SCRIPT)
        self._next += 1
        return Proposal(b"script:%d" % self._next, script[g : g + cap])

    def report(self, receipt) -> None:
        self.reported.append(receipt)

    def discard(self, decision_id: bytes, reason: str) -> None:
        self.discarded.append((decision_id, reason))


SCRIPTED = SourceDescriptor("scripted", (
    Option("script", "text", "", "text whose tokens are proposed as the continuation", flag="--script",
           metavar="TEXT", file_flag="--script-file", required=True, missing="The scripted source needs a script text.",
           multiline=True, placeholder="script text: its tokens are proposed as the continuation"),
), help="propose the tokens of a typed text as the continuation", capabilities=frozenset({"settings"}),
    reasons=REASONS)
"""The scripted source's declaration."""


def make_scripted(ctx, **options) -> ScriptedSource:
    """The ``scripted`` source: the tokens of ``script`` (tokenized by ``ctx.runtime``, special tokens
    parsed, no BOS) as the continuation. Options are checked with ``SCRIPTED`` (``ValueError``)."""
    o = SCRIPTED.with_defaults(options)
    rt = ctx.runtime
    return ScriptedSource.from_text(lambda t: rt.tokenize(t, False, True), o["script"])


# The factory carries its declaration, as a plugin's does (``inspector.sources.registry.BUILTIN_FACTORIES``).
make_scripted.descriptor = SCRIPTED
