"""llama.cpp's ``ngram-mod`` proposer as a source: a hashed n-gram -> next-token pool.

Our own Python for the rules of llama.cpp's ``common/ngram-mod.cpp`` (``common_ngram_mod``:
``idx``, ``add``, ``get``, ``reset``; stored version 20a0483f16744ce28ea77332f01c157152040011)
and ``common_speculative_state_ngram_mod`` in ``common/speculative.cpp`` (``begin``, ``draft``,
``accept``; the pool of 4*1024*1024 entries made in ``common_speculative_init``), with
llama-server 2026's parameters (``common_params_speculative_ngram_mod``: n_match 24, n_min 48,
n_max 64; flags ``--spec-ngram-mod-n-match``, ``--spec-ngram-mod-n-min``,
``--spec-ngram-mod-n-max``, each 1..1024). No llama.cpp code is copied.

Rules:

- The pool has ``POOL_SIZE`` slots; the slot of an n-gram of ``n_match`` tokens is an LCG hash
  (multiplier 6364136223846793005, 64-bit) modulo the size; a slot holds the token that last
  followed an n-gram hashed there (collisions overwrite, lookups are not checked: a collision
  can propose a wrong token, which verification then refuses).
- ``begin`` (a new request): every n-gram of the prompt is added; then, when the pool's
  ``used`` count (adds into an already filled slot) exceeds a quarter of the slots, it is
  emptied.
- each proposal: generated n-grams are added in chunks (when more than 32 new positions
  wait); then starting from the last ``n_match`` tokens the pool is walked token by token, up
  to ``n_max`` tokens; a walk that stops (an empty slot) before ``n_min`` tokens proposes
  nothing. The engine's cap (draft max) then keeps the first tokens of the walk.
- after each verified proposal: less than half accepted three times in a row empties the pool.

The pool is shared by every request of a session (``SourceContext.memory``, key
``("ngram-mod", n_match)``), as llama-server shares one pool across all slots.
"""

from __future__ import annotations

from array import array

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest
from inspector.sources.descriptors import Option, SourceDescriptor

POOL_SIZE = 4 * 1024 * 1024
"""Slots of the pool (llama.cpp: ``common_ngram_mod(n, 4*1024*1024)``, 16 MB of int32)."""
EMPTY = -1
"""An empty slot (llama.cpp ``common_ngram_mod::EMPTY``)."""
OCCUPANCY_RESET = 0.25
"""``begin`` empties the pool when used/size exceeds this (llama.cpp ``f_thold``)."""
ADD_CHUNK = 32
"""Generated n-grams are added once more than this many positions wait."""
LOW_ACCEPTANCE = 0.5
LOW_STREAK = 3
"""Three verified proposals in a row with less than half accepted empty the pool."""
_MULT = 6364136223846793005
_MASK = (1 << 64) - 1


HISTORY_SHORT = "history_short"
BELOW_N_MIN = "below_n_min"
REASONS = {
    HISTORY_SHORT: "fewer tokens so far than n_match",
    BELOW_N_MIN: "the pool walk from the last n_match tokens stopped before n_min tokens (llama-server's default "
                 "n_min is 48: short repeats never propose)",
}
"""Why ngram-mod proposes nothing (its declaration's ``reasons``)."""


class ModPool:
    """The hashed pool: ``n`` (the n-gram length) and ``size`` slots of int32 tokens."""

    def __init__(self, n: int, size: int = POOL_SIZE) -> None:
        self.n = n
        self.size = size
        self.entries = array("i", [EMPTY]) * size
        self.used = 0
        self.resets = 0

    def slot(self, tokens, start: int) -> int:
        h = 0
        for t in tokens[start:start + self.n]:
            h = (h * _MULT + t) & _MASK
        return h % self.size

    def add(self, tokens, start: int) -> None:
        """Record that ``tokens[start + n]`` followed the n-gram at ``start``."""
        i = self.slot(tokens, start)
        if self.entries[i] == EMPTY:  # a slot filled for the first time (llama.cpp: used++ on EMPTY)
            self.used += 1
        self.entries[i] = tokens[start + self.n]

    def get(self, tokens, start: int) -> int:
        return self.entries[self.slot(tokens, start)]

    def reset(self) -> None:
        self.entries = array("i", [EMPTY]) * self.size
        self.used = 0
        self.resets += 1


class NgramModSource:
    """llama.cpp ``--spec-type ngram-mod`` (see the module docstring)."""

    name = "ngram-mod"

    def __init__(self, n_match: int = 24, n_min: int = 48, n_max: int = 64, memory: dict | None = None,
                 pool_size: int = POOL_SIZE) -> None:
        self.n_match, self.n_min, self.n_max = n_match, n_min, n_max
        memory = {} if memory is None else memory
        key = ("ngram-mod", n_match, pool_size)
        if key not in memory:
            memory[key] = ModPool(n_match, pool_size)
        self.pool: ModPool = memory[key]
        self.pool_used_at_start = self.pool.used
        self.i_last = 0
        self.n_draft_last = 0
        self.n_low = 0
        self._begun = False
        self._count = 0
        self._pending = None

    def warm_state(self) -> str:
        """The pool's fill when this request began (``registry.warm_text``), "" when empty."""
        used = self.pool_used_at_start
        if not used:
            return ""
        return f"pool holds {used:,} of {self.pool.size:,} entries from earlier requests"

    def settings(self) -> dict:
        return {"n_match": self.n_match, "n_min": self.n_min, "n_max": self.n_max}

    def begin(self, prompt) -> None:
        """A new request: add the prompt's n-grams; empty an over-full pool (the engine calls it after
        the prefill, as llama-server does when the prompt is done; else the first query does)."""
        self._begun = True
        self.i_last = self.n_draft_last = self.n_low = 0
        n = self.n_match
        if len(prompt) < n:
            return
        for i in range(len(prompt) - n):
            self.pool.add(prompt, i)
        self.i_last = len(prompt) - n
        if self.pool.used / self.pool.size > OCCUPANCY_RESET:
            self.pool.reset()

    def draft(self, inp, sampled: int) -> list[int]:
        """llama.cpp's draft: ``inp`` is the history without ``sampled`` (the current token)."""
        self.n_draft_last = 0
        n, cur = self.n_match, len(inp)
        self.walked = 0
        if cur < n:
            return []
        if self.i_last + ADD_CHUNK < cur:
            for i in range(self.i_last, cur - n):
                self.pool.add(inp, i)
            self.i_last = cur - n
        walk = list(inp[cur - n + 1:]) + [sampled]
        for i in range(self.n_max):
            token = self.pool.get(walk, i)
            if token == EMPTY:
                if i < self.n_min:
                    self.walked = i
                    return []
                break
            walk.append(token)
        out = walk[n:]
        self.n_draft_last = len(out)
        return out

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        tokens = request.tokens
        if not self._begun:
            self.begin(list(tokens[: min(request.prompt_token_count, len(tokens) - 1)]))
        ids = self.draft(tokens[:-1], tokens[-1])[: request.max_proposal_tokens]
        if not ids:
            if len(tokens) - 1 < self.n_match:
                return NoProposal(HISTORY_SHORT)
            return NoProposal(BELOW_N_MIN, f"walked {self.walked} of n_min {self.n_min}")
        self._count += 1
        decision = b"ngram-mod:%d:n%d:w%d" % (self._count, self.n_match, self.n_draft_last)
        self._pending = (decision.hex(), len(ids))
        return Proposal(decision, tuple(ids))

    def report(self, receipt) -> None:
        """llama.cpp's ``accept``: track the low-acceptance streak; empty the pool after three."""
        if self._pending is None or receipt.decision_id != self._pending[0]:
            return
        proposed = self._pending[1]
        self._pending = None
        if receipt.accepted_proposal_tokens / proposed < LOW_ACCEPTANCE:
            self.n_low += 1
            if self.n_low >= LOW_STREAK:
                self.pool.reset()
                self.n_low = 0
                self.i_last = 0
        else:
            self.n_low = 0

    def discard(self, decision_id: bytes, reason: str) -> None:
        """Nothing was verified: nothing to learn."""
        self._pending = None


def _sizes_rule(given: dict, merged: dict) -> None:
    if merged["n_min"] > merged["n_max"]:
        shown = [f"{k}={merged[k]}" + ("" if k in given else " (the default)") for k in ("n_min", "n_max")]
        raise ValueError(f"source ngram-mod options must satisfy n_min <= n_max, observed {', '.join(shown)}")


NGRAM_MOD = SourceDescriptor("ngram-mod", (
    Option("n_match", "int", 24, "llama.cpp spec.ngram_mod.n_match: length of the hashed lookup n-gram (tokens; "
           "llama.cpp warns below 16)", minimum=1, maximum=1024, control_max=64, flag="--spec-ngram-mod-n-match"),
    Option("n_min", "int", 48, "llama.cpp spec.ngram_mod.n_min: propose nothing when the pool walk stops before "
           "this many tokens", minimum=1, maximum=1024, control_max=128, flag="--spec-ngram-mod-n-min"),
    Option("n_max", "int", 64, "llama.cpp spec.ngram_mod.n_max: longest pool walk (tokens; the proposal is also "
           "capped by draft max)", minimum=1, maximum=1024, control_max=128, flag="--spec-ngram-mod-n-max"),
), help="llama.cpp ngram-mod: a hashed n-gram -> next token pool shared by the session's requests",
    capabilities=frozenset({"settings"}), check=_sizes_rule, llama_server="ngram-mod", reasons=REASONS)


def make_ngram_mod(ctx, **options) -> NgramModSource:
    """The ``ngram-mod`` source (its pool kept in ``ctx.memory``); options checked with ``NGRAM_MOD``."""
    o = NGRAM_MOD.with_defaults(options)
    return NgramModSource(o["n_match"], o["n_min"], o["n_max"], memory=ctx.memory)


# Each factory carries its declaration, as a plugin's does (``inspector.sources.registry.BUILTIN_FACTORIES``).
make_ngram_mod.descriptor = NGRAM_MOD
