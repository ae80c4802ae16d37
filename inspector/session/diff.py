"""What changed between two runs of one prompt: ``spec-inspector diff A B`` (issue 57).

Two request documents (``inspector.receipts``) of the same prompt, made before and after a change (a new
llama.cpp build, other weights, CPU against RPC, other threads, another source): ``diff_documents`` says what
differs in their setup, whether their outputs are equal and where they part (the generated token's index, both
tokens, the top-2 margin of the row that chose each, in logits: a small margin is a near-tie that batch
arithmetic or other weights may flip), their speculation side by side with the ratio B / A (windows, acceptance,
acceptance per draft position, mean accepted length, tokens/s, proposal and verification time per window, runtime
lock wait and hold), and the windows at the same KV position that gained or lost the most accepted tokens.

Pure: two parsed documents in, a ``RunDiff`` out (``inspector.cli.diff`` reads the files and prints it). The
figures are the documents' own (their ``summary``), not computed again here.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from inspector.session.record_from_file import record_from_document

MOST_CHANGED = 5
"""Windows listed among those that gained, and among those that lost, the most accepted tokens."""


class DiffRefused(ValueError):
    """Two documents that cannot be compared (not the same prompt); the message says why, in one line."""


@dataclass(frozen=True)
class SetupDifference:
    """One setting that differs: its name and both values (None: the document does not say)."""

    name: str
    a: object
    b: object


@dataclass(frozen=True)
class Parting:
    """Where two outputs part: generated token ``index`` (0-based), each side's token id and text, and the top-2
    margin (logits) of the row that chose it, None where the document has no figures for that row."""

    index: int
    a_token: int | None
    b_token: int | None
    a_text: str
    b_text: str
    a_margin: float | None
    b_margin: float | None


@dataclass(frozen=True)
class Figure:
    """One figure of both runs and B / A (None when either is missing or A is 0)."""

    name: str
    a: float | None
    b: float | None

    @property
    def ratio(self) -> float | None:
        return self.b / self.a if self.a and self.b is not None else None


@dataclass(frozen=True)
class WindowChange:
    """The windows of both runs that began at the same KV position (``base_position``) and how many proposal
    tokens each accepted."""

    base_position: int
    a_accepted: int
    b_accepted: int

    @property
    def change(self) -> int:
        return self.b_accepted - self.a_accepted


@dataclass(frozen=True)
class AlignedWindow:
    """One KV position where either run began a window (its main session's first window there): each run's
    (proposed, accepted) proposal tokens there, None where it began none."""

    base_position: int
    a: tuple[int, int] | None
    b: tuple[int, int] | None

    @property
    def change(self) -> int | None:
        """B's accepted tokens minus A's, None unless both began a window here."""
        return self.b[1] - self.a[1] if self.a is not None and self.b is not None else None


@dataclass(frozen=True)
class RunDiff:
    """``diff_documents``' answer (module docstring)."""

    setup: tuple[SetupDifference, ...]
    outputs_equal: bool
    a_tokens: int
    b_tokens: int
    parting: Parting | None
    figures: tuple[Figure, ...]
    by_position: tuple[Figure, ...]
    """Acceptance per draft position (position 1 = the first proposal token), each side's share of windows."""
    gained: tuple[WindowChange, ...]
    lost: tuple[WindowChange, ...]

    def to_json(self) -> dict:
        """The diff as JSON-able data (``--json OUT``), ratios included."""
        def figure(f: Figure) -> dict:
            return {"name": f.name, "a": f.a, "b": f.b, "ratio": f.ratio}

        return {"setup": [asdict(s) for s in self.setup], "outputs_equal": self.outputs_equal,
                "a_tokens": self.a_tokens, "b_tokens": self.b_tokens,
                "parting": asdict(self.parting) if self.parting is not None else None,
                "figures": [figure(f) for f in self.figures], "acceptance_by_position": [figure(f) for f in
                                                                                          self.by_position],
                "gained": [{**asdict(w), "change": w.change} for w in self.gained],
                "lost": [{**asdict(w), "change": w.change} for w in self.lost]}


def _get(doc: dict, *keys):
    v = doc
    for k in keys:
        if not isinstance(v, dict):
            return None
        v = v.get(k)
    return v


SETUP = (
    ("model file", lambda d: Path(str(_get(d, "model", "converted_from") or _get(d, "model", "path") or "")).name
     or None),
    ("model sha256", lambda d: _get(d, "model", "sha256")),
    ("weights", lambda d: _get(d, "model", "weights")),
    ("llama.cpp", lambda d: _get(d, "model", "llama_cpp", "commit")),
    ("llama-cpp-python", lambda d: _get(d, "model", "machine", "llama_cpp_python")),
    ("llama.cpp features", lambda d: _get(d, "model", "machine", "llama_cpp_system_info")),
    ("CPU", lambda d: _get(d, "model", "machine", "cpu")),
    ("cores", lambda d: _get(d, "model", "machine", "logical_cores")),
    ("layers", lambda d: _get(d, "model", "layers")),
    ("threads", lambda d: _get(d, "model", "n_threads")),
    ("n_ctx", lambda d: _get(d, "model", "n_ctx")),
    ("n_batch", lambda d: _get(d, "model", "n_batch")),
    ("n_ubatch", lambda d: _get(d, "model", "llama_cpp", "n_ubatch")),
    ("flash_attn", lambda d: _get(d, "model", "llama_cpp", "flash_attn")),
    ("type_k", lambda d: _get(d, "model", "llama_cpp", "type_k")),
    ("type_v", lambda d: _get(d, "model", "llama_cpp", "type_v")),
    ("backend sampling", lambda d: bool(_get(d, "model", "llama_cpp", "backend_sampling"))),
    ("source", lambda d: _get(d, "settings", "source", "name")),
    ("source options", lambda d: _get(d, "settings", "source", "settings")),
    ("draft_max", lambda d: _get(d, "settings", "draft_max")),
    ("sampling", lambda d: _get(d, "settings", "sampling")),
    ("max_new_tokens", lambda d: _get(d, "settings", "max_new_tokens")),
    ("verification", lambda d: _get(d, "settings", "verification")),
)
"""(name, how to read it from a request document): what ``setup_differences`` compares."""


def setup_differences(a: dict, b: dict) -> tuple[SetupDifference, ...]:
    """The settings of ``SETUP`` whose values differ between the two documents, in ``SETUP``'s order."""
    return tuple(SetupDifference(name, va, vb) for name, read in SETUP if (va := read(a)) != (vb := read(b)))


def _margin(record, index: int) -> float | None:
    """The top-2 margin (logits) of the row that chose generated token ``index`` of ``record``, or None."""
    if index >= len(record.tokens):
        return None
    p = record.token_probabilities(record.tokens[index])
    return None if p is None else float(p.margin)


def _parting(a: dict, b: dict) -> Parting | None:
    """Where the two outputs part (None when they are equal)."""
    ta, tb = list(a["output"]["token_ids"]), list(b["output"]["token_ids"])
    if ta == tb:
        return None
    i = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    ra, rb = record_from_document(a), record_from_document(b)
    tok_a, tok_b = (ta[i] if i < len(ta) else None), (tb[i] if i < len(tb) else None)
    return Parting(i, tok_a, tok_b, ra.text_of(tok_a) if tok_a is not None else "(ended)",
                   rb.text_of(tok_b) if tok_b is not None else "(ended)", _margin(ra, i), _margin(rb, i))


def _median(values) -> float | None:
    values = list(values)
    return float(statistics.median(values)) if values else None


def _figures(a: dict, b: dict) -> tuple[Figure, ...]:
    def both(name: str, read) -> Figure:
        return Figure(name, read(a), read(b))

    def summ(key):
        return lambda d: d["summary"].get(key)

    def windows_median(key):
        return lambda d: _median(w[key] / 1000.0 for w in d["windows"])

    def lock_total(key):
        return lambda d: sum(op[key] for op in d.get("lock_operations", ())) / 1000.0

    return (
        both("generated tokens", summ("generated_tokens")),
        both("windows", summ("windows")),
        both("plain steps", summ("plain_steps")),
        both("proposed tokens", summ("proposed_tokens")),
        both("accepted tokens", summ("accepted_tokens")),
        both("acceptance rate", summ("acceptance_rate")),
        both("mean accepted length", summ("mean_accepted_length")),
        both("decode tokens/s", summ("decode_tokens_per_s")),
        both("end-to-end tokens/s", summ("end_to_end_tokens_per_s")),
        both("prefill ms", lambda d: d["summary"].get("prefill_elapsed_us", 0) / 1000.0),
        both("proposal ms per window (median)", windows_median("proposal_elapsed_us")),
        both("verification ms per window (median)", windows_median("verification_elapsed_us")),
        both("runtime lock wait ms (total)", lock_total("wait_us")),
        both("runtime lock hold ms (total)", lock_total("hold_us")),
    )


def _by_position(a: dict, b: dict) -> tuple[Figure, ...]:
    pa, pb = a["summary"].get("acceptance_by_position") or [], b["summary"].get("acceptance_by_position") or []
    return tuple(Figure(f"draft position {i + 1}", pa[i] if i < len(pa) else None, pb[i] if i < len(pb) else None)
                 for i in range(max(len(pa), len(pb))))


def aligned_windows(a: dict, b: dict) -> tuple[AlignedWindow, ...]:
    """Both runs' windows side by side by the KV position they began at (``AlignedWindow``), in position order:
    the Windows tables of the window's comparison, and the gained and lost windows."""
    def at(doc: dict) -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for w in doc["windows"]:
            proposed = int(w.get("proposal_token_count", len(w.get("proposal_token_ids") or ())))
            out.setdefault(int(w["base_position"]), (proposed, int(w["accepted_proposal_tokens"])))
        return out

    wa, wb = at(a), at(b)
    return tuple(AlignedWindow(p, wa.get(p), wb.get(p)) for p in sorted(wa.keys() | wb.keys()))


def _window_changes(a: dict, b: dict) -> tuple[tuple[WindowChange, ...], tuple[WindowChange, ...]]:
    """The windows at the same KV position (``aligned_windows``) that gained and lost the most accepted tokens,
    ``MOST_CHANGED`` each, largest change first."""
    changes = [WindowChange(w.base_position, w.a[1], w.b[1]) for w in aligned_windows(a, b) if w.change]
    gained = sorted((c for c in changes if c.change > 0), key=lambda c: (-c.change, c.base_position))
    lost = sorted((c for c in changes if c.change < 0), key=lambda c: (c.change, c.base_position))
    return tuple(gained[:MOST_CHANGED]), tuple(lost[:MOST_CHANGED])


def diff_documents(a: dict, b: dict) -> RunDiff:
    """Compare two request documents of the same prompt (module docstring). Raises ``DiffRefused`` when their
    prompts differ (token ids; the text when a document has none)."""
    if _prompt_key(a) != _prompt_key(b):
        raise _not_the_same_prompt(a, b)
    gained, lost = _window_changes(a, b)
    ta, tb = a["output"]["token_ids"], b["output"]["token_ids"]
    return RunDiff(setup_differences(a, b), list(ta) == list(tb), len(ta), len(tb), _parting(a, b),
                   _figures(a, b), _by_position(a, b), gained, lost)


def _preview(text: str | None, most: int = 30) -> str:
    t = " ".join(str(text or "").split())
    return repr(t if len(t) <= most else t[:most] + "…")


def value_text(v, digits: int = 3) -> str:
    """A figure or setting as the diff shows it: "-" for None, a float with ``digits`` decimals below 10 and one
    above, anything else as ``str``."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def parting_side(token: int | None, text: str, margin: float | None) -> str:
    """One side of a parting in words: its token, id and the row's margin, or that its output ended there."""
    if token is None:
        return "ended there"
    return f"{text!r} ({token}, margin {value_text(margin)} logits)"


def format_diff(d: RunDiff, a_name: str = "A", b_name: str = "B") -> str:
    """The diff as text: setup, output, figures side by side with B / A, acceptance per position, the windows
    that changed most."""
    lines = [f"A: {a_name}", f"B: {b_name}", "", "setup:"]
    lines += [f"  {s.name:<16} {value_text(s.a)}  ->  {value_text(s.b)}" for s in d.setup] or ["  the same"]
    lines.append("")
    if d.outputs_equal:
        lines.append(f"output: equal ({d.a_tokens} tokens)")
    else:
        p = d.parting
        lines.append(f"output: parts at generated token {p.index} (A {d.a_tokens} tokens, B {d.b_tokens}): "
                     f"A {parting_side(p.a_token, p.a_text, p.a_margin)}, "
                     f"B {parting_side(p.b_token, p.b_text, p.b_margin)}")
    lines += ["", f"{'figure':<38}{'A':>12}{'B':>12}{'B / A':>9}"]
    for f in d.figures + d.by_position:
        lines.append(f"{f.name:<38}{value_text(f.a):>12}{value_text(f.b):>12}{value_text(f.ratio, 2):>9}")
    for title, changes in (("gained the most", d.gained), ("lost the most", d.lost)):
        lines += ["", f"windows that {title} accepted tokens (same KV position):"]
        lines += [f"  KV position {c.base_position}: {c.a_accepted} -> {c.b_accepted} ({c.change:+d})"
                  for c in changes] or ["  none"]
    return "\n".join(lines)


def _not_the_same_prompt(a: dict, b: dict) -> DiffRefused:
    pa, pb = a["prompt"], b["prompt"]
    return DiffRefused(f"not the same prompt: A's is {len(pa.get('token_ids') or ())} tokens "
                       f"({_preview(pa.get('text'))}), B's {len(pb.get('token_ids') or ())} "
                       f"({_preview(pb.get('text'))}); diff compares runs of one prompt")


def requests_of(doc: dict) -> list[dict]:
    """The request documents in a document: itself, or a conversation's (or served session's) turns in order."""
    return list(doc["turns"]) if doc.get("kind") == "conversation" else [doc]


def _prompt_key(doc: dict):
    p = doc["prompt"]
    return tuple(p.get("token_ids") or ()) or p.get("text")


def matched_requests(a: dict, b: dict) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Pairs ``(i, j)`` of A's and B's requests (``requests_of``) with the same prompt, each used once, in A's order
    (the first unused of B's with that prompt); then A's and B's requests left without a match. Raises
    ``DiffRefused`` when no request of A has a prompt of B's."""
    ra, rb = requests_of(a), requests_of(b)
    free: dict = {}
    for j, r in enumerate(rb):
        free.setdefault(_prompt_key(r), []).append(j)
    pairs, only_a = [], []
    for i, r in enumerate(ra):
        js = free.get(_prompt_key(r))
        if js:
            pairs.append((i, js.pop(0)))
        else:
            only_a.append(i)
    used = {j for _i, j in pairs}
    only_b = [j for j in range(len(rb)) if j not in used]
    if not pairs and len(ra) == len(rb) == 1:
        raise _not_the_same_prompt(ra[0], rb[0])
    if not pairs:
        raise DiffRefused(f"no request of A has the prompt of one of B's ({len(ra)} and {len(rb)} requests; "
                          f"A's first prompt {_preview(ra[0]['prompt'].get('text'))}, B's "
                          f"{_preview(rb[0]['prompt'].get('text'))}): diff compares runs of the same prompts")
    return pairs, only_a, only_b
