"""Autosave: a run's records as JSON Lines, one flushed line per record.

Lines, in the order things happened: ``header`` (prompt, model, source,
settings), ``prefill`` (the prompt's token count, KV length and prefill time), then ``receipt`` (a receipts-document window), ``discard`` (a
discard, with the texts of its tokens) and ``step`` (a plain step's committed
token), and ``end`` after a clean finish. Every line after the header also
carries ``events``: the engine events emitted since the line before (so a
reader shows the run's own event list, times included). A plain step's figures
are summarised in batches of up to 8 rows (``inspector.engine.deferred_figures``):
a ``step`` event whose figures are still pending is written without them, and
a later line carries them in ``figures`` (``[{"seq": the event's seq,
"probabilities": its block}]``), so writing a step never forces its batch. A run
closed without its ``end`` (stopped, failed) writes a ``tail`` line instead: the events
and step figures not written yet (an error in a plain step, the last steps' figures).
Each line is written whole and flushed, so a process killed mid-run loses at most the record being written and
the figures of the plain steps whose batch had not run yet (at most 8 steps or 50 ms;
their tokens are kept): ``read_autosave`` keeps every complete line and counts a
torn last line.
Used by ``spec-inspector run --autosave`` and the window (its autosave folder).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from inspector.engine.classify import FROM_PREFILL
from inspector.engine.deferred_figures import DeferredFigures
from inspector.engine.observer import GenerationObserver
from inspector.engine.records import (COMMIT, PREFILL, STEP, Discard, EngineEvent, WindowReceipt, discard_from_json,
                                      event_from_json, receipt_from_json)
from inspector.engine.probabilities import WindowProbabilities, top_texts_of, with_top_texts
from inspector.engine.stats import summarize_receipts
from inspector.engine.text import label_bytes, shown_text
from inspector.bounded_read import BoundedReadError, read_bounded
from inspector.receipts.document import MAX_FILE_BYTES, ReceiptsFileError, part_problem


class AutosaveWriter:
    """Appends one flushed JSON line per record to ``path`` (created or truncated),
    starting with the ``header`` record.

    Write errors disable the writer (the run goes on) and are kept in ``error``.
    ``fsync``: also ``os.fsync`` each line (survives a power cut, slower). ``append``: add this
    run after the ones the file holds (the next turn of a conversation, ``run --turns``: one
    file, each turn from its own ``header`` line) instead of truncating it.
    """

    def __init__(self, path: str | os.PathLike, header: dict, fsync: bool = False, append: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.error: str | None = None
        self.fsync = fsync
        self._fh = open(self.path, "a" if append else "w", encoding="utf-8")
        self.write({"kind": "header", **header})

    def write(self, record: dict) -> None:
        """Write ``record`` as one line and flush it (no-op after an error or close)."""
        if self._fh is None:
            return
        try:
            self._fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            self._fh.flush()
            if self.fsync:
                os.fsync(self._fh.fileno())
        except (OSError, ValueError) as exc:
            self.error = str(exc)
            self.close()

    def close(self, end: dict | None = None) -> None:
        """Write the ``end`` line (a clean finish) when given, then close."""
        if self._fh is None:
            return
        if end is not None:
            try:
                self._fh.write(json.dumps({"kind": "end", **end}) + "\n")
            except (OSError, ValueError):
                pass
        try:
            self._fh.close()
        finally:
            self._fh = None


def receipt_record(receipt: WindowReceipt, token_text) -> dict:
    """The ``receipt`` line of a window: its JSON form plus token texts."""
    d = receipt.to_json()
    d["proposal_token_texts"] = [token_text(t) for t in receipt.proposal_token_ids]
    d["verification_row_prediction_texts"] = [token_text(t) for t in receipt.verification_row_predictions]
    if "probabilities" in d:
        d["probabilities"] = with_top_texts(d["probabilities"], token_text)
    return {"kind": "receipt", "receipt": d}


def discard_record(d: Discard, token_text, n_vocab: int) -> dict:
    """The ``discard`` line: the discard and the texts of its (valid) tokens."""
    committed = d.partial.committed_tokens if d.partial else ()
    return {
        "kind": "discard", "discard": d.to_json(),
        "proposal_token_texts": [token_text(t) for t in d.proposal_token_ids if 0 <= t < n_vocab],
        "committed_tokens": list(committed), "committed_token_texts": [token_text(t) for t in committed],
    }


class AutosaveRecorder(GenerationObserver):
    """A ``GenerationObserver`` that writes every receipt, discard and plain step
    to an ``AutosaveWriter`` as it happens, then passes each call on to ``inner``."""

    def __init__(self, writer: AutosaveWriter, runtime, inner: GenerationObserver | None = None) -> None:
        self.writer = writer
        self.runtime = runtime
        self.inner = inner or GenerationObserver()
        self.generation = None
        """The ``Generation`` observed (set after it is made): its prefill figures go in the
        ``prefill`` record. Without it the record has the KV length only."""
        self._events: list[dict] = []  # events since the last line: the next line carries them
        self._late: list[tuple[int, DeferredFigures]] = []  # (seq, figures) of step events written without them

    def _write(self, record: dict) -> None:
        record["events"], self._events = self._events, []
        late = self._late_figures(force=False)
        if late:
            record["figures"] = late
        self.writer.write(record)

    def _late_figures(self, force: bool) -> list[dict]:
        """The ``figures`` entries of the pending step events whose batch has run (``force``: of every one,
        running the batch), taken off the pending list."""
        done, waiting = [], []
        for seq, f in self._late:  # one pass: a batch run meanwhile on another thread (a hover) drops nothing
            (done if force or f.ready else waiting).append((seq, f))
        self._late = waiting
        return [{"seq": seq, "probabilities": with_top_texts(f.value.to_json(), self.runtime.token_text)}
                for seq, f in done]

    def _event_json(self, event) -> dict:
        figures = event.probabilities
        if isinstance(figures, DeferredFigures) and not figures.ready:
            self._late.append((event.seq, figures))  # a later line carries them: its batch is not forced
            return replace(event, probabilities=None).to_json()
        d = event.to_json()
        if "probabilities" in d:
            d["probabilities"] = with_top_texts(d["probabilities"], self.runtime.token_text)
        return d

    def on_event(self, event) -> None:
        # Serialised now: the line written at this step's commit must carry its events, or a killed run would
        # lose committed tokens on recovery. Figures still pending follow in a later line (``_late_figures``).
        self._events.append(self._event_json(event))
        if event.kind == PREFILL:
            g = self.generation
            rec = {"kind": "prefill", "kv_length": event.position}
            if g is not None:
                rec.update(prompt_tokens=g.prompt_token_count, elapsed_us=g.prefill_elapsed_us)
            self._write(rec)
        elif event.kind == COMMIT and event.window is None:  # a plain step's token, or the prefill's (first)
            self._write({"kind": "step", "token": event.token, "text": self.runtime.token_text(event.token),
                         "position": event.position,
                         **({"outcome": FROM_PREFILL} if event.detail == FROM_PREFILL else {})})
        self.inner.on_event(event)

    def close(self, end: dict | None = None) -> None:
        """Close the writer; ``end`` (a clean finish) gets the events and the step figures not written yet
        (without ``end``, a ``tail`` line has them, when there are any)."""
        late = self._late_figures(force=True)
        events, self._events = self._events, []
        if end is not None:
            end = {**end, "events": events, **({"figures": late} if late else {})}
        elif late or events:
            self.writer.write({"kind": "tail", "events": events, **({"figures": late} if late else {})})
        self.writer.close(end)

    def on_proposal(self, window, proposal) -> None:
        self.inner.on_proposal(window, proposal)

    def on_receipt(self, receipt) -> None:
        self._write(receipt_record(receipt, self.runtime.token_text))
        self.inner.on_receipt(receipt)

    def on_discard(self, discard) -> None:
        self._write(discard_record(discard, self.runtime.token_text, self.runtime.n_vocab))
        self.inner.on_discard(discard)

    def on_token(self, token, text):
        return self.inner.on_token(token, text)

    def before_commit(self, window, row, token, position) -> None:
        self.inner.before_commit(window, row, token, position)

    def on_finish(self, reason) -> None:
        self.inner.on_finish(reason)

    def on_prefill(self, done, total) -> None:
        tell = getattr(self.inner, "on_prefill", None)  # an observer may predate the hook
        if tell is not None:
            tell(done, total)


@dataclass
class AutosaveRun:
    """What an autosave file holds: every complete record, in order.

    ``clean``: the file ends with the ``end`` record (the run finished).
    ``bad_lines``: lines that were not complete, valid records (a torn last
    line after a kill, or damage), skipped. ``text``: the committed text
    rebuilt from the records' token texts. ``records``: every valid record in
    file order as ``(kind, value, texts)``: ``("receipt", WindowReceipt, {id: text})``,
    ``("discard", Discard, {id: text})``, ``("step", (token, position), {id: text})``,
    ``("prefill", dict, {})``, ``("end", dict, {})``, ``("tail", dict, {})`` (a run closed without its
    end: its last events), each with a fourth item: the
    ``EngineEvent`` list the line carried (the events since the line before), or None in
    files written before lines carried events. ``texts``: every token text seen, id -> text.
    """

    path: Path
    header: dict = field(default_factory=dict)
    receipts: list = field(default_factory=list)
    discards: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    end: dict | None = None
    prefill: dict | None = None
    """The ``prefill`` record (``kv_length``; ``prompt_tokens`` and ``elapsed_us`` in µs when
    the writer knew them), or None (a file from before it existed, or killed before prefill)."""
    bad_lines: int = 0
    committed: list = field(default_factory=list)
    text: str = ""
    records: list = field(default_factory=list)
    texts: dict = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return self.end is not None

    def summary(self):
        """``Summary`` of the complete records (no decode times are saved: tokens/s are None)."""
        plain = sum(1 for st in self.steps if st.get("outcome") != FROM_PREFILL)
        return summarize_receipts(self.receipts, plain_steps=plain, discards=len(self.discards),
                                  generated_tokens=len(self.committed), decode_elapsed_us=0,
                                  finish_reason=(self.end or {}).get("finish_reason"))


def _matches(value, name: str) -> None:
    """Raise ``ValueError`` when ``value`` breaks the schema's ``$defs/NAME`` (a string where a count belongs)."""
    problem = part_problem(value, name)
    if problem:
        raise ValueError(f"{name} {problem}")


def _check_ints(values, what: str) -> None:
    if not all(type(v) is int and 0 <= v < 2**31 for v in values):
        raise ValueError(f"{what}: a position, count or token is not a non-negative 32-bit integer")


def _receipt(w: dict):
    """(receipt, token texts, committed tokens) of a ``receipt`` record; raises when damaged."""
    _matches(w, "receipt")
    r = receipt_from_json(w)
    _check_ints((r.window_index, r.base_position, r.position_after_verification, r.canonical_position,
                 r.trimmed_rows, r.verification_rows, *r.proposal_token_ids, *r.committed_tokens,
                 *r.verification_row_predictions), f"window {r.window_index!r}")
    texts = {}
    for ids, txt in (("proposal_token_ids", "proposal_token_texts"),
                     ("verification_row_predictions", "verification_row_prediction_texts")):
        texts.update(zip(w[ids], map(str, w.get(txt, []))))
    texts.update(top_texts_of(w.get("probabilities")))
    return r, texts, r.committed_tokens


def _discard(rec: dict):
    """(discard, token texts, committed tokens) of a ``discard`` record; raises when damaged."""
    _matches(rec["discard"], "discard")
    d = discard_from_json(rec["discard"])
    committed = tuple(rec.get("committed_tokens", ()))
    _check_ints((d.base_position, *committed), "discard")
    texts = dict(zip(d.proposal_token_ids, map(str, rec.get("proposal_token_texts", []))))
    texts.update(zip(committed, map(str, rec.get("committed_token_texts", []))))
    return d, texts, committed


def _events(rec: dict) -> list[EngineEvent] | None:
    """The events a line carries (raises on a damaged one), or None when it has no ``events``."""
    raw = rec.get("events")
    if raw is None:
        return None
    for e in raw:
        _matches(e, "event")
    events = [event_from_json(e) for e in raw]
    _check_ints([v for e in events for v in (e.seq, e.t_us, e.window, e.token, e.row, e.position)
                 if v is not None], "events")
    return events


def _attach_figures(entries, pending: dict[int, tuple[list, int]], texts: dict[int, str]) -> int:
    """Give the step events in ``pending`` (seq -> (events, index)) the figures a later line carries
    (``figures``: ``[{"seq", "probabilities"}]``, ``AutosaveRecorder``), their top tokens' texts into
    ``texts``. Returns how many entries were damaged or named no pending step (skipped): 0 or 1 per line."""
    bad = 0
    for entry in entries if isinstance(entries, list) else [None]:
        try:
            events, i = pending.pop(entry["seq"])
            block = entry["probabilities"]
            events[i] = replace(events[i], probabilities=WindowProbabilities.from_json(block))
            texts.update(top_texts_of(block))
        except (ValueError, KeyError, TypeError, AttributeError):
            bad = 1
    return bad


def read_autosave(path: str | os.PathLike, turn: int | None = None) -> AutosaveRun:
    """Read an autosave file, keeping every complete record: its one run, or of a conversation's
    autosave (``run --turns``: a ``header`` line starts each turn) turn ``turn`` (1-based; None: the
    last, the one a crash ended). Raises ``ReceiptsFileError`` as ``read_autosave_turns``, and for a
    turn the file does not hold."""
    runs = read_autosave_turns(path)
    if turn is None:
        return runs[-1]
    if not 1 <= turn <= len(runs):
        raise ReceiptsFileError(f"{runs[0].path} has no turn {turn} (turns 1..{len(runs)})")
    return runs[turn - 1]


def read_autosave_turns(path: str | os.PathLike) -> list[AutosaveRun]:
    """Read an autosave file, keeping every complete record: one ``AutosaveRun`` per ``header`` line,
    in file order (one for a single run; a conversation's turns, ``run --turns``). A damaged line
    counts in the run it stands in (before the first header: the first run's).

    Raises ``ReceiptsFileError`` when the file cannot be read, is larger than
    the receipts limit, or holds no header record (not an autosave file).
    """
    p = Path(path)
    try:
        raw = read_bounded(p, MAX_FILE_BYTES, "autosave")  # the bytes read count, not the size reported
    except BoundedReadError as exc:
        raise ReceiptsFileError(str(exc)) from None
    except OSError as exc:
        raise ReceiptsFileError(f"cannot read autosave {p}: {exc.strerror or exc}") from None
    run = AutosaveRun(p)
    pending: dict[int, tuple[list, int]] = {}  # seq -> (events, index) of step events written without figures
    runs: list[tuple[AutosaveRun, list[str]]] = []
    pieces: list[str] = []
    seen_header = False
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line.decode("utf-8"))
            kind = rec["kind"]
            if kind == "header":
                if seen_header:  # the next turn of a conversation
                    runs.append((run, pieces))
                    run, pieces, pending = AutosaveRun(p), [], {}
                run.header = rec
                seen_header = True
                continue
            events = _events(rec)
            for e in rec.get("events") or ():
                run.texts.update(top_texts_of(e.get("probabilities")))
            for i, e in enumerate(events or ()):
                if e.kind == STEP and e.probabilities is None:
                    pending[e.seq] = (events, i)
            if rec.get("figures") is not None:
                run.bad_lines += _attach_figures(rec["figures"], pending, run.texts)
            if kind == "tail":  # a run closed without its end: its last events (and figures, attached above)
                run.records.append(("tail", rec, {}, events))
                continue
            if kind == "receipt":
                value, texts, committed = _receipt(rec["receipt"])
                run.receipts.append(value)
            elif kind == "discard":
                value, texts, committed = _discard(rec)
                run.discards.append(value)
            elif kind == "step":
                token, position = rec["token"], rec["position"]
                _check_ints((token, position), "step")
                value, texts, committed = (token, position), {token: str(rec.get("text", ""))}, (token,)
                run.steps.append(rec)
            elif kind == "end":
                run.end = rec
                run.records.append(("end", rec, {}, events))
                continue
            elif kind == "prefill":
                _check_ints([v for k, v in rec.items() if k not in ("kind", "events")], "prefill")
                run.prefill = rec
                run.records.append(("prefill", rec, {}, events))
                continue
            else:
                run.bad_lines += 1
                continue
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # torn or damaged: skip it
            run.bad_lines += 1
            continue
        run.records.append((kind, value, texts, events))
        run.texts.update(texts)
        run.committed.extend(committed)
        pieces.extend(run.texts.get(t, "") for t in committed)
    if not seen_header:
        raise ReceiptsFileError(f"{p} is not an autosave file: no header record "
                                f"(expected JSON Lines written by spec-inspector)")
    runs.append((run, pieces))
    for each, its_pieces in runs:
        each.text = shown_text(map(label_bytes, its_pieces))  # the labels' bytes joined: split characters whole
    return [each for each, _pieces in runs]


_HEADER_FIELDS = (("prompt", str, 0), ("model", str, 0), ("model_weights", str, 0), ("model_stored_weights", str, 0),
                  ("source", str, 0), ("settings", dict, 0), ("session_id", int, 0), ("prompt_tokens", int, 0),
                  ("n_ctx", int, 1), ("background_sessions", int, 0), ("conversation", dict, 0))
"""A header's fields, their type and, for counts, their least value (a field may be absent)."""


def header_problems(header: dict) -> list[str]:
    """What is wrong in an autosave's ``header`` record, one phrase each ("n_ctx is 'x', not a whole number
    >= 1"; a ``conversation`` turn beyond its turns): the header is read as it is, so a reader says so."""
    out = []
    for name, kind, least in _HEADER_FIELDS:
        value = header.get(name)
        if value is None:
            continue
        if kind is int and (type(value) is not int or value < least):
            out.append(f"{name} is {value!r:.40}, not a whole number >= {least}")
        elif kind is not int and not isinstance(value, kind):
            out.append(f"{name} is {value!r:.40}, not {'text' if kind is str else 'an object'}")
    block = header.get("conversation")
    if isinstance(block, dict):
        turn, turns = block.get("turn"), block.get("turns")
        if type(turn) is not int or type(turns) is not int or not 1 <= turn <= turns:
            out.append(f"conversation says turn {turn!r:.20} of {turns!r:.20} turns")
    return out
