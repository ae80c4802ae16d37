"""Plain one-token decoding of the same prompt, and where speculation differs from it.

SPEC invariant: with greedy sampling the committed stream equals plain greedy
decoding, except where batch arithmetic flips a near-tie; such a divergence
is detected and reported with the target's logit margin, never hidden.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from inspector.engine.generation import Generation
from inspector.engine.scheduler import RuntimeScheduler
from inspector.engine.settings import GenerationSettings


@dataclass(frozen=True, slots=True)
class Divergence:
    """First generated index where two streams differ.

    ``index``: 0-based generated-token index. ``plain_token`` /
    ``speculative_token``: the tokens there (-1 when that stream already
    ended). ``top_token``/``second_token``/``margin``: the target's two best
    tokens after the shared prefix, decoded one row at a time, and their
    logit difference (logits; a near-tie is well below 1).
    """

    index: int
    plain_token: int
    speculative_token: int
    top_token: int
    second_token: int
    margin: float

    def describe(self) -> str:
        return (
            f"speculative output diverges from plain decoding at generated token {self.index}: "
            f"plain {self.plain_token}, speculative {self.speculative_token}; "
            f"target top-2 margin there {self.margin:.4f} logits (tokens {self.top_token}, {self.second_token})"
        )


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first position where ``a`` and ``b`` differ (a shorter stream
    differs where it ends), or None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    if len(a) != len(b):
        return min(len(a), len(b))
    return None


def plain_generation(
    scheduler: RuntimeScheduler, prompt_tokens: Sequence[int], settings: GenerationSettings
) -> Generation:
    """Run plain one-token decoding (no proposal source) to completion on a new
    session, drop the session, and return the finished ``Generation``."""
    g = Generation(scheduler, None, prompt_tokens, settings)
    try:
        g.run()
    finally:
        g.close()
    return g


def top2_after(scheduler: RuntimeScheduler, tokens: Sequence[int]) -> tuple[int, int, float]:
    """The target's top two tokens and logit margin after ``tokens``, decoding
    the last token alone on a temporary session (plain arithmetic)."""
    def op(rt):
        sid = rt.open_session(None)
        try:
            if len(tokens) > 1:
                rt.prefill(sid, list(tokens[:-1]), 0)
            rt.decode_rows(sid, (tokens[-1],), len(tokens) - 1)
            return rt.row_logits_top2(0)
        finally:
            rt.drop_session(sid)

    return scheduler.execute("baseline", -1, op).value


def compare_with_plain(
    scheduler: RuntimeScheduler,
    prompt_tokens: Sequence[int],
    speculative_generated: Sequence[int],
    settings: GenerationSettings,
) -> tuple[list[int], Divergence | None]:
    """Plain-decode the prompt with ``settings`` and compare with a speculative run.

    Returns (plain generated tokens, the first ``Divergence`` or None).
    """
    plain = plain_generation(scheduler, prompt_tokens, settings).generated
    i = first_difference(plain, speculative_generated)
    if i is None:
        return plain, None
    top, second, margin = top2_after(scheduler, list(prompt_tokens) + list(plain[:i]))
    return plain, Divergence(
        i,
        plain[i] if i < len(plain) else -1,
        speculative_generated[i] if i < len(speculative_generated) else -1,
        top, second, margin,
    )
