"""Acceptance statistics with named definitions (SPEC, last invariant).

Only receipts feed these figures, and receipts count only committed tokens
(``accepted_proposal_tokens`` = min(accepted, committed)), so
branch-conditioned predictions never reach them.
"""

from __future__ import annotations

from typing import Iterable

from inspector.engine.records import Summary, WindowReceipt


def acceptance_by_position(receipts: Iterable[WindowReceipt]) -> list[float]:
    """Per proposal index i: accepted / offered over windows whose proposal had an index i."""
    offered: list[int] = []
    accepted: list[int] = []
    for r in receipts:
        n = r.proposal_token_count
        if len(offered) < n:
            offered.extend([0] * (n - len(offered)))
            accepted.extend([0] * (n - len(accepted)))
        for i in range(n):
            offered[i] += 1
        for i in range(r.accepted_proposal_tokens):
            accepted[i] += 1
    return [a / o for a, o in zip(accepted, offered)]


def accepted_length_histogram(receipts: Iterable[WindowReceipt]) -> list[int]:
    """``h[n]`` = windows that accepted exactly n proposal tokens, n = 0..max proposal length."""
    h: list[int] = []
    for r in receipts:
        n = max(r.proposal_token_count, r.accepted_proposal_tokens)
        if len(h) <= n:
            h.extend([0] * (n + 1 - len(h)))
        h[r.accepted_proposal_tokens] += 1
    return h


def decode_tokens_per_s(generated_tokens: int, decode_elapsed_us: int) -> float | None:
    """Generated tokens / decode time (seconds, prefill excluded); None before any decode time."""
    return generated_tokens / (decode_elapsed_us / 1e6) if decode_elapsed_us > 0 else None


def server_tokens_per_s(generated_tokens: int, decode_elapsed_us: int, requests: int = 1) -> float | None:
    """Decode tokens/s as llama-server's ``timings.predicted_per_second`` counts them: the tokens that cost a
    decode (each request's first comes from its prompt's last row) over the decode time, tokens per second
    (llama.cpp 0c1e570 ``tools/server/server-common.h`` ``n_gen_tps``: ``n_gen - 1`` over the time after the
    first token). ``requests``: how many requests (turns) the counts sum. None before any decode time. Every
    ratio against llama-server's speed uses this, not ``decode_tokens_per_s`` (which counts the first token
    too: ``n / (n - 1)`` faster, 1.6% at 64 tokens)."""
    steps = generated_tokens - requests
    return steps / (decode_elapsed_us / 1e6) if decode_elapsed_us > 0 and steps > 0 else None


def summarize_receipts(
    receipts: list[WindowReceipt],
    *,
    plain_steps: int,
    discards: int,
    generated_tokens: int,
    decode_elapsed_us: int,
    prefill_elapsed_us: int = 0,
    finish_reason: str | None = None,
) -> Summary:
    """Build the ``Summary`` of a request from its receipts and counters.

    ``acceptance_rate`` = sum(accepted_proposal_tokens) / sum(proposal_token_count);
    ``mean_accepted_length`` = 1 + accepted / windows;
    ``decode_tokens_per_s`` = generated tokens / decode time (prefill excluded);
    ``end_to_end_tokens_per_s`` = generated tokens / (prefill + decode time);
    ``accepted_length_histogram[n]`` = windows that accepted exactly n proposal tokens.
    """
    s = Summary()
    s.windows = len(receipts)
    s.plain_steps = plain_steps
    s.discards = discards
    s.generated_tokens = generated_tokens
    s.proposed_tokens = sum(r.proposal_token_count for r in receipts)
    s.accepted_tokens = sum(r.accepted_proposal_tokens for r in receipts)
    for r in receipts:
        s.dispositions[r.disposition] = s.dispositions.get(r.disposition, 0) + 1
    if s.proposed_tokens:
        s.acceptance_rate = s.accepted_tokens / s.proposed_tokens
    if s.windows:
        s.mean_accepted_length = 1 + s.accepted_tokens / s.windows
    s.acceptance_by_position = acceptance_by_position(receipts)
    s.accepted_length_histogram = accepted_length_histogram(receipts)
    s.decode_elapsed_us = decode_elapsed_us
    s.prefill_elapsed_us = prefill_elapsed_us
    s.decode_tokens_per_s = decode_tokens_per_s(generated_tokens, decode_elapsed_us)
    if decode_elapsed_us + prefill_elapsed_us > 0:
        s.end_to_end_tokens_per_s = generated_tokens / ((decode_elapsed_us + prefill_elapsed_us) / 1e6)
    s.finish_reason = finish_reason
    return s


def summarize(generation) -> Summary:
    """``summarize_receipts`` over a ``Generation``'s state."""
    g = generation
    return summarize_receipts(
        g.receipts,
        plain_steps=g.plain_steps,
        discards=len(g.discards),
        generated_tokens=g.generated_count,
        decode_elapsed_us=g.decode_elapsed_us,
        prefill_elapsed_us=g.prefill_elapsed_us,
        finish_reason=g.finish_reason,
    )


SLOW_VERIFICATION_FACTOR = 5.0
"""A verification slower than this many times the run's median is marked slow."""
SLOW_VERIFICATION_HINT = (
    "llama.cpp's threads waited for a CPU core: with as many threads as cores, every barrier of the "
    "decode waits while another process or thread runs (two llama.cpp processes on one machine slow "
    "each other 10-30x, a single row by much more). Stop the other work, or lower Threads (-t).")
"""Why a verification is far slower than its neighbours on a CPU (measured here: a 1-row decode of
~6 ms took 2.7 s while a second llama.cpp process ran; issue 11)."""


def slow_verification_threshold_us(verification_us) -> float | None:
    """Verification time (µs) above which a window counts as slow: ``SLOW_VERIFICATION_FACTOR``
    times the median of ``verification_us`` (the run's ``verification_elapsed_us`` values), or
    None with fewer than 5 windows (no median worth comparing with)."""
    v = sorted(verification_us)
    if len(v) < 5:
        return None
    n = len(v)
    median = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return SLOW_VERIFICATION_FACTOR * max(median, 1)

