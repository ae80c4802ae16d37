"""A tiny fake runtime for pure-logic tests of the engine (repair ordering, faults).

The fake target's greedy prediction after token t is (t + 1) % n_vocab, so
the "right" proposal after current token c is c+1, c+2, ... . Real-model
tests cover the same behaviours on llama.cpp.
"""

from __future__ import annotations

import numpy as np

from inspector.engine.probabilities import summarise_rows


class FakeRuntime:
    local_logits = True
    def __init__(self, n_vocab: int = 1000, n_ctx: int = 256, n_batch: int = 64, eog: tuple[int, ...] = ()):
        self.n_vocab = n_vocab
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.eog = set(eog)
        self.kv: dict[int, list[int]] = {}
        self.trim_result = True
        self.calls: list[str] = []

    def open_session(self, sampling=None) -> int:
        sid = next(i for i in range(16) if i not in self.kv)
        self.kv[sid] = []
        return sid

    def kv_length(self, sid: int) -> int:
        return len(self.kv.get(sid, []))

    def decode_rows(self, sid, tokens, position, abort=None):
        self.calls.append(f"decode {len(tokens)}@{position}")
        kv = self.kv[sid]
        assert position == len(kv), f"decode at {position} but kv holds {len(kv)}"
        kv.extend(tokens)
        self._last_rows = tuple(tokens)
        return [(t + 1) % self.n_vocab for t in tokens]

    def last_logits(self, n):
        """Made-up logits of the last decode's first n rows (as the runtime's): after token t, t+1 has logit 4, t+2 logit 2, the rest 0."""
        logits = np.zeros((n, self.n_vocab), dtype=np.float32)
        for i, t in enumerate(self._last_rows[:n]):
            logits[i, (t + 1) % self.n_vocab] = 4.0
            logits[i, (t + 2) % self.n_vocab] = 2.0
        return logits

    def row_probabilities(self, n, proposed, predictions, sampling=None, rows=None, top=5):
        """Figures from ``last_logits`` (``rows``: only these, in order)."""
        logits = self.last_logits(n)
        return summarise_rows(logits if rows is None else logits[list(rows)], proposed, predictions, sampling, top=top)

    def prefill(self, sid, tokens, position):
        self.decode_rows(sid, tokens, position)
        self._last_rows = self._last_rows[-1:]  # a prompt's logits: its last row only, as llama.cpp's

    def prefill_predict(self, sid, tokens, position):
        prediction = self.decode_rows(sid, tokens, position)[-1]
        self._last_rows = self._last_rows[-1:]
        return prediction

    def trim(self, sid, position) -> bool:
        self.calls.append(f"trim {position}")
        if not self.trim_result:
            return False
        del self.kv[sid][position:]
        return True

    def retire_checkpoint(self, sid, start, count):
        self.calls.append("retire")

    def drop_session(self, sid):
        self.calls.append(f"drop {sid}")
        self.kv.pop(sid, None)

    def is_eog(self, token) -> bool:
        return token in self.eog

    def token_piece(self, token, special=False) -> bytes:
        return b"" if token in self.eog else f"{token} ".encode()

    def token_text(self, token) -> str:
        return self.token_piece(token, True).decode()


class ListSource:
    """Hands out the given proposals in order (then None); records reports and discards."""

    name = "list"

    def __init__(self, proposals):
        self.proposals = list(proposals)
        self.reported = []
        self.discarded = []

    def propose(self, request):
        from inspector.engine.proposal import Proposal

        if not self.proposals:
            return None
        p = self.proposals.pop(0)
        if callable(p):
            p = p(request)
        return None if p is None else Proposal(b"p%d" % len(self.reported + self.discarded), tuple(p))

    def report(self, receipt):
        self.reported.append(receipt)

    def discard(self, decision_id, reason):
        self.discarded.append((decision_id, reason))


def follow(k):
    """A proposal of the fake target's own next k tokens (fully accepted)."""
    return lambda req: [(req.tokens[-1] + i) % 1000 for i in range(1, k + 1)]
