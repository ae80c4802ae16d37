"""The losslessness audit (issue 39, item 1): is a difference between speculative output and plain
decoding the verify batch's arithmetic, or a bug?

With greedy sampling speculative decoding commits the target's argmax of each verify row, so its
output equals plain decoding's unless the batch shape changes the arithmetic (llama.cpp picks other
CPU kernels for other batch sizes; LLAMA_CPP_NOTES "Greedy decoding one token at a time and greedy
speculative decoding can differ at a near-tie"). At the generated position ``p`` where two streams
part, the audit recomputes the target's prediction of that position with the runtime's own verify
path (``LlamaRuntime.decode_rows``: one batch, logits on every row, as
``inspector.engine.window`` verifies) for every verify width ``w = 1..k`` and every place ``j``
(``0..w-1``) a window of that width could have put the row that predicts ``p``: the rows are the
committed tokens from ``base = (prompt length + p - 1) - j``, the KV holds everything before
``base``, and the rows after ``j`` are the speculative stream's next tokens (a window's proposal
there). A window starts at or after the first generated token (its row 0 is the current token), so
only places with ``base >= prompt length`` are tried.

The KV prefix is built as plain decoding builds it: the prompt in one prefill (chunks of
``n_batch``, llama.cpp's schedule), then the committed tokens one row per decode. So width 1 at
place 0 is exactly plain decoding's step. Or, given the run's windows (``VerifiedWindow``, from its
receipts), as the speculative run built it: each window's verify batch decoded again at its base and
trimmed to its canonical position, plain steps between them (``prefix_windows``): the KV the run had. Everything runs on a session of its own, dropped at the
end: no other session's KV is touched. No Qt here.

Margins are logit differences (top-1 logit minus top-2 logit of the row, after the run's
penalties); a near-tie is well below 1 logit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Sequence

from inspector.engine.baseline import first_difference
from inspector.engine.errors import EngineError, RequestCancelled
from inspector.engine.settings import PENALTY_FIELDS, SamplingSettings

MAX_AUDIT_WIDTH = 16
"""The widest verify batch the audit tries (rows): llama.cpp's speculative windows here stay under it."""

BATCH_SHAPE = "batch-shape numerics"
NOT_EXPLAINED = "NOT EXPLAINED BY BATCH SHAPE"
WIDTH_INDEPENDENT = "not a verify-width effect"
PLAIN_PREFIX = "plain"
"""The KV prefix built as plain decoding built it (one token per decode after the prompt)."""
RUN_PREFIX = "run"
"""The KV prefix built as the speculative run built it (its windows' verify batches again)."""


@dataclass(frozen=True, slots=True)
class VerifiedWindow:
    """One verify batch of the run: ``base`` (its first KV position, tokens), ``proposal`` (the
    proposal's token ids; the batch's rows are the current token, the committed token at ``base``,
    then these) and ``canonical`` (the KV length the run kept after it, tokens)."""

    base: int
    proposal: tuple[int, ...]
    canonical: int


def windows_of(receipts: Sequence[dict], session_id: int | None = None) -> tuple[VerifiedWindow, ...]:
    """The ``VerifiedWindow`` s of a receipts document's ``windows`` (of session ``session_id``; None:
    every window), in KV order. Raises ``KeyError`` for a window without its positions."""
    out = [VerifiedWindow(int(w["base_position"]), tuple(int(t) for t in w["proposal_token_ids"]),
                          int(w["canonical_position"]))
           for w in receipts if session_id is None or w.get("session_id") == session_id]
    return tuple(sorted(out, key=lambda v: v.base))


def build_prefix(runtime, sid: int, tokens: Sequence[int], start: int, end: int,
                 windows: Sequence[VerifiedWindow] = ()) -> None:
    """Fill session ``sid``'s KV from position ``start`` up to ``end`` (exclusive; tokens) with
    ``tokens`` (prompt then committed ids): one row per decode (plain decoding), except where a
    window of ``windows`` starts at or after ``start`` and before ``end``: its verify batch is decoded
    again (``decode_rows``, the run's shape) and trimmed to its canonical position (or ``end``).
    Raises ``EngineError`` when a trim fails or a window does not fit the stream."""
    pos = start
    for w in windows:
        if w.base < pos or w.base >= end:
            continue
        while pos < w.base:
            runtime.decode_rows(sid, (tokens[pos],), pos)
            pos += 1
        if w.base >= len(tokens):
            raise EngineError(f"a window at KV position {w.base} is past the committed stream ({len(tokens)} tokens)")
        runtime.decode_rows(sid, (tokens[w.base], *w.proposal), w.base)
        pos = min(max(w.canonical, w.base + 1), end)
        if not runtime.trim(sid, pos) or runtime.kv_length(sid) != pos:
            raise EngineError(f"the KV cache could not be trimmed to {pos} positions (llama_memory_seq_rm)")
    while pos < end:
        runtime.decode_rows(sid, (tokens[pos],), pos)
        pos += 1


@dataclass(frozen=True, slots=True)
class PlacePick:
    """The target's pick for the audited position from one verify batch.

    ``width``: rows in the batch. ``place``: the row (0-based) that predicts the position.
    ``base``: the batch's first KV position (tokens). ``token``: the argmax (after the run's
    penalties); ``second``: the runner-up; ``margin``: their logit difference (logits, >= 0)."""

    width: int
    place: int
    base: int
    token: int
    second: int
    margin: float


@dataclass(frozen=True, slots=True)
class WidthPicks:
    """Every place tried at one verify width (``width`` rows): ``places`` in place order."""

    width: int
    places: tuple[PlacePick, ...]

    @property
    def tokens(self) -> tuple[int, ...]:
        """The distinct tokens picked at this width, in order of first place."""
        return tuple(dict.fromkeys(p.token for p in self.places))

    @property
    def min_margin(self) -> float:
        """The smallest top-2 margin over the places (logits)."""
        return min(p.margin for p in self.places)


@dataclass(frozen=True, slots=True)
class AuditResult:
    """The audit of one generated position.

    ``position``: the generated-token index audited (0-based; KV position = prompt length +
    ``position``). ``speculative_token`` / ``plain_token``: the two streams' tokens there (-1 when a
    stream had ended). ``widths``: per verify width 1..k. ``verdict``: one line (``verdict``).
    ``prefix``: how the KV before the audited rows was built, ``PLAIN_PREFIX`` or ``RUN_PREFIX``."""

    position: int
    prompt_length: int
    speculative_token: int
    plain_token: int
    widths: tuple[WidthPicks, ...]
    verdict: str
    prefix: str = "plain"

    @property
    def explained(self) -> bool:
        """Whether some verify width reproduces the speculative token."""
        return not self.verdict.startswith(NOT_EXPLAINED)

    def widths_picking(self, token: int) -> tuple[int, ...]:
        """The widths (rows) at which some place picks ``token``."""
        return tuple(w.width for w in self.widths if token in w.tokens)

    def table(self, token_text: Callable[[int], str] = str) -> list[str]:
        """One line per width: the places tried, the token(s) picked and the smallest margin (logits)."""
        lines = [f"{'width':>5}  {'places':>6}  {'picks':<40}  {'min top-2 margin (logits)':>25}"]
        for w in self.widths:
            picks = ", ".join(
                f"{token_text(t)!r} ({t})" + ("" if len(w.tokens) == 1 else
                                              f" at places {compact([p.place for p in w.places if p.token == t])}")
                for t in w.tokens)
            lines.append(f"{w.width:>5}  {len(w.places):>6}  {picks:<40}  {w.min_margin:>25.4f}")
        return lines


def compact(numbers: Sequence[int]) -> str:
    """Sorted integers as ranges, e.g. ``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    out: list[str] = []
    ns = sorted(set(numbers))
    i = 0
    while i < len(ns):
        j = i
        while j + 1 < len(ns) and ns[j + 1] == ns[j] + 1:
            j += 1
        out.append(str(ns[i]) if i == j else f"{ns[i]}-{ns[j]}")
        i = j + 1
    return ", ".join(out)


def penalty_sampling(sampling: SamplingSettings | None) -> SamplingSettings:
    """A greedy ``SamplingSettings`` with ``sampling``'s penalties (the audit's session sampler)."""
    if sampling is None:
        return SamplingSettings()
    return SamplingSettings(**{k: getattr(sampling, k) for k in PENALTY_FIELDS})


def audit_position(runtime, prompt: Sequence[int], stream: Sequence[int], position: int, max_width: int,
                   sampling: SamplingSettings | None = None,
                   prefix_windows: Sequence[VerifiedWindow] = (),
                   progress: Callable[[int, int], None] | None = None,
                   cancel: threading.Event | None = None) -> tuple[WidthPicks, ...]:
    """The target's pick for generated position ``position`` (0-based, tokens after the prompt) at
    every verify width ``1..max_width`` (rows) and every place a window could put the predicting row.

    ``runtime``: a ``LlamaRuntime`` (or anything with its session and decode calls); call it under the
    scheduler's lock (``RuntimeScheduler.execute``) when other sessions may run. ``prompt``: the
    prompt's token ids. ``stream``: the generated token ids whose first ``position`` tokens are the
    committed prefix; tokens after it fill the rows after the predicting row (its last token repeats
    when it runs out). ``sampling``: the run's sampling (greedy; its penalties apply).
    ``prefix_windows``: the run's windows, to build the KV prefix as the run did (``build_prefix``);
    empty: as plain decoding did. ``progress(done, total)``: after each verify batch (batches).
    ``cancel``: when set, ``RequestCancelled`` is raised between batches. Uses a session of
    its own (``open_session``), dropped at the end. Raises ``ValueError`` for a position outside
    ``1..len(stream)`` or ``max_width`` < 1, ``EngineError`` when the batches exceed the context or
    ``n_batch``, or when no session is free."""
    if max_width < 1:
        raise ValueError(f"max_width must be >= 1 rows, observed {max_width}")
    if not 1 <= position <= len(stream):
        raise ValueError(f"position must be 1..{len(stream)} (generated tokens; the first comes from the "
                         f"prompt's prefill, no verify window predicts it), observed {position}")
    if not prompt:
        raise ValueError("the prompt is empty: expected at least 1 token")
    n = len(prompt)
    tokens = list(prompt) + list(stream)
    row = n + position - 1  # the KV position of the row that predicts generated[position]
    max_width = min(max_width, runtime.n_batch)
    if row + max_width > runtime.n_ctx:
        raise EngineError(f"auditing position {position} needs {row + max_width} KV positions, n_ctx is "
                          f"{runtime.n_ctx}")

    def rows(base: int, width: int) -> list[int]:
        out = tokens[base:base + width]
        return out + [tokens[-1]] * (width - len(out))

    places = min(max_width, position)
    total = sum(max_width - place for place in range(places))
    done = 0
    sid = runtime.open_session(penalty_sampling(sampling))
    try:
        runtime.prefill(sid, list(prompt), 0)
        build_prefix(runtime, sid, tokens, n, row, prefix_windows)
        found: dict[int, list[PlacePick]] = {w: [] for w in range(1, max_width + 1)}
        for place in range(0, places):  # base >= n: a window starts at a generated token
            base = row - place
            if not runtime.trim(sid, base) or runtime.kv_length(sid) != base:
                raise EngineError(f"the KV cache could not be trimmed to {base} positions (llama_memory_seq_rm)")
            for width in range(place + 1, max_width + 1):
                if cancel is not None and cancel.is_set():
                    raise RequestCancelled()
                picks = runtime.decode_rows(sid, rows(base, width), base)
                top, second, margin = runtime.row_logits_top2(place)
                if top != picks[place]:  # an exact tie: llama.cpp's argmax order is the pick
                    top, second = picks[place], top
                found[width].append(PlacePick(width, place, base, int(top), int(second), float(margin)))
                if not runtime.trim(sid, base):
                    raise EngineError(f"the KV cache could not be trimmed to {base} positions (llama_memory_seq_rm)")
                done += 1
                if progress is not None:
                    progress(done, total)
    finally:
        runtime.drop_session(sid)
    return tuple(WidthPicks(w, tuple(sorted(ps, key=lambda p: p.place))) for w, ps in found.items())


def verdict(widths: Sequence[WidthPicks], speculative_token: int, plain_token: int,
            token_text: Callable[[int], str] = str, reference: str = "plain decoding") -> str:
    """One line: ``batch-shape numerics: widths W1 pick 'x' (margin m logits), widths W2 pick 'y' ...``
    when the widths disagree and one of them picks the speculative token; ``NOT EXPLAINED BY BATCH
    SHAPE ...`` (a real bug) when none does; ``not a verify-width effect ...`` when every width picks
    the speculative token (then plain decoding's token is the odd one out). ``reference``: what the
    ``plain_token`` came from, in words (e.g. "llama-server")."""
    by_token: dict[int, list[WidthPicks]] = {}
    for w in widths:
        for t in w.tokens:
            by_token.setdefault(t, []).append(w)
    if speculative_token not in by_token:
        picked = "; ".join(f"widths {compact([w.width for w in ws])} pick {token_text(t)!r}"
                           for t, ws in by_token.items())
        return (f"{NOT_EXPLAINED}: no verify width 1..{max(w.width for w in widths)} at any place picks the "
                f"speculative token {token_text(speculative_token)!r} ({picked}): this is a real bug, "
                "not numerics")
    if len(by_token) == 1:
        plain = f"{token_text(plain_token)!r}" if plain_token >= 0 else "end of output"
        return (f"{WIDTH_INDEPENDENT}: every verify width 1..{max(w.width for w in widths)} picks "
                f"{token_text(speculative_token)!r}; {reference}'s {plain} is not "
                "reproduced by any batch shape here")

    def margin(t: int, ws: list[WidthPicks]) -> float:
        return min(p.margin for w in ws for p in w.places if p.token == t)

    order = sorted(by_token, key=lambda t: (t != speculative_token, t))
    parts = [f"widths {compact([w.width for w in by_token[t]])} pick {token_text(t)!r} "
             f"(margin {margin(t, by_token[t]):.4f} logits)" for t in order]
    return f"{BATCH_SHAPE}: " + ", ".join(parts)


def audit_divergence(runtime, prompt: Sequence[int], speculative: Sequence[int], plain: Sequence[int],
                     max_width: int, sampling: SamplingSettings | None = None,
                     token_text: Callable[[int], str] = str,
                     prefix_windows: Sequence[VerifiedWindow] = (),
                     progress: Callable[[int, int], None] | None = None,
                     cancel: threading.Event | None = None,
                     reference: str = "plain decoding") -> AuditResult | None:
    """Audit where ``speculative`` parts from ``plain`` (generated token ids of the same ``prompt``):
    the target's pick there at every verify width ``1..max_width`` (rows, at most ``MAX_AUDIT_WIDTH``)
    and the verdict. None when the streams are identical. A difference only in length (one stream
    stopped) is audited at the end of the shorter one when the longer one has a token there.
    ``prefix_windows``: the speculative run's windows, to build the KV prefix as it did (empty: as
    plain decoding did; ``AuditResult.prefix`` says which). ``reference``: where ``plain`` came from, in
    words (the verdict names it). Arguments and errors as ``audit_position``; ``ValueError`` also when they part at generated
    token 0 (the prompt's prefill predicts it, not a verify window)."""
    p = first_difference(plain, speculative)
    if p is None:
        return None
    if p == 0:
        raise ValueError("the streams part at generated token 0, which the prompt's prefill predicts, not a "
                         "verify window: check the runs' settings (model, context, flash attention)")
    spec = speculative[p] if p < len(speculative) else -1
    plain_token = plain[p] if p < len(plain) else -1
    stream = list(speculative) if p < len(speculative) else list(plain)
    widths = audit_position(runtime, prompt, stream, p, min(max_width, MAX_AUDIT_WIDTH), sampling, prefix_windows,
                            progress, cancel)
    if spec < 0:  # speculation stopped early: what the widths pick is the question
        text = (f"the speculative run ended at generated token {p}; {reference} went on with "
                f"{token_text(plain_token)!r}")
    else:
        text = verdict(widths, spec, plain_token, token_text, reference)
    return AuditResult(p, len(prompt), spec, plain_token, widths, text, RUN_PREFIX if prefix_windows else PLAIN_PREFIX)
