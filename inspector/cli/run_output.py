"""Terminal output of ``spec-inspector run`` and ``view``: streamed text and summaries."""

from __future__ import annotations

import sys
from typing import TextIO

from inspector.engine.classify import row_outcomes
from inspector.engine.errors import RuntimeLost
from inspector.engine.no_proposal import ENGINE_REASONS, count_reasons
from inspector.engine.observer import GenerationObserver
from inspector.engine.probabilities import WindowProbabilities, top_texts_of
from inspector.engine.profit import plain_step_us, run_balance
from inspector.engine.records import (COMMIT, DISCARD, PREFILL, STEP, VERIFY, LockOperation, Summary, decision_id_text,
                                      receipt_from_json)
from inspector.engine.stats import summarize_receipts
from inspector.llama.cost_cache import load_cost_model, placement
from inspector.receipts.document import version_note
from inspector.session.tree_verdict import tree_versus_chain
from inspector.sources.registry import PLAIN, describe_source


class StreamPrinter(GenerationObserver):
    """Prints committed text as it arrives (nothing branch-conditioned ever reaches it), and a long
    prefill's progress on ``status`` (standard error: the text alone goes to ``out``)."""

    def __init__(self, out: TextIO, quiet: bool = False, status: TextIO | None = None) -> None:
        self.out = out
        self.quiet = quiet
        self.status = status if status is not None else sys.stderr
        self._prefill_shown = False
        self._open_line = False
        self.printed = 0
        """Characters of the committed text printed so far."""

    def on_token(self, token: int, text: str) -> None:
        self._write(text)

    def on_prefill(self, done: int, total: int) -> None:
        """A prompt longer than one ``n_batch`` chunk: "prefill: DONE/TOTAL prompt tokens" on ``status``,
        rewritten in place on a terminal (each chunk), said once elsewhere (a log gets one line)."""
        if self.quiet or (done >= total and not self._prefill_shown):
            return
        try:
            tty = self.status.isatty()
            if tty:
                self.status.write(f"\rprefill: {done}/{total} prompt tokens" + ("\n" if done >= total else ""))
            elif not self._prefill_shown:
                self.status.write(f"prefill: {total} prompt tokens …\n")
            self.status.flush()
        except (OSError, ValueError):  # a closed or full stderr never costs the run
            return
        self._prefill_shown = done < total

    def _write(self, text: str) -> None:
        self.printed += len(text)
        if text and not self.quiet:
            self.out.write(text)
            self.out.flush()
            self._open_line = not text.endswith("\n")

    def catch_up(self, committed_text: str) -> None:
        """Print what was committed but not streamed (the token whose callback failed: the engine
        committed it before the callback raised), so the printed text is the committed text."""
        if len(committed_text) > self.printed:
            self._write(committed_text[self.printed:])

    def newline(self) -> None:
        if self._open_line:
            self.out.write("\n")
            self.out.flush()
            self._open_line = False


def drive_run(run, gen, printer: StreamPrinter, resume: bool) -> bool:
    """Step ``run`` (a ``SessionRun``) until its generation ``gen`` finishes. An engine or injected error
    is reported on stderr (its receipts kept, the KV cache already repaired) and, with ``resume``,
    resumed from the canonical position (at most 20 times; never after a lost runtime). Returns
    True when the generation finished, False when an error ended it."""
    attempts = 0
    while not gen.finished:
        try:
            for _ in run.steps():
                pass
        except Exception as exc:  # engine or injected error: already repaired, receipts kept
            printer.catch_up(gen.text.text)
            sys.stdout.flush()
            lost = isinstance(exc, RuntimeLost)
            message = exc.at(gen.failure_place()) if lost else str(exc)
            print(f"\nspec-inspector: generation error: {message}", file=sys.stderr, flush=True)
            if resume and attempts < 20 and not lost:
                attempts += 1
                print("spec-inspector: resuming from the canonical position", file=sys.stderr)
                gen.resume()
                continue
            return False
    return True


def _get(obj, name):
    """A field of an engine record or of its JSON form (receipts documents hold dicts)."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name)


def _probabilities(obj) -> WindowProbabilities | None:
    """The probability block of a receipt/event or of its JSON form, or None."""
    p = _get(obj, "probabilities")
    return WindowProbabilities.from_json(p) if isinstance(p, dict) else p


def _figures(probs: WindowProbabilities | None, row: int | None, outcome: str = "") -> str:
    """A committed token's figures on its event line: "p 0.912 rank 1" for an accepted proposal
    token (its p and rank), "p 0.384 (proposed p 0.069 rank 4)" for a correction (the committed
    token's p, then the rejected proposal token's), "p 0.571" for a bonus token or a plain step."""
    if probs is None or row is None or not 0 <= row < probs.rows:
        return ""
    text = f"p {probs.predicted_p[row]:.3f}"
    rank = probs.proposed_rank[row]
    if rank is None:
        return text
    if outcome == "accepted":
        return f"{text} rank {rank}"
    return f"{text} (proposed p {probs.proposed_p[row]:.3f} rank {rank})"


def format_event(e, token_text, decision_id=None, probabilities=None) -> str:
    """One line of the event list, fields that do not apply left out.

    ``e``: an ``EngineEvent`` or its JSON form. ``token_text(id) -> str``.
    ``decision_id``: the proposal's decision id (bytes or stored hex), shown
    with ``decision_id_text`` on verify and discard lines. ``probabilities``: the
    window's ``WindowProbabilities`` for a commit line (a step line has its own): the
    committed token's p, and the rank of the proposal token its row judged.
    """
    parts = [f"{_get(e, 'seq'):5d}", f"{_get(e, 't_us') / 1000:10.1f} ms", f"{_get(e, 'kind'):8s}"]
    if _get(e, "window") is not None:
        parts.append(f"window {_get(e, 'window')}")
    if _get(e, "row") is not None:
        parts.append(f"row {_get(e, 'row')}")
    if _get(e, "token") is not None:
        parts.append(f"token {_get(e, 'token')} {token_text(_get(e, 'token'))!r}")
    if _get(e, "position") is not None:
        parts.append(f"position {_get(e, 'position')}")
    if decision_id is not None:
        parts.append(f"decision {decision_id_text(decision_id)}")
    kind = _get(e, "kind")
    if kind in (COMMIT, STEP, PREFILL):
        own = kind in (STEP, PREFILL)  # a step (or the prefill's last row) carries its own figures
        figures = _figures(_probabilities(e) if own else probabilities, _get(e, "row"), _get(e, "detail"))
        if figures:
            parts.append(figures)
    if _get(e, "detail"):
        parts.append(_get(e, "detail"))
    return "  " + "  ".join(parts)


def format_events(events, token_text, receipts=(), discards=()) -> list[str]:
    """The event list, one line per event (``format_event``), with the decision
    id of the proposal on every verify and discard line.

    ``receipts``/``discards``: the run's ``WindowReceipt``/``Discard`` records
    or their JSON forms. A verify event takes the decision id of its window's
    receipt (or, for a window that ended in an error, of the discard that kept
    its partial window); the n-th discard event is the n-th discard (both are
    appended in the same order, ``inspector.engine.failure_log.FailureLog.discard``).
    """
    by_window, figures = {}, {}
    for d in discards:
        partial = _get(d, "partial")
        if partial:
            by_window[_get(partial, "window_index")] = _get(d, "decision_id")
    for r in receipts:
        by_window[_get(r, "window_index")] = _get(r, "decision_id")
        figures[_get(r, "window_index")] = _probabilities(r)
    discards = list(discards)
    lines, n_discard = [], 0
    for e in events:
        kind, decision = _get(e, "kind"), None
        if kind in (STEP, PREFILL):
            figures[("step", _get(e, "position"))] = _probabilities(e)  # its commit line shows them too
        if kind == VERIFY:
            decision = by_window.get(_get(e, "window"))
        elif kind == DISCARD:
            if n_discard < len(discards):
                decision = _get(discards[n_discard], "decision_id")
            n_discard += 1
        window = _get(e, "window")
        key = window if window is not None else ("step", _get(e, "position"))
        lines.append(format_event(e, token_text, decision, figures.get(key)))
    return lines


def format_window_rows(receipt, token_text, missing: str = "turned off for this run, or a schema-1 file") -> list[str]:
    """``view --window N``: one window's header and one line per verification row with the target's
    figures (``inspector.engine.probabilities``): the proposal token the row judged with its p and rank,
    the row's prediction with its p, the logit margin, the entropy, the top 5 and the draft's q.

    ``receipt``: a ``WindowReceipt``. ``token_text(id) -> str``. ``missing``: why a window has no
    figures, when it has none. Positions follow the window's rows table: row r's input token sits
    at KV position base + r (its prediction is the token after it). Rows past the first mismatch
    are branch-conditioned (never output) and say so."""
    r = receipt
    lines = [f"window {r.window_index}  step {r.decode_step}  decision {decision_id_text(r.decision_id)}  "
             f"{r.disposition}  accepted {r.accepted_proposal_tokens}/{r.proposal_token_count}  "
             f"base {r.base_position} -> canonical {r.canonical_position}  ({r.verification_rule})"]
    probs = r.probabilities
    if probs is None:
        lines.append(f"  (no probability figures: {missing})")
    else:
        lines.append(f"  probabilities: {probs.basis}" + (" (raw softmax of the logits)" if probs.basis == "softmax"
                     else " (after the sampler chain)") + "; margin in logits, entropy in nats")
    outcomes = row_outcomes(r.proposal_token_ids, r.verification_row_predictions, r.canonical_prediction_count)
    for i in range(r.verification_rows):
        pos = r.base_position + i
        pred = r.verification_row_predictions[i]
        proposed = r.proposal_token_ids[i] if i < r.proposal_token_count else None
        head = f"  row {i:2d}  position {pos:5d}  {outcomes[i]:12s}"
        prop = "bonus row" if proposed is None else f"proposed {token_text(proposed)!r}"
        row = r.row_probabilities(i)  # None without figures, and on the rows after a mismatch (never judged)
        if row is None:
            lines.append(f"{head}  {prop}  predicted {token_text(pred)!r}")
            continue
        if proposed is not None:
            prop += f" p {row.proposed_p:.3f} rank {row.proposed_rank}"
            if row.draft_q is not None:
                prop += f" q {row.draft_q:.3f}"
        top = ", ".join(f"{token_text(t)!r} {p:.3f}" for t, p in row.top)
        lines.append(f"{head}  {prop}  predicted {token_text(pred)!r} p {row.predicted_p:.3f}  "
                     f"margin {row.margin:.3f}  entropy {row.entropy:.3f}  top: {top}")
    return lines


def document_token_text(doc: dict):
    """``token_text(id) -> str`` from the token texts a receipts document stores
    (output, proposals, row predictions); an id it does not hold shows as ``<id N>``."""
    texts: dict[int, str] = {}
    out = doc.get("output", {})
    texts.update(zip(out.get("token_ids", []), out.get("token_texts", [])))
    for w in doc.get("windows", []):
        texts.update(zip(w.get("proposal_token_ids", []), w.get("proposal_token_texts", [])))
        texts.update(zip(w.get("verification_row_predictions", []), w.get("verification_row_prediction_texts", [])))
        texts.update(top_texts_of(w.get("probabilities")))
    for e in doc.get("events", []):
        texts.update(top_texts_of(e.get("probabilities")))
    return lambda t: texts.get(t, f"<id {t}>")


def format_windows(windows, discards) -> list[str]:
    """One line per verified window and per discard, in decode-step order, with
    the decision id (``decision_id_text``) and what happened to the proposal.

    ``windows``/``discards``: ``WindowReceipt``/``Discard`` records or their
    JSON forms (a receipts document's ``windows`` and ``discards``).
    """
    rows = []
    for w in windows:
        rows.append((_get(w, "decode_step"), 0, (
            f"  window {_get(w, 'window_index'):4d}  step {_get(w, 'decode_step'):5d}  "
            f"decision {decision_id_text(_get(w, 'decision_id'))}  {_get(w, 'disposition')}  "
            f"accepted {_get(w, 'accepted_proposal_tokens')}/{_get(w, 'proposal_token_count')}  "
            f"base {_get(w, 'base_position')} -> canonical {_get(w, 'canonical_position')}")))
    for d in discards:
        error = _get(d, "error")
        rows.append((_get(d, "decode_step"), 1, (
            f"  discard      step {_get(d, 'decode_step'):5d}  decision {decision_id_text(_get(d, 'decision_id'))}  "
            f"{_get(d, 'reason')}  {len(_get(d, 'proposal_token_ids') or ())} proposed"
            + (f"  ({error})" if error else ""))))
    rows.sort(key=lambda r: (r[0], r[1]))
    return [r[2] for r in rows]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "n/a" if x is None else format(x, fmt)


ENDED_AS_WORDS = {"stopped": "none (stopped by the user)", "error": "none (an error stopped it)",
                  "interrupted": "none (interrupted by a signal: the complete windows are kept)"}


def format_reasons(events, source_name: str | None) -> str:
    """Lines on why decode steps ran without a window (issue 28), from a run's ``events``
    (``EngineEvent`` or JSON dicts): the plain steps by reason, most first, each with its meaning
    (``ENGINE_REASONS`` and the source's declared ``reasons``); "" without plain steps."""
    counts = count_reasons(events)
    if not counts:
        return ""
    meanings = dict(ENGINE_REASONS)
    try:
        meanings.update(describe_source(source_name or PLAIN).reasons)
    except ValueError:  # an unknown or broken source: its codes stay without words
        pass
    lines = [f"why no window:        {sum(counts.values())} plain step(s) by reason"]
    for code, n in counts.most_common():
        words = meanings.get(code, "(not declared by the source)") if code else "(not recorded: an older file)"
        lines.append(f"  {n:>5} {code or '-'}: {words}")
    return "\n".join(lines)


def format_balance(receipts, lock_operations, session_id) -> str:
    """The summary's line on what the windows gained or lost against plain decoding of their tokens
    (``inspector.engine.profit``, c(1) from the run's own plain steps); "" when it cannot be said."""
    b = run_balance(receipts, plain_step_us(lock_operations, session_id))
    return "" if b is None else f"windows vs plain:     {b.text()}"


def format_summary(s: Summary, wall_s: float | None = None, *, kv_length=None, canonical=None,
                   ended_as: str | None = None, incomplete_utf8_bytes: int = 0, why: str = "") -> str:
    """Multi-line summary with the definitions of the acceptance figures. ``ended_as``: how the
    run ended when the engine did not finish it (``stopped``, ``error``), if known.
    ``incomplete_utf8_bytes``: the text ended inside a character (``RunEnd``): said in a line.
    ``why``: ``format_reasons``' lines, after the windows line."""
    disp = ", ".join(f"{k} {v}" for k, v in sorted(s.dispositions.items())) or "none"
    ended = s.finish_reason or ENDED_AS_WORDS.get(ended_as or "", "none (an error stopped it, or it did not finish)")
    lines = [
        "--- summary ---",
        f"finish reason:        {ended}",
        f"generated tokens:     {s.generated_tokens}",
        f"windows:              {s.windows} ({disp}); plain steps {s.plain_steps}; discards {s.discards}",
        *([why] if why else []),
        f"accepted/proposed:    {s.accepted_tokens}/{s.proposed_tokens} = {_pct(s.acceptance_rate)}",
        f"mean accepted length: {_num(s.mean_accepted_length)} tokens per window (1 + accepted / windows)",
        f"decode tokens/s:      {_num(s.decode_tokens_per_s, '.1f')} (generated / decode time, prefill excluded)",
    ]
    if s.acceptance_by_position:
        lines.append("acceptance by proposal position: "
                     + " ".join(f"{i + 1}:{100 * r:.0f}%" for i, r in enumerate(s.acceptance_by_position[:16])))
    if wall_s is not None:
        lines.append(f"wall time:            {wall_s:.2f} s (prefill {s.prefill_elapsed_us / 1e3:.0f} ms)")
    if incomplete_utf8_bytes:
        held = "its last byte is" if incomplete_utf8_bytes == 1 else f"its last {incomplete_utf8_bytes} bytes are"
        lines.append(f"text:                 ends inside a character: {held} kept out of the text (as "
                     "llama-server holds incomplete UTF-8 back); the token ids have them")
    if kv_length is not None or canonical is not None:
        lines.append(f"KV length:            {kv_length if kv_length is not None else 'session retired'}"
                     f" (canonical position {canonical})")
    return "\n".join(lines)


def format_document(doc: dict) -> str:
    """Human summary of a loaded receipts document."""
    s = Summary(**{k: v for k, v in doc["summary"].items() if k in Summary.__dataclass_fields__})
    head = [
        f"file:    {version_note(doc)}",
        f"model:   {doc['model'].get('name', '')} ({doc['model']['architecture']}) {doc['model']['path']}",
        f"source:  {doc['settings']['source']['name']}" + (
            f" (warm: {doc['settings']['source']['warm']})" if doc['settings']['source'].get('warm') else ""),
        f"prompt:  {len(doc['prompt']['token_ids'])} tokens",
        "--- output ---",
        doc["output"]["text"],
    ]
    tail = ""
    b = doc.get("baseline")
    if b:
        d = b.get("divergence")
        if d is None:
            line = f"identical to plain decoding ({len(b.get('plain_token_ids', []))} tokens)"
        else:
            line = (f"diverges from plain decoding at generated token {d['index']}: plain {d['plain_token']}, "
                    f"speculative {d['speculative_token']}; target top-2 margin there {d['margin']:.4f} logits")
        if b.get("observed_speedup"):
            line += f"; speculative/plain decode tokens/s = {b['observed_speedup']:.2f}x"
        tail = f"\nbaseline:             {line}"
    why = format_reasons(doc.get("events") or (), doc["settings"]["source"]["name"])
    balance = document_balance(doc)
    return "\n".join(head) + "\n" + format_summary(
        s, ended_as=doc["output"].get("ended_as"), incomplete_utf8_bytes=doc["output"].get("incomplete_utf8_bytes", 0),
        why=why) + (f"\n{balance}" if balance else "") + tail


def document_balance(doc: dict) -> str:
    """``format_balance`` of a receipts document (its windows and lock operations, the main session the
    first event names): the "windows vs plain" line ``run`` prints; "" when it cannot be said."""
    receipts = [receipt_from_json(w) for w in doc.get("windows") or ()]
    ops = [LockOperation(**op) for op in doc.get("lock_operations") or ()]
    events = doc.get("events") or ()
    session = events[0].get("session_id") if events else None
    return format_balance(receipts, ops, session)


def turn_heading(n: int, count: int, message: str) -> str:
    """``--- turn 2/4: Apply this change to ... ---``: a turn's heading with its user message (one line,
    at most 80 characters of it)."""
    shown = " ".join(message.split())
    return f"--- turn {n}/{count}: {shown[:77] + '...' if len(shown) > 80 else shown} ---"


def format_conversation(doc: dict) -> str:
    """Human summary of a loaded conversation document: one line per turn (its message, tokens,
    windows, acceptance, how it ended), where it stopped, then the summary over every turn."""
    c = doc["conversation"]
    first = doc["turns"][0]
    planned = c.get("planned_turns")
    lines = [f"file:    conversation, {c['turns']} turn(s)" + (f" of {planned}" if planned and planned != c["turns"] else ""),
             f"model:   {first['model'].get('name', '')} ({first['model']['architecture']}) {first['model']['path']}",
             f"source:  {first['settings']['source']['name']}", "--- turns ---"]
    for k, t in enumerate(doc["turns"], 1):
        s = t["summary"]
        message = " ".join((t.get("conversation", {}).get("user_text") or t["prompt"]["text"]).split())
        if len(message) > 60:
            message = message[:57] + "..."
        lines.append(f"turn {k}: prompt {len(t['prompt']['token_ids'])} tokens, generated {s['generated_tokens']}, "
                     f"windows {s['windows']}, acceptance {_pct(s.get('acceptance_rate'))}, "
                     f"ended {t['output'].get('ended_as') or t['output'].get('finish_reason') or '?'} · {message}")
    if c.get("stopped_at"):
        lines.append(f"stopped: {c['stopped_at']}")
    s = Summary(**{k: v for k, v in doc["summary"].items() if k in Summary.__dataclass_fields__})
    return "\n".join(lines) + "\n(the summary below sums every turn)\n" + format_summary(s) + \
        "\n(spec-inspector view FILE --turn N shows one turn: its output, windows and events)"


def format_autosave(record) -> str:
    """Human summary of an autosave file read as a ``SessionRecord`` (``inspector.session.record_from_file.record_from_autosave``)."""
    state = ("finished: " + str(record.ended_as or "?")) if not record.unfinished else \
        "unfinished (the run stopped or was killed): every complete record is shown"
    head = [
        f"autosave: {record.document_path}",
        f"state:    {state}",
        f"model:    {record.model_name or '?'}",
        f"source:   {record.source_name or '?'}",
    ]
    block = record.conversation or {}
    if block.get("turn"):  # a turn of run --turns' autosave
        head.append(f"turn:     {block['turn']} of {block.get('turns') or '?'} · {_shortened(block.get('user_text', ''))}")
    if record.skipped_lines:
        head.append(f"skipped:  {record.skipped_lines} incomplete or damaged line(s)")
    head += ["--- output ---", record.output_text]
    tail = "" if record.decode_elapsed_us else \
        "\n(no decode time: only a finished run's end line has it, so tokens/s are n/a)"
    return "\n".join(head) + "\n" + format_summary(
        record.summary(), ended_as=record.ended_as, incomplete_utf8_bytes=record.incomplete_utf8_bytes,
        why=format_reasons(record.events, record.source_name)) + tail


def _shortened(message: str, most: int = 60) -> str:
    shown = " ".join(str(message).split())
    return shown[:most - 3] + "..." if len(shown) > most else shown


def format_autosave_turns(records) -> str:
    """Human summary of a conversation's autosave (``run --turns --autosave``) read as one ``SessionRecord``
    per turn (``inspector.session.record_from_file.records_from_autosave``): a line per turn (how it ended,
    or unfinished: the turn a kill or crash ended), then the summary over every complete record."""
    first, last = records[0], records[-1]
    planned = (last.conversation or {}).get("turns")
    lines = [f"autosave: {first.document_path}",
             f"file:     conversation, {len(records)} turn(s)" + (f" of {planned}" if planned and planned != len(records)
                                                                    else ""),
             f"model:    {first.model_name or '?'}", f"source:   {first.source_name or '?'}", "--- turns ---"]
    for k, r in enumerate(records, 1):
        s = r.summary()
        ended = "unfinished (stopped or killed)" if r.unfinished else (r.ended_as or "?")
        skipped = f", {r.skipped_lines} damaged line(s) skipped" if r.skipped_lines else ""
        lines.append(f"turn {k}: prompt {r.prompt_token_count} tokens, generated {s.generated_tokens}, windows "
                     f"{s.windows}, acceptance {_pct(s.acceptance_rate)}, ended {ended}{skipped} · "
                     f"{_shortened((r.conversation or {}).get('user_text') or r.prompt_text)}")
    total = summarize_receipts([w for r in records for w in r.receipts], plain_steps=sum(r.plain_steps for r in records),
                               discards=sum(len(r.discards) for r in records),
                               generated_tokens=sum(len(r.tokens) for r in records),
                               decode_elapsed_us=sum(r.decode_elapsed_us for r in records),
                               finish_reason=last.finish_reason)
    return "\n".join(lines) + "\n(the summary below sums every turn)\n" + format_summary(total) + \
        "\n(spec-inspector view FILE --turn N shows one turn: its output, windows and events)"


def tree_line(receipts, runtime, label: str = "tree or chain") -> str | None:
    """``run``'s "tree or chain" line for ``receipts`` (``inspector.session.tree_verdict``: the trees
    against their first branches, priced on the stored cost model of ``runtime``), None without tree
    windows."""
    if not any(r.tree is not None for r in receipts):
        return None  # no cost model read for a run of chains
    versus = tree_versus_chain(receipts, load_cost_model(runtime.model_path, runtime.n_threads, placement(runtime)))
    return None if versus is None else f"{label + ':':<22}{versus.text()}"
