"""``spec-inspector tune FILE``: what other sources and settings would have done on a recorded greedy run
(``inspector.bench.tune``), best predicted first, llama-server's flags for the best llama.cpp one, and the
synthetic-acceptance table its c(k) predicts (``inspector.bench.synthetic_map``: would a better draft pay?)."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from inspector.bench.synthetic_map import format_predicted_table
from inspector.bench.tune import (DRAFT_MAX_GRID, MODEL_FREE, NotReplayable, cold_replay_note, costs_from_document,
                                  fitted_costs,
                                  format_tune, format_verified, grid, measured_points, recording_from_document, tune,
                                  verify)
from inspector.cli.common import EXIT_USAGE, fail
from inspector.cli.interrupt import Interrupted
from inspector.cli.ranges import whole_number
from inspector.engine.llama_settings import COUNT_MAX, THREADS_MAX
from inspector.engine.records import decoded_rows_of
from inspector.engine import RuntimeScheduler
from inspector.engine.errors import EngineError
from inspector.llama.cost_cache import load_cost_model
from inspector.llama.model_file import ModelFileError
from inspector.bench.tune_turns import conversation_costs, tune_turns
from inspector.receipts.document import ReceiptsFileError, is_conversation, load_document, model_sha256
from inspector.sources.registry import describe_source
from inspector.sources.server_flags import NoServerEquivalent, server_command, server_notes

MAX_DRAFT_MAX_VALUES = 32
"""Most ``--draft-max`` values one ``tune`` replays (each is a whole grid of configurations)."""
MAX_VERIFY = 20
"""Most configurations ``--verify`` runs for real, and most ``--repeats`` of each (model runs, not replays)."""


def add_tune_command(sub) -> None:
    """The ``tune`` subcommand's arguments (on ``sub``, the CLI's subparsers)."""
    t = sub.add_parser("tune", help="replay a recorded greedy run with other sources and settings, without the model",
                       description="Replay every model-free source over a greedy run's receipts (run --receipts), over "
                                   "a grid of its options and draft max, and predict each one's decode time from "
                                   "the run's own verification and plain-step times (c(k)) plus the source's "
                                   "measured proposal time. A replayed window equals the real one whenever the "
                                   "output is the same. Seconds, not a model run. Last, the speedup the same c(k) "
                                   "predicts for a draft of mean acceptance length 1..8 and cost 0, 0.25, 0.5 c(1) "
                                   "per token, and from which length it pays (synthetic acceptance).")
    t.add_argument("file", type=Path, metavar="RECEIPTS.json", help="a receipts document of a greedy run")
    t.add_argument("--source", action="append", choices=MODEL_FREE, metavar="NAME",
                   help=f"sources to replay (repeatable; default all: {', '.join(MODEL_FREE)})")
    t.add_argument("--draft-max", dest="draft_maxes", type=whole_number(1), action="append", metavar="N",
                   help=f"draft max values to try (repeatable, 1..{COUNT_MAX}, at most {MAX_DRAFT_MAX_VALUES} values; "
                        f"default {', '.join(map(str, DRAFT_MAX_GRID))})")
    t.add_argument("--top", type=whole_number(1), default=15, help=f"rows to print (1..{COUNT_MAX}) [15]")
    t.add_argument("--costs", choices=("stored", "run"), default="stored",
                   help="c(k): the cost model stored for the recording's model and threads (bench, the Cost model tab), "
                        "scaled to the run's own times (stored; the run's own times when none is stored), or the run's "
                        "own times interpolated (run) [stored]")
    t.add_argument("--json", type=Path, metavar="OUT.json", help="write every row as JSON")
    t.add_argument("--verify", type=whole_number(1, MAX_VERIFY), metavar="N",
                   help="then run plain decoding and the best N configurations for real on the recording's model and "
                        f"prompt, and print measured beside predicted (loads the model; 1..{MAX_VERIFY})")
    t.add_argument("--repeats", type=whole_number(1, MAX_VERIFY), default=1, metavar="R",
                   help="with --verify: run plain decoding and each configuration R times and print the medians "
                        f"(a busy machine's noise; 1..{MAX_VERIFY}, 1 run per configuration by default) [1]")


def _grid(args) -> list | None:
    """The configurations ``args`` ask for, each source and draft max once; None after saying that
    more than ``MAX_DRAFT_MAX_VALUES`` draft max values were given."""
    draft_maxes = list(dict.fromkeys(args.draft_maxes or DRAFT_MAX_GRID))
    if len(draft_maxes) > MAX_DRAFT_MAX_VALUES:
        fail(f"--draft-max: at most {MAX_DRAFT_MAX_VALUES} values, got {len(draft_maxes)}", EXIT_USAGE)
        return None
    return grid(list(dict.fromkeys(args.source or MODEL_FREE)), draft_maxes)


def recorded_model(model) -> dict:
    """A document's ``model`` block once its values pass the ranges the flags have (``path`` text without
    NUL, ``n_threads`` 0..``THREADS_MAX``, ``n_ctx`` and ``n_batch`` 1..``COUNT_MAX``): an edited file
    must not reach llama.cpp, which aborts on 2147483647 threads. Raises ``NotReplayable`` naming the field."""
    model = model if isinstance(model, dict) else {}
    path = model.get("path", "")
    if not isinstance(path, str) or "\0" in path:
        raise NotReplayable(f"its model/path {path!r} is not a file name (it holds a NUL character)")
    for key, low, high in (("n_threads", 0, THREADS_MAX), ("n_ctx", 1, COUNT_MAX), ("n_batch", 1, COUNT_MAX)):
        value = model.get(key)
        if value is not None and (type(value) is not int or not low <= value <= high):
            raise NotReplayable(f"its model/{key} must be {low}..{high} (as the flag), got {value!r}")
    return model


def _zero_costs(costs, file) -> str | None:
    """Why ``costs`` cannot predict anything (recorded times of zero), or None."""
    if costs is not None and costs.cost(1) <= 0:
        return (f"cannot tune {file}: its recorded times are zero (c(1) = {costs.cost(1):g} ms), so no time can be "
                "predicted from them (an edited or damaged file; record the run again)")
    return None


def best_server_row(rows):
    """The first (best) of the tune table's ``rows`` whose source llama-server can run (its declaration's
    ``has_llama_server_equivalent``), or None: ``tune`` prints its llama-server command."""
    return next((r for r in rows if describe_source(r.source).has_llama_server_equivalent), None)


def cmd_tune(args) -> int:
    """Run ``tune`` (see ``add_tune_command``); one-line errors for a bad file or a sampled run."""
    configs = _grid(args)
    if configs is None:
        return EXIT_USAGE
    try:
        doc = load_document(args.file)
        if is_conversation(doc):
            return _tune_conversation(args, doc, configs)
        model = recorded_model(doc.get("model"))
        rec = recording_from_document(doc)
    except ReceiptsFileError as exc:
        return fail(str(exc))
    except NotReplayable as exc:
        return fail(f"cannot tune {args.file}: {exc}", EXIT_USAGE)
    stored = load_cost_model(model.get("path", ""), int(model.get("n_threads") or 0)) if args.costs == "stored" \
        else None
    points = measured_points([op["hold_us"] for op in doc.get("lock_operations", []) if op.get("kind") == "step"],
                             [(decoded_rows_of(w), w["verification_elapsed_us"]) for w in doc.get("windows", [])])
    if stored is not None and points:
        costs, costs_from = fitted_costs(stored, points), "the stored cost model's shape at this run's level"
    else:
        costs, costs_from = costs_from_document(doc), "from its own times"
    if costs is None:
        return fail(f"cannot tune {args.file}: the run has no plain step to measure c(1) from and no cost model is "
                    "stored for its model and threads (record a run with plain steps, or measure one: bench, or the "
                    "window's Cost model tab)")
    if _zero_costs(costs, args.file):
        return fail(_zero_costs(costs, args.file))
    t = time.perf_counter()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        if not sys.stderr.isatty():
            return
        now = time.perf_counter()
        if now - last[0] > 1.0 or done == total:
            last[0] = now
            print(f"\rreplayed {done}/{total} configurations", end="" if done < total else "\n", file=sys.stderr)

    rows = tune(rec, costs, configs, progress)
    recorded = doc["settings"]["source"]["name"]
    print(f"recording: {len(rec.output)} tokens of {recorded} (draft max {doc['settings'].get('draft_max')}); "
          f"c(1) {costs.cost(1):.1f} ms, c(8) {costs.cost(8):.1f} ms ({costs_from}); "
          f"{len(rows)} configurations in {time.perf_counter() - t:.1f} s")
    note = cold_replay_note(doc["settings"]["source"].get("warm"), (doc.get("conversation") or {}).get("turn"))
    if note:
        print(f"note: {note}")
    print(format_tune(rows, args.top))
    best = best_server_row(rows)
    if best is not None:
        try:
            print(f"best llama.cpp proposer: {server_command(best.source, best.options, draft_max=best.draft_max)}")
            for note in server_notes(best.source, best.options, draft_max=best.draft_max):
                print(f"  note: {note}")
        except (NoServerEquivalent, ValueError):
            pass
    print(format_predicted_table(costs))
    if args.json:
        args.json.write_text(json.dumps([{**r.__dict__, "label": r.label} for r in rows], indent=1), "utf-8")
        print(f"tune table: {args.json}")
    if args.verify:
        try:
            return _verify(doc, rec, rows[:args.verify], args.repeats)
        except Interrupted as exc:  # the table above is printed, and --json written: say so
            kept = f"the tune table was written: {args.json}" if args.json else "nothing was written"
            return fail(f"interrupted ({exc.name}) while verifying; {kept}", exc.status)
    return 0


def _verify(doc, rec, rows, repeats: int = 1) -> int:
    """``--verify``: load the recording's model with its context and threads, run ``repeats`` times, print
    the medians."""
    from inspector.llama.runtime import LlamaRuntime  # llama.cpp loads only for --verify: tune needs no model

    model = doc["model"]
    print(f"loading {model['path']} ...", file=sys.stderr, flush=True)
    try:
        rt = LlamaRuntime(model["path"], n_ctx=int(model.get("n_ctx") or 2048), n_batch=int(model.get("n_batch") or 512),
                          n_threads=int(model.get("n_threads") or 0))
    except (ModelFileError, EngineError, OSError) as exc:
        return fail(f"cannot verify: {exc}")
    try:
        refused = _other_model(model, rt)
        if refused:
            return fail(refused)
        verified = verify(RuntimeScheduler(rt), replace(rec, is_eog=rt.is_eog), rows, rt, repeats)
    finally:
        rt.close()
    print(format_verified(verified))
    return 0


def _other_model(recorded: dict, rt) -> str | None:
    """Whether ``rt`` (loaded from ``recorded["path"]``) is the model the run was recorded on: the reason
    to refuse when its vocabulary differs (the recorded token ids mean other tokens); one warning on stderr
    when only the file differs (by SHA-256, else by size): the times measured are another file's."""
    name = recorded.get("name", "?")
    if recorded.get("n_vocab") not in (None, rt.n_vocab):
        return (f"cannot verify: the run was recorded on {name}, vocabulary {recorded['n_vocab']} tokens; the file "
                f"{recorded['path']} now holds a model of {rt.n_vocab} tokens: the recorded token ids mean other "
                "tokens there")
    try:
        sha = model_sha256(recorded["path"]) if recorded.get("sha256") else None
        size = os.path.getsize(recorded["path"])
    except OSError:
        sha, size = None, None
    if (sha is not None and sha != recorded["sha256"]) or recorded.get("size_bytes") not in (None, size):
        print(f"warning: the run was recorded on {name} ({recorded.get('size_bytes')} bytes, sha256 "
              f"{str(recorded.get('sha256'))[:12]}); the file {recorded['path']} is now another one ({size} bytes"
              f"{f', sha256 {sha[:12]}' if sha else ''}): measured times and windows are of that file",
              file=sys.stderr, flush=True)
    return None


def _tune_conversation(args, doc, configs) -> int:
    """``tune`` of a conversation document (``run --turns``, a ``serve --session`` export): every turn
    replayed in order with one source memory per configuration (``inspector.bench.tune_turns``), c(k)
    from the stored cost model or every turn's own times. ``--verify`` is for one request only.
    Raises ``NotReplayable`` for a turn that cannot be replayed (sampled, cut by a stop string)."""
    recs = []
    recorded_model(doc["turns"][0].get("model"))
    for n, turn in enumerate(doc["turns"], 1):
        try:
            recs.append(recording_from_document(turn))
        except NotReplayable as exc:
            raise NotReplayable(f"turn {n}: {exc}") from None
    model = doc["turns"][0].get("model") or {}
    stored = load_cost_model(model.get("path", ""), int(model.get("n_threads") or 0)) if args.costs == "stored" \
        else None
    costs = stored or conversation_costs(doc)
    if costs is None:
        return fail(f"cannot tune {args.file}: no turn has a plain step to measure c(1) from and no cost model is "
                    "stored for its model and threads")
    if _zero_costs(costs, args.file):
        return fail(_zero_costs(costs, args.file))
    if args.verify:
        print("note: --verify runs one request; tune a turn's receipts for it (view FILE --turn N)", file=sys.stderr)
    t = time.perf_counter()
    rows = tune_turns(recs, costs, configs)
    print(f"conversation: {len(recs)} turns, {sum(len(r.output) for r in recs)} tokens; c(1) {costs.cost(1):.1f} ms, "
          f"c(8) {costs.cost(8):.1f} ms; {len(rows)} configurations replayed over every turn with one memory in "
          f"{time.perf_counter() - t:.1f} s")
    print(format_tune(rows, args.top))
    print(format_predicted_table(costs))
    if args.json:
        args.json.write_text(json.dumps([{**r.__dict__, "label": r.label} for r in rows], indent=1), "utf-8")
        print(f"tune table: {args.json}")
    return 0
