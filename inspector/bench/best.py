"""``bench --llama-server --best``: the best source per workload, ours against llama-server's (issue 41, part 3).

For every workload (a bundled example: one request; a bundled conversation: every turn, each with its own
answers in the history, one source memory across the turns):

1. **Record**: our plain greedy run gives the recordings (one per turn) and the per-turn prompts.
2. **Tune** (``tune_turns.replay_turns``, no model): every model-free source on ``BEST_GRID`` x
   ``BEST_DRAFT_MAXES``, replayed over the recordings on c(k) (the cost model stored for this model and
   thread count; measured and stored first when there is none). Per source its best predicted
   configuration: ours takes any of its options (trees included), llama-server's types take the best
   configuration llama-server can run (``server_arguments`` accepts it: chains), so llama-server runs each
   of its speculative types at our tuner's best for that type and is not handicapped.
3. **Oracle**: the copy oracle (``inspector.bench.oracle``) on the same recordings and c(k), draft max the
   grid's largest: the bound of every lookup source, and c(k)'s own bound (the cost model's ceiling).
4. **Measure**, in rounds: ours (plain, then each source at its tuned best: ``run_compare``) and
   llama-server (plain, then each of its types; a fresh process per configuration, the turns' prompts sent
   in order, the same token ids our plain run had, greedy, same threads and context) alternate which goes
   first each round. Each side's speedup: its configuration's median decode tokens/s over its own plain
   median (prefill excluded, as ``timings.predicted_per_second``). The winner of a side: its fastest
   configuration, plain included.

llama-server's speculative types and flags: ``inspector.sources.server_flags`` (llama.cpp 0c1e570,
``common/arg.cpp``); request and reply fields: ``inspector.bench.server_client``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from statistics import median
from typing import Callable, Sequence

from inspector.bench.compare import run_compare
from inspector.bench.compare_result import CompareConfig
from inspector.bench.oracle import ORACLE_LABEL, CopyOracle
from inspector.bench.server_http import ServerError
from inspector.bench.server_process import LlamaServerProcess
from inspector.bench.tune import DRAFT_MAX_GRID, MODEL_FREE, OPTION_GRID, Recording, TuneRow, grid
from inspector.bench.tune_turns import replay_turns, tune_turns
from inspector.engine.errors import EngineError
from inspector.engine.scheduler import RuntimeScheduler
from inspector.engine.settings import GenerationSettings
from inspector.llama.cost_model import CostModel
from inspector.llama.server_parity import server_context
from inspector.prompts import TURNS_EXAMPLES, example_prompt, turns_path
from inspector.session.conversation import read_turns
from inspector.sources.registry import PLAIN
from inspector.sources.server_flags import runs_alike_on_server, server_arguments, server_sources

BEST_DRAFT_MAXES = tuple(d for d in DRAFT_MAX_GRID if d <= 16)
"""Draft max values the tuner tries (tokens): the tuner's grid up to 16, the cost model's measured range."""
BEST_GRID = {**OPTION_GRID, "ngram": {**OPTION_GRID["ngram"], "length": ("fixed", "adaptive")}}
"""The tuner's option grid, with our n-gram source's adaptive length beside its fixed one."""
ORACLE_GOAL = 0.9
"""Our best speedup / the copy oracle's at or above this is the goal (issue 41)."""
OWN_MAXIMUM = {"ngram-simple": "size_m", "ngram-map-k": "size_m", "ngram-map-k4v": "size_m", "ngram-mod": "n_max"}
"""The option that bounds each llama-server n-gram type's proposals (it has no draft max cap of its own)."""
OURS, SERVER = "ours", "llama-server"


def server_grid(source: str) -> list[tuple[str, dict, int]]:
    """Configurations of ``source`` that llama-server runs as we do (``runs_alike_on_server``): the tuner's
    grid with the type's own maximum (``OWN_MAXIMUM``) equal to each draft max of ``BEST_DRAFT_MAXES``;
    a type without one (ngram-cache: its fixed 8) as the grid has it."""
    own = OWN_MAXIMUM.get(source)
    options = {k: v for k, v in BEST_GRID.get(source, {}).items() if k != own}
    out = []
    for s, opts, dm in grid([source], BEST_DRAFT_MAXES, {source: options}):
        opts = {**opts, own: dm} if own else opts
        if runs_alike_on_server(s, opts, dm):
            out.append((s, opts, dm))
    return out


@dataclass
class Contender:
    """One configuration of one side on one workload: ``config`` (plain: source ``none``), its tuner
    prediction (``predicted``; None for plain), llama-server's ``flags``, decode tokens/s of each round
    (``tps``), ``same_output``: every round generated our plain run's tokens; ``error``: one line."""

    side: str
    config: CompareConfig
    predicted: TuneRow | None = None
    flags: tuple[str, ...] = ()
    tps: list[float] = field(default_factory=list)
    same_output: bool = True
    error: str | None = None

    @property
    def median_tps(self) -> float | None:
        """Median decode tokens/s of the rounds, None without one (or after an error)."""
        return median(self.tps) if self.tps and self.error is None else None

    def to_json(self) -> dict:
        return {"side": self.side, "label": self.config.label, "source": self.config.source,
                "draft_max": self.config.draft_max, "options": dict(self.config.options), "flags": list(self.flags),
                "predicted_speedup": None if self.predicted is None else self.predicted.speedup,
                "tps": list(self.tps), "median_tps": self.median_tps, "same_output": self.same_output,
                "error": self.error}


@dataclass
class BestWorkload:
    """One workload's contenders (``ours``, ``server``: plain first), the copy ``oracle``'s predicted row,
    the cost model's ``ceiling`` (x plain), ``turns`` and ``tokens`` (our plain run's generated tokens)."""

    name: str
    turns: int
    tokens: int
    ceiling: float
    oracle: TuneRow
    ours: list[Contender]
    server: list[Contender]

    def speedup(self, c: Contender) -> float | None:
        """``c``'s median tokens/s over its side's plain median (None without both)."""
        plain = (self.ours if c.side == OURS else self.server)[0].median_tps
        return None if plain is None or c.median_tps is None or plain <= 0 else c.median_tps / plain

    def plain_ratio(self) -> float | None:
        """Our plain decoding's median tokens/s over llama-server's (None without both)."""
        ours, theirs = self.ours[0].median_tps, self.server[0].median_tps
        return ours / theirs if ours is not None and theirs else None

    def winner(self, side: str) -> Contender | None:
        """``side``'s fastest configuration (plain included), None when nothing ran."""
        ran = [c for c in (self.ours if side == OURS else self.server) if c.median_tps is not None]
        return max(ran, key=lambda c: c.median_tps) if ran else None

    def to_json(self) -> dict:
        ours, theirs = self.winner(OURS), self.winner(SERVER)
        return {"workload": self.name, "turns": self.turns, "tokens": self.tokens, "ceiling": self.ceiling,
                "oracle_speedup": self.oracle.speedup, "oracle_draft_max": self.oracle.draft_max,
                "ours_winner": None if ours is None else ours.config.label,
                "ours_speedup": None if ours is None else self.speedup(ours),
                "server_winner": None if theirs is None else theirs.config.label,
                "server_speedup": None if theirs is None else self.speedup(theirs),
                "ours": [c.to_json() for c in self.ours], "llama_server": [c.to_json() for c in self.server]}


def tuned_contenders(recordings: Sequence[Recording], costs: CostModel, sources: Sequence[str] = MODEL_FREE,
                     progress: Callable[[str], None] = lambda _m: None) -> tuple[list[Contender], list[Contender]]:
    """(ours, llama-server's): plain, then per source its best predicted configuration on ``BEST_GRID`` x
    ``BEST_DRAFT_MAXES`` over ``recordings`` (module docstring, step 2); llama-server gets one per type
    in ``server_sources()`` that has a configuration it can run."""
    plain = CompareConfig("plain", PLAIN, 0)
    ours, theirs = [Contender(OURS, plain)], [Contender(SERVER, plain)]
    served = set(server_sources())
    for s in sources:
        progress(f"tuning {s} ...")
        rows = tune_turns(recordings, costs, grid([s], BEST_DRAFT_MAXES, BEST_GRID)
                          + (server_grid(s) if s in served else []))
        if not rows:
            continue
        ours.append(Contender(OURS, _config(rows[0]), rows[0]))
        alike = next((r for r in rows if runs_alike_on_server(r.source, r.options, r.draft_max)), None)
        if alike is not None:
            flags = tuple(server_arguments(alike.source, alike.options, draft_max=alike.draft_max))
            theirs.append(Contender(SERVER, _config(alike), alike, flags))
    return ours, theirs


def _config(row: TuneRow) -> CompareConfig:
    return CompareConfig(row.label, row.source, row.draft_max, dict(row.options))


def oracle_row(recordings: Sequence[Recording], costs: CostModel, draft_max: int = max(BEST_DRAFT_MAXES)) -> TuneRow:
    """The copy oracle replayed and priced over ``recordings`` (``inspector.bench.oracle``); its own
    proposal time is left out (``proposal_ms`` 0): it is a bound, not a source."""
    row = replay_turns(ORACLE_LABEL, {}, draft_max, recordings, costs,
                       make=lambda rec, _memory: CopyOracle(rec, costs.cost, draft_max)).row
    decode_ms = row.decode_ms - row.proposal_ms
    scale = row.decode_ms / decode_ms if decode_ms > 0 else 1.0
    return replace(row, proposal_ms=0.0, decode_ms=decode_ms, tokens_per_s=row.tokens_per_s * scale,
                   speedup=row.speedup * scale)


def recordings_of_run(run, runtime, max_tokens: int) -> tuple[list[Recording], list[tuple[int, ...]]]:
    """(one ``Recording`` per turn, each turn's prompt token ids) of a plain run (a ``Generation`` or a
    ``TurnsRun``) on ``runtime``."""
    gens = getattr(run, "generations", None) or [run]
    recs, prompts = [], []
    for g in gens:
        prompt = tuple(g.tokens[:g.prompt_token_count])
        recs.append(Recording(prompt, tuple(g.generated), max_tokens, runtime.n_batch, runtime.n_ctx, runtime.is_eog))
        prompts.append(prompt)
    return recs, prompts


def measure_server(c: Contender, binary, runtime, prompts: Sequence[Sequence[int]], expected: Sequence[int],
                   max_tokens: int) -> None:
    """One round of llama-server's contender ``c``: a fresh process with its flags, every prompt in order;
    its decode tokens/s (summed generated tokens over summed decode time) appended; a failure sets ``error``."""
    if c.error is not None:
        return
    try:
        with LlamaServerProcess(binary, runtime.model_path, args=c.flags, threads=runtime.n_threads,
                                n_ctx=runtime.n_ctx, context=server_context(runtime)) as server:
            done = [server.client.complete(p, max_tokens) for p in prompts]
    except ServerError as exc:
        c.error = str(exc)
        return
    ms = sum(d.predicted_ms for d in done)
    c.tps.append(sum(d.predicted_n for d in done) / ms * 1000 if ms > 0 else 0.0)
    c.same_output &= [t for d in done for t in d.tokens] == list(expected)


def measure_ours(contenders: Sequence[Contender], scheduler: RuntimeScheduler, settings: GenerationSettings,
                 tokens: Sequence[int], turns: Sequence[str] | None, expected: Sequence[int] | None = None):
    """One round of our contenders (plain first, ``run_compare``): each one's decode tokens/s appended,
    a failed run's error kept. Returns the round's runs (plain's first)."""
    result = run_compare(scheduler, tokens, [c.config for c in contenders], settings, turns=turns, keep_runs=True)
    for c, row in zip(contenders, result.rows):
        if row.error is not None:
            c.error = c.error or row.error
        elif row.summary.decode_tokens_per_s:
            c.tps.append(row.summary.decode_tokens_per_s)
        if expected is not None:
            c.same_output &= list(row.generated_tokens) == list(expected)
    return result.runs


def best_bench(runtime, binary, costs: CostModel, *, workloads: Sequence[str], max_tokens: int = 128,
               repeats: int = 3, sources: Sequence[str] = MODEL_FREE,
               progress: Callable[[str], None] = lambda _m: None) -> list[BestWorkload]:
    """Every workload (module docstring): a bundled example's name or a bundled conversation's
    (``TURNS_EXAMPLES``); ``max_tokens`` per request (tokens), ``repeats`` rounds. ``sources``: ours to
    tune (default: every model-free one). ``costs``: c(k) for the tuner and the oracle (the stored cost
    model of ``runtime``'s model and threads). Raises ``EngineError`` when our plain run fails; llama-server's
    failures are kept in its contenders' ``error``."""
    scheduler = RuntimeScheduler(runtime)
    settings = GenerationSettings(max_new_tokens=max_tokens, draft_max=max(BEST_DRAFT_MAXES), probabilities=True)
    out = []
    for name in workloads:
        turns = read_turns(turns_path(name)) if name in TURNS_EXAMPLES else None
        tokens = () if turns is not None else tuple(runtime.prompt_tokens(example_prompt(name)))
        progress(f"{name}: recording plain decoding ...")
        plain_run = run_compare(scheduler, tokens, [CompareConfig("plain", PLAIN, 0)], settings, turns=turns,
                                keep_runs=True)
        if plain_run.rows[0].error is not None:
            raise EngineError(f"{name}: plain decoding failed: {plain_run.rows[0].error}")
        recs, prompts = recordings_of_run(plain_run.runs[0], runtime, max_tokens)
        expected = [t for r in recs for t in r.output]
        ours, theirs = tuned_contenders(recs, costs, sources, progress=lambda m, n=name: progress(f"{n}: {m}"))
        oracle = oracle_row(recs, costs)
        for rnd in range(repeats):
            sides = ("ours", "server") if rnd % 2 == 0 else ("server", "ours")
            for side in sides:
                if side == "ours":
                    progress(f"{name}: round {rnd + 1}/{repeats}: ours, {len(ours)} configurations ...")
                    measure_ours(ours, scheduler, settings, tokens, turns, expected)
                else:
                    for c in theirs:
                        progress(f"{name}: round {rnd + 1}/{repeats}: llama-server {c.config.label} ...")
                        measure_server(c, binary, runtime, prompts, expected, max_tokens)
        out.append(BestWorkload(name, len(recs), len(expected), costs.ceiling, oracle, ours, theirs))
    return out


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if value is not None else "n/a"


def format_best(rows: Sequence[BestWorkload]) -> str:
    """The winners table (one line per workload: our fastest and llama-server's, each x its own plain;
    ours / llama-server in tokens/s and its two factors, plain decoding's ratio and the winners' speedups'
    ratio; the copy oracle, the cost model's ceiling and our winner's share of the oracle), what decided
    the workloads ours did not win, then every configuration measured, per workload, with its predicted
    speedup."""
    head = (f"{'workload':22s} {'ours best':14s} {'x plain':>7s} {'llama-server':14s} {'x plain':>7s} "
            f"{'ours/srv':>8s} {'=plain':>6s} {'x spdup':>7s} {'oracle':>6s} {'ceiling':>7s} {'of oracle':>9s}")
    lines, ahead, near, behind = [head], 0, 0, []
    ratio = lambda v: f"{v:.2f}" if v is not None else "n/a"  # noqa: E731
    for w in rows:
        ours, theirs = w.winner(OURS), w.winner(SERVER)
        o_x, s_x = (w.speedup(ours) if ours else None), (w.speedup(theirs) if theirs else None)
        vs = (ours.median_tps / theirs.median_tps) if ours and theirs and theirs.median_tps else None
        plain = w.plain_ratio()
        spd = o_x / s_x if o_x is not None and s_x else None
        share = o_x / w.oracle.speedup if o_x is not None and w.oracle.speedup > 0 else None
        ahead += vs is not None and vs > 1.0
        near += share is not None and share >= ORACLE_GOAL
        if vs is not None and vs <= 1.0 and plain is not None and spd is not None:
            behind.append((w.name, plain, spd))
        lines.append(f"{w.name[:22]:22s} {(ours.config.source if ours else 'n/a')[:14]:14s} {_x(o_x):>7s} "
                     f"{(theirs.config.source if theirs else 'n/a')[:14]:14s} {_x(s_x):>7s} "
                     f"{ratio(vs):>8s} {ratio(plain):>6s} {ratio(spd):>7s} {_x(w.oracle.speedup):>6s} "
                     f"{_x(w.ceiling):>7s} {(f'{share:.0%}' if share is not None else 'n/a'):>9s}")
    lines += ["", f"ours ahead of llama-server's best on {ahead} of {len(rows)} workloads (ours/srv > 1); "
                  f"ours >= {ORACLE_GOAL:.0%} of the copy oracle on {near} of {len(rows)}"]
    if behind:
        by_plain = [n for n, p, sp in behind if p < 1.0 and p <= sp]
        by_source = [n for n, p, sp in behind if n not in by_plain]
        if by_plain:
            lines.append(f"decided by plain decoding (ours {min(p for _n, p, _s in behind):.2f}-"
                         f"{max(p for _n, p, _s in behind):.2f}x llama-server's where ours is behind): "
                         + ", ".join(by_plain))
        if by_source:
            lines.append("decided by the sources (llama-server's winner's speedup ahead of ours by more than plain "
                          "decoding's gap): " + ", ".join(by_source))
    for w in rows:
        lines += ["", f"{w.name}: {w.turns} turn{'s' if w.turns != 1 else ''}, {w.tokens} tokens; copy oracle "
                      f"{_x(w.oracle.speedup)} predicted ({w.oracle.windows} windows, draft max {w.oracle.draft_max})"]
        for c in (*w.ours, *w.server):
            pred = "" if c.predicted is None else f"predicted {_x(c.predicted.speedup)}"
            tps = f"{c.median_tps:6.1f}" if c.median_tps is not None else "   n/a"
            tail = f"error: {c.error}" if c.error else ("" if c.same_output else "output differs from plain")
            lines.append(f"  {c.side:12s} {c.config.label[:62]:62s} {tps} tok/s {_x(w.speedup(c)):>6s} "
                         f"{pred:17s} {tail}")
    lines += ["", "x plain: median decode tokens/s over the same side's plain median; ours/srv: our winner's "
                  "tokens/s over llama-server's winner's, = plain: our plain tokens/s over llama-server's, x spdup: "
                  "our winner's speedup over llama-server's winner's (ours/srv is their product); oracle: the copy "
                  "oracle's predicted speedup on c(k) (the longest runs of the true output copied from the context, "
                  "in the lengths that finish soonest); ceiling: c(k)'s best with every proposal accepted; of "
                  "oracle: our winner's speedup / the oracle's. Each side ran each configuration in rounds (which "
                  "side went first alternated); llama-server's types at our tuner's best for them"]
    return "\n".join(lines)
