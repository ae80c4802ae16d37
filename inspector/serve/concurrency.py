"""What a served request rode with: its slot, its times, and the batched schedule's steps that carried it.

``concurrency_block`` is the ``served.concurrency`` object of a request's receipts document (issue 53):
``slot``, ``waiting_ms`` (arrival to a slot taking it), ``started_unix_s``, ``first_token_unix_s``,
``ended_unix_s``; in the batched schedule ``steps`` (each decode step its rows rode in: its index, rows
in all, the sessions active, and per session its kind of rows: ``prompt``, ``plain`` or ``draft``) and
``window_steps`` (the step each window was verified in, window order). A window is one join of its
session (``inspector.engine.step_batch``), so the request's ``draft`` parts, in order, are its windows.
"""

from __future__ import annotations

import time

from inspector.engine.step_batch import DRAFT


def window_steps(steps, session_id: int) -> list[int]:
    """The index of each step in ``steps`` (``StepRecord``) where session ``session_id`` put draft rows, in
    order: the step each of its windows was verified in."""
    return [s.index for s in steps for p in s.parts if p.session_id == session_id and p.kind == DRAFT]


def concurrency_block(job, record) -> dict:
    """``served.concurrency`` of ``job`` (a ``Job`` a slot ran) with its ``SessionRecord`` ``record``; times
    in seconds since the epoch (the end: now, as the document is written when the request ends)."""
    row = job.row
    out = {"slot": job.slot,
           "waiting_ms": round(1000.0 * row.waiting_s, 3) if row.waiting_s is not None else None,
           "started_unix_s": row.started, "first_token_unix_s": row.first_token_at, "ended_unix_s": time.time()}
    if job.steps:
        out["steps"] = [s.to_json() for s in job.steps]
        out["window_steps"] = window_steps(job.steps, record.receipts[0].session_id) if record.receipts else []
    return out
