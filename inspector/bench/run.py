"""``spec-inspector bench``: plain vs our n-gram speculation vs llama-cpp-python's
``LlamaPromptLookupDecoding`` on fixed tasks, in one process, with the cost model.

Tokens/s are decode phase (prefill excluded). For llama-cpp-python the decode
time is (time for N tokens) - (time for 1 token) on a reset cache. Our n-gram
source runs twice: with the adaptive proposal length (the default) and with
the fixed length (everything that followed the match, up to draft max 8,
as llama.cpp's lookup does). Time outside ``llama_decode`` is split into
picking the predictions (argmax over every row's logits, numpy) and the
engine's own Python bookkeeping.
"""

from __future__ import annotations

import textwrap
import time
from dataclasses import dataclass
from statistics import median
from time import perf_counter_ns

from inspector.engine import Generation, GenerationSettings, RuntimeScheduler
from inspector.engine.probabilities import figure_path
from inspector.llama.cost_cache import placement, store_cost_model
from inspector.llama.cost_model import measure_cost_model, verify_cost_diagnosis
from inspector.prompts import EXAMPLES, example_prompt
from inspector.session.session_record import SessionRecord
from inspector.session.run import RunRequest, SessionRun
from inspector.sources import NgramSource

TASKS = EXAMPLES
"""The bench's tasks: the bundled examples (``inspector.prompts``)."""


@dataclass
class TaskResult:
    task: str
    generated_tokens: int
    plain_tps: float
    ngram_tps: float
    ngram_fixed_tps: float
    lcpp_lookup_tps: float | None
    ngram_over_plain: float
    ngram_fixed_over_plain: float
    ngram_over_lcpp: float | None
    fraction_of_ceiling: float
    acceptance_rate: float | None
    mean_accepted_length: float | None
    windows: int
    python_us_per_step: float
    python_us_per_window: float | None
    predict_us_per_step: float
    probability_us_per_row: float | None
    probability_us_per_step: float | None
    engine_us_per_step: float
    expected_speedup: float | None
    same_output_as_plain: bool


_prompt = example_prompt


def run_task(scheduler, source, tokens, max_tokens, draft_max: int = 8) -> Generation:
    """One run through the run service, as ``spec-inspector run`` makes it (a session record
    filled as it goes); the time outside ``llama_decode`` per window step is measured."""
    rt = scheduler.runtime
    settings = GenerationSettings(max_new_tokens=max_tokens, draft_max=draft_max)
    run = SessionRun(scheduler, RunRequest("", settings, source.name if source else "none",
                                           prompt_token_ids=tuple(tokens)),
                     SessionRecord().apply, make_source=lambda _req: source)
    g = run.prepare()
    run.start()
    before, predict_before = rt.decode_ns, getattr(rt, "predict_ns", 0)
    prob_before = getattr(rt, "probability_ns", 0), getattr(rt, "probability_rows", 0)
    g.window_outside_us = []  # per window step: time outside llama_decode (microseconds)
    windows, d0, t0 = len(g.receipts), rt.decode_ns, perf_counter_ns()
    for _ in run.steps():
        if len(g.receipts) > windows:
            g.window_outside_us.append((perf_counter_ns() - t0 - (rt.decode_ns - d0)) / 1000)
        windows, d0, t0 = len(g.receipts), rt.decode_ns, perf_counter_ns()
    g.decode_ns_inside = rt.decode_ns - before
    g.predict_ns = getattr(rt, "predict_ns", 0) - predict_before
    g.probability_ns = getattr(rt, "probability_ns", 0) - prob_before[0]
    g.probability_rows = getattr(rt, "probability_rows", 0) - prob_before[1]
    run.end(g.finish_reason)
    return g


ADAPTIVE_DRAFT_MAX = 16
"""Draft max for the adaptive n-gram runs: the policy picks the length below it."""


def _lcpp_lookup_tps(model_path: str, tokens, max_tokens: int, n_ctx: int, threads: int) -> float | None:
    try:
        from llama_cpp import Llama
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    except ImportError:
        return None
    llm = Llama(model_path=model_path, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False,
                draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10, max_ngram_size=2))
    try:
        def timed(n):
            llm.reset()
            t = time.perf_counter()
            out = llm.create_completion(prompt=list(tokens), max_tokens=n, temperature=0.0, top_k=1)
            return time.perf_counter() - t, out["usage"]["completion_tokens"]

        t1, _ = timed(1)
        tn, n = timed(max_tokens)
        return (n - 1) / max(1e-9, tn - t1) if n > 1 else None
    finally:
        llm.close() if hasattr(llm, "close") else None


def run_bench(runtime, tasks=None, max_tokens: int = 128, k_max: int = 16, repeats: int = 3,
              compare_llama_cpp_python: bool = True, progress=print) -> dict:
    """Run every task; return a JSON-ready dict with per-task figures and the cost model."""
    scheduler = RuntimeScheduler(runtime)
    names = list(tasks or TASKS)
    first = runtime.prompt_tokens(_prompt(names[0]))
    progress(f"measuring the cost model (k = 1..{k_max}, {repeats} repeats) ...")
    cm = measure_cost_model(scheduler, first[:64], k_max=k_max, repeats=repeats)
    disturbed = cm.disturbed()
    if disturbed:
        progress(f"warning: the cost model looks disturbed ({disturbed}); another process probably took "
                 f"the CPU. Its figures are unreliable and it is not stored; run bench again on a quiet machine.")
    else:
        store_cost_model(runtime.model_path, runtime.n_threads, cm, placement(runtime))
    results = []
    for name in names:
        tokens = runtime.prompt_tokens(_prompt(name))
        progress(f"{name}: plain ...")
        plain = run_task(scheduler, None, tokens, max_tokens)
        progress(f"{name}: n-gram, fixed length ...")
        fixed = run_task(scheduler, NgramSource(length="fixed"), tokens, max_tokens)
        progress(f"{name}: n-gram, adaptive length ...")
        spec = run_task(scheduler, NgramSource(length="adaptive", row_costs=cm.row_ms), tokens, max_tokens,
                    ADAPTIVE_DRAFT_MAX)
        lcpp = None
        if compare_llama_cpp_python:
            progress(f"{name}: llama-cpp-python LlamaPromptLookupDecoding ...")
            lcpp = _lcpp_lookup_tps(runtime.model_path, tokens, max_tokens, runtime.n_ctx, runtime.n_threads)
        sp, ss, sf = plain.summary(), spec.summary(), fixed.summary()
        steps = max(1, spec.decode_step)
        outside_us = (spec.decode_elapsed_us * 1000 - spec.decode_ns_inside) / steps / 1000
        predict_us = spec.predict_ns / steps / 1000
        plain_tps = max(1e-9, sp.decode_tokens_per_s or 0.0)
        over_plain = (ss.decode_tokens_per_s or 0.0) / plain_tps
        results.append(TaskResult(
            task=name,
            generated_tokens=spec.generated_count,
            plain_tps=sp.decode_tokens_per_s or 0.0,
            ngram_tps=ss.decode_tokens_per_s or 0.0,
            ngram_fixed_tps=sf.decode_tokens_per_s or 0.0,
            lcpp_lookup_tps=lcpp,
            ngram_over_plain=over_plain,
            ngram_fixed_over_plain=(sf.decode_tokens_per_s or 0.0) / plain_tps,
            ngram_over_lcpp=None if not lcpp else (ss.decode_tokens_per_s or 0.0) / lcpp,
            fraction_of_ceiling=over_plain / cm.ceiling,
            acceptance_rate=ss.acceptance_rate,
            mean_accepted_length=ss.mean_accepted_length,
            windows=ss.windows,
            python_us_per_step=outside_us,
            python_us_per_window=median(fixed.window_outside_us) if fixed.window_outside_us else None,
            predict_us_per_step=predict_us,
            probability_us_per_row=spec.probability_ns / spec.probability_rows / 1000 if spec.probability_rows else None,
            probability_us_per_step=spec.probability_ns / steps / 1000 if spec.probability_rows else None,
            engine_us_per_step=outside_us - predict_us - spec.probability_ns / steps / 1000,
            expected_speedup=cm.expected_speedup(
                [(r.decoded_rows, r.canonical_prediction_count) for r in spec.receipts], spec.plain_steps),
            same_output_as_plain=plain.generated == spec.generated == fixed.generated,
        ))
    return {
        "model": runtime.describe(),
        "max_tokens": max_tokens,
        "cost_model": {**cm.to_json(), "disturbed": disturbed,
                       "weight_types": {t: b for t, b in getattr(getattr(runtime, "info", None), "weight_types", ())},
                       "diagnosis": verify_cost_diagnosis(
                           cm, tuple(getattr(getattr(runtime, "info", None), "weight_types", ())))},
        "tasks": [r.__dict__ for r in results],
        "figure_path": figure_path(),
        "definitions": {
            "tps": "generated tokens / decode time (prefill excluded)",
            "python_us_per_step": "decode time outside llama_decode per decode step (window or plain step), microseconds",
            "python_us_per_window": "median time outside llama_decode per window of the fixed n-gram run, microseconds",
            "predict_us_per_step": "of which picking greedy predictions: argmax over every row's logits (numpy)",
            "probability_us_per_row": "of which the per-row probability figures (top 5, softmax, entropy, margin), "
                                      "per verification row, microseconds (adapt run)",
            "probability_us_per_step": "the same per decode step (window or plain step), microseconds",
            "figure_path": "which code sums the figures: the C kernel (and its instruction set) or numpy",
            "engine_us_per_step": "of which the engine's Python bookkeeping (query, classify, commit, repair, receipt), "
                                  "probability figures excluded",
            "ngram_tps": "n-gram source, adaptive proposal length with this run's cost model (draft max 16)",
            "ngram_fixed_tps": "n-gram source, fixed proposal length (draft max 8)",
            "fraction_of_ceiling": "ngram_over_plain / the cost model's ceiling",
            "expected_speedup": "tokens * c(1) / (sum of c(rows) over windows + plain steps * c(1)), from the cost model",
            "ceiling": "max over k of k * c(1) / c(k): every proposal accepted",
        },
    }


def format_bench(result: dict) -> str:
    """The benchmark as a text table."""
    cm = result["cost_model"]
    lines = [
        "cost model: c(k) ms = " + " ".join(f"{k + 1}:{v:.1f}" for k, v in enumerate(cm["row_ms"])),
        f"ceiling {cm['ceiling']:.2f}x at {cm['best_rows']} rows",
        f"probability figures summed by {result.get('figure_path', 'numpy')}",
        *([textwrap.fill(cm["diagnosis"], 110)] if cm.get("diagnosis") else []),
        "",
        f"{'task':22s} {'plain':>6s} {'fixed':>6s} {'adapt':>6s} {'lcpp':>6s} {'adapt/plain':>11s} {'fixed/plain':>11s} "
        f"{'adapt/lcpp':>10s} {'expected':>8s} {'of ceil':>7s} {'accept':>6s} {'us/step':>7s} {'argmax':>6s} "
        f"{'engine':>6s} {'us/win':>6s} {'p/row':>5s} {'p/step':>6s} same",
    ]
    for t in result["tasks"]:
        lcpp = f"{t['lcpp_lookup_tps']:.1f}" if t["lcpp_lookup_tps"] else "n/a"
        rel = f"{t['ngram_over_lcpp']:.2f}x" if t["ngram_over_lcpp"] else "n/a"
        exp = f"{t['expected_speedup']:.2f}x" if t["expected_speedup"] else "n/a"
        acc = f"{100 * t['acceptance_rate']:.0f}%" if t["acceptance_rate"] is not None else "n/a"
        lines.append(f"{t['task'][:22]:22s} {t['plain_tps']:6.1f} {t['ngram_fixed_tps']:6.1f} {t['ngram_tps']:6.1f} "
                     f"{lcpp:>6s} {t['ngram_over_plain']:10.2f}x {t['ngram_fixed_over_plain']:10.2f}x {rel:>10s} "
                     f"{exp:>8s} {100 * t['fraction_of_ceiling']:6.0f}% {acc:>6s} {t['python_us_per_step']:7.0f} "
                     f"{t['predict_us_per_step']:6.0f} {t['engine_us_per_step']:6.0f} "
                     f"{t['python_us_per_window'] or 0:6.0f} {t.get('probability_us_per_row') or 0:5.0f} "
                     f"{t.get('probability_us_per_step') or 0:6.0f} "
                     f"{'yes' if t['same_output_as_plain'] else 'no'}")
    if cm.get("disturbed"):
        lines.insert(2, f"WARNING: the cost model looks disturbed ({cm['disturbed']}): figures unreliable")
    lines += ["", "tokens/s are decode phase (prefill excluded); fixed = n-gram proposing up to 8 tokens (the "
              "default); adapt = n-gram with --ngram-length adaptive, using this run's cost model; "
              "expected = speedup the cost model predicts for the adapt run; of ceil = adapt/plain as a share "
              "of the ceiling; accept = accepted / proposed tokens of the adapt run (n/a: it proposed nothing); "
              "us/step = time outside llama_decode per decode step of the adapt run = argmax over the rows' logits + "
              "engine bookkeeping; us/win = the same per window of the fixed run (median); p/row, p/step = of "
              "us/step, the per-row probability figures (top 5, softmax, entropy, margin; --no-probabilities in "
              "run leaves them out), microseconds per verification row and per decode step"]
    return "\n".join(lines)
