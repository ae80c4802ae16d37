"""Chrome trace event JSON (opens in Perfetto / chrome://tracing) from a receipts document.

Lanes (threads of process 1): one per session ("session N": prefill, verify,
commit, repair and plain-step slices) and one per session for the runtime
lock ("lock, session N": wait and hold slices). A counter track per session
follows its KV position. Each verify slice carries its window's receipt
figures as arguments. Times are microseconds on the scheduler's clock.
A conversation document gives one process per turn ("turn N"), on the same clock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from inspector.receipts.document import is_conversation

PID = 1
LOCK_LANE = 1000


def _window_args(w: dict) -> dict:
    keys = ("window_index", "disposition", "proposal_token_count", "accepted_proposal_tokens",
            "canonical_prediction_count", "base_position", "position_after_verification",
            "canonical_position", "trimmed_rows", "proposal_elapsed_us", "verification_elapsed_us",
            "repair_elapsed_us", "runtime_lock_wait_us", "runtime_lock_hold_us", "verification_rule")
    return {k: w[k] for k in keys if k in w}


def chrome_trace(doc: dict, pid: int = PID, process: str = "") -> dict:
    """The trace of one receipts document (``inspector.receipts.load_document``), as process ``pid``
    (``process``: a prefix of its name); a conversation document traces each turn as process N.

    Returns ``{"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}``;
    every event has ``name``, ``ph``, ``ts``, ``pid`` and ``tid``.
    """
    if is_conversation(doc):
        turns = [chrome_trace(d, k, f"turn {k}") for k, d in enumerate(doc["turns"], 1)]
        return {"traceEvents": [e for t in turns for e in t["traceEvents"]], "displayTimeUnit": "ms",
                "metadata": {**turns[0]["metadata"], "turns": len(turns),
                             "windows": sum(t["metadata"]["windows"] for t in turns)}}
    t0 = int(doc.get("timing", {}).get("request_started_us", 0))
    out: list[dict] = []
    sessions: set[int] = set()

    def ev(**kw) -> None:
        kw.setdefault("pid", pid)
        out.append(kw)

    windows = {w["window_index"]: w for w in doc["windows"]}
    for e in doc["events"]:
        sid, ts, kind = e["session_id"], t0 + e["t_us"], e["kind"]
        sessions.add(sid)
        if kind == "verify" and e.get("window") in windows:
            w = windows[e["window"]]
            dur = max(1, w["verification_elapsed_us"])
            ev(name="verify", cat="window", ph="X", ts=ts - dur, dur=dur, tid=sid, args=_window_args(w))
        elif kind == "verify":
            ev(name="verify (window failed)", cat="window", ph="i", s="t", ts=ts, tid=sid,
               args={"window_index": e.get("window")})
        elif kind == "repair":
            w = windows.get(e.get("window"))
            dur = max(1, w["repair_elapsed_us"]) if w else 1
            ev(name=f"repair ({e.get('detail') or 'trim'})", cat="window", ph="X", ts=ts - dur, dur=dur, tid=sid,
               args={"window_index": e.get("window"), "position": e.get("position")})
        elif kind == "commit":
            ev(name="commit", cat="token", ph="i", s="t", ts=ts, tid=sid,
               args={"window_index": e.get("window"), "row": e.get("row"), "token": e.get("token"),
                     "position": e.get("position")})
        elif kind in ("error", "discard", "finish"):
            ev(name=f"{kind}: {e.get('detail', '')}"[:120], cat=kind, ph="i", s="t", ts=ts, tid=sid)
        if e.get("position") is not None and kind in ("prefill", "verify", "repair", "step"):
            ev(name=f"KV position, session {sid}", ph="C", ts=ts, tid=sid, args={"kv": e["position"]})

    for op in doc.get("lock_operations", []):
        sid = op["session_id"]
        start, wait, hold = op["started_us"], op["wait_us"], op["hold_us"]
        if sid >= 0:
            sessions.add(sid)
        lane = LOCK_LANE + max(sid, 0)
        if wait > 0:
            ev(name="lock wait", cat="lock", ph="X", ts=start, dur=wait, tid=lane, args={"operation": op["kind"]})
        ev(name=f"lock hold: {op['kind']}", cat="lock", ph="X", ts=start + wait, dur=max(1, hold), tid=lane,
           args={"operation": op["kind"]})
        if op["kind"] in ("prefill", "step") and sid >= 0:
            name = "plain step" if op["kind"] == "step" else "prefill"
            ev(name=name, cat="runtime", ph="X", ts=start + wait, dur=max(1, hold), tid=sid)

    where = doc["model"].get("layers")  # e.g. "30/30 layers on RPC0[127.0.0.1:50052]": the lanes say where
    ev(name="process_name", ph="M", ts=0, tid=0,
       args={"name": (f"{process} · " if process else "") + f"spec-inspector · {Path(str(doc['model'].get('path', ''))).name}" + (f" · {where}" if where else "")})
    for sid in sorted(sessions):
        ev(name="thread_name", ph="M", ts=0, tid=sid, args={"name": f"session {sid}"})
        ev(name="thread_name", ph="M", ts=0, tid=LOCK_LANE + max(sid, 0), args={"name": f"lock, session {sid}"})
    return {
        "traceEvents": out,
        "displayTimeUnit": "ms",
        "metadata": {"source": "spec-inspector", "model": doc["model"].get("path"),
                     "layers": where, "offload": doc["model"].get("offload"), "windows": len(doc["windows"])},
    }


def write_trace(doc: dict, path: str | os.PathLike) -> Path:
    """Write ``chrome_trace(doc)`` as JSON to ``path``; return the path."""
    p = Path(path)
    p.write_text(json.dumps(chrome_trace(doc)), encoding="utf-8")
    return p
