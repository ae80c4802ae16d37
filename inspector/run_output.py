"""Terminal output of ``spec-inspector run`` and ``view``: streamed text and summaries."""

from __future__ import annotations

from typing import TextIO

from inspector.engine.generation import GenerationObserver
from inspector.engine.receipt import Summary


class StreamPrinter(GenerationObserver):
    """Prints committed text as it arrives (nothing branch-conditioned ever reaches it)."""

    def __init__(self, out: TextIO, quiet: bool = False) -> None:
        self.out = out
        self.quiet = quiet
        self._open_line = False

    def on_token(self, token: int, text: str) -> None:
        if text and not self.quiet:
            self.out.write(text)
            self.out.flush()
            self._open_line = not text.endswith("\n")

    def newline(self) -> None:
        if self._open_line:
            self.out.write("\n")
            self.out.flush()
            self._open_line = False


def format_event(e, token_text) -> str:
    """One line of the event list, fields that do not apply left out."""
    parts = [f"{e.seq:5d}", f"{e.t_us / 1000:10.1f} ms", f"{e.kind:8s}"]
    if e.window is not None:
        parts.append(f"window {e.window}")
    if e.row is not None:
        parts.append(f"row {e.row}")
    if e.token is not None:
        parts.append(f"token {e.token} {token_text(e.token)!r}")
    if e.position is not None:
        parts.append(f"position {e.position}")
    if e.detail:
        parts.append(e.detail)
    return "  " + "  ".join(parts)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "n/a" if x is None else format(x, fmt)


def format_summary(s: Summary, wall_s: float | None = None, *, kv_length=None, canonical=None) -> str:
    """Multi-line summary with the definitions of the acceptance figures."""
    disp = ", ".join(f"{k} {v}" for k, v in sorted(s.dispositions.items())) or "none"
    lines = [
        "--- summary ---",
        f"finish reason:        {s.finish_reason or 'none (an error stopped it, or it did not finish)'}",
        f"generated tokens:     {s.generated_tokens}",
        f"windows:              {s.windows} ({disp}); plain steps {s.plain_steps}; discards {s.discards}",
        f"accepted/proposed:    {s.accepted_tokens}/{s.proposed_tokens} = {_pct(s.acceptance_rate)}",
        f"mean accepted length: {_num(s.mean_accepted_length)} tokens per window (1 + accepted / windows)",
        f"decode tokens/s:      {_num(s.decode_tokens_per_s, '.1f')} (generated / decode time, prefill excluded)",
    ]
    if s.acceptance_by_position:
        lines.append("acceptance by proposal position: "
                     + " ".join(f"{i + 1}:{100 * r:.0f}%" for i, r in enumerate(s.acceptance_by_position[:16])))
    if wall_s is not None:
        lines.append(f"wall time:            {wall_s:.2f} s (prefill {s.prefill_elapsed_us / 1e3:.0f} ms)")
    if kv_length is not None or canonical is not None:
        lines.append(f"KV length:            {kv_length if kv_length is not None else 'session retired'}"
                     f" (canonical position {canonical})")
    return "\n".join(lines)


def format_document(doc: dict) -> str:
    """Human summary of a loaded receipts document."""
    s = Summary(**{k: v for k, v in doc["summary"].items() if k in Summary.__dataclass_fields__})
    head = [
        f"model:   {doc['model'].get('name', '')} ({doc['model']['architecture']}) {doc['model']['path']}",
        f"source:  {doc['settings']['source']['name']}",
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
    return "\n".join(head) + "\n" + format_summary(s) + tail


def format_autosave(run) -> str:
    """Human summary of an autosave file (``inspector.receipts.autosave.AutosaveRun``)."""
    h = run.header
    state = ("finished: " + str(run.end.get("finish_reason", "?"))) if run.clean else \
        "unfinished (the run stopped or was killed): every complete record is shown"
    head = [
        f"autosave: {run.path}",
        f"state:    {state}",
        f"model:    {h.get('model', '?')}",
        f"source:   {h.get('source', '?')}",
    ]
    if run.bad_lines:
        head.append(f"skipped:  {run.bad_lines} incomplete or damaged line(s)")
    head += ["--- output ---", run.text]
    return ("\n".join(head) + "\n" + format_summary(run.summary())
            + "\n(decode times are not autosaved: tokens/s are in the receipts document of a finished run)")
