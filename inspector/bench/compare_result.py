"""What a comparison produced, and how it is written: ``CompareConfig`` (one configuration), ``CompareRow``
(its figures), ``CompareResult`` (every row and what they shared), the JSON and CSV exports and the text
table (``format_compare``). The runs themselves are ``inspector.bench.compare.run_compare``'s."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from inspector.engine.records import Summary
from inspector.engine.settings import GenerationSettings, check_setting
from inspector.llama.cost_model import CostModel


@dataclass(frozen=True)
class CompareConfig:
    """One configuration: ``label`` (shown in tables), ``source`` (a registry
    name, or ``"none"`` for plain decoding), ``draft_max`` (proposal tokens at
    most per window) and ``options`` for the source's factory (e.g.
    ``{"n_max": 4, "n_min": 2}`` for ``ngram``, ``{"draft_model": PATH}`` for
    ``draft``)."""

    label: str
    source: str
    draft_max: int = 8
    options: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Raises ``ValueError`` for a ``draft_max`` outside the engine's rule
        (``inspector.engine.settings.check_setting``: >= 0)."""
        check_setting("draft_max", self.draft_max)

    def to_json(self) -> dict:
        return {"label": self.label, "source": self.source, "draft_max": self.draft_max, "options": dict(self.options)}


@dataclass(frozen=True)
class CompareRow:
    """The figures of one configuration's run.

    ``summary``: the run's ``Summary`` (named definitions in
    ``inspector.engine.records.Summary``). ``speedup_vs_plain``: decode
    tokens/s over the plain run's (None without a plain run).
    ``expected_speedup``: what the cost model predicts from this run's windows
    (None without a cost model or windows). ``same_output_as_plain``: the
    generated token ids equal the plain run's. ``generated_tokens``: the ids.
    ``error``: the message when the run failed (figures then describe what it
    did before the error). ``warm``: what the source remembered before its
    request began (``SessionRun.source_warm``; for a conversation, which turns
    began warm and what the last of them remembered), "" when cold: a warm row
    is no cold benchmark (issue 28).
    """

    config: CompareConfig
    summary: Summary
    speedup_vs_plain: float | None
    expected_speedup: float | None
    same_output_as_plain: bool | None
    generated_tokens: tuple[int, ...]
    error: str | None = None
    warm: str = ""
    tree_windows: int = 0
    """Windows that verified a token tree (``inspector.engine.tree``; a source's tree option)."""
    rows_per_token: float | None = None
    """Verification rows decoded per generated token: each window's decoded rows (a tree's every node)
    and one per plain step (None without a run). A tree pays only when it commits more per row."""
    decode_tokens_per_s_runs: tuple[float, ...] = ()
    """Decode tokens/s of each round's run (``run_compare``'s ``repeats``); ``summary.decode_tokens_per_s``
    is their median when there are several."""

    def to_json(self) -> dict:
        return {
            "config": self.config.to_json(),
            "tree_windows": self.tree_windows,
            "rows_per_token": self.rows_per_token,
            "decode_tokens_per_s_runs": list(self.decode_tokens_per_s_runs),
            "summary": self.summary.to_json(),
            "speedup_vs_plain": self.speedup_vs_plain,
            "expected_speedup": self.expected_speedup,
            "same_output_as_plain": self.same_output_as_plain,
            "generated_token_ids": list(self.generated_tokens),
            "error": self.error,
            "warm": self.warm,
        }


@dataclass(frozen=True)
class CompareResult:
    """Every configuration's row, in the order given, plus what they shared."""

    rows: tuple[CompareRow, ...]
    prompt_token_count: int
    settings: GenerationSettings
    cost_model: CostModel | None = None
    runs: tuple = ()
    """With ``run_compare(keep_runs=True)``: each row's ``Generation`` or ``TurnsRun`` (None where the
    source could not be made), in row order; not part of the JSON."""
    llama_server: tuple = ()
    """llama-server's figures per row (``inspector.bench.server_compare.ServerRow``, row order) when
    the comparison ran through llama-server too, else empty."""
    model: dict | None = None
    """What ran: the runtime's ``describe()`` (file, weight form, threads, context, the llama.cpp
    commit and settings), as the receipts document's ``model``; None for a runtime without it."""
    system_prompt: str = ""
    """The chat's system message (``-sys``) every configuration's prompt (every turn's) began with; ""
    for none. In the JSON only when set, as in a receipts document's ``settings``."""
    repeats: int = 1
    """Runs per configuration, in rounds (``run_compare``): tokens/s and speedups are medians over them."""

    def to_json(self) -> dict:
        return {
            "kind": "spec-inspector/compare",
            "version": 1,
            "model": self.model,
            "prompt_token_count": self.prompt_token_count,
            "repeats": self.repeats,
            **({"system_prompt": self.system_prompt} if self.system_prompt else {}),
            "settings": self.settings.to_json(),
            "cost_model": None if self.cost_model is None else self.cost_model.to_json(),
            "rows": [r.to_json() for r in self.rows],
            **({"llama_server": [r.to_json() for r in self.llama_server]} if self.llama_server else {}),
            "definitions": {
                "decode_tokens_per_s": "generated tokens / decode time (prefill excluded); with repeats, the median "
                                       "of the rounds' runs (decode_tokens_per_s_runs)",
                "speedup_vs_plain": "decode_tokens_per_s / the plain run's decode_tokens_per_s",
                "expected_speedup": "tokens * c(1) / (sum of c(rows) over windows + plain steps * c(1)), cost model",
                "acceptance_rate": "accepted / proposed tokens over verified windows",
                "mean_accepted_length": "1 + accepted / windows",
            },
        }


CSV_COLUMNS = ("label", "source", "draft_max", "decode_tokens_per_s", "speedup_vs_plain", "expected_speedup",
               "acceptance_rate", "mean_accepted_length", "windows", "plain_steps", "generated_tokens",
               "same_output_as_plain", "error", "tree_windows", "rows_per_token")
MODEL_CSV_COLUMNS = ("model", "weights", "converted_from", "threads", "n_ctx", "llama_cpp_commit")
"""Added after the others on every line: what ran (a Q4_1 and a Q8_0 export must not look the same)."""
SERVER_CSV_COLUMNS = ("llama_server_tokens_per_s", "llama_server_drafted", "llama_server_accepted",
                      "drafted", "accepted", "same_output_as_llama_server", "same_windows_as_llama_server",
                      "llama_server_note")
"""Added after ``CSV_COLUMNS`` when the comparison ran through llama-server (``drafted``/``accepted``:
ours, in the same units: proposal tokens)."""


def write_compare_json(result: CompareResult, path: str | os.PathLike) -> Path:
    """Write ``result.to_json()`` to ``path`` (UTF-8, indented). Returns the path."""
    p = Path(path)
    p.write_text(json.dumps(result.to_json(), indent=1, ensure_ascii=False) + "\n", "utf-8")
    return p


def write_compare_csv(result: CompareResult, path: str | os.PathLike) -> Path:
    """Write one line per configuration with ``CSV_COLUMNS`` (then ``SERVER_CSV_COLUMNS`` when it ran
    through llama-server) and ``MODEL_CSV_COLUMNS``. Returns the path."""
    p = Path(path)
    with p.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        server = result.llama_server
        w.writerow(CSV_COLUMNS + (SERVER_CSV_COLUMNS if server else ()) + MODEL_CSV_COLUMNS)
        m = result.model or {}
        ran = [m.get("path", ""), m.get("weights", ""), m.get("converted_from", ""), m.get("n_threads", ""),
               m.get("n_ctx", ""), (m.get("llama_cpp") or {}).get("commit", "")]
        for i, r in enumerate(result.rows):
            s = r.summary
            line = [r.config.label, r.config.source, r.config.draft_max, s.decode_tokens_per_s,
                    r.speedup_vs_plain, r.expected_speedup, s.acceptance_rate, s.mean_accepted_length,
                    s.windows, s.plain_steps, s.generated_tokens, r.same_output_as_plain, r.error or "",
                    r.tree_windows, r.rows_per_token]
            if server:
                v = server[i]
                line += [v.tokens_per_s, v.drafted, v.accepted, v.ours_drafted, v.ours_accepted, v.same_output,
                         v.same_windows, v.error or v.note]
            w.writerow(line + ran)
    return p



def format_compare(result: CompareResult) -> str:
    """The comparison as a text table (one line per configuration)."""
    w = max([40, *(len(r.config.label) for r in result.rows)])  # whole labels: their settings differ at the end
    head = (f"{'configuration':{w}s} {'tok/s':>7s} {'vs plain':>8s} {'expected':>8s} {'accept':>7s} "
            f"{'mean len':>8s} {'windows':>7s} {'rows/tok':>8s} same")
    lines = [head]
    for r in result.rows:
        s = r.summary
        tps = f"{s.decode_tokens_per_s:.1f}" if s.decode_tokens_per_s else "n/a"
        vs = f"{r.speedup_vs_plain:.2f}x" if r.speedup_vs_plain else "n/a"
        exp = f"{r.expected_speedup:.2f}x" if r.expected_speedup else "n/a"
        acc = f"{100 * s.acceptance_rate:.0f}%" if s.acceptance_rate is not None else "n/a"
        mal = f"{s.mean_accepted_length:.2f}" if s.mean_accepted_length is not None else "n/a"
        same = "n/a" if r.same_output_as_plain is None else ("yes" if r.same_output_as_plain else "no")
        rows = "n/a" if r.rows_per_token is None else f"{r.rows_per_token:.2f}"
        line = f"{r.config.label:{w}s} {tps:>7s} {vs:>8s} {exp:>8s} {acc:>7s} {mal:>8s} {s.windows:7d} {rows:>8s} {same}"
        if r.error:
            line += f"  error: {r.error}"
        lines.append(line)
    lines += [f"warm: {r.config.label}: {r.warm} (its source remembered earlier requests: not a cold run)"
              for r in result.rows if r.warm]
    lines += [f"tree: {r.config.label}: {r.tree_windows} of {r.summary.windows} windows verified a token tree "
              "(rows/tok counts every node)" for r in result.rows if r.tree_windows]
    if result.repeats > 1:
        lines.append(f"tok/s, vs plain: medians of {result.repeats} runs per configuration, run in rounds (every "
                     "configuration once per round, plain first); the other columns: the first round's run")
    return "\n".join(lines)
