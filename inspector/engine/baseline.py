"""Plain one-token decoding of the same prompt, and where speculation differs from it.

SPEC invariant: with greedy sampling the committed stream equals plain greedy
decoding, except where batch arithmetic flips a near-tie; such a divergence
is detected and reported with the target's logit margin, never hidden.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from inspector.engine.generation import Generation
from inspector.engine.scheduler import RuntimeScheduler
from inspector.engine.settings import PENALTY_FIELDS, GenerationSettings, SamplingSettings


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
    scheduler: RuntimeScheduler, prompt_tokens: Sequence[int], settings: GenerationSettings, cancel=None
) -> Generation:
    """Run plain one-token decoding (no proposal source) to completion on a new
    session, drop the session, and return the finished ``Generation``.
    ``cancel``: a ``threading.Event``; when set, the run raises ``RequestCancelled``."""
    g = Generation(scheduler, None, prompt_tokens, settings)
    if cancel is not None:
        g.cancel_event = cancel
    try:
        g.run()
    finally:
        g.close()
    return g


def top2_after(scheduler: RuntimeScheduler, tokens: Sequence[int], prompt_token_count: int = 0,
               sampling: SamplingSettings | None = None) -> tuple[int, int, float]:
    """The target's top two tokens and logit margin after ``tokens``, on a temporary session,
    with plain decoding's arithmetic: when ``tokens`` is the prompt (``len(tokens) <=
    prompt_token_count``) from the last row of one prefill, as the first generated token comes;
    otherwise decoding the last token alone after a prefill of the rest. ``sampling``: its
    penalties apply to the logits first, as in the run (None: no penalties)."""
    penalties = None if sampling is None else SamplingSettings(**{k: getattr(sampling, k) for k in PENALTY_FIELDS})

    def op(rt):
        sid = rt.open_session(penalties)
        try:
            if len(tokens) <= prompt_token_count:
                rt.prefill_predict(sid, list(tokens), 0)
                return rt.row_logits_top2(-1)
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
    return plain, find_divergence(scheduler, prompt_tokens, plain, speculative_generated, settings.sampling)


def find_divergence(scheduler: RuntimeScheduler, prompt_tokens: Sequence[int], plain: Sequence[int],
                    speculative: Sequence[int], sampling: SamplingSettings | None = None) -> Divergence | None:
    """The first ``Divergence`` of two generated streams of ``prompt_tokens``
    (with the target's top-2 margin there, decoded one row at a time, after ``sampling``'s
    penalties), or None."""
    i = first_difference(plain, speculative)
    if i is None:
        return None
    top, second, margin = top2_after(scheduler, list(prompt_tokens) + list(plain[:i]), len(prompt_tokens),
                                     sampling)
    return Divergence(
        i,
        plain[i] if i < len(plain) else -1,
        speculative[i] if i < len(speculative) else -1,
        top, second, margin,
    )


@dataclass(frozen=True, slots=True)
class BaselineResult:
    """A plain one-token run of the same prompt and sampling, compared with a
    speculative run (issue 5 "Baseline").

    ``plain_tokens``: the plain run's generated token ids.
    ``plain_decode_tokens_per_s`` / ``speculative_decode_tokens_per_s``:
    generated tokens / decode time (prefill excluded) of each run, None when
    undefined. ``divergence``: the first difference, or None when the streams
    are identical. ``observed_speedup`` = speculative / plain decode tokens/s.
    """

    plain_tokens: tuple[int, ...]
    plain_decode_tokens_per_s: float | None
    speculative_decode_tokens_per_s: float | None
    divergence: Divergence | None

    @property
    def identical(self) -> bool:
        return self.divergence is None

    @property
    def observed_speedup(self) -> float | None:
        p, s = self.plain_decode_tokens_per_s, self.speculative_decode_tokens_per_s
        return None if not p or s is None else s / p

    def describe(self) -> str:
        """One line for people: identical or where it diverged, and the speedup."""
        speed = f"; speculative/plain decode tokens/s = {self.observed_speedup:.2f}x" if self.observed_speedup else ""
        if self.divergence is None:
            return f"identical to plain decoding ({len(self.plain_tokens)} tokens){speed}"
        return self.divergence.describe() + speed

    def to_json(self, token_text=None) -> dict:
        """The document's ``baseline`` object; ``token_text(id) -> str`` adds texts."""
        d = self.divergence
        div = None
        if d is not None:
            div = {"index": d.index, "plain_token": d.plain_token, "speculative_token": d.speculative_token,
                   "top_token": d.top_token, "second_token": d.second_token, "margin": d.margin}
            if token_text is not None:
                div["plain_text"] = token_text(d.plain_token) if d.plain_token >= 0 else ""
                div["speculative_text"] = token_text(d.speculative_token) if d.speculative_token >= 0 else ""
        return {
            "plain_token_ids": list(self.plain_tokens),
            "plain_decode_tokens_per_s": self.plain_decode_tokens_per_s,
            "speculative_decode_tokens_per_s": self.speculative_decode_tokens_per_s,
            "observed_speedup": self.observed_speedup,
            "identical": self.identical,
            "divergence": div,
        }


def run_baseline(scheduler: RuntimeScheduler, generation: Generation, *, max_new_tokens: int | None = None,
                 cancel=None) -> BaselineResult:
    """Plain-decode ``generation``'s prompt with its settings and compare the two
    streams (the speculative run must have finished or stopped).

    ``max_new_tokens``: generate at most this many plain tokens (e.g. the
    number a stopped run generated, so stopping is not a divergence); default
    the run's own limit. ``cancel``: a ``threading.Event`` that stops the
    plain run (``RequestCancelled``). Runs on a new session (the speculative
    session is untouched), under the scheduler lock per decode step. Raises
    what plain decoding raises.
    """
    g = generation
    prompt = list(g.tokens[: g.prompt_token_count])
    settings = g.settings if max_new_tokens is None else replace(g.settings, max_new_tokens=max(1, max_new_tokens))
    plain = plain_generation(scheduler, prompt, settings, cancel)
    spec = list(g.generated)
    divergence = find_divergence(scheduler, prompt, plain.generated, spec, settings.sampling)
    return BaselineResult(tuple(plain.generated), plain.summary().decode_tokens_per_s,
                          g.summary().decode_tokens_per_s, divergence)
