"""What distribution costs: the same model local and over llama.cpp RPC servers, in one run.

``spec-inspector bench --rpc HOST:PORT`` measures, for the model in this process and then with
its layers on the RPC servers (``inspector.llama.remote.RemoteRuntime``, a child process):
c(k) and its ceiling, plain and n-gram decoding on ``copy-exact``, and whether the outputs
equal the local ones. Over a network every decode pays a round trip whatever its rows, so the
curve is flatter relative to c(1) and speculation can pay more than locally; on one machine the
server's threads and the client compete for the same cores (give the server its own small
thread count).
"""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass

from inspector.bench.run import run_task
from inspector.engine import RuntimeScheduler
from inspector.llama.cost_cache import placement, store_cost_model
from inspector.llama.cost_model import measure_cost_model
from inspector.llama.devices import Offload
from inspector.llama.quantize import open_target
from inspector.prompts import example_prompt
from inspector.sources import NgramSource

COPY_TASK = "copy-exact"


@dataclass
class PlacementResult:
    """One placement of the model. Speeds in decode tokens/s; costs in ms per batch."""

    where: str
    layers: str
    row_ms: tuple[float, ...]
    ceiling: float
    best_rows: int
    plain_tps: float
    ngram_tps: float
    ngram_over_plain: float
    acceptance: float | None
    same_as_local: bool
    ngram_same_as_plain: bool


def bench_rpc(model_path, endpoints, *, max_tokens: int = 128, k_max: int = 16, repeats: int = 3,
              threads: int | None = None, n_gpu_layers: int | None = None, draft_max: int = 8,
              progress=print) -> dict:
    """Measure the model local, then on ``endpoints`` (RPC servers, HOST:PORT); return a JSON-ready
    dict (``placements``: ``PlacementResult`` fields). Raises ``ModelFileError``, ``RpcUnavailable``
    and ``RuntimeLost`` (a server went away)."""
    results = []
    local_out = None
    for where, offload in (("local", Offload()),
                           (f"RPC {','.join(endpoints)}", Offload(n_gpu_layers=n_gpu_layers, rpc=tuple(endpoints)))):
        progress(f"{where}: loading ...")
        rt = open_target(model_path, "", offload=offload, n_ctx=2048, n_batch=512, n_seq_max=2, n_threads=threads)
        try:
            scheduler = RuntimeScheduler(rt)
            tokens = rt.prompt_tokens(example_prompt(COPY_TASK))
            progress(f"{where}: cost model (k = 1..{k_max}) ...")
            cm = measure_cost_model(scheduler, tokens[:64], k_max=k_max, repeats=repeats)
            store_cost_model(rt.model_path, rt.n_threads, cm, placement(rt))  # runs there read it (draft max auto)
            progress(f"{where}: plain and n-gram on {COPY_TASK} ...")
            plain = run_task(scheduler, None, tokens, max_tokens)
            ngram = run_task(scheduler, NgramSource(length="fixed"), tokens, max_tokens, draft_max)
            p, n = plain.summary(), ngram.summary()
            out = list(plain.generated)
            local_out = out if local_out is None else local_out
            results.append(PlacementResult(
                where, rt.layers, cm.row_ms, cm.ceiling, cm.best_rows, p.decode_tokens_per_s or 0.0,
                n.decode_tokens_per_s or 0.0, (n.decode_tokens_per_s or 0.0) / max(1e-9, p.decode_tokens_per_s or 0.0),
                n.acceptance_rate, out == local_out, list(ngram.generated) == out))
        finally:
            rt.close()
    return {"model": str(model_path), "task": COPY_TASK, "max_tokens": max_tokens, "draft_max": draft_max,
            "placements": [asdict(r) for r in results]}


def format_rpc(result: dict) -> str:
    """The c(k) lines and the table of ``bench_rpc``'s result."""
    lines = []
    for r in result["placements"]:
        lines.append(f"{r['where']}: {r['layers']}")
        lines.append("  c(k) ms = " + " ".join(f"{k + 1}:{v:.1f}" for k, v in enumerate(r["row_ms"]))
                     + f"   ceiling {r['ceiling']:.2f}x at {r['best_rows']} rows")
    lines.append("")
    lines.append(f"{'where':28s} {'c(1)':>6s} {'c(16)':>6s} {'ceil':>5s} {'plain':>6s} {'n-gram':>6s} "
                 f"{'n-gram/plain':>12s} {'accept':>6s} {'= local':>7s} {'= plain':>7s}")
    for r in result["placements"]:
        acc = "n/a" if r["acceptance"] is None else f"{r['acceptance']:.0%}"
        lines.append(f"{r['where'][:28]:28s} {r['row_ms'][0]:6.1f} {r['row_ms'][-1]:6.1f} {r['ceiling']:4.2f}x "
                     f"{r['plain_tps']:6.1f} {r['ngram_tps']:6.1f} {r['ngram_over_plain']:11.2f}x {acc:>6s} "
                     f"{'yes' if r['same_as_local'] else 'NO':>7s} {'yes' if r['ngram_same_as_plain'] else 'NO':>7s}")
    lines.append("")
    lines.append(textwrap.fill(
        f"task {result['task']}, {result['max_tokens']} tokens, greedy; n-gram = fixed length, draft max "
        f"{result['draft_max']}; c(k) = median ms to verify k rows; = local: plain output equals the local "
        f"run's; = plain: the n-gram output equals plain decoding in the same placement", 110))
    return "\n".join(lines)
