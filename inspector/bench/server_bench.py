"""``spec-inspector bench --llama-server``: our decode speed against llama-server's on the same work,
with and without per-row probabilities, from one run (issue 24).

For every bundled example and every configuration (plain decoding and each llama.cpp source, with
llama-server's flags for it: ``inspector.sources.server_flags``), each repeat runs three runs: our run
with the per-row probability figures, a fresh llama-server process with that configuration (same GGUF,
prompt token ids, greedy, thread count and context size), and our run without the figures. The repeats
go in rounds (every row once per round) and each round rotates the three runs' order (``run_order``), so
a noisy machine's slow phases spread over every row and program, and the first-run advantage over all three; a fresh
server per repeat and a fresh source memory per our run compare cold with cold (ngram-mod's pool,
ngram-map-k's and ngram-cache's counts start empty on both sides). Each round's ours / llama-server (with
and without the figures) is taken, and their median over the rounds compared: a ratio of two medians
would mix rounds minutes apart, between which this machine drifts up to 20%.

Beside the speeds, our run with the figures reports where its time outside ``llama_decode`` went:
per decode step (a window or a plain step), as a share of the time inside ``llama_decode``, and the
figures' own cost per row (a window's verification rows and a plain step's single row). Decode
tokens/s on both sides: generated tokens but the first (it comes from the prefill) / the time after the
prefill, as llama-server's ``timings.predicted_per_second`` counts them (``server_tokens_per_s``; until
issue 52 ours counted the first token too, n / (n - 1) in our favour: 0.8% at 128 tokens).

llama-server's request and reply fields: llama.cpp 0c1e570 ``tools/server`` (as
``inspector.bench.server_compare``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from time import perf_counter_ns
from typing import Callable, Sequence

from inspector.bench.compare import parse_config, registry_source_factory
from inspector.sources.registry import PLAIN
from inspector.bench.compare_result import CompareConfig
from inspector.llama.server_parity import server_counted_accepted
from inspector.bench.server_process import LlamaServerProcess
from inspector.bench.server_http import ServerError
from inspector.engine.probabilities import figure_path
from inspector.engine import GenerationSettings, RuntimeScheduler
from inspector.llama.server_parity import server_context
from inspector.engine.llama_settings import DEFAULT_N_CTX
from inspector.engine.stats import server_tokens_per_s
from inspector.llama.quantize import weight_form
from inspector.prompts import EXAMPLES, example_prompt
from inspector.session.session_record import SessionRecord
from inspector.session.run import RunRequest, SessionRun
from inspector.sources.server_flags import server_arguments

SERVER_BENCH_CONFIGS = (
    "none",
    "ngram-simple:draft_max=16,size_n=3,size_m=16",
    "ngram-map-k:draft_max=16,size_n=3,size_m=16",
    "ngram-map-k4v:draft_max=16,size_n=3,size_m=16",
    "ngram-mod:draft_max=16,n_match=8,n_min=4,n_max=16",
    "ngram-cache:draft_max=16",
)
"""The default configurations: plain decoding and every llama.cpp n-gram source, each with a draft
max of 16 and its own maximum equal to it (so both programs cap proposals alike). The draft-model
source is added by the command line (it needs a draft GGUF: ``make_draft``)."""
GOAL = 0.95
"""ours / llama-server at or above this is the goal (issue 24)."""
OUTSIDE_GOAL = 0.02
"""Time outside ``llama_decode`` / time inside it, on plain steps and on windows, at or below this (issue 41)."""
WINDOW_GOAL = 0.98
"""The window / headless at or above this (issue 41)."""


@dataclass(frozen=True)
class MeasuredRun:
    """One of our runs, measured. ``tokens_per_s``: decode tokens/s (prefill excluded). ``steps``:
    decode steps (windows and plain steps). ``decode_us``: time inside ``llama_decode`` after the
    prefill (the target's, and a draft model's); ``outside_us``: the decode phase's time outside it (proposal, validation, figures,
    receipts, records, bookkeeping); ``probability_us`` and ``probability_rows``: the per-row figures'
    share of it and their rows. All times in microseconds. ``generated``: the token ids;
    ``drafted``/``accepted``: proposal tokens proposed and accepted (counted as llama-server counts:
    ``server_counted_accepted``)."""

    tokens_per_s: float
    steps: int
    decode_us: float
    outside_us: float
    probability_us: float
    probability_rows: int
    generated: tuple[int, ...]
    drafted: int
    accepted: int
    plain_us: tuple[float, float] = (0.0, 0.0)
    """Plain steps: (time inside ``llama_decode``, time outside it), microseconds; run service included."""
    window_us: tuple[float, float] = (0.0, 0.0)
    """Window steps, the same."""

    def outside_share(self, kind: str) -> float | None:
        """Time outside ``llama_decode`` / time inside it over the ``kind`` steps ("plain" or "window"), None
        without such steps."""
        inside, outside = self.plain_us if kind == "plain" else self.window_us
        return outside / inside if inside > 0 else None


def measure_run(scheduler: RuntimeScheduler, config: CompareConfig, prompt_tokens: Sequence[int],
                max_tokens: int, probabilities: bool) -> MeasuredRun:
    """Run ``prompt_tokens`` with ``config`` through the run service (as ``spec-inspector run`` does:
    a session record filled as it goes) and measure it. A fresh source (and source memory) per call.
    Raises what the run raises (``EngineError``, the source factory's errors)."""
    rt = scheduler.runtime
    settings = GenerationSettings(max_new_tokens=max_tokens, draft_max=max(1, config.draft_max),
                                  probabilities=probabilities)
    make = registry_source_factory(rt, settings)
    made = []
    run = SessionRun(scheduler, RunRequest("", settings, config.source, dict(config.options),
                                           prompt_token_ids=tuple(prompt_tokens)),
                     SessionRecord().apply,
                     make_source=lambda req: made.append(make(config, req.source_memory)) or made[-1])
    try:
        g = run.prepare()
        run.start()
        draft = getattr(made[0], "draft", None) if made else None  # a draft model decodes in llama.cpp too
        draft_ns = lambda: getattr(draft, "decode_ns", 0)  # noqa: E731
        d0, p0, r0, dd0 = rt.decode_ns, rt.probability_ns, rt.probability_rows, draft_ns()
        split = {"plain": [0, 0], "window": [0, 0]}  # ns inside, outside llama_decode per kind of step
        t, d, windows = perf_counter_ns(), rt.decode_ns + draft_ns(), g.window_count
        for _ in run.steps():
            inside = rt.decode_ns + draft_ns() - d
            kind = split["window" if g.window_count != windows else "plain"]
            kind[0] += inside
            kind[1] += perf_counter_ns() - t - inside
            t, d, windows = perf_counter_ns(), rt.decode_ns + draft_ns(), g.window_count
        inside_ns = rt.decode_ns - d0 + draft_ns() - dd0
        prob_ns, rows = rt.probability_ns - p0, rt.probability_rows - r0
        run.end(g.finish_reason)
    finally:
        run.close_source()
    return MeasuredRun(
        tokens_per_s=server_tokens_per_s(g.generated_count, g.decode_elapsed_us) or 0.0, steps=g.decode_step,
        decode_us=inside_ns / 1000,
        outside_us=max(0.0, g.decode_elapsed_us - inside_ns / 1000), probability_us=prob_ns / 1000,
        probability_rows=rows, generated=tuple(g.generated),
        drafted=sum(r.proposal_token_count for r in g.receipts),
        accepted=sum(server_counted_accepted(r, rt.is_eog) for r in g.receipts),
        plain_us=tuple(v / 1000 for v in split["plain"]), window_us=tuple(v / 1000 for v in split["window"]))


@dataclass
class BenchRow:
    """One example x configuration: per repeat, our tokens/s with the figures (``ours``), without
    (``ours_bare``) and llama-server's (``server``); our runs' outside-decode figures with the figures
    on (``outside_share``: outside / decode time; ``outside_us_per_step``; ``probability_us_per_row``);
    ``same_output``: llama-server generated our token ids in every repeat; ``same_drafts``: and drafted
    and accepted as many proposal tokens; ``error``: one line when llama-server could not run it."""

    example: str
    label: str
    flags: tuple[str, ...]
    ours: list[float] = field(default_factory=list)
    ours_bare: list[float] = field(default_factory=list)
    server: list[float] = field(default_factory=list)
    outside_share: list[float] = field(default_factory=list)
    outside_us_per_step: list[float] = field(default_factory=list)
    probability_us_per_row: list[float] = field(default_factory=list)
    plain_outside_share: list[float] = field(default_factory=list)
    window_outside_share: list[float] = field(default_factory=list)
    same_output: bool = True
    same_drafts: bool = True
    error: str | None = None

    def ratio(self, bare: bool = False) -> float | None:
        """Median over the rounds of ours (without the figures when ``bare``) / llama-server's in the same
        round: a round's runs are seconds apart, while the machine drifts up to 20% between minutes, which
        a ratio of the two medians would mix in (their rounds differ). None without both, or when llama-server
        failed in a repeat (its runs would no longer match ours one for one)."""
        mine = self.ours_bare if bare else self.ours
        if self.error is not None or not mine or not self.server or min(self.server) <= 0:
            return None
        return median(m / s for m, s in zip(mine, self.server))

    def to_json(self) -> dict:
        med = lambda xs: median(xs) if xs else None  # noqa: E731
        return {"example": self.example, "label": self.label, "flags": list(self.flags),
                "ours_tps": self.ours, "ours_tps_without_probabilities": self.ours_bare, "server_tps": self.server,
                "ratio": self.ratio(), "ratio_without_probabilities": self.ratio(bare=True),
                "outside_share": med(self.outside_share), "outside_us_per_step": med(self.outside_us_per_step),
                "probability_us_per_row": med(self.probability_us_per_row),
                "plain_outside_share": med(self.plain_outside_share),
                "window_outside_share": med(self.window_outside_share),
                "same_output": None if self.error else self.same_output,
                "same_drafts": None if self.error else self.same_drafts, "error": self.error}


def server_bench(
    runtime,
    binary: str | Path,
    *,
    examples: Sequence[str] = EXAMPLES,
    configs: Sequence[str | CompareConfig] = SERVER_BENCH_CONFIGS,
    max_tokens: int = 128,
    repeats: int = 3,
    progress: Callable[[str], None] = lambda _m: None,
) -> list[BenchRow]:
    """Every example x configuration, ``repeats`` times each, in rounds (see the module docstring).

    ``runtime``: our loaded ``LlamaRuntime`` (its model, thread count and context size are the
    server's); ``binary``: a llama-server executable; ``configs``: ``CompareConfig``s or ``compare
    --config`` texts (``parse_config``; raises ``ValueError``/``UnknownSource`` for a bad one before
    anything runs).
    A configuration llama-server cannot run (it fails to start or to answer) keeps our figures and
    gets ``error``; our own failures raise (``EngineError``)."""
    parsed = [c if isinstance(c, CompareConfig) else parse_config(c) for c in configs]
    scheduler = RuntimeScheduler(runtime)
    work = []
    for name in examples:
        tokens = runtime.prompt_tokens(example_prompt(name))
        for config in parsed:
            flags = () if config.source == PLAIN else tuple(server_arguments(config.source, config.options,
                                                                             draft_max=config.draft_max))
            work.append((BenchRow(name, config.label, flags), config, tokens))
    for rep in range(repeats):  # rounds: every row once per round, so a slow phase of the machine hits all rows
        for row, config, tokens in work:
            progress(f"round {rep + 1}/{repeats} · {row.example} · {row.label}")
            _measure_round(row, scheduler, runtime, binary, config, tokens, max_tokens, rep)
    return [row for row, _config, _tokens in work]


RUN_ORDER = ("ours", "server", "bare")
"""Our run with the figures, llama-server's, ours without the figures: round r runs them from
``RUN_ORDER[r % 3]`` on (ours, server, bare; server, bare, ours; bare, ours, server), so over every three
rounds each program runs first, second and third once (the first run of a sequence was ~10% faster)."""


def run_order(round_index: int) -> tuple[str, ...]:
    """The order of ``RUN_ORDER`` in round ``round_index`` (0-based): rotated left by ``round_index % 3``."""
    k = round_index % len(RUN_ORDER)
    return RUN_ORDER[k:] + RUN_ORDER[:k]


def _measure_round(row: BenchRow, scheduler, runtime, binary, config: CompareConfig, tokens, max_tokens: int,
                   round_index: int) -> None:
    """One round of ``row``: its three runs in ``run_order(round_index)``, their figures appended to ``row``."""
    with_p = done = None
    for which in run_order(round_index):
        if which == "ours":
            with_p = measure_run(scheduler, config, tokens, max_tokens, True)
            row.ours.append(with_p.tokens_per_s)
            row.outside_share.append(with_p.outside_us / with_p.decode_us if with_p.decode_us else 0.0)
            row.outside_us_per_step.append(with_p.outside_us / max(1, with_p.steps))
            if with_p.probability_rows:
                row.probability_us_per_row.append(with_p.probability_us / with_p.probability_rows)
            for kind, shares in (("plain", row.plain_outside_share), ("window", row.window_outside_share)):
                share = with_p.outside_share(kind)
                if share is not None:
                    shares.append(share)
        elif which == "bare":
            row.ours_bare.append(measure_run(scheduler, config, tokens, max_tokens, False).tokens_per_s)
        elif row.error is None:
            try:
                with LlamaServerProcess(binary, runtime.model_path, args=row.flags, threads=runtime.n_threads,
                                        n_ctx=runtime.n_ctx, context=server_context(runtime)) as server:
                    done = server.client.complete(tokens, max_tokens)
                row.server.append(done.predicted_per_second)
            except ServerError as exc:
                row.error = str(exc)
    if done is not None:
        row.same_output &= tuple(done.tokens) == with_p.generated
        row.same_drafts &= (done.draft_n, done.draft_n_accepted) == (with_p.drafted, with_p.accepted)


SPEEDUP_WEIGHTS = "Q8_0"
"""The weight form whose n-gram speedup the bench reports (the bundled model's best layout for
verification on a CPU: ``bench --weights``)."""
SPEEDUP_GOAL = 2.5
"""n-gram (draft max 16) / plain on that form at or above this is the goal (issue 24)."""


def weight_form_speedup(model_path: str | Path, *, weight_type: str = SPEEDUP_WEIGHTS, example: str = "copy-exact",
                        draft_max: int = 16, max_tokens: int = 128, repeats: int = 3, threads: int | None = None,
                        progress: Callable[[str], None] = lambda _m: None) -> dict:
    """Our n-gram source (draft max ``draft_max``) against plain decoding on the ``weight_type`` form of
    the model (converted once with llama.cpp's quantizer, cached: ``weight_form``), probabilities on,
    runs interleaved ``repeats`` times. Returns ``plain_tps`` and ``ngram_tps`` (lists, decode tokens/s)
    and ``speedup`` (median / median). Raises ``ModelFileError`` and ``EngineError``."""
    from inspector.llama.runtime import LlamaRuntime  # llama.cpp loads only when a model runs, not for --help

    path, _converted = weight_form(model_path, weight_type)
    rt = LlamaRuntime(path, n_ctx=DEFAULT_N_CTX, n_seq_max=1, n_threads=threads)
    try:
        scheduler = RuntimeScheduler(rt)
        tokens = rt.prompt_tokens(example_prompt(example))
        plain, ngram = CompareConfig("plain", PLAIN, 0), CompareConfig("ngram", "ngram", draft_max)
        p_tps, n_tps = [], []
        for rep in range(repeats):
            progress(f"{weight_type} form · {example} · plain and ngram draft max {draft_max} · repeat {rep + 1}/{repeats}")
            p_tps.append(measure_run(scheduler, plain, tokens, max_tokens, True).tokens_per_s)
            n_tps.append(measure_run(scheduler, ngram, tokens, max_tokens, True).tokens_per_s)
    finally:
        rt.close()
    return {"weight_type": weight_type, "example": example, "draft_max": draft_max, "plain_tps": p_tps,
            "ngram_tps": n_tps, "speedup": median(n_tps) / median(p_tps) if median(p_tps) > 0 else None}


def _share(shares: Sequence[float]) -> str:
    """A median share as "  6.1%" (6 characters), "     -" without one."""
    return f"{100 * median(shares):5.1f}%" if shares else "     -"


def format_server_bench(rows: Sequence[BenchRow], gui: dict | None = None, speedup: dict | None = None) -> str:
    """The bench as a text table, one line per example x configuration, then the summary against
    ``GOAL`` and, with ``gui`` (``inspector.cli.gui_speed.measure``'s result, as ``bench --gui`` prints it),
    the window against headless."""
    lines = [f"{'example':22s} {'configuration':50s} {'ours':>6s} {'bare':>6s} {'server':>6s} {'ratio':>6s} "
             f"{'bare':>6s} {'plain':>6s} {'window':>6s} {'us/step':>7s} {'p/row':>5s} same"]
    for r in rows:
        med = lambda xs: f"{median(xs):6.1f}" if xs else "   n/a"  # noqa: E731
        ratio = lambda x: f"{x:6.2f}" if x is not None else "   n/a"  # noqa: E731
        same = "error: " + r.error if r.error else (
            ("yes" if r.same_output else "no") + ("" if r.same_drafts or not r.same_output else " (drafts differ)"))
        lines.append(f"{r.example[:22]:22s} {r.label[:50]:50s} {med(r.ours)} {med(r.ours_bare)} {med(r.server)} "
                     f"{ratio(r.ratio())} {ratio(r.ratio(bare=True))} "
                     f"{_share(r.plain_outside_share)} {_share(r.window_outside_share)} "
                     f"{median(r.outside_us_per_step) if r.outside_us_per_step else 0:7.0f} "
                     f"{median(r.probability_us_per_row) if r.probability_us_per_row else 0:5.0f} {same}")
    ratios = [x for x in (r.ratio() for r in rows) if x is not None]
    bare = [x for x in (r.ratio(bare=True) for r in rows) if x is not None]
    if ratios:
        below = [f"{r.example} {r.label}" for r in rows if r.ratio() is not None and r.ratio() < GOAL]
        lines += ["", f"ours / llama-server with probabilities: {min(ratios):.2f}-{max(ratios):.2f} "
                      f"(median {median(ratios):.2f}); without: {min(bare):.2f}-{max(bare):.2f} "
                      f"(median {median(bare):.2f}); goal >= {GOAL}: "
                      + ("met" if not below else f"{len(below)} of {len(ratios)} below")]
    for what, column in (("plain steps", "plain_outside_share"), ("windows", "window_outside_share")):
        shares = [median(getattr(r, column)) for r in rows if getattr(r, column)]
        if shares:
            lines.append(f"time outside llama_decode with probabilities, {what}: {100 * min(shares):.1f}-"
                         f"{100 * max(shares):.1f}% of the time inside it (median {100 * median(shares):.1f}%; "
                         f"goal <= {100 * OUTSIDE_GOAL:.0f}%)")
    lines.append(f"probability figures summed by {figure_path()}")
    if speedup is not None and speedup.get("error"):
        lines.append(f"ngram / plain on the {SPEEDUP_WEIGHTS} form: not measured: {speedup['error']}")
    elif speedup is not None and speedup.get("speedup"):
        lines.append(f"ngram draft max {speedup['draft_max']} / plain on the {speedup['weight_type']} form "
                     f"({speedup['example']}, probabilities on): {speedup['speedup']:.2f}x "
                     f"({median(speedup['ngram_tps']):.1f} / {median(speedup['plain_tps']):.1f} tokens/s); "
                     f"goal >= {SPEEDUP_GOAL}")
    if gui is not None and gui.get("error"):
        lines.append(f"window / headless: not measured: {gui['error']}")
    elif gui is not None and gui.get("ratio") is not None:
        lines.append(f"window / headless ({gui['task']}, every view live): {gui['ratio']:.2f}x "
                     f"({gui['gui_median']:.1f} / {gui['headless_median']:.1f} tokens/s, GUI thread CPU "
                     f"{gui['gui_cpu_share']:.0%}); goal >= {WINDOW_GOAL}")
    lines += ["", "ours, bare, server: decode tokens/s (median of the repeats) with the per-row probability "
              "figures, without them, and llama-server's; ratio, bare: median over the rounds of ours / server in the "
              "same round; plain, window: time outside "
              "llama_decode as a share of the time inside it, over the plain steps and over the windows, with the "
              "figures; us/step: time outside llama_decode per decode step (window or plain step), microseconds; p/row: of it, the figures' microseconds per verification row; "
              "same: llama-server generated our tokens in every repeat (and drafted and accepted as many); "
              "the repeats ran in rounds (every row once per round), each round's three runs in a rotated order"]
    return "\n".join(lines)
