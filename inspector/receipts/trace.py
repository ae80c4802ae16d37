"""Chrome trace event JSON (opens in Perfetto / chrome://tracing) from a receipts document.

Lanes (threads of process 1): one per session ("session N": prefill, verify,
commit, repair and plain-step slices) and one per session for the runtime
lock ("lock, session N": wait and hold slices). A counter track per session
follows its KV position. Each verify slice carries its window's receipt
figures as arguments. Times are microseconds on the scheduler's clock.
A conversation document gives one process per turn ("turn N"), on the same clock.

The trace is written as it is made (issue 37, 16), and ``trace_file`` reads the receipts file piece
by piece (``inspector.receipts.document_stream``): its memory does not grow with the file's size
(but for each window's few figures that its verify slice needs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from inspector.receipts.document import ReceiptsFileError, is_conversation
from inspector.receipts.document_stream import stream_document

PID = 1
LOCK_LANE = 1000
_WINDOW_KEYS = ("window_index", "disposition", "proposal_token_count", "accepted_proposal_tokens",
                "canonical_prediction_count", "base_position", "position_after_verification",
                "canonical_position", "trimmed_rows", "proposal_elapsed_us", "verification_elapsed_us",
                "repair_elapsed_us", "runtime_lock_wait_us", "runtime_lock_hold_us", "verification_rule")


def _window_args(w: dict) -> dict:
    return {k: w[k] for k in _WINDOW_KEYS if k in w}


def _event_trace(e: dict, t0: int, pid: int, windows: dict) -> list[dict]:
    """The trace events of engine event ``e`` (``windows``: window index -> its ``_window_args``)."""
    sid, ts, kind = e["session_id"], t0 + e["t_us"], e["kind"]
    out = []
    if kind == "verify" and e.get("window") in windows:
        w = windows[e["window"]]
        dur = max(1, w["verification_elapsed_us"])
        out.append(dict(name="verify", cat="window", ph="X", ts=ts - dur, dur=dur, tid=sid, args=w, pid=pid))
    elif kind == "verify":
        out.append(dict(name="verify (window failed)", cat="window", ph="i", s="t", ts=ts, tid=sid,
                        args={"window_index": e.get("window")}, pid=pid))
    elif kind == "repair":
        w = windows.get(e.get("window"))
        dur = max(1, w["repair_elapsed_us"]) if w else 1
        out.append(dict(name=f"repair ({e.get('detail') or 'trim'})", cat="window", ph="X", ts=ts - dur, dur=dur,
                        tid=sid, args={"window_index": e.get("window"), "position": e.get("position")}, pid=pid))
    elif kind == "commit":
        out.append(dict(name="commit", cat="token", ph="i", s="t", ts=ts, tid=sid,
                        args={"window_index": e.get("window"), "row": e.get("row"), "token": e.get("token"),
                              "position": e.get("position")}, pid=pid))
    elif kind in ("error", "discard", "finish"):
        out.append(dict(name=f"{kind}: {e.get('detail', '')}"[:120], cat=kind, ph="i", s="t", ts=ts, tid=sid, pid=pid))
    if e.get("position") is not None and kind in ("prefill", "verify", "repair", "step"):
        out.append(dict(name=f"KV position, session {sid}", ph="C", ts=ts, tid=sid, args={"kv": e["position"]}, pid=pid))
    return out


def _lock_trace(op: dict, pid: int) -> list[dict]:
    """The trace events of lock operation ``op``."""
    sid = op["session_id"]
    start, wait, hold = op["started_us"], op["wait_us"], op["hold_us"]
    lane = LOCK_LANE + max(sid, 0)
    out = []
    if wait > 0:
        out.append(dict(name="lock wait", cat="lock", ph="X", ts=start, dur=wait, tid=lane,
                        args={"operation": op["kind"]}, pid=pid))
    out.append(dict(name=f"lock hold: {op['kind']}", cat="lock", ph="X", ts=start + wait, dur=max(1, hold), tid=lane,
                    args={"operation": op["kind"]}, pid=pid))
    if op["kind"] in ("prefill", "step") and sid >= 0:
        name = "plain step" if op["kind"] == "step" else "prefill"
        out.append(dict(name=name, cat="runtime", ph="X", ts=start + wait, dur=max(1, hold), tid=sid, pid=pid))
    return out


def _names(model: dict, process: str, sessions, pid: int) -> list[dict]:
    """The process's and its lanes' names."""
    where = model.get("layers")  # e.g. "30/30 layers on RPC0[127.0.0.1:50052]": the lanes say where
    out = [dict(name="process_name", ph="M", ts=0, tid=0,
                args={"name": (f"{process} · " if process else "") + f"spec-inspector · "
                      f"{Path(str(model.get('path', ''))).name}" + (f" · {where}" if where else "")}, pid=pid)]
    for sid in sorted(sessions):
        out.append(dict(name="thread_name", ph="M", ts=0, tid=sid, args={"name": f"session {sid}"}, pid=pid))
        out.append(dict(name="thread_name", ph="M", ts=0, tid=LOCK_LANE + max(sid, 0),
                        args={"name": f"lock, session {sid}"}, pid=pid))
    return out


def _metadata(model: dict, windows: int) -> dict:
    return {"source": "spec-inspector", "model": model.get("path"), "layers": model.get("layers"),
            "offload": model.get("offload"), "windows": windows}


class _Request:
    """One request's trace as its parts come (``pid``: its process; ``process``: a name prefix)."""

    def __init__(self, pid: int, process: str, t0: int, windows: dict) -> None:
        self.pid, self.process, self.t0, self.windows = pid, process, t0, windows
        self.sessions: set[int] = set()

    def part(self, key: str, item: dict) -> list[dict]:
        if key == "events":
            self.sessions.add(item["session_id"])
            return _event_trace(item, self.t0, self.pid, self.windows)
        if key == "lock_operations":
            if item["session_id"] >= 0:
                self.sessions.add(item["session_id"])
            return _lock_trace(item, self.pid)
        return []

    def end(self, model: dict) -> list[dict]:
        return _names(model, self.process, self.sessions, self.pid)


def _t0(doc: dict) -> int:
    return int(doc.get("timing", {}).get("request_started_us", 0))


def _requests(doc: dict) -> list[tuple[dict, int, str]]:
    """(request document, pid, process name) of each request ``doc`` holds."""
    if is_conversation(doc):
        return [(d, k, f"turn {k}") for k, d in enumerate(doc["turns"], 1)]
    return [(doc, PID, "")]


def _conversation_metadata(metas: list[dict]) -> dict:
    return {**metas[0], "turns": len(metas), "windows": sum(m["windows"] for m in metas)}


def _trace_events(doc: dict):
    """Every trace event of a loaded document, in order."""
    for d, pid, process in _requests(doc):
        r = _Request(pid, process, _t0(d), {w["window_index"]: _window_args(w) for w in d["windows"]})
        for key in ("events", "lock_operations"):
            for item in d.get(key, []):
                yield from r.part(key, item)
        yield from r.end(d["model"])


def _metadata_of(doc: dict) -> dict:
    metas = [_metadata(d["model"], len(d["windows"])) for d, _pid, _process in _requests(doc)]
    return _conversation_metadata(metas) if is_conversation(doc) else metas[0]


def chrome_trace(doc: dict) -> dict:
    """The trace of one receipts document (``inspector.receipts.load_document``); a conversation
    document traces each turn as process N.

    Returns ``{"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}``;
    every event has ``name``, ``ph``, ``ts``, ``pid`` and ``tid``.
    """
    return {"traceEvents": list(_trace_events(doc)), "displayTimeUnit": "ms", "metadata": _metadata_of(doc)}


class _TraceFile:
    """``{"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}`` written event by event (the
    text ``json.dumps(chrome_trace(doc))`` gives), to a temporary file beside ``path`` that replaces it
    whole when done (a failure leaves no half trace)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.fh = open(self.tmp, "w", encoding="utf-8")
        self.fh.write('{"traceEvents": [')
        self.first = True

    def add(self, events) -> None:
        for e in events:
            self.fh.write(json.dumps(e) if self.first else ", " + json.dumps(e))
            self.first = False

    def finish(self, metadata: dict) -> Path:
        self.fh.write(f'], "displayTimeUnit": "ms", "metadata": {json.dumps(metadata)}}}')
        self.fh.close()
        os.replace(self.tmp, self.path)
        return self.path

    def discard(self) -> None:
        self.fh.close()
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def _written(path, make) -> Path:
    out = _TraceFile(Path(path))
    try:
        return make(out)
    except BaseException:
        out.discard()
        raise


def write_trace(doc: dict, path: str | os.PathLike) -> Path:
    """Write ``chrome_trace(doc)`` as JSON to ``path``, event by event; return the path."""
    def make(out: _TraceFile) -> Path:
        out.add(_trace_events(doc))
        return out.finish(_metadata_of(doc))

    return _written(path, make)


def trace_file(receipts: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Write the trace of receipts file ``receipts`` to ``path`` without ever holding the document:
    a first pass checks it as ``load_document`` does (``ReceiptsFileError``) and keeps each request's
    start, model and windows' figures; the second writes the events and lock operations as they are
    read. Returns the path."""
    figures: dict = {}
    counted: dict = {}

    def keep(turn, key, item) -> None:
        if key == "windows":
            figures.setdefault(turn, {})[item["window_index"]] = _window_args(item)
            counted[turn] = counted.get(turn, 0) + 1

    doc = stream_document(receipts, keep)
    order = [(k if is_conversation(doc) else None, *r) for k, r in enumerate(_requests(doc))]
    metas = [_metadata(d["model"], counted.get(turn, 0)) for turn, d, _pid, _process in order]

    def make(out: _TraceFile) -> Path:
        at = [0, None]  # the request being written (its place in ``order``) and its ``_Request``

        def request_of(turn) -> _Request:
            while order[at[0]][0] != turn:  # the one before is done (or had no events): its names
                finish()
            if at[1] is None:
                _turn, d, pid, process = order[at[0]]
                at[1] = _Request(pid, process, _t0(d), figures.get(turn, {}))
            return at[1]

        def finish() -> None:
            _turn, d, pid, process = order[at[0]]
            out.add((at[1] or _Request(pid, process, 0, {})).end(d["model"]))
            at[0], at[1] = at[0] + 1, None

        try:
            stream_document(receipts, lambda turn, key, item: out.add(request_of(turn).part(key, item)), check=False)
        except (KeyError, TypeError, IndexError, ValueError) as exc:  # it passed the checks a moment ago
            raise ReceiptsFileError(f"receipts {receipts} changed while it was traced ({type(exc).__name__}: "
                                    f"{exc}); trace it again") from None
        while at[0] < len(order):
            finish()
        return out.finish(_conversation_metadata(metas) if is_conversation(doc) else metas[0])

    return _written(path, make)
