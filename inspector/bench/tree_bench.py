"""``bench --trees``: tree or chain, on this machine (issue 40 item 4).

For each workload (the bundled examples, and the bundled conversations when named: every configuration
runs each conversation's turns with its own answers, one source memory across them), plain decoding and each branching source run as a chain and
as a tree with the same node budget (the draft max), ``repeats`` times, the three runs of a repeat in
rotating order so the machine's drift and order effect fall on each alike; medians. Per source and
form: decode tokens/s over plain, tokens committed per window, rows verified per committed token (a
tree verifies every node, so it commits more per window only by verifying more rows) and whether the
output equals plain decoding. Before the runs, c(k) of trees (2 and 4 equal branches) against chains
of the same rows (``inspector.llama.cost_model.measure_tree_costs``). The verdict per workload says
which form was faster, and why from the measured figures: the tree's extra tokens per window against
its extra rows' cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import median
from typing import Callable, Sequence

from inspector.bench.run import run_task
from inspector.engine.baseline import find_divergence
from inspector.engine.scheduler import RuntimeScheduler
from inspector.engine.settings import GenerationSettings
from inspector.llama.cost_cache import stored_row_costs
from inspector.llama.cost_model import measure_tree_costs
from inspector.llama.quantize import make_draft
from inspector.bench.compare import run_compare
from inspector.bench.compare_result import CompareConfig
from inspector.prompts import TURNS_EXAMPLES, example_prompt, turns_path
from inspector.session.conversation import read_turns
from inspector.sources.registry import SourceContext, make_source

TREE_SOURCES = {"suffix": {"tree_nodes": None}, "ngram": {"branches": 2}, "ngram-cache": {"branches": 3},
                "draft": {"p_split": 0.1}}
"""The branching sources and the option that makes each propose trees (None: the node budget, the
draft max). ``draft`` drafts with the target converted to Q4_0 (``make_draft``, cached)."""
TREE_SHAPES = (1, 2, 4)
"""Branch counts whose c(k) is measured (1: the chain)."""


@dataclass(frozen=True)
class FormFigures:
    """One source in one form (chain or tree) on one workload: medians over the repeats."""

    tokens_per_s: float
    speedup: float
    committed_per_window: float
    rows_per_token: float
    windows: int
    tree_windows: int
    same_output: bool
    divergence: str = ""
    """Where the output first parted from plain decoding and the target's top-2 margin there (a near-tie
    that the tree's batch shape flipped, or a bug: ``inspector.engine.baseline.find_divergence``)."""

    def to_json(self) -> dict:
        return dict(self.__dict__)


def run_figures(g) -> tuple[float, float, float, int, int]:
    """(decode tokens/s, tokens committed per window, rows verified per committed token, windows, tree
    windows) of a finished run: the rows are each window's decoded rows (a tree's every node) and one per
    plain step."""
    windows = len(g.receipts)
    committed = sum(r.canonical_prediction_count for r in g.receipts)
    rows = sum(r.decoded_rows for r in g.receipts) + g.plain_steps
    tokens = max(1, len(g.generated))
    trees = sum(1 for r in g.receipts if r.tree is not None)
    return (g.summary().decode_tokens_per_s or 0.0, committed / windows if windows else 0.0, rows / tokens, windows,
            trees)


def tree_bench(runtime, tasks: Sequence[str], max_tokens: int = 64, draft_max: int = 8, repeats: int = 3,
               sources: Sequence[str] = tuple(TREE_SOURCES), progress: Callable[[str], None] = print) -> dict:
    """Run the comparison (module docstring) on ``runtime``; a JSON-ready dict: ``costs`` (``{branches:
    [c(2).., c(k)]}`` ms, at the first task's prompt, a conversation's first turn), ``tasks`` (``{task: {"plain_tokens_per_s",
    source: {"chain": FormFigures, "tree": FormFigures}}}``). Raises ``ValueError`` for an unknown
    source."""
    unknown = [s for s in sources if s not in TREE_SOURCES]
    if unknown:
        raise ValueError(f"no tree form for {', '.join(unknown)}: expected one of {', '.join(TREE_SOURCES)}")
    scheduler = RuntimeScheduler(runtime)
    first_text = read_turns(turns_path(tasks[0]))[0] if tasks[0] in TURNS_EXAMPLES else example_prompt(tasks[0])
    first = runtime.prompt_tokens(first_text)
    progress(f"measuring c(k) of chains and trees ({', '.join(map(str, TREE_SHAPES))} branches, k = 2..{draft_max + 1})"
             " ...")
    costs = measure_tree_costs(scheduler, first, k_max=draft_max + 1, repeats=max(3, repeats),
                               branches=TREE_SHAPES)
    settings = GenerationSettings(max_new_tokens=max_tokens, draft_max=draft_max)
    row_costs = stored_row_costs(runtime)
    out: dict = {"costs": {str(b): list(c) for b, c in costs.items()}, "draft_max": draft_max,
                 "max_tokens": max_tokens, "repeats": repeats, "tasks": {}}

    draft_file = str(make_draft(runtime.model_path, "Q4_0")) if "draft" in sources else ""

    def options_for(name: str, form: str) -> dict:
        options = {k: (draft_max if v is None else v) for k, v in TREE_SOURCES[name].items()} if form == "tree" else {}
        if name == "draft":
            options["draft_model"] = draft_file
        return options

    def source_for(name: str, form: str, tokens):
        ctx = SourceContext(runtime, settings, row_costs=row_costs, memory={}, prompt_tokens=tuple(tokens),
                            scheduler=scheduler)
        return make_source(name, ctx, options_for(name, form))

    for task in tasks:
        conversation = task in TURNS_EXAMPLES
        turns = read_turns(turns_path(task)) if conversation else None
        tokens = () if conversation else runtime.prompt_tokens(example_prompt(task))
        runs = [("plain", None)] + [(name, form) for name in sources for form in ("chain", "tree")]
        figures: dict = {key: [] for key in runs}
        outputs: dict = {key: [] for key in runs}
        for rep in range(repeats):
            order = runs[rep % len(runs):] + runs[:rep % len(runs)]
            if conversation:  # every configuration over the whole conversation (plain first: compare's rule)
                progress(f"{task}: {len(turns)} turns, {len(order)} configurations, repeat {rep + 1}/{repeats} ...")
                configs = [CompareConfig(f"{n} {f}", n if f else "none", draft_max if f else 0,
                                         options_for(n, f) if f else {}) for n, f in order]
                result = run_compare(scheduler, (), configs, settings, turns=turns, keep_runs=True)
                done = {(c.source if c.source != "none" else "plain", c.label.split()[-1] if c.source != "none"
                         else None): g for c, g in zip((r.config for r in result.rows), result.runs)}
            for key in order:
                name, form = key
                if conversation:
                    g = done[key]
                else:
                    progress(f"{task}: {name}{'' if form is None else ' as a ' + form}, repeat {rep + 1}/{repeats} ...")
                    source = None if form is None else source_for(name, form, tokens)
                    g = run_task(scheduler, source, tokens, max_tokens, draft_max)
                    close = getattr(source, "close", None)
                    if close is not None:
                        close()
                figures[key].append(run_figures(g))
                outputs[key].append(list(g.generated))
        plain_tps = median(f[0] for f in figures[("plain", None)])
        plain_out = outputs[("plain", None)][0]
        row: dict = {"plain_tokens_per_s": plain_tps}
        for name in sources:
            row[name] = {}
            for form in ("chain", "tree"):
                fs = figures[(name, form)]
                tps = median(f[0] for f in fs)
                differing = next((o for o in outputs[(name, form)] if o != plain_out), None)
                found = None if differing is None or conversation else \
                    find_divergence(scheduler, tokens, plain_out, differing)
                divergence = "" if found is None else found.describe()
                row[name][form] = FormFigures(tps, tps / plain_tps if plain_tps else 0.0, median(f[1] for f in fs),
                                              median(f[2] for f in fs), int(median(f[3] for f in fs)),
                                              int(median(f[4] for f in fs)), differing is None, divergence).to_json()
        out["tasks"][task] = row
    return out


def verdict(name: str, chain: dict, tree: dict, costs: dict) -> str:
    """One line: which form was faster on the workload and why, from the measured figures (tokens per
    window, rows per token, and c(k) of trees against chains)."""
    ratio = (tree["speedup"] / chain["speedup"]) if chain["speedup"] else 0.0
    if not tree["tree_windows"]:
        return (f"{name}: no tree: the source never had a second candidate here, so both forms ran the same "
                f"chains ({ratio:.2f}x tree/chain is the runs' noise)")
    faster = "tree" if tree["speedup"] > chain["speedup"] else "chain"
    extra_tokens = tree["committed_per_window"] - chain["committed_per_window"]
    extra_rows = tree["rows_per_token"] / chain["rows_per_token"] if chain["rows_per_token"] else 0.0
    why = (f"the tree committed {extra_tokens:+.2f} tokens per window and verified {extra_rows:.2f}x the rows per "
           f"committed token")
    return f"{name}: {faster} faster ({ratio:.2f}x tree/chain): {why}"


def format_tree_bench(result: dict) -> str:
    """The comparison as text: c(k) of chains and trees, a line per workload and source, the verdicts."""
    costs = result["costs"]
    ks = range(2, result["draft_max"] + 2)
    lines = ["c(k) ms, chain vs trees of equal branches (k rows: the root and k - 1 nodes):",
             f"{'branches':>8} " + " ".join(f"{f'c({k})':>7}" for k in ks)]
    for b, row in costs.items():
        lines.append(f"{b:>8} " + " ".join(f"{c:7.2f}" for c in row))
    chain = costs.get("1")
    for b, row in costs.items():
        if b != "1" and chain:
            ratios = [t / c for t, c in zip(row, chain)]
            lines.append(f"trees of {b} branches cost {min(ratios):.2f}..{max(ratios):.2f}x the chain of the same rows")
    lines += ["", f"draft max {result['draft_max']} (the tree's node budget), {result['max_tokens']} tokens, median of "
                  f"{result['repeats']}:",
              f"{'workload':<22} {'source':<11} {'form':<6} {'speedup':>8} {'tok/window':>10} {'rows/token':>10} "
              f"{'windows':>7} {'trees':>5} same"]
    verdicts, notes, best = [], [], []
    for task, row in result["tasks"].items():
        best.append(best_forms(task, row))
        for name, forms in row.items():
            if name == "plain_tokens_per_s":
                continue
            for form, f in forms.items():
                lines.append(f"{task:<22} {name:<11} {form:<6} {f['speedup']:7.2f}x {f['committed_per_window']:10.2f} "
                             f"{f['rows_per_token']:10.2f} {f['windows']:7d} {f['tree_windows']:5d} "
                             f"{'yes' if f['same_output'] else 'no'}")
                if f["divergence"]:
                    notes.append(f"{task} {name} {form}: {f['divergence']}")
            verdicts.append(f"{task}: " + verdict(name, forms["chain"], forms["tree"], costs))
    return "\n".join(lines + notes + [""] + verdicts + [""] + best)


def best_forms(task: str, row: dict) -> str:
    """One line: the workload's fastest chain and fastest tree (of sources that formed trees there), and
    which won (the issue's question: does any tree configuration beat the best chain?)."""
    chains = [(f["chain"]["speedup"], name) for name, f in row.items() if name != "plain_tokens_per_s"]
    trees = [(f["tree"]["speedup"], name) for name, f in row.items()
             if name != "plain_tokens_per_s" and f["tree"]["tree_windows"]]
    c_speed, c_name = max(chains)
    if not trees:
        return f"{task}: best chain {c_name} {c_speed:.2f}x; no source formed a tree"
    t_speed, t_name = max(trees)
    winner = "tree" if t_speed > c_speed else "chain"
    ratio = f" ({t_speed / c_speed:.2f}x tree/chain)" if c_speed else ""
    return f"{task}: best chain {c_name} {c_speed:.2f}x, best tree {t_name} {t_speed:.2f}x: the {winner}{ratio}"
