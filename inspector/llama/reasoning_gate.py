"""The reasoning-block gate of a lazy grammar: llama.cpp 0c1e570's reasoning-budget sampler without a budget
(``common/reasoning-budget.cpp``; ``common/sampling.cpp`` ``common_sampler_init`` makes one for a lazy grammar on
a template with reasoning markers, ``grammar_should_apply`` and ``common_sampler_accept`` use it).

Its state follows the generated tokens (and first the generation prompt's, ``prefill``): idle until the start
marker's tokens, open ("counting") until the end marker's, then done (a new start marker opens it again); each
marker is matched on token ids, as an Aho-Corasick matcher of one pattern that restarts after a match. While it
is open the grammar neither constrains nor accepts tokens (a tool-call marker inside the reasoning block does not
wake it); when the end marker closes it, the marker's tokens are given to the grammar (``replay``).
"""

from __future__ import annotations

from typing import Sequence

IDLE, OPEN, DONE = 0, 1, 2


class _Matcher:
    """One token pattern, matched as it grows (the matched prefix's length), restarting after a match."""

    def __init__(self, pattern: Sequence[int]) -> None:
        self.pattern = tuple(pattern)
        self.k = 0

    def advance(self, token: int) -> bool:
        seq = self.pattern[:self.k] + (token,)
        for k in range(min(len(self.pattern), len(seq)), -1, -1):
            if k == 0 or seq[len(seq) - k:] == self.pattern[:k]:
                self.k = k
                break
        if self.pattern and self.k == len(self.pattern):
            self.k = 0
            return True
        return False


class ReasoningGate:
    """The gate of ``start`` / ``end`` marker tokens, after ``prefill`` (the generation prompt's tokens)."""

    def __init__(self, start: Sequence[int], end: Sequence[int], prefill: Sequence[int] = ()) -> None:
        self.start, self.end, self.prefill = tuple(start), tuple(end), tuple(prefill)
        self.reset()

    def reset(self) -> None:
        self.state = IDLE
        self._start, self._end = _Matcher(self.start), _Matcher(self.end)
        for token in self.prefill:
            self.advance(token)

    def copy(self) -> "ReasoningGate":
        out = ReasoningGate.__new__(ReasoningGate)
        out.start, out.end, out.prefill, out.state = self.start, self.end, self.prefill, self.state
        out._start, out._end = _Matcher(self.start), _Matcher(self.end)
        out._start.k, out._end.k = self._start.k, self._end.k
        return out

    @property
    def open(self) -> bool:
        """Inside a reasoning block: the lazy grammar is neither applied nor given tokens."""
        return self.state == OPEN

    def advance(self, token: int) -> bool:
        """Take one token; True when it closed the block (the end marker's tokens are then replayed)."""
        if self.state == OPEN:
            if self._end.advance(token):
                self.state = DONE
                return True
        elif self._start.advance(token):
            self.state = OPEN
            self._end = _Matcher(self.end)
        return False
