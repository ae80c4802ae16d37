"""Compare: one prompt run with several configurations, side by side (issue 5).

Each configuration names a proposal source (``"none"`` = plain one-token
decoding), its draft max and the source's options. The runs share one loaded
target and run one after the other on fresh sessions, so their tokens/s are
measured under the same conditions. The first ``"none"`` configuration (or
an extra plain run when there is none) is the reference for "speedup vs
plain" and "same output as plain".
"""

from __future__ import annotations

import threading
from dataclasses import replace
from statistics import median
from typing import Callable, Sequence

from inspector.engine.errors import RequestCancelled
from inspector.engine.generation import Generation
from inspector.engine.records import Summary
from inspector.engine.scheduler import RuntimeScheduler
from inspector.bench.compare_result import CompareConfig, CompareResult, CompareRow
from inspector.engine.settings import GenerationSettings, check_setting
from inspector.engine.stats import summarize_receipts
from inspector.llama.cost_cache import stored_row_costs
from inspector.llama.cost_model import CostModel
from inspector.session.conversation import Conversation
from inspector.session.run import RunRefused, RunRequest, SessionRun
from inspector.sources.descriptors import split_option
from inspector.sources.registry import PLAIN, SourceContext, describe_source
from inspector.sources.registry import make_source as make_registry_source



def default_configs(cost_model: CostModel | None = None) -> list[CompareConfig]:
    """Plain decoding and the n-gram source at three draft maxima; with a measured ``cost_model``
    also at the draft max its ceiling's best window implies (best_rows - 1 proposal tokens),
    when that is not one of the three: the curve decides where longer proposals stop paying."""
    configs = [
        CompareConfig("plain", PLAIN, 0),
        CompareConfig("ngram draft_max 4", "ngram", 4),
        CompareConfig("ngram draft_max 8", "ngram", 8),
        CompareConfig("ngram draft_max 16", "ngram", 16),
    ]
    best = cost_model.best_draft_max if cost_model is not None else 0
    if best >= 1 and best not in (4, 8, 16):
        configs.append(CompareConfig(f"ngram draft_max {best} (the cost model's best)", "ngram", best))
    return configs


def check_config_options(source: str, options: dict, draft_max: int) -> dict:
    """A configuration's ``options`` checked by its source's declaration
    (``inspector.sources.registry.describe_source``), with the options a source takes from the
    generation's ``draft_max`` (``Option.from_setting``, e.g. the draft's) set to ``draft_max``:
    the one check of ``compare --config`` and the Compare window. Returns the converted options.
    Raises ``UnknownSource``, or ``ValueError`` naming the source, the option, the observed value
    and the valid range (or the unknown options, or the broken cross rule)."""
    descriptor = describe_source(source)
    shared = {o.name: draft_max for o in descriptor.options or () if o.from_setting == "draft_max"}
    return descriptor.check_options({**options, **shared})


def parse_config(text: str) -> CompareConfig:
    """Parse ``SOURCE[:key=value,...]`` (CLI ``compare --config``), e.g.
    ``ngram:draft_max=4,n_min=1`` or ``none``. ``label=`` names it.

    Values are checked here, before any model loads: ``draft_max`` with the
    engine's rule (>= 0; >= 1 for ``draft``), the source's options with its
    declaration (``inspector.sources.registry.describe_source``: e.g. ngram ``n_max``,
    ``n_min`` >= 1, ``n_min`` <= ``n_max``; ``none`` takes none). Raises ``ValueError``
    with the offending text, the option, the observed value and the valid range, or
    ``unknown proposal source 'x': ...`` (``UnknownSource``)."""
    name, _, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"configuration {text!r} has no source name (expected SOURCE[:key=value,...])")
    options: dict = {}
    draft_max = 0 if name == PLAIN else 8
    label = None
    for part in filter(None, (p.strip() for p in rest.split(","))):
        try:
            key, value = split_option(part)
        except ValueError as exc:
            raise ValueError(f"configuration {text!r}: {exc}") from None
        if key == "draft_max":
            try:
                draft_max = int(value)
            except ValueError:
                raise ValueError(f"configuration {text!r}: draft_max must be an integer >= 0, "
                                 f"observed {value!r}") from None
            try:
                check_setting("draft_max", draft_max)
            except ValueError as exc:
                raise ValueError(f"configuration {text!r}: {exc}") from None
        elif key == "label":
            label = value
        else:
            options[key] = value
    try:  # an unknown name is UnknownSource (a ValueError); "none" takes no options
        check_config_options(name, options, draft_max)
    except ValueError as exc:
        raise ValueError(f"configuration {text!r}: {exc}") from None
    if label is None:
        label = name if name == PLAIN else f"{name} draft_max {draft_max}" + "".join(
            f" {k}={v}" for k, v in options.items())
    return CompareConfig(label, name, draft_max, options)


def registry_source_factory(runtime, settings: GenerationSettings) -> Callable[[CompareConfig], object]:
    """``make_source`` for ``run_compare`` from the source registry
    (``inspector.sources.registry.make_source``): ``"none"`` gives None; raises
    ``UnknownSource`` and what the source's factory raises."""
    def make(config: CompareConfig, memory: dict | None = None):
        # The context's settings carry the configuration's draft_max (a draft's own draft_max by default).
        ctx = SourceContext(runtime, _with_draft_max(settings, config.draft_max), row_costs=stored_row_costs(runtime),
                            memory={} if memory is None else memory)
        return make_registry_source(config.source, ctx, config.options)

    return make


def _ignore(record) -> None:
    """The records of a compare run: its rows are read from the ``Generation``s (and background
    sessions' lock operations arrive on other threads, where no record may be changed)."""


def run_compare(
    scheduler: RuntimeScheduler,
    prompt_tokens: Sequence[int],
    configs: Sequence[CompareConfig],
    settings: GenerationSettings,
    make_source: Callable[[CompareConfig], object] | None = None,
    cost_model: CostModel | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    cancel: threading.Event | None = None,
    turns: Sequence[str] | None = None,
    keep_runs: bool = False,
    turn_progress: Callable[[int, int, int, int, str], None] | None = None,
    system_prompt: str = "",
    row_done: Callable[[CompareResult], None] | None = None,
    repeats: int = 1,
) -> CompareResult:
    """Run ``prompt_tokens`` once per configuration (in order) with ``settings``
    (its ``draft_max`` replaced by each configuration's) and compare.

    ``repeats``: run every configuration that many times, in rounds (every configuration once per round,
    the plain reference first), so a slow phase of the machine reaches every row alike: each row keeps its
    first round's run (windows, tokens, receipts) and the median decode tokens/s of its rounds
    (``CompareRow.decode_tokens_per_s_runs`` has each); its speedup is the median over plain's median. A row
    whose first run failed is not run again.

    ``keep_runs``: keep each row's ``Generation``/``TurnsRun`` in ``CompareResult.runs``.
    ``turns``: user messages of a conversation to run instead of ``prompt_tokens``
    (``inspector.session.conversation``): each configuration runs every turn with its
    own answers in the history and one source memory across the turns; its row sums
    the turns (``TurnsRun``), and a failing turn gives the row an error naming it.
    ``turn_progress(turn, turn_count, done, total, label)`` is called before each turn
    (``turn`` 1-based; ``done``/``total``: configurations, as for ``progress``).
    ``system_prompt``: the system message ``prompt_tokens`` were made with (kept in the result);
    with ``turns`` it opens every configuration's chat, so every turn's prompt holds it.

    ``make_source(config, memory)`` returns the proposal source (None for plain; ``memory``:
    the ``SourceContext.memory`` of the request, one dict across a conversation's turns);
    default: ``registry_source_factory``. Sources with ``close()`` are closed
    after their run. ``progress(done, total, label)`` is called before each run.
    ``row_done(partial)`` is called after each configuration ends, with a ``CompareResult`` of the
    rows finished so far (in the result's order; the plain reference runs first, so every row has
    its speedup; ``runs`` kept with ``keep_runs``): a window shows them as they come.
    ``cancel``: when set, the run in flight is cancelled and
    ``RequestCancelled`` is raised (rows already finished are lost to the
    caller only if it does not catch it: they are in the exception's
    ``partial`` attribute).
    A configuration whose source cannot be made or whose run fails gets a row
    with ``error`` set; the other configurations still run.
    Raises ``ValueError`` when ``configs`` is empty.
    """
    if not configs:
        raise ValueError("no configurations to compare")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, observed {repeats}")
    make_source = make_source or registry_source_factory(scheduler.runtime, settings)
    order = list(configs)
    plain_first = next((c for c in order if c.source == PLAIN), None)
    extra_plain = plain_first is None
    if extra_plain:
        plain_first = CompareConfig("plain (reference)", PLAIN, 0)
        order.insert(0, plain_first)
    else:  # the reference runs first, so every other row can be compared with it
        order.remove(plain_first)
        order.insert(0, plain_first)
    runs: dict[int, tuple[object | None, str | None]] = {}
    speeds: dict[int, list[float]] = {}  # id(config) -> decode tokens/s of each round's run
    result_order = [c for c in configs] if not extra_plain else [plain_first, *configs]
    total = len(order) * repeats
    for done in range(total):
        rnd, i = divmod(done, len(order))
        config = order[i]
        if rnd and (runs[id(config)][0] is None or runs[id(config)][1] is not None):
            continue  # its first run failed: nothing to time again
        if progress is not None:
            progress(done, total, config.label if repeats == 1 else f"{config.label} (round {rnd + 1}/{repeats})")
        try:
            if turns is None:
                run = _run_request(scheduler, config, settings, make_source, cancel,
                                   prompt_token_ids=tuple(prompt_tokens), source_memory={})
            else:
                on_turn = None if turn_progress is None else (
                    lambda n, count, i=done, label=config.label: turn_progress(n, count, i, total, label))
                conv, error = _run_turns(scheduler, config, settings, turns, make_source, cancel, on_turn,
                                         system_prompt)
                run = (conv, error, "" if conv is None else conv.warm_text())
        except RequestCancelled as exc:
            exc.partial = replace(_result(runs, [c for c in result_order if id(c) in runs],
                                          runs.get(id(plain_first), (None,))[0], prompt_tokens, settings,
                                          cost_model, speeds), repeats=rnd + 1)
            raise
        if not rnd:
            runs[id(config)] = run
        tps = None if run[0] is None or run[1] is not None else run[0].summary().decode_tokens_per_s
        if tps is not None:
            speeds.setdefault(id(config), []).append(tps)
        if row_done is not None:
            finished = [c for c in result_order if id(c) in runs]
            partial = _result(runs, finished, runs[id(plain_first)][0], prompt_tokens, settings, cost_model, speeds)
            row_done(replace(partial, runs=tuple(runs[id(c)][0] for c in finished)) if keep_runs else partial)
    plain_gen = runs[id(plain_first)][0]
    result = replace(_result(runs, result_order, plain_gen, prompt_tokens, settings, cost_model, speeds),
                     system_prompt=system_prompt, repeats=repeats)
    describe = getattr(scheduler.runtime, "describe", None)
    if describe is not None:
        result = replace(result, model=describe())
    if keep_runs:
        result = replace(result, runs=tuple(runs.get(id(c), (None, None, ""))[0] for c in result_order))
    return result


def _run_request(scheduler, config: CompareConfig, settings: GenerationSettings, make_source, cancel,
                 prompt_text: str = "", **request) -> tuple[Generation | None, str | None, str]:
    """Run one request of ``config`` to its end: (its ``Generation``, or None when the prompt or the source
    could not be made, the error message or None, and what the source remembered before the request
    began: ``SessionRun.source_warm``, "" when cold). ``request``: the other ``RunRequest`` fields (the
    prompt's ``prompt_token_ids``, or a turn's ``Conversation.next_turn`` fields; ``source_memory``).
    Raises ``RequestCancelled`` when ``cancel`` is set."""
    s = _with_draft_max(settings, config.draft_max)
    run = SessionRun(scheduler, RunRequest(prompt_text, s, config.source, dict(config.options), **request),
                     _ignore, make_source=lambda req, c=config: make_source(c, req.source_memory))
    gen, error = None, None
    try:
        run.tokenize()
        run.make_source()
    except RunRefused as exc:  # a bad configuration is a row with its error, not the end of the compare
        cause = exc.cause or exc
        return None, f"{type(cause).__name__}: {cause}", ""
    except Exception as exc:  # a chat template that fails to render: every turn would fail the same way
        return None, f"{type(exc).__name__}: {exc}", ""
    try:
        gen = run.open()
        if cancel is not None:
            gen.cancel_event = cancel
        try:
            run.start()
            for _ in run.steps():
                pass
        except RequestCancelled:
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        finally:
            run.end(gen.finish_reason or "error")
    except RequestCancelled:
        raise
    except Exception as exc:  # e.g. the prompt does not fit the context
        gen, error = None, f"{type(exc).__name__}: {exc}"
    finally:
        run.close_source()
    return gen, error, run.source_warm


class TurnsRun:
    """One configuration's conversation (a ``Conversation`` whose turns are kept as their ``Generation``s),
    read as one run: ``receipts``, ``plain_steps``, ``generated`` (every turn's tokens, in order) and
    ``summary()`` over all turns (decode times summed, prefill of every turn's history included in
    ``prefill_elapsed_us``)."""

    def __init__(self, system_prompt: str = "", planned_turns: int | None = None) -> None:
        self.conversation = Conversation.opened(system_prompt, planned_turns)
        self.warm: list[str] = []
        """What the source remembered before each turn began, turn 1 first ("" cold)."""

    def warm_text(self) -> str:
        """Which turns began warm and what the last of them remembered, "" when every turn began cold:
        ``turns 2-4 began warm (turn 4: 312 tokens remembered from 3 earlier requests)``."""
        warm = [(n, w) for n, w in enumerate(self.warm, 1) if w]
        if not warm:
            return ""
        (first, _), (last, text) = warm[0], warm[-1]
        if first == last:
            return f"turn {first} began warm ({text})"
        return f"turns {first}-{last} began warm (turn {last}: {text})"

    @property
    def generations(self) -> list[Generation]:
        """Each turn's ``Generation``, turn 1 first."""
        return self.conversation.records

    @property
    def memory(self) -> dict:
        """What the source kept across the turns (``SourceContext.memory``)."""
        return self.conversation.memory

    @property
    def receipts(self) -> list:
        return [r for g in self.generations for r in g.receipts]

    @property
    def plain_steps(self) -> int:
        return sum(g.plain_steps for g in self.generations)

    @property
    def generated(self) -> list[int]:
        return [t for g in self.generations for t in g.generated]

    def summary(self) -> Summary:
        gens = self.generations
        return summarize_receipts(
            self.receipts, plain_steps=self.plain_steps, discards=sum(len(g.discards) for g in gens),
            generated_tokens=len(self.generated), decode_elapsed_us=sum(g.decode_elapsed_us for g in gens),
            prefill_elapsed_us=sum(g.prefill_elapsed_us for g in gens),
            finish_reason=gens[-1].finish_reason if gens else None)


def _run_turns(scheduler, config: CompareConfig, settings: GenerationSettings, turns: Sequence[str], make_source,
               cancel, on_turn: Callable[[int, int], None] | None = None,
               system_prompt: str = "") -> tuple[TurnsRun | None, str | None]:
    """Run ``config`` over a conversation (``Conversation.next_turn``, as ``run --turns`` and the window
    do): each turn's prompt is the chat so far, with this configuration's own answers; one source memory
    for every turn. A failing turn ends the conversation with an error naming it (earlier turns are kept
    in the row). ``on_turn(turn, turn_count)`` is called before each turn (1-based). ``system_prompt``:
    the chat's first message (as ``run --turns`` starts it), "" for none."""
    out = TurnsRun(system_prompt, len(turns))
    conv = out.conversation
    for n, text in enumerate(turns, 1):
        if on_turn is not None:
            on_turn(n, len(turns))
        gen, error, warm = _run_request(scheduler, config, settings, make_source, cancel, text,
                                        **conv.next_turn(text))
        out.warm.append(warm)
        if gen is None:
            return (out if out.generations else None), f"turn {n}: {error}"
        conv.add_answered(gen, text, gen.text.text)
        if error is not None:
            return out, f"turn {n}: {error}"
    return out, None


def _with_draft_max(settings: GenerationSettings, draft_max: int) -> GenerationSettings:
    return replace(settings, draft_max=max(0, int(draft_max)))


def _median_speed(gen, speeds: list[float] | None) -> float | None:
    """The median of a row's rounds' decode tokens/s; its run's own with one round (or none timed)."""
    if speeds and len(speeds) > 1:
        return median(speeds)
    return gen.summary().decode_tokens_per_s


def _result(runs, configs, plain_gen, prompt_tokens, settings, cost_model, speeds=None) -> CompareResult:
    """The rows of ``configs`` from ``runs`` (id(config) -> (a ``Generation`` or ``TurnsRun``, error, warm));
    ``speeds``: id(config) -> each round's decode tokens/s (``run_compare``'s ``repeats``)."""
    speeds = speeds or {}
    plain_id = next((k for k, run in runs.items() if plain_gen is not None and run[0] is plain_gen), None)
    plain_tps = _median_speed(plain_gen, speeds.get(plain_id)) if plain_gen is not None else None
    plain_error = next((run[1] for run in runs.values() if plain_gen is not None and run[0] is plain_gen), None)
    rows = []
    for config in configs:
        gen, error, warm = runs.get(id(config), (None, "not run", ""))
        if gen is None:
            rows.append(CompareRow(config, Summary(), None, None, None, (), error, warm))
            continue
        s = gen.summary()
        if len(speeds.get(id(config), ())) > 1:
            s = replace(s, decode_tokens_per_s=_median_speed(gen, speeds[id(config)]))
        speedup = None if not plain_tps or s.decode_tokens_per_s is None else s.decode_tokens_per_s / plain_tps
        expected = None
        if cost_model is not None:
            expected = cost_model.expected_speedup(
                [(r.decoded_rows, r.canonical_prediction_count) for r in gen.receipts], gen.plain_steps)
        same = None if plain_gen is None or error or plain_error else \
            list(gen.generated) == list(plain_gen.generated)  # a row cut short by an error: not known
        decoded = sum(r.decoded_rows for r in gen.receipts) + gen.plain_steps
        rows.append(CompareRow(config, s, speedup, expected, same, tuple(gen.generated), error, warm,
                               tree_windows=sum(1 for r in gen.receipts if r.tree is not None),
                               rows_per_token=decoded / len(gen.generated) if gen.generated else None,
                               decode_tokens_per_s_runs=tuple(speeds.get(id(config), ()))))
    return CompareResult(tuple(rows), len(prompt_tokens), settings, cost_model)


