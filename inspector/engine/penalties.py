"""Repeat, presence and frequency penalties of a verification row, as llama.cpp's sampler applies them.

The rule (llama.cpp 0c1e570, ``src/llama-sampler.cpp`` ``llama_sampler_penalties_apply``): for every
token seen ``count`` > 0 times among the last ``repeat_last_n`` tokens, its logit is divided by
``repeat_penalty`` when positive, multiplied by it otherwise, then reduced by
``count * frequency_penalty + presence_penalty``, all in float32. The penalties are the first stage
of llama-server's chain (``common/common.h``: ``penalties, dry, top_n_sigma, top_k, ...``), greedy
included.

Which tokens a row sees: llama-server accepts every prompt token into the slot's sampler when the
request starts (``tools/server/server-context.cpp``, "init sampler"), then every token it samples,
and a draft is verified by ``common_sampler_sample_and_accept_n`` (``common/sampling.cpp``), which
samples row i after accepting rows 0..i-1. So the row at position ``p`` of the sequence sees the
last ``repeat_last_n`` tokens at positions ``<= p``: the prompt, the committed output, and the proposal
tokens before it in the window (the branch the row's KV is conditioned on). One rule for plain steps,
verification rows and the prefill's last row: ``penalize_rows``.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from inspector.engine.settings import SamplingSettings


def penalize_row(row: np.ndarray, window: Counter, s: SamplingSettings) -> None:
    """Apply the penalties for the token counts ``window`` (token id -> count > 0) to one row of
    logits in place. ``row``: shape (n_vocab,), float32. Ids outside the vocabulary are ignored.
    Does nothing when ``s.penalized`` is false."""
    if not window or not s.penalized:
        return
    n_vocab = row.shape[0]
    ids = np.fromiter((t for t in window if 0 <= t < n_vocab), dtype=np.int64)
    if ids.size == 0:
        return
    counts = np.fromiter((window[t] for t in ids.tolist()), dtype=np.float32, count=ids.size)
    f32 = np.float32
    logit = row[ids]
    logit = np.where(logit <= f32(0), logit * f32(s.repeat_penalty), logit / f32(s.repeat_penalty))
    logit = logit - (counts * f32(s.frequency_penalty) + (counts > 0).astype(np.float32) * f32(s.presence_penalty))
    row[ids] = logit.astype(np.float32, copy=False)


def penalize_rows(rows: np.ndarray, sequence: Sequence[int], first_position: int, s: SamplingSettings) -> None:
    """Apply the penalties to consecutive rows of logits in place.

    ``rows``: shape (n, n_vocab), float32, the rows of positions ``first_position .. first_position +
    n - 1``. ``sequence``: the session's tokens by position (at least ``first_position + n`` of them:
    row i's own input token included). Row i sees the last ``s.repeat_last_n`` tokens at positions
    ``<= first_position + i`` (module docstring). Raises ``ValueError`` when ``sequence`` is shorter.
    Does nothing when ``s.penalized`` is false.
    """
    n = rows.shape[0]
    if not s.penalized or n == 0:
        return
    if len(sequence) < first_position + n:
        raise ValueError(f"penalties need the tokens up to position {first_position + n - 1}, "
                         f"observed {len(sequence)} tokens")
    last_n = s.repeat_last_n
    start = max(0, first_position + 1 - last_n)
    window = Counter(sequence[start:first_position + 1])
    for i in range(n):
        if i:
            p = first_position + i
            window[sequence[p]] += 1
            old = p - last_n
            if old >= 0:
                t = sequence[old]
                window[t] -= 1
                if window[t] == 0:
                    del window[t]
        penalize_row(rows[i], window, s)
