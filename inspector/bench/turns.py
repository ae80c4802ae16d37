"""``bench --turns``: every source over a conversation, with its memory and proposal time (issue 16).

One run on one loaded target: the cost model first (its ceiling), then each source runs every
turn of the conversation (``inspector.bench.compare.run_compare`` with ``turns``: its own answers
in its history, one memory across the turns). Per source: acceptance, mean accepted length,
windows, speedup vs plain, the share of the cost-model ceiling, the median proposal time per
window (µs, the receipts' ``proposal_elapsed_us``) and the memory the source kept across the
turns, per 1,000 tokens it saw (``memory_bytes`` of its ``SourceContext.memory``).
"""

from __future__ import annotations

import sys
from statistics import median
from typing import Callable, Mapping, Sequence

import numpy as np

from inspector.bench.compare import run_compare
from inspector.bench.compare_result import CompareConfig
from inspector.engine.records import PREFILL, STEP
from inspector.sources.registry import PLAIN, self_contained_sources

SOURCES = (PLAIN, *self_contained_sources())
"""The sources ``bench --turns`` compares, plain decoding first: every built-in one that needs nothing but
the target's tokens (``SourceDescriptor.self_contained``)."""
REPEATING = ("agent-edits", "file-edits")
"""The bundled conversations whose answers repeat earlier ones (``bench --turns agent-edits,file-edits``):
an agent loop editing a function it wrote, and a file edited in several steps."""


def memory_bytes(obj, _seen: set | None = None) -> int:
    """Bytes held by ``obj`` and what it refers to (containers, objects' attributes and slots; numpy
    arrays by ``nbytes``), each object counted once. An estimate: shared interpreter objects (small
    ints, interned strings) count wherever they are referred to."""
    seen = _seen if _seen is not None else set()
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes) + sys.getsizeof(obj) - (obj.nbytes if obj.base is None and obj.flags.owndata else 0)
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(memory_bytes(k, seen) + memory_bytes(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(memory_bytes(v, seen) for v in obj)
    elif hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
        for v in getattr(obj, "__dict__", {}).values():
            size += memory_bytes(v, seen)
        for name in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, name):
                size += memory_bytes(getattr(obj, name), seen)
    return size


def plain_token_margins(generations) -> list[float | None]:
    """The top-2 logit margin (logits) of each token plain decoding generated, turn after turn: the first
    token of a turn comes from its prefill's last row (the ``prefill`` event), every later one from a
    one-token ``step`` (each event's probability figures; None where they were not kept). Indexed like
    the conversation's generated tokens."""
    return [e.probabilities.margin[0] if e.probabilities is not None else None
            for g in generations for e in g.events if e.kind in (PREFILL, STEP) and e.token is not None]


def _divergence(plain, run, plain_margins: list[float | None]) -> dict | None:
    """Where ``run``'s conversation output first differs from plain decoding's: the generated-token
    ``index`` and the plain run's top-2 logit ``plain_margin`` there (its step's probability figures;
    None when they were not kept), or None when one output is a prefix of the other."""
    a, b = plain.generated, run.generated
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), None)
    if i is None:
        return None
    return {"index": i, "plain_margin": plain_margins[i] if i < len(plain_margins) else None}


def run_turns_bench(scheduler, turns: Sequence[str], settings, cost_model, sources: Sequence[str] = SOURCES,
                    progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Run ``sources`` over ``turns`` with ``settings`` (each source's default options, draft max from
    ``settings``) and return a JSON-ready dict: ``rows`` (one per source) and ``definitions``."""
    configs = [CompareConfig(s, s, 0 if s == PLAIN else settings.draft_max) for s in sources]
    result = run_compare(scheduler, [], configs, settings, cost_model=cost_model, progress=progress, turns=turns,
                         keep_runs=True)
    plain = result.runs[0] if result.runs and sources and sources[0] == PLAIN else None
    plain_margins = plain_token_margins(plain.generations if plain is not None else ())
    rows = []
    for row, run in zip(result.rows, result.runs):
        s = row.summary
        proposal_us = [r.proposal_elapsed_us for r in run.receipts] if run is not None else []
        seen = len(run.generated) + sum(g.prompt_token_count for g in run.generations) if run is not None else 0
        mem = memory_bytes(run.memory) if run is not None and run.memory else 0
        rows.append({
            "source": row.config.source,
            "acceptance_rate": s.acceptance_rate,
            "mean_accepted_length": s.mean_accepted_length,
            "windows": s.windows,
            "generated_tokens": s.generated_tokens,
            "decode_tokens_per_s": s.decode_tokens_per_s,
            "speedup_vs_plain": row.speedup_vs_plain,
            "fraction_of_ceiling": None if row.speedup_vs_plain is None else row.speedup_vs_plain / cost_model.ceiling,
            "proposal_us_per_window": median(proposal_us) if proposal_us else None,
            "memory_bytes": mem,
            "memory_bytes_per_1000_tokens": mem / seen * 1000 if seen else None,
            "same_output_as_plain": row.same_output_as_plain,
            "divergence": _divergence(plain, run, plain_margins) if row.same_output_as_plain is False else None,
            "error": row.error,
        })
    return {"turns": len(turns), "settings": settings.to_json(), "cost_model": cost_model.to_json(), "rows": rows,
            "definitions": {
                "fraction_of_ceiling": "speedup_vs_plain / the cost model's ceiling (every proposal accepted)",
                "proposal_us_per_window": "median time the source took to propose, per verified window (µs)",
                "memory_bytes_per_1000_tokens": "bytes the source kept across the turns (its SourceContext.memory) "
                                                "per 1,000 tokens it saw (every turn's prompt and output)",
                "divergence": "the first generated token where the output differs from plain decoding's, with the "
                              "plain run's top-2 logit margin there (logits)",
            }}


def format_turns_bench(result: dict) -> str:
    """The table of ``run_turns_bench``."""
    cm = result["cost_model"]
    lines = [f"conversation: {result['turns']} turns; cost model ceiling {cm['ceiling']:.2f}x at {cm['best_rows']} rows",
             f"{'source':14s} {'accept':>6s} {'mean len':>8s} {'windows':>7s} {'vs plain':>8s} {'of ceil':>7s} "
             f"{'us/prop':>7s} {'mem B/1k tok':>12s} same"]

    def f(v, fmt, na="n/a"):
        return na if v is None else format(v, fmt)

    for r in result["rows"]:
        same = "n/a" if r["same_output_as_plain"] is None else ("yes" if r["same_output_as_plain"] else "no")
        d = r.get("divergence")
        if d is not None:
            same += f" (token {d['index']}, plain margin {f(d['plain_margin'], '.3f')})"
        acc = "n/a" if r["acceptance_rate"] is None else f"{100 * r['acceptance_rate']:.0f}%"
        line = (f"{r['source'][:14]:14s} {acc:>6s} {f(r['mean_accepted_length'], '.2f'):>8s} {r['windows']:7d} "
                f"{f(r['speedup_vs_plain'], '.2f') + 'x':>8s} {f(r['fraction_of_ceiling'] and 100 * r['fraction_of_ceiling'], '.0f') + '%':>7s} "
                f"{f(r['proposal_us_per_window'], '.0f'):>7s} {f(r['memory_bytes_per_1000_tokens'], ',.0f'):>12s} {same}")
        if r["error"]:
            line += f"  error: {r['error']}"
        lines.append(line)
    lines.append("us/prop = median proposal time per window (µs); mem = bytes kept across the turns per 1,000 tokens "
                 "seen; same = the whole conversation's output equals plain decoding's, else the first generated "
                 "token that differs and the plain run's top-2 logit margin there (a near-tie that batch arithmetic "
                 "flips is well below 1 logit)")
    return "\n".join(lines)


def combine_turns_benches(results: Mapping[str, dict]) -> dict:
    """Every source over several conversations (``run_turns_bench`` results by conversation name): per
    source the tokens/s of all their decode time (generated tokens / decode seconds, summed), its
    speedup over plain decoding's, windows, accepted and proposed tokens and mean accepted length
    (1 + accepted / windows). JSON-ready: ``conversations`` (the names) and ``rows``."""
    totals: dict[str, dict] = {}
    for result in results.values():
        for r in result["rows"]:
            t = totals.setdefault(r["source"], {"generated": 0, "seconds": 0.0, "windows": 0, "accepted": 0.0,
                                                "proposed": 0.0, "error": None})
            if r["error"] or not r["decode_tokens_per_s"]:
                t["error"] = t["error"] or r["error"] or "no decode time"
                continue
            t["generated"] += r["generated_tokens"]
            t["seconds"] += r["generated_tokens"] / r["decode_tokens_per_s"]
            accepted = (r["mean_accepted_length"] - 1) * r["windows"] if r["windows"] else 0.0
            t["windows"] += r["windows"]
            t["accepted"] += accepted
            if r["acceptance_rate"]:
                t["proposed"] += accepted / r["acceptance_rate"]
    plain = totals.get(PLAIN)
    plain_tps = plain["generated"] / plain["seconds"] if plain and plain["seconds"] else None
    rows = []
    for source, t in totals.items():
        tps = t["generated"] / t["seconds"] if t["seconds"] else None
        rows.append({"source": source, "decode_tokens_per_s": tps,
                     "speedup_vs_plain": tps / plain_tps if tps and plain_tps else None,
                     "windows": t["windows"], "accepted": round(t["accepted"]), "proposed": round(t["proposed"]),
                     "mean_accepted_length": 1 + t["accepted"] / t["windows"] if t["windows"] else None,
                     "error": t["error"]})
    return {"conversations": list(results), "rows": rows}


def format_combined(combined: dict) -> str:
    """The table of ``combine_turns_benches``, the fastest source marked."""
    rows = combined["rows"]
    best = max((r["decode_tokens_per_s"] or 0 for r in rows), default=0)
    lines = [f"all conversations ({', '.join(combined['conversations'])}): tokens/s over their summed decode time",
             f"{'source':14s} {'tok/s':>7s} {'vs plain':>8s} {'windows':>7s} {'acc/prop':>9s} {'mean len':>8s}"]
    for r in rows:
        tps, sp, mal = r["decode_tokens_per_s"], r["speedup_vs_plain"], r["mean_accepted_length"]
        line = (f"{r['source'][:14]:14s} {'n/a' if tps is None else f'{tps:.1f}':>7s} "
                f"{'n/a' if sp is None else f'{sp:.2f}x':>8s} {r['windows']:7d} "
                f"{str(r['accepted']) + '/' + str(r['proposed']):>9s} {'n/a' if mal is None else f'{mal:.2f}':>8s}")
        if tps and tps == best:
            line += "  fastest"
        if r["error"]:
            line += f"  error: {r['error']}"
        lines.append(line)
    return "\n".join(lines)
