"""``bench --paired [N]``: our ``serve``'s single requests paired with llama-server's, one client, to about 1%
(issue 53: what ours spends per request that llama-server does not).

Both servers run for the whole measurement (started once each, one slot, the flags ``bench --concurrency``
gives them: ``inspector.bench.concurrency_bench.start_server``). One client sends every request to both, in
the order ABBA (pair ``i``: ours first when ``i % 4`` is 0 or 3), each pair with its own system message (no
prompt cache holds it) and bundled example ``i`` modulo the examples, as a streamed greedy chat of at most
``n_predict`` tokens. Per pair: ours / llama-server's total time (the client's clock, request to the stream's
end), time per generated token (each server's own ``timings.predicted_per_token_ms``) and time to the first
token. A pair's two requests are a second apart, so the drift of this kind of machine (which moves
``bench --concurrency``'s one-request rounds by up to 0.2) mostly cancels within a pair; the table gives each
ratio's median over the pairs and the middle half of them.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median, quantiles
from typing import Callable, Sequence

import httpx

from inspector.bench.compare_result import CompareConfig
from inspector.bench.concurrency_bench import client_system, start_server
from inspector.bench.concurrency_result import LLAMA_SERVER, OURS_BATCHED, Contender
from inspector.bench.serve_bench import REQUEST_TIMEOUT_S, WARM_UP, stream_chat
from inspector.bench.server_http import ServerError
from inspector.prompts import EXAMPLES, example_prompt

DEFAULT_PAIRS = 40
"""Pairs per configuration when ``--paired`` names no number."""
MAX_PAIRS = 1000


@dataclass
class PairedRow:
    """One configuration's pairs: per pair ours / llama-server's ``total`` time, time per generated ``token`` and
    time to the ``first`` token (ratios; > 1: ours took longer); ``ours_ms`` / ``theirs_ms``: each request's total
    time (milliseconds)."""

    source: str
    total: list[float] = field(default_factory=list)
    token: list[float] = field(default_factory=list)
    first: list[float] = field(default_factory=list)
    ours_ms: list[float] = field(default_factory=list)
    theirs_ms: list[float] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"source": self.source, "total_ratios": self.total, "per_token_ratios": self.token,
                "first_token_ratios": self.first, "ours_ms": self.ours_ms, "theirs_ms": self.theirs_ms}


def middle(values: Sequence[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile) of ``values`` (one value: itself three times). Raises
    ``ValueError`` for no values."""
    if not values:
        raise ValueError("no pairs")
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def pair_order(i: int) -> tuple[str, str]:
    """Which server pair ``i`` (0-based) asks first: ABBA, ours first when ``i % 4`` is 0 or 3."""
    return ("ours", "theirs") if i % 4 in (0, 3) else ("theirs", "ours")


def _timed(client: httpx.Client, messages: list[dict], n_predict: int) -> tuple[float, float, float]:
    """(total seconds, the server's ms per generated token, seconds to the first token) of one request. A
    connection the server closed between two requests (a kept-alive one it let go: seen once with
    llama-server) is retried once; a second failure is a ``ServerError``."""
    for attempt in (1, 2):
        try:
            start = time.perf_counter()
            chat = stream_chat(client, messages, n_predict)
        except httpx.TransportError as exc:
            if attempt == 2:
                raise ServerError(f"{client.base_url}: {type(exc).__name__}: {exc}") from None
            continue
        total = time.perf_counter() - start
        return total, float(chat.timings.get("predicted_per_token_ms") or 0.0), chat.first_token_s or total
    raise AssertionError("unreachable")  # pragma: no cover


def paired_bench(runtime, binary: str, configs: Sequence[CompareConfig], *, pairs: int = DEFAULT_PAIRS,
                 examples: Sequence[str] = EXAMPLES, n_predict: int = 64,
                 progress: Callable[[str], None] = lambda _m: None) -> list[PairedRow]:
    """``pairs`` paired requests per configuration (module docstring); ``runtime``: our loaded ``LlamaRuntime``
    (its model and settings are both servers'). Raises ``ServerError`` when a server fails to start or
    answer."""
    prompts = [example_prompt(name) for name in examples]
    rows = []
    for config in configs:
        row = PairedRow(config.source)
        with tempfile.TemporaryDirectory(prefix="spec-inspector-paired-") as folder, \
                start_server(runtime, binary, config, Contender(OURS_BATCHED), 1, str(Path(folder) / "r")) as ours, \
                start_server(runtime, binary, config, Contender(LLAMA_SERVER, ours=False), 1, folder) as theirs, \
                httpx.Client(base_url=ours.url, timeout=REQUEST_TIMEOUT_S) as a, \
                httpx.Client(base_url=theirs.url, timeout=REQUEST_TIMEOUT_S) as b:
            clients = {"ours": a, "theirs": b}
            for c in clients.values():
                stream_chat(c, WARM_UP, 1)
            for i in range(pairs):
                if i % 10 == 0:
                    progress(f"{config.source}: pair {i + 1}/{pairs}")
                messages = [{"role": "system", "content": client_system(0, i)},
                            {"role": "user", "content": prompts[i % len(prompts)]}]
                got = {who: _timed(clients[who], messages, n_predict) for who in pair_order(i)}
                (ot, op, of), (tt, tp, tf) = got["ours"], got["theirs"]
                row.total.append(ot / tt)
                row.token.append(op / tp if tp > 0 else 0.0)
                row.first.append(of / tf)
                row.ours_ms.append(1000 * ot)
                row.theirs_ms.append(1000 * tt)
        rows.append(row)
    return rows


def format_paired_bench(rows: Sequence[PairedRow], *, pairs: int, n_predict: int, threads: int) -> str:
    """The table: per configuration the median ours / llama-server of each measure with the middle half of the
    pairs, and the tokens/s ratio that the total time's median means (llama-server's / ours)."""
    lines = [f"paired: {pairs} single streamed greedy chat requests per configuration, each sent to our serve and "
             f"to llama-server (both kept running, one slot, {threads} threads each, order ABBA), {n_predict} "
             "tokens; ours / llama-server per pair: median [middle half]",
             f"{'source':14s} {'total':>20s} {'per token':>20s} {'first token':>20s} {'tok/s ratio':>11s} "
             f"{'ours ms':>8s} {'theirs ms':>9s}"]
    for r in rows:
        cells = []
        for values in (r.total, r.token, r.first):
            q1, q2, q3 = middle(values)
            cells.append(f"{q2:.3f} [{q1:.3f}-{q3:.3f}]")
        lines.append(f"{r.source:14s} {cells[0]:>20s} {cells[1]:>20s} {cells[2]:>20s} {1 / median(r.total):11.3f} "
                     f"{median(r.ours_ms):8.0f} {median(r.theirs_ms):9.0f}")
    return "\n".join(lines)
