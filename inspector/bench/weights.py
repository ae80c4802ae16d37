"""Compare weight layouts of one model: what each costs to verify, and what speculation reaches.

``spec-inspector bench --weights Q4_1,Q8_0,Q4_0`` converts the model into each weight type with
llama.cpp's quantizer (``inspector.llama.quantize.make_draft``: cached next to the drafts,
keyed by the source file's size and time), then in one process, one layout after the other:
measures c(k) and its ceiling, runs plain decoding and the n-gram source on the copy task,
and checks quality against the original file: whether greedy output on each bundled example
equals the original's, and on what share of the original's output positions the converted
target's top token differs (one teacher-forced batch per example, no sampling).
Issue 13: on a CPU, whether two verification rows cost one or two decodes depends on the
weight type (``inspector.llama.cost_model`` module docstring).
"""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

from inspector.bench.run import run_task
from inspector.engine import RuntimeScheduler
from inspector.llama.cost_model import measure_cost_model, verify_cost_diagnosis
from inspector.llama.model_file import check_gguf
from inspector.llama.quantize import weight_form
from inspector.prompts import COPY_EXACT, EXAMPLES, example_prompt
from inspector.sources import NgramSource

COPY_TASK = COPY_EXACT
"""The task whose plain and n-gram speeds are compared per layout: the example the model copies."""


@dataclass
class LayoutResult:
    """One weight layout. Speeds in decode tokens/s (prefill excluded); costs in ms per batch."""

    weight_type: str
    path: str
    size_bytes: int
    converted: bool
    row_ms: tuple
    ceiling: float
    best_rows: int
    diagnosis: str
    plain_tps: float
    ngram_tps: float
    ngram_draft_max: int
    ngram_over_plain: float
    fraction_of_ceiling: float
    acceptance_rate: float | None
    same_as_original: dict
    """Example name -> greedy output equals the original file's (plain decoding)."""
    top_token_differs: float | None
    """Share of the original's output positions (all examples) where this layout's top token differs."""
    best_draft_max: int | None = None
    """The draft max (of those tried) that gave the most n-gram tokens/s on the copy task."""
    ngram_same_as_plain: bool | None = None
    """The n-gram run's output equals plain decoding's of the same layout (greedy: it must)."""


def _plain_and_ngram(scheduler, tokens, max_tokens: int, draft_maxes):
    """(plain generation, {draft max: n-gram generation}) on ``tokens``, through the run service."""
    plain = run_task(scheduler, None, tokens, max_tokens)
    return plain, {d: run_task(scheduler, NgramSource(length="fixed"), tokens, max_tokens, d) for d in draft_maxes}


def top_token_differences(runtime, prompt_tokens, output_tokens) -> int:
    """How many of ``output_tokens`` (the original's greedy output after ``prompt_tokens``) are
    not ``runtime``'s top token at their position: one teacher-forced batch (logits on every
    row), greedy. Returns a count of positions."""
    sid = runtime.open_session(None)
    try:
        base = len(prompt_tokens) - 1
        if base:
            runtime.prefill(sid, list(prompt_tokens[:-1]), 0)
        rows = [prompt_tokens[-1], *output_tokens[:-1]]
        predictions = runtime.decode_rows(sid, rows, base)
        return sum(1 for p, t in zip(predictions, output_tokens) if p != t)
    finally:
        runtime.drop_session(sid)


def bench_weights(model_path, weight_types, *, max_tokens: int = 128, k_max: int = 16, repeats: int = 3,
                  threads: int | None = None, draft_maxes=(8, 16), out_dir=None, progress=print) -> dict:
    """Run every layout of ``weight_types`` (e.g. ``["Q4_1", "Q8_0", "Q4_0"]``) one after the other
    in this process; return a JSON-ready dict (``layouts``: ``LayoutResult`` fields). The first
    layout whose file is the model itself (or the first one) is the quality reference.
    ``draft_maxes``: the n-gram runs' draft max values (the best is reported; ``ngram_tps`` is
    the best). Raises ``ValueError`` for an unknown type and ``ModelFileError``."""
    from inspector.llama.runtime import LlamaRuntime  # llama.cpp loads only when the bench runs

    forms = []
    for t in weight_types:
        progress(f"{t}: preparing the weights (llama.cpp quantize, cached) ...")
        forms.append((t, *weight_form(model_path, t, out_dir)))
    forms.sort(key=lambda f: f[2])  # the original file first: it is the quality reference
    reference: dict[str, tuple[list[int], list[int]]] = {}
    layouts = []
    for t, path, converted in forms:
        progress(f"{t}: loading {Path(path).name} ...")
        rt = LlamaRuntime(path, n_ctx=2048, n_batch=512, n_seq_max=2, n_threads=threads)
        try:
            scheduler = RuntimeScheduler(rt)
            copy_tokens = rt.prompt_tokens(example_prompt(COPY_TASK))
            progress(f"{t}: cost model (k = 1..{k_max}) ...")
            cm = measure_cost_model(scheduler, copy_tokens[:64], k_max=k_max, repeats=repeats)
            progress(f"{t}: plain and n-gram on {COPY_TASK} ...")
            plain, ngram = _plain_and_ngram(scheduler, copy_tokens, max_tokens, draft_maxes)
            best_d = max(ngram, key=lambda d: ngram[d].summary().decode_tokens_per_s or 0.0)
            best = ngram[best_d].summary()
            plain_tps = plain.summary().decode_tokens_per_s or 0.0
            over = (best.decode_tokens_per_s or 0.0) / max(1e-9, plain_tps)
            same, differs, positions = {}, 0, 0
            for name in EXAMPLES:
                if name == COPY_TASK:
                    tokens, out = copy_tokens, list(plain.generated)
                else:
                    tokens = rt.prompt_tokens(example_prompt(name))
                    out = list(run_task(scheduler, None, tokens, max_tokens).generated)
                ref_tokens, ref_out = reference.setdefault(name, (tokens, out))  # the first layout: the original
                same[name] = out == ref_out
                if ref_out is not out and ref_tokens == tokens:
                    differs += top_token_differences(rt, ref_tokens, ref_out)
                    positions += len(ref_out)
            info = check_gguf(path)
            layouts.append(LayoutResult(
                t, str(path), info.size_bytes, converted, cm.row_ms, cm.ceiling, cm.best_rows,
                verify_cost_diagnosis(cm, info.weight_types), plain_tps, best.decode_tokens_per_s or 0.0, best_d,
                over, over / cm.ceiling, best.acceptance_rate, same,
                None if not positions else differs / positions, best_d,
                list(ngram[best_d].generated) == list(plain.generated)))
        finally:
            rt.close()
    return {"model": str(model_path), "max_tokens": max_tokens, "task": COPY_TASK,
            "layouts": [asdict(r) for r in layouts],
            "definitions": {
                "ceiling": "max over k of k * c(1) / c(k): every proposal accepted",
                "ngram_tps": f"n-gram source, fixed length, the best of draft max {', '.join(map(str, draft_maxes))}",
                "fraction_of_ceiling": "ngram_over_plain / ceiling",
                "same_as_original": "greedy output of each bundled example equals the original file's",
                "ngram_same_as_plain": "the n-gram run's output equals plain decoding of the same layout",
                "top_token_differs": "share of the original's greedy output positions where this layout's top "
                                     "token differs (teacher-forced on the original's output)"}}


def format_weights(result: dict) -> str:
    """The layouts as text: c(k) and ceiling per layout, then plain vs n-gram and quality."""
    lines = []
    for r in result["layouts"]:
        lines.append(f"{r['weight_type']:7s} c(k) ms = " + " ".join(f"{k + 1}:{v:.1f}" for k, v in enumerate(r["row_ms"]))
                     + f"   ceiling {r['ceiling']:.2f}x at {r['best_rows']} rows")
    lines.append("")
    lines.append(f"{'weights':7s} {'MB':>5s} {'plain':>6s} {'n-gram':>6s} {'n-gram/plain':>12s} {'of ceil':>7s} "
                 f"{'accept':>6s} {'best dmax':>9s} {'= plain':>7s} {'top differs':>11s}  "
                 "same greedy output as the original")
    for r in result["layouts"]:
        acc = "n/a" if r["acceptance_rate"] is None else f"{100 * r['acceptance_rate']:.0f}%"
        diff = "(ref)" if r["top_token_differs"] is None else f"{100 * r['top_token_differs']:.1f}%"
        same = ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in r["same_as_original"].items())
        eq = {True: "yes", False: "NO", None: "n/a"}[r.get("ngram_same_as_plain")]
        lines.append(f"{r['weight_type']:7s} {r['size_bytes'] / 1e6:5.0f} {r['plain_tps']:6.1f} {r['ngram_tps']:6.1f} "
                     f"{r['ngram_over_plain']:11.2f}x {100 * r['fraction_of_ceiling']:6.0f}% {acc:>6s} "
                     f"{r['best_draft_max']:9d} {eq:>7s} {diff:>11s}  {same}")
    lines.append("")
    for r in result["layouts"]:
        lines.append(textwrap.fill(f"{r['weight_type']}: {r['diagnosis']}", 110))
    lines.append(f"(task {result['task']}, {result['max_tokens']} tokens, greedy; tokens/s are decode phase, "
                 "prefill excluded; top differs: teacher-forced on the original's output)")
    return "\n".join(lines)
