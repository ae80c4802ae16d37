"""``spec-inspector bench --concurrency 1,2,4``: N clients at once against our ``serve -np N`` and llama-server's.

For every level N (1..``MAX_LEVEL`` clients) and every configuration (plain decoding first, then each chosen
llama.cpp source with llama-server's flags for it, ``inspector.sources.server_flags``), each contender
serves, round after round, a wave of N client threads on 127.0.0.1 that start together and each send one
streamed greedy ``/v1/chat/completions`` request (one of the bundled examples: in round r client i sends
example r + i, so that concurrent requests differ and the rounds go through every example; ``n_predict``
tokens each), after one short warm-up request. Contenders:

- ``ours batched``: our ``spec-inspector serve`` started as a child process (``ServeProcess``) with ``-np N
  -kvu`` and the batched schedule (every slot's rows of a step in one ``llama_decode``, as llama-server's
  ``update_slots``), the same model, thread count, context size and batch and context settings as
  llama-server's (``ours_arguments``);
- ``ours locked``: the same with ``--schedule locked`` (each slot under the runtime lock, no joined decode);
- ``ours batched, spec-max-active M`` when asked: batched with drafts off while more than M slots generate
  (``inspector.serve.spec_gate``), for the speculative configurations only (plain decoding is unchanged);
- ``llama-server``: a real llama-server started with ``-np N -kvu``, the same thread count, context size and
  batch sizes (``LlamaServerProcess``; the later ``-np`` overrides its ``-np 1``).

Both servers run as their own process, as users run them, and the N client threads in this one (the
bench's): neither server shares an interpreter (Python's GIL) with the clients that parse its streams. For
each level and configuration every contender's server is started once (one after the other, each waiting
for ``/health``) and kept running while the rounds take turns on them; only the server being measured has
requests, the others sit idle (a llama.cpp server without requests computes nothing: they never decode at
once, which on a small machine would slow both many times over). This machine's speed drifts by 10-60%
over minutes (other work on the host): a fresh server per run put minutes between the two runs a ratio
compares, and the ratio moved by 0.1-0.25 from one bench to the next. Now the two runs of a ratio are
neighbours (``round_order``: ``ours batched`` right before or after llama-server, the order reversing
every round, so a slow phase falls on both programs) and each round is one wave of requests, a few seconds:
measured at one client, rounds of four requests per client (5-20 s) gave ratios from 0.81 to 0.95 within one
bench, a request per round a 95% interval of 0.91-0.96 around the median over 40 rounds. Each round's clients
open with system messages of that round's own (``client_system``), so no request finds an earlier round's
prompt in a server's prompt cache and every round does the same work, as on a fresh server.

Per run: aggregate generated tokens/s (every reply's ``timings.predicted_n`` over the wall time from the
clients' start to the last reply's end) and each request's latency (request sent -> its stream ended,
ms). A cell (level, configuration, contender) reports the median over rounds of the aggregate tokens/s, the
median and p95 (nearest rank) of every request's latency over its rounds, and ours / llama-server: the median
of the rounds' ratios of aggregate tokens/s (each pair from the same round). For each configuration and contender:
the lowest level where speculation stops paying (the configuration's aggregate tokens/s at or below plain
decoding's on the same contender at that level; the gated contender's plain is ``ours batched``'s).
"""

from __future__ import annotations

import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Sequence

import httpx

from inspector.bench.compare import check_config_options, parse_config
from inspector.bench.compare_result import CompareConfig
from inspector.bench.concurrency_result import (LLAMA_SERVER, OURS_BATCHED, OURS_LOCKED, Cell, ConcurrencyResult,
                                               Contender, LevelRun)
from inspector.bench.server_bench import SERVER_BENCH_CONFIGS
from inspector.bench.server_http import ServerError
from inspector.bench.server_process import ChildServer, LlamaServerProcess, ServeProcess, ServerDeadlines
from inspector.bench.serve_bench import REQUEST_TIMEOUT_S, WARM_UP, server_flags, stream_chat
from inspector.llama.server_parity import server_context
from inspector.prompts import EXAMPLES, example_prompt
from inspector.serve.slots import LOCKED
from inspector.sources.registry import PLAIN, describe_source

START_TIMEOUT_S = 120.0
"""Longest wait for a server child's ``/health`` to answer 200 (seconds)."""
MAX_LEVEL = 8
"""Most concurrent clients a level may have (``--concurrency``)."""
DEFAULT_LEVELS = (1, 2, 4)
DEFAULT_SOURCES = ("ngram-simple",)
"""The speculative configurations run beside plain decoding unless ``--sources`` says otherwise."""
DEFAULT_N_PREDICT = 64
"""Tokens each request asks for (``--max-tokens``' default with ``--concurrency``)."""
DEFAULT_REPEATS = 8
"""Rounds (``--repeats``' default with ``--concurrency``)."""


def parse_levels(text: str) -> tuple[int, ...]:
    """``--concurrency 1,2,4``: client counts 1..``MAX_LEVEL``, each once, in increasing order. Raises
    ``ValueError`` (one line) naming the bad value."""
    levels = []
    for part in text.split(","):
        part = part.strip()
        try:
            n = int(part)
        except ValueError:
            raise ValueError(f"expected client counts 1..{MAX_LEVEL} such as 1,2,4, got {text!r}") from None
        if not 1 <= n <= MAX_LEVEL:
            raise ValueError(f"{n} clients is outside 1..{MAX_LEVEL} (levels such as 1,2,4), got {text!r}")
        levels.append(n)
    return tuple(sorted(set(levels)))


def source_configs(names: Sequence[str]) -> list[CompareConfig]:
    """Plain decoding and each named source, at the settings ``bench --llama-server`` gives it
    (``SERVER_BENCH_CONFIGS``: draft max 16, the source's own maximum equal to it). Raises ``ValueError``
    for a name without such a configuration (a source llama-server does not have, or the draft model's)."""
    known = {parse_config(c).source: c for c in SERVER_BENCH_CONFIGS if c != PLAIN}
    out = [parse_config(PLAIN)]
    for name in names:
        if name == PLAIN:
            continue
        if name not in known:
            raise ValueError(f"--sources: {name!r} is not one of llama-server's n-gram types here "
                             f"(expected {', '.join(known)})")
        if all(c.source != name for c in out):
            out.append(parse_config(known[name]))
    return out


def contenders(spec_max_active: int | None = None) -> list[Contender]:
    """The contenders of every level, in the first round's order (llama-server last)."""
    out = [Contender(OURS_BATCHED), Contender(OURS_LOCKED, schedule=LOCKED)]
    if spec_max_active is not None:
        out.append(Contender(f"ours batched, spec-max-active {spec_max_active}", spec_max_active=spec_max_active))
    out.append(Contender(LLAMA_SERVER, ours=False))
    return out


def _client(url: str) -> httpx.Client:
    """A client of ``url``: no proxy, a new connection per request (cpp-httplib closes idle ones)."""
    return httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S, trust_env=False,
                        limits=httpx.Limits(max_keepalive_connections=0))


def client_system(i: int, round_index: int = 0) -> str:
    """The system message of client ``i`` in round ``round_index`` (both 0-based): its own from the first
    tokens on (the round first: a prompt shares only the chat template's opening with an earlier round's)."""
    return f"Round {round_index + 1}. You are assistant number {i + 1} of several; answer the user."


def client_prompts(prompts: Sequence[str], i: int, round_index: int = 0, per_client: int | None = None) -> list[str]:
    """What client ``i`` sends in round ``round_index`` (both 0-based), in order: ``per_client`` prompts (all
    when None) from ``prompts``, starting at the (``round_index`` + ``i``)-th and wrapping."""
    n = len(prompts) if per_client is None else per_client
    return [prompts[(round_index + i + k) % len(prompts)] for k in range(n)]


def drive_clients(url: str, prompts: Sequence[str], n_clients: int, n_predict: int,
                  round_index: int = 0, per_client: int | None = None) -> LevelRun:
    """``n_clients`` threads that start together, each sending its ``client_prompts`` (``per_client`` of them,
    every prompt when None) in turn as a streamed greedy chat of at most ``n_predict`` tokens to the server at
    ``url``, after one warm-up request (not measured). Each client's requests open with its own system message of round
    ``round_index`` (``client_system``), so no request finds another client's prompt, or an earlier round's,
    in a server's prompt cache (``--cache-ram``): which one would depends on arrival order, and the runs would
    not do the same work. Raises the first client's ``ServerError`` (an HTTP failure too)."""
    try:
        with _client(url) as warm:
            stream_chat(warm, WARM_UP, 1)
    except httpx.HTTPError as exc:
        raise ServerError(f"{url}: {type(exc).__name__}: {exc}") from None
    start: list[float] = []
    barrier = threading.Barrier(n_clients, action=lambda: start.append(time.perf_counter()))
    lock = threading.Lock()
    run = LevelRun(0.0, 0, [])
    errors: list[BaseException] = []
    ends: list[float] = []

    def client(i: int) -> None:
        order = client_prompts(prompts, i, round_index, per_client)
        try:
            with _client(url) as c:
                barrier.wait()
                system = {"role": "system", "content": client_system(i, round_index)}
                for prompt in order:
                    sent = time.perf_counter()
                    chat = stream_chat(c, [system, {"role": "user", "content": prompt}], n_predict)
                    done = time.perf_counter()
                    draft_n, accepted = chat.drafts
                    with lock:
                        run.latencies_s.append(done - sent)
                        run.tokens += int(chat.timings.get("predicted_n", 0))
                        run.draft_n += draft_n
                        run.draft_n_accepted += accepted
                        ends.append(done)
        except (ServerError, httpx.HTTPError, threading.BrokenBarrierError) as exc:
            with lock:
                errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=client, args=(i,), name=f"bench client {i}", daemon=True)
               for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:  # the first real failure (the others' broken barrier follows from it)
        exc = sorted(errors, key=lambda e: isinstance(e, threading.BrokenBarrierError))[0]
        raise exc if isinstance(exc, ServerError) else ServerError(f"{url}: {type(exc).__name__}: {exc}")
    run.wall_s = max(ends) - start[0]
    return run


def ours_arguments(runtime, config: CompareConfig, contender: Contender, n_clients: int,
                   receipts_dir: str) -> list[str]:
    """Our ``serve``'s flags (besides ``--host`` and ``--port``) for one run: ``runtime``'s model
    (``model_path``), ``--threads`` (``n_threads``), ``-c`` (``n_ctx``), ``-b`` (``n_batch``) and every context
    setting llama-server gets (``server_context``: ``-ub``, ``-fa``, ``-ctk``, ``-ctv``, written out even at their
    defaults); ``-np n_clients -kvu``, ``contender``'s ``--schedule`` and ``--spec-max-active``; ``config``'s
    ``--source``, ``--draft-max`` and each option as ``--source-option KEY=VALUE`` (an option the source takes
    from the draft max comes from ``--draft-max``); receipts into ``receipts_dir``. ``runtime``: a loaded
    ``LlamaRuntime`` or any object with those attributes. Raises ``ValueError`` / ``UnknownSource`` for options
    the source does not take (``check_config_options``)."""
    check_config_options(config.source, dict(config.options), config.draft_max)
    from_draft_max = {o.name for o in describe_source(config.source).options or () if o.from_setting == "draft_max"}
    args = ["--model", str(Path(runtime.model_path).absolute()), "--threads", str(runtime.n_threads),
            "-c", str(runtime.n_ctx), "-b", str(runtime.n_batch), *server_context(runtime).args(),
            "-np", str(n_clients), "-kvu", "--schedule", contender.schedule]
    if contender.spec_max_active is not None:
        args += ["--spec-max-active", str(contender.spec_max_active)]
    args += ["--source", config.source, "--draft-max", str(config.draft_max)]
    for key, value in config.options.items():
        if key not in from_draft_max:
            args += ["--source-option", f"{key}={value}"]
    return [*args, "--receipts-dir", str(receipts_dir)]


def start_server(runtime, binary: str, config: CompareConfig, contender: Contender, n_clients: int,
                 receipts_dir: str) -> ChildServer:
    """``contender``'s server for ``n_clients`` clients and ``config``, started and answering ``/health``: our
    ``spec-inspector serve`` as a child process (``ServeProcess``) with ``ours_arguments`` (serve's defaults
    otherwise: per-row probabilities on; receipts into ``receipts_dir``), or a llama-server with ``config``'s
    flags and ``-np n_clients -kvu``, our thread count, context size and batch sizes (``LlamaServerProcess``).
    Stop it with ``stop()`` (a context manager). Raises ``ServerError`` (``ServerStartError``: it did not
    answer within ``START_TIMEOUT_S`` seconds or exited first, with the last lines of its output);
    ``ValueError`` for options the source does not take."""
    if contender.ours:
        return ServeProcess(ours_arguments(runtime, config, contender, n_clients, receipts_dir),
                            timeout_s=START_TIMEOUT_S)
    flags = [*server_flags(runtime, config), "-np", str(n_clients), "-kvu"]
    return LlamaServerProcess(binary, runtime.model_path, args=flags, threads=runtime.n_threads, n_ctx=runtime.n_ctx,
                              context=server_context(runtime), deadlines=ServerDeadlines(start_s=START_TIMEOUT_S))


def round_order(order: Sequence[Contender], round_index: int) -> list[Contender]:
    """The contenders in the order round ``round_index`` (0-based) measures them: the others first, then ``ours
    batched`` and llama-server side by side (the ratio the speed target reads compares two neighbouring runs);
    every odd round reversed."""
    ordered = ([c for c in order if c.label not in (OURS_BATCHED, LLAMA_SERVER)]
               + [c for c in order if c.label == OURS_BATCHED] + [c for c in order if c.label == LLAMA_SERVER])
    return ordered if round_index % 2 == 0 else ordered[::-1]


def concurrency_bench(runtime, binary: str, *, levels: Sequence[int] = DEFAULT_LEVELS,
                      configs: Sequence[CompareConfig], examples: Sequence[str] = EXAMPLES,
                      n_predict: int = DEFAULT_N_PREDICT, repeats: int = DEFAULT_REPEATS,
                      spec_max_active: int | None = None,
                      progress: Callable[[str], None] = lambda _m: None) -> ConcurrencyResult:
    """Every level x configuration x contender, ``repeats`` rounds (see the module docstring).

    ``runtime``: our loaded ``LlamaRuntime`` (or an object with its settings: ``ours_arguments``); its model,
    thread count, context size and batch and context settings are both servers' (each its own child process).
    ``binary``: a llama-server executable. ``configs``: plain decoding first (``source_configs``). A run
    llama-server cannot do keeps our figures and sets its cell's ``error``; ours raise (``ServerError``)."""
    prompts = [example_prompt(name) for name in examples]
    order = contenders(spec_max_active)
    result = ConcurrencyResult(tuple(levels), list(configs), order, {})
    for level in levels:
        for config in configs:
            for c in order:
                if result.runs_source(config.source, c):
                    result.cells[(level, config.source, c.label)] = Cell(level, config.source, c.label)
    for level in levels:
        for config in configs:
            here = [c for c in order if (level, config.source, c.label) in result.cells]
            with tempfile.TemporaryDirectory(prefix="spec-inspector-concurrency-") as folder, ExitStack() as stack:
                servers: dict[str, ChildServer] = {}
                for c in here:
                    progress(f"{level} clients · {config.source} · starting {c.label}")
                    try:
                        servers[c.label] = stack.enter_context(
                            start_server(runtime, binary, config, c, level, str(Path(folder) / f"receipts-{len(servers)}")))
                    except ServerError as exc:
                        if c.ours:
                            raise
                        result.cell(level, config.source, c.label).error = str(exc)
                for rep in range(repeats):
                    this_round: dict[str, LevelRun] = {}
                    for c in round_order(here, rep):
                        server = servers.get(c.label)
                        if server is None:
                            continue
                        progress(f"round {rep + 1}/{repeats} · {level} clients · {config.source} · {c.label}")
                        try:
                            run = drive_clients(server.url, prompts, level, n_predict, rep, per_client=1)
                        except ServerError as exc:
                            if c.ours:
                                raise
                            result.cell(level, config.source, c.label).error = str(exc)
                            servers.pop(c.label).stop()
                            continue
                        result.cell(level, config.source, c.label).runs.append(run)
                        this_round[c.label] = run
                    theirs = this_round.get(LLAMA_SERVER)
                    if theirs is not None and theirs.tokens_per_s > 0:
                        for label, run in this_round.items():
                            if label != LLAMA_SERVER:
                                result.cell(level, config.source, label).ratios.append(
                                    run.tokens_per_s / theirs.tokens_per_s)
    return result
