"""A session's decode in the batched schedule: its rows join the step (``inspector.engine.step_batch``),
and the runtime's logits reader is pointed at them once the step is decoded.

``fill_rows`` writes a step's ``BatchRow`` list into a ``llama_batch`` (the runtime then decodes it
once); ``join_step`` is what ``LlamaRuntime`` does instead of its own fill-and-decode when its
scheduler batches steps.
"""

from __future__ import annotations

import threading
from typing import Sequence

from inspector.engine.step_batch import BatchRow, Joined, StepBatch


def fill_rows(batch, rows: Sequence[BatchRow]) -> None:
    """Write ``rows`` into the ``llama_batch`` ``batch`` (one sequence id per row)."""
    tok, pos, nseq, seq, lg = batch.token, batch.pos, batch.n_seq_id, batch.seq_id, batch.logits
    for i, r in enumerate(rows):
        tok[i] = r.token
        pos[i] = r.position
        nseq[i] = 1
        seq[i][0] = r.seq
        lg[i] = 1 if r.output else 0
    batch.n_tokens = len(rows)


def join_step(steps: StepBatch, logits, sid: int, tokens: Sequence[int], position: int, all_logits: bool,
              abort: threading.Event | None) -> Joined:
    """Join session ``sid``'s rows to the step and wait for it (``StepBatch.join``: its errors); then
    point ``logits`` (a ``LogitsReader``) at them, so the runtime reads them as its whole last decode."""
    joined = steps.join(sid, tokens, position, all_logits, abort)
    logits.window(joined.output_first, joined.batch_first, joined.outputs)
    return joined
