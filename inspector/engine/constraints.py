"""What constrains a request's sampling besides ``SamplingSettings``: a GBNF grammar and a logit bias.

``Constraints`` is plain data (it pickles, so it reaches a ``RemoteRuntime`` child unchanged). The
runtime applies it (``inspector.llama.grammar``) as llama.cpp 0c1e570's ``common/sampling.cpp`` does:

- ``logit_bias``: the ``llama_sampler_init_logit_bias`` stage at the head of the sampler chain, before
  the penalties and every other stage; each ``(token, bias)`` adds ``bias`` to that token's logit
  (a token named twice gets both; ``-inf`` bans it). Every row gets it: plain steps, the prefill's
  last row and every verification row, greedy or sampled.
- ``grammar``: a GBNF text whose rule ``root`` must match the generated text (never the prompt),
  applied through llama.cpp's own grammar sampler (``llama_sampler_init_grammar``), outside the chain:
  ``common_sampler_sample`` samples the chain first and, when the grammar refuses that token, samples
  again with the grammar applied first (its rejection path, ``grammar_first`` false as llama-server
  calls it). Speculative verification follows ``common_sampler_sample_and_accept_n``: row i is
  sampled with the grammar in the state after the committed tokens and the proposal's first i tokens,
  and verification stops at the first mismatch.
- ``triggers``: the grammar is lazy (``llama_sampler_init_grammar_lazy_patterns``): it constrains nothing
  until the generated text matches one of these regular expressions, then applies from the match on (the
  tool-call grammars of llama-server's chat route under ``tool_choice: auto``).
- ``gate``: a lazy grammar's reasoning-block gate (start marker tokens, end marker tokens, the generation
  prompt's tokens; ``inspector.llama.reasoning_gate``): inside the block the grammar is neither applied nor
  given tokens (llama.cpp's reasoning-budget sampler, made for a lazy grammar on a reasoning template).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Constraints:
    """``grammar``: GBNF text (rule ``root``), or None. ``logit_bias``: ``(token id, bias)`` pairs in the
    order given (bias a float; ``-math.inf`` bans the token). ``triggers``: regular expressions that wake a
    lazy grammar (empty: the grammar applies from the first generated token). Raises ``ValueError`` for a token id that is
    not a whole number >= 0 or a bias that is NaN or +inf; the vocabulary bound is the runtime's check."""

    grammar: str | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    triggers: tuple[str, ...] = ()
    gate: tuple = ()

    def __post_init__(self) -> None:
        if self.grammar is not None and not isinstance(self.grammar, str):
            raise ValueError(f"grammar must be GBNF text, observed {type(self.grammar).__name__}")
        pairs = []
        for token, bias in self.logit_bias:
            if isinstance(token, bool) or not isinstance(token, int) or token < 0:
                raise ValueError(f"logit_bias token must be a whole number >= 0, observed {token!r}")
            value = float(bias)
            if math.isnan(value) or value == math.inf:
                raise ValueError(f"logit_bias of token {token} must be a number or -inf (a ban), observed {bias!r}")
            pairs.append((int(token), value))
        object.__setattr__(self, "logit_bias", tuple(pairs))
        if self.grammar is not None and not self.grammar.strip():
            object.__setattr__(self, "grammar", None)  # llama.cpp: an empty grammar string is no grammar

    @property
    def empty(self) -> bool:
        """Nothing to apply: neither a grammar nor a bias."""
        return self.grammar is None and not self.logit_bias

    def to_json(self) -> dict:
        """Plain JSON (``-inf`` written as ``false``, llama-server's ban form)."""
        return {"grammar": self.grammar, "grammar_triggers": list(self.triggers),
                "logit_bias": [[t, False if b == -math.inf else b] for t, b in self.logit_bias]}
