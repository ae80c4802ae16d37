"""``spec-inspector bench``: plain vs our n-gram speculation vs llama-cpp-python's
``LlamaPromptLookupDecoding`` on fixed tasks, in one process, with the cost model.

Tokens/s are decode phase (prefill excluded). For llama-cpp-python the decode
time is (time for N tokens) - (time for 1 token) on a reset cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from inspector import asset_path
from inspector.bench.cost_model import measure_cost_model
from inspector.engine import Generation, GenerationSettings, RuntimeScheduler
from inspector.sources import NgramSource

TASKS = {
    "copy-with-corrections": "prompts/copy-with-corrections.txt",
    "code-rewrite": "prompts/code-rewrite.txt",
    "open-ended": "prompts/open-ended.txt",
}


@dataclass
class TaskResult:
    task: str
    generated_tokens: int
    plain_tps: float
    ngram_tps: float
    lcpp_lookup_tps: float | None
    ngram_over_plain: float
    ngram_over_lcpp: float | None
    acceptance_rate: float | None
    mean_accepted_length: float | None
    windows: int
    python_us_per_step: float
    expected_speedup: float | None
    same_output_as_plain: bool


def _prompt(name: str) -> str:
    text = asset_path(TASKS[name]).read_text("utf-8")
    return text[:-1] if text.endswith("\n") else text


def _run(scheduler, source, tokens, max_tokens) -> Generation:
    rt = scheduler.runtime
    g = Generation(scheduler, source, tokens, GenerationSettings(max_new_tokens=max_tokens))
    g.start()
    before = rt.decode_ns
    g.run()
    g.decode_ns_inside = rt.decode_ns - before
    g.close()
    return g


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
    results = []
    for name in names:
        tokens = runtime.prompt_tokens(_prompt(name))
        progress(f"{name}: plain ...")
        plain = _run(scheduler, None, tokens, max_tokens)
        progress(f"{name}: n-gram ...")
        spec = _run(scheduler, NgramSource(), tokens, max_tokens)
        lcpp = None
        if compare_llama_cpp_python:
            progress(f"{name}: llama-cpp-python LlamaPromptLookupDecoding ...")
            lcpp = _lcpp_lookup_tps(runtime.model_path, tokens, max_tokens, runtime.n_ctx, runtime.n_threads)
        sp, ss = plain.summary(), spec.summary()
        steps = max(1, spec.decode_step)
        results.append(TaskResult(
            task=name,
            generated_tokens=spec.generated_count,
            plain_tps=sp.decode_tokens_per_s or 0.0,
            ngram_tps=ss.decode_tokens_per_s or 0.0,
            lcpp_lookup_tps=lcpp,
            ngram_over_plain=(ss.decode_tokens_per_s or 0.0) / max(1e-9, sp.decode_tokens_per_s or 0.0),
            ngram_over_lcpp=None if not lcpp else (ss.decode_tokens_per_s or 0.0) / lcpp,
            acceptance_rate=ss.acceptance_rate,
            mean_accepted_length=ss.mean_accepted_length,
            windows=ss.windows,
            python_us_per_step=(spec.decode_elapsed_us * 1000 - spec.decode_ns_inside) / steps / 1000,
            expected_speedup=cm.expected_speedup(
                [(r.verification_rows, r.canonical_prediction_count) for r in spec.receipts], spec.plain_steps),
            same_output_as_plain=plain.generated == spec.generated,
        ))
    return {
        "model": runtime.describe(),
        "max_tokens": max_tokens,
        "cost_model": cm.to_json(),
        "tasks": [r.__dict__ for r in results],
        "definitions": {
            "tps": "generated tokens / decode time (prefill excluded)",
            "python_us_per_step": "decode time outside llama_decode per decode step (window or plain step), microseconds",
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
        "",
        f"{'task':24s} {'plain t/s':>9s} {'ngram t/s':>9s} {'lcpp t/s':>9s} {'ngram/plain':>11s} {'ngram/lcpp':>10s} "
        f"{'expected':>8s} {'accept':>7s} {'py us/step':>10s} same",
    ]
    for t in result["tasks"]:
        lcpp = f"{t['lcpp_lookup_tps']:.1f}" if t["lcpp_lookup_tps"] else "n/a"
        rel = f"{t['ngram_over_lcpp']:.2f}x" if t["ngram_over_lcpp"] else "n/a"
        exp = f"{t['expected_speedup']:.2f}x" if t["expected_speedup"] else "n/a"
        acc = f"{100 * t['acceptance_rate']:.0f}%" if t["acceptance_rate"] is not None else "n/a"
        lines.append(f"{t['task']:24s} {t['plain_tps']:9.1f} {t['ngram_tps']:9.1f} {lcpp:>9s} "
                     f"{t['ngram_over_plain']:10.2f}x {rel:>10s} {exp:>8s} {acc:>7s} {t['python_us_per_step']:10.0f} "
                     f"{'yes' if t['same_output_as_plain'] else 'no'}")
    return "\n".join(lines)
