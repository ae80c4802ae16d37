"""N-gram prompt lookup: propose what followed the last n tokens earlier in the stream."""

from __future__ import annotations

from inspector.engine.proposal import Proposal, ProposalRequest


class NgramSource:
    """Prompt-lookup proposals (as llama.cpp's ``common_ngram`` lookup and
    llama-cpp-python's ``LlamaPromptLookupDecoding``, with a hash index).

    For n from ``n_max`` down to ``n_min``: find the most recent earlier
    occurrence of the last n committed tokens and propose up to the cap of
    the tokens that followed it. ``n_min`` >= 1, ``n_max`` >= ``n_min``
    (tokens). Lookups cost O(n_max) per query: every n-gram of the stream is
    indexed once, by the position right after its most recent occurrence.
    """

    name = "ngram"

    def __init__(self, n_max: int = 4, n_min: int = 2) -> None:
        if n_min < 1 or n_max < n_min:
            raise ValueError(f"n-gram sizes must satisfy 1 <= n_min <= n_max, observed n_min={n_min}, n_max={n_max}")
        self.n_max = n_max
        self.n_min = n_min
        self._index: dict[int, dict[tuple, int]] = {n: {} for n in range(n_min, n_max + 1)}
        self._indexed = 0  # positions < _indexed have their n-grams ending there indexed
        self._stream: list[int] = []
        self._count = 0

    def settings(self) -> dict:
        return {"n_max": self.n_max, "n_min": self.n_min}

    def _sync(self, tokens) -> None:
        n_tok = len(tokens)
        st = self._stream
        if n_tok < len(st) or (st and tokens[len(st) - 1] != st[-1]):
            # Not an extension of what we indexed (new request): start again.
            st.clear()
            for d in self._index.values():
                d.clear()
            self._indexed = 0
        st.extend(tokens[len(st):])
        # Index n-grams ending before the last token: an n-gram ending at
        # end e (exclusive) maps to e, the start of what followed it.
        stop = n_tok - 1
        for e in range(max(self._indexed, 1), stop + 1):
            for n, d in self._index.items():
                if e >= n:
                    d[tuple(st[e - n : e])] = e
        self._indexed = max(self._indexed, stop + 1)

    def propose(self, request: ProposalRequest) -> Proposal | None:
        """Propose up to ``request.max_proposal_tokens`` tokens, or None without a match."""
        tokens = request.tokens
        self._sync(tokens)
        n_tok = len(tokens)
        cap = request.max_proposal_tokens
        st = self._stream
        for n in range(self.n_max, self.n_min - 1, -1):
            if n_tok <= n:
                continue
            follow = self._index[n].get(tuple(st[n_tok - n :]))
            if follow is None or follow >= n_tok:
                continue
            ids = st[follow : follow + cap]
            if ids:
                self._count += 1
                return Proposal(b"ngram:%d:n%d" % (self._count, n), tuple(ids))
        return None

    def report(self, receipt) -> None:
        """Nothing to learn: committed tokens arrive with the next request."""

    def discard(self, decision_id: bytes, reason: str) -> None:
        """Nothing to roll back."""
