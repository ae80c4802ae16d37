"""``spec-inspector bench --serve``: our ``serve`` against llama-server over HTTP, the same requests.

For every configuration (plain decoding and llama.cpp sources, with llama-server's flags for each:
``inspector.sources.server_flags``), each repeat starts our ``InspectorServer`` in this process on the
loaded model (serve's defaults: per-row probabilities, a receipts document per request, in a temporary
folder) and a llama-server of the same GGUF with the same thread count, context size and batch sizes,
one after the other, never both decoding at once (the order alternates between repeats, so a noisy
machine's slow phases fall on both), and sends each the same streamed greedy
``/v1/chat/completions`` request for every bundled example in turn, after one short warm-up request.
A fresh server per repeat on both sides: the prompt cache and stateful sources start cold on both.

Per request: decode tokens/s as each server reports it (``timings.predicted_per_second``: generated
tokens / the time after the prefill, llama.cpp 0c1e570 ``tools/server/server-task.cpp``), and the time
to the first token measured by the client (request sent -> first chunk with text; the prompt's prefill
and the first token's sampling, plus HTTP). A row per configuration: the medians of both sides and the
median of the per-request ratios ours / llama-server's (each pair is the same example in the same
repeat), against the goal: decode at least ``DECODE_GOAL`` x llama-server's and the first token within
``FIRST_TOKEN_GOAL`` of it. The answers and the draft counts are compared too (``same``).
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from statistics import median
from typing import Callable, Sequence

import httpx

from inspector.bench.compare import check_config_options, parse_config
from inspector.sources.registry import PLAIN
from inspector.bench.compare_result import CompareConfig
from inspector.bench.server_process import LlamaServerProcess
from inspector.bench.server_http import ServerError
from inspector.engine import GenerationSettings, RuntimeScheduler
from inspector.llama.server_parity import server_context
from inspector.prompts import EXAMPLES, example_prompt
from inspector.serve.params import ServeDefaults
from inspector.serve.receipts_dir import ReceiptsDir
from inspector.serve.server import InspectorServer, ServeOptions
from inspector.sources.server_flags import server_arguments

SERVE_BENCH_CONFIGS = ("none", "ngram-simple:draft_max=16,size_n=3,size_m=16")
"""The default configurations: plain decoding and ngram-simple with a draft max equal to its own
maximum (``size_m``), so both programs cap proposals alike."""
DECODE_GOAL = 0.95
"""Our decode tokens/s at least this x llama-server's."""
FIRST_TOKEN_GOAL = 0.10
"""Our time to the first token at most this much longer than llama-server's (ratio <= 1.10)."""
WARM_UP = [{"role": "user", "content": "Hello."}]
"""A one-token request each server answers first (not measured): both sides' first request pays no
first-use costs (pages of the model, allocator growth, the HTTP stack)."""
REQUEST_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class StreamedChat:
    """One streamed chat reply as the client saw it. ``first_token_s``: seconds from sending the request
    to the first chunk with text (None: no text came); ``content``: the text; ``timings``: the server's
    ``timings`` object (from the chunk carrying ``finish_reason``)."""

    first_token_s: float | None
    content: str
    timings: dict

    @property
    def tokens_per_s(self) -> float:
        """The server's decode tokens/s (``timings.predicted_per_second``), 0 without one."""
        return float(self.timings.get("predicted_per_second") or 0.0)

    @property
    def drafts(self) -> tuple[int, int]:
        """``(draft_n, draft_n_accepted)`` (0 when the server drafted nothing)."""
        return int(self.timings.get("draft_n", 0)), int(self.timings.get("draft_n_accepted", 0))


def stream_chat(client: httpx.Client, messages: list[dict], n_predict: int) -> StreamedChat:
    """``POST /v1/chat/completions`` with ``stream: true``, greedy (temperature 0), at most ``n_predict``
    tokens, on ``client`` (its ``base_url`` is the server). Raises ``ServerError`` for an HTTP error or a
    stream without ``timings``."""
    body = {"messages": messages, "max_tokens": n_predict, "temperature": 0, "stream": True}
    first, parts, timings = None, [], None
    start = time.perf_counter()
    with client.stream("POST", "/v1/chat/completions", json=body) as reply:
        if reply.status_code != 200:
            raise ServerError(f"POST {client.base_url}/v1/chat/completions: HTTP {reply.status_code}: "
                              f"{reply.read().decode('utf-8', 'replace')[:300]}")
        for line in reply.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or ():
                text = (choice.get("delta") or {}).get("content")
                if text:
                    if first is None:
                        first = time.perf_counter() - start
                    parts.append(text)
            if isinstance(chunk.get("timings"), dict):
                timings = chunk["timings"]
    if timings is None:
        raise ServerError(f"{client.base_url}: the stream ended without timings")
    return StreamedChat(first, "".join(parts), timings)


def _chats(client: httpx.Client, prompts: Sequence[str], n_predict: int) -> list[StreamedChat]:
    stream_chat(client, WARM_UP, 1)
    return [stream_chat(client, [{"role": "user", "content": p}], n_predict) for p in prompts]


def _client(url: str) -> httpx.Client:
    """A client of ``url``: no proxy (127.0.0.1), a new connection per request on both sides (a kept-alive
    connection the server closed meanwhile fails the next request: cpp-httplib closes idle ones)."""
    return httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S, trust_env=False,
                        limits=httpx.Limits(max_keepalive_connections=0))


def ours_once(scheduler: RuntimeScheduler, config: CompareConfig, prompts: Sequence[str],
              n_predict: int) -> list[StreamedChat]:
    """A fresh ``InspectorServer`` with ``config`` on ``scheduler``'s runtime (serve's defaults: per-row
    probabilities, receipts in a temporary folder removed afterwards), the warm-up and every prompt as a
    streamed chat, then stopped."""
    options = check_config_options(config.source, dict(config.options), config.draft_max)
    with tempfile.TemporaryDirectory(prefix="spec-inspector-serve-bench-") as folder:
        server = InspectorServer(scheduler, str(scheduler.runtime.model_path), ServeOptions(
            port=0, source=config.source, source_options=options,
            template=GenerationSettings(draft_max=config.draft_max), defaults=ServeDefaults(),
            receipts=ReceiptsDir(folder)))
        try:
            url = server.start()
            if not server.wait_started():
                raise ServerError("our serve did not start within 10 s")
            with _client(url) as client:
                return _chats(client, prompts, n_predict)
        finally:
            server.stop()


def server_flags(runtime, config: CompareConfig) -> list[str]:
    """llama-server's flags for ``config`` on ``runtime`` (besides model, threads, context and the
    physical batch, which ``LlamaServerProcess`` gives): the source's and our logical batch."""
    return server_arguments(config.source, config.options, draft_max=config.draft_max, n_batch=runtime.n_batch)


def theirs_once(runtime, binary: str, config: CompareConfig, prompts: Sequence[str],
                n_predict: int) -> list[StreamedChat]:
    """A fresh llama-server with ``config``'s flags, our thread count, context size and batch sizes, the
    warm-up and every prompt as a streamed chat, then stopped. Raises ``ServerError``."""
    with LlamaServerProcess(binary, runtime.model_path, args=server_flags(runtime, config),
                            threads=runtime.n_threads, n_ctx=runtime.n_ctx, context=server_context(runtime)) as server:
        with _client(server.url) as client:
            try:
                return _chats(client, prompts, n_predict)
            except httpx.HTTPError as exc:
                raise ServerError(f"{server.url}: {type(exc).__name__}: {exc}") from None


@dataclass
class ServeBenchRow:
    """One configuration over every example and repeat. Per request, in the same order on both sides:
    decode tokens/s (``ours_tps``, ``theirs_tps``) and time to the first token in seconds (``ours_ttft``,
    ``theirs_ttft``). ``same_output``: every answer equal; ``same_drafts``: and every request's
    ``draft_n``/``draft_n_accepted``; ``error``: one line when llama-server could not run it."""

    label: str
    flags: tuple[str, ...]
    ours_tps: list[float] = field(default_factory=list)
    theirs_tps: list[float] = field(default_factory=list)
    ours_ttft: list[float] = field(default_factory=list)
    theirs_ttft: list[float] = field(default_factory=list)
    same_output: bool = True
    same_drafts: bool = True
    error: str | None = None

    def add(self, ours: Sequence[StreamedChat], theirs: Sequence[StreamedChat]) -> None:
        """One repeat's replies, request by request."""
        for a, b in zip(ours, theirs):
            self.ours_tps.append(a.tokens_per_s)
            self.theirs_tps.append(b.tokens_per_s)
            self.ours_ttft.append(a.first_token_s if a.first_token_s is not None else float("nan"))
            self.theirs_ttft.append(b.first_token_s if b.first_token_s is not None else float("nan"))
            self.same_output &= a.content == b.content
            self.same_drafts &= a.drafts == b.drafts

    @staticmethod
    def _ratio(mine: Sequence[float], theirs: Sequence[float]) -> float | None:
        pairs = [a / b for a, b in zip(mine, theirs) if a == a and b == b and b > 0]  # nan != nan
        return median(pairs) if pairs else None

    @property
    def decode_ratio(self) -> float | None:
        """Median over requests of ours / llama-server's decode tokens/s (None without a pair)."""
        return self._ratio(self.ours_tps, self.theirs_tps)

    @property
    def first_token_ratio(self) -> float | None:
        """Median over requests of ours / llama-server's time to the first token (None without a pair)."""
        return self._ratio(self.ours_ttft, self.theirs_ttft)

    @property
    def meets_goal(self) -> bool | None:
        """Decode >= ``DECODE_GOAL`` x and first token <= (1 + ``FIRST_TOKEN_GOAL``) x llama-server's."""
        d, f = self.decode_ratio, self.first_token_ratio
        if d is None or f is None:
            return None
        return d >= DECODE_GOAL and f <= 1 + FIRST_TOKEN_GOAL

    def to_json(self) -> dict:
        """The row's figures (times in seconds, speeds in tokens/s)."""
        return {"label": self.label, "flags": list(self.flags), "ours_tps": self.ours_tps,
                "theirs_tps": self.theirs_tps, "ours_first_token_s": self.ours_ttft,
                "theirs_first_token_s": self.theirs_ttft, "decode_ratio": self.decode_ratio,
                "first_token_ratio": self.first_token_ratio, "meets_goal": self.meets_goal,
                "same_output": None if self.error else self.same_output,
                "same_drafts": None if self.error else self.same_drafts, "error": self.error}


def serve_bench(runtime, binary: str, *, examples: Sequence[str] = EXAMPLES,
                configs: Sequence[str | CompareConfig] = SERVE_BENCH_CONFIGS, max_tokens: int = 128,
                repeats: int = 3, progress: Callable[[str], None] = lambda _m: None) -> list[ServeBenchRow]:
    """Every configuration, ``repeats`` times, both programs (see the module docstring).

    ``runtime``: our loaded ``LlamaRuntime`` (its model, thread count, context size and batch sizes are
    llama-server's too); ``binary``: a llama-server executable; ``configs``: ``CompareConfig``s or
    ``compare --config`` texts (``parse_config``: ``ValueError`` for a bad one before anything runs).
    A configuration llama-server cannot run keeps our figures and gets ``error``; ours raise."""
    parsed = [c if isinstance(c, CompareConfig) else parse_config(c) for c in configs]
    scheduler = RuntimeScheduler(runtime)
    prompts = [example_prompt(name) for name in examples]
    rows = []
    for config in parsed:
        row = ServeBenchRow(config.label, () if config.source == PLAIN else tuple(server_flags(runtime, config)))
        rows.append(row)
        for rep in range(repeats):
            progress(f"{config.label} · repeat {rep + 1}/{repeats}")
            theirs = None
            if rep % 2 == 1 and row.error is None:
                theirs = _theirs_or_error(row, runtime, binary, config, prompts, max_tokens)
            ours = ours_once(scheduler, config, prompts, max_tokens)
            if rep % 2 == 0 and row.error is None:
                theirs = _theirs_or_error(row, runtime, binary, config, prompts, max_tokens)
            if theirs is not None:
                row.add(ours, theirs)
            else:
                row.ours_tps += [c.tokens_per_s for c in ours]
                row.ours_ttft += [c.first_token_s or float("nan") for c in ours]
    return rows


def _theirs_or_error(row: ServeBenchRow, runtime, binary, config, prompts, max_tokens) -> list[StreamedChat] | None:
    try:
        return theirs_once(runtime, binary, config, prompts, max_tokens)
    except ServerError as exc:
        row.error = str(exc)
        return None


def format_serve_bench(rows: Sequence[ServeBenchRow], *, examples: Sequence[str], max_tokens: int, repeats: int,
                       threads: int) -> str:
    """The bench as a text table: one line per configuration (medians; ratios are medians of the per-request
    ratios), then one line with the goal and how many rows meet it."""
    med = lambda xs, f: f.format(median([x for x in xs if x == x])) if [x for x in xs if x == x] else "n/a"  # noqa: E731
    ratio = lambda x: f"{x:.2f}" if x is not None else "n/a"  # noqa: E731
    lines = [f"serve / llama-server: {len(examples)} examples as streamed chat requests, greedy, {max_tokens} tokens, "
             f"{threads} threads on both sides, {repeats} repeats (order alternating)",
             f"{'configuration':46s} {'decode ours':>11s} {'theirs':>7s} {'ratio':>6s}  {'1st token ours':>14s} "
             f"{'theirs':>7s} {'ratio':>6s}  {'same':4s}  goal"]
    for r in rows:
        same = "yes" if r.same_output and r.same_drafts else ("no" if not r.same_output else "drafts differ")
        goal = {True: "met", False: "missed", None: "n/a"}[r.meets_goal]
        tail = f"  error: {r.error}" if r.error else ""
        lines.append(f"{r.label[:46]:46s} {med(r.ours_tps, '{:.1f}'):>11s} {med(r.theirs_tps, '{:.1f}'):>7s} "
                     f"{ratio(r.decode_ratio):>6s}  {med([1000 * x for x in r.ours_ttft], '{:.0f} ms'):>14s} "
                     f"{med([1000 * x for x in r.theirs_ttft], '{:.0f} ms'):>7s} {ratio(r.first_token_ratio):>6s}  "
                     f"{same if not r.error else 'n/a':4s}  {goal}{tail}")
    met = sum(1 for r in rows if r.meets_goal)
    lines += ["", f"goal: decode >= {DECODE_GOAL:.2f}x llama-server's and the first token within "
                  f"{100 * FIRST_TOKEN_GOAL:.0f}% of its (ratio <= {1 + FIRST_TOKEN_GOAL:.2f}): {met} of {len(rows)} "
                  "rows meet it"]
    return "\n".join(lines)
