"""The ``audit`` command: why did my output change? (issue 39, item 1)

``spec-inspector audit RECEIPTS`` loads the run's model (or ``--model``) with the run's context
settings, reruns plain one-token decoding of the same prompt with the same settings, and, where the
two streams part, prints the target's pick for that position at every verify width 1..k (k = the
run's draft max + 1, at most 16 rows) with the top-2 logit margin, and the verdict
(``inspector.session.audit``). Greedy runs only.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from inspector.cli.common import EXIT_USAGE, fail
from inspector.cli.ranges import positive
from inspector.engine import RuntimeScheduler
from inspector.engine.baseline import first_difference, plain_generation
from inspector.engine.errors import EngineError
from inspector.engine.settings import GenerationSettings, SamplingSettings
from inspector.llama.context_settings import context_from_values, loaded_context
from inspector.llama.model_file import ModelFileError
from inspector.llama.quantize import open_target
from inspector.receipts import ReceiptsFileError, load_document
from inspector.receipts.document import is_conversation
from inspector.session.audit import MAX_AUDIT_WIDTH, AuditResult, VerifiedWindow, audit_divergence, windows_of
from inspector.sources.registry import PLAIN


class AuditRefused(Exception):
    """The receipts cannot be audited: the message says why, in one line."""


def add_audit_command(sub) -> None:
    """The ``audit`` subcommand's arguments (on ``sub``, the CLI's subparsers)."""
    a = sub.add_parser("audit", help="why did my output change? compare a greedy run with plain decoding and "
                                     "test every verify width at the point where they part",
                       description="Rerun plain one-token decoding of a receipts file's prompt with its model and "
                                   "settings; where the texts part, recompute the target's pick at every verify "
                                   "width 1..k (k = the run's draft max + 1, at most 16) and say whether batch-shape "
                                   "numerics explain the difference.")
    a.add_argument("file", type=Path, help="receipts .json of a greedy run")
    a.add_argument("--model", "-m", type=Path, help="the GGUF to load (default: the one the receipts name)")
    a.add_argument("--max-width", type=positive, metavar="K",
                   help=f"widest verify batch to try, rows (default: the run's draft max + 1, at most "
                        f"{MAX_AUDIT_WIDTH})")
    a.add_argument("--threads", type=positive, help="CPU threads (default: all)")


def run_of(doc: dict) -> tuple[list[int], list[int], GenerationSettings, int]:
    """``(prompt token ids, generated token ids, settings, draft max)`` of a receipts document (one
    run). Raises ``AuditRefused`` for a conversation, a sampled run or settings llama.cpp refuses."""
    if is_conversation(doc):
        raise AuditRefused("this is a conversation; audit one run's receipts (one request)")
    s = doc["settings"]
    try:
        sampling = SamplingSettings(**s["sampling"])
    except (TypeError, ValueError) as exc:
        raise AuditRefused(f"the receipts' sampling settings are not usable: {exc}") from None
    if not sampling.greedy:
        raise AuditRefused(f"audit compares greedy runs only; this run sampled at temperature "
                           f"{sampling.temperature:g}, so its output is not meant to equal plain decoding's")
    generated = list(doc["output"]["token_ids"])
    if not generated:
        raise AuditRefused("the run generated no tokens: nothing to audit")
    settings = GenerationSettings(max_new_tokens=len(generated), stop=tuple(s.get("stop", ())), sampling=sampling,
                                  probabilities=False)
    return list(doc["prompt"]["token_ids"]), generated, settings, int(s.get("draft_max") or 0)


def check_model(runtime, model: dict, prompt: list[int]) -> None:
    """Refuse a model that is not the run's (``AuditRefused``): another vocabulary size, or another file
    size than the receipts' ``model`` block says, or prompt ids outside the vocabulary."""
    if model.get("n_vocab") not in (None, runtime.n_vocab):
        raise AuditRefused(f"model mismatch: {runtime.model_path} has {runtime.n_vocab} tokens, the run's model "
                           f"{model.get('n_vocab')}")
    if model.get("size_bytes") not in (None, runtime.info.size_bytes) and not model.get("converted_from"):
        raise AuditRefused(f"model mismatch: {runtime.model_path} is {runtime.info.size_bytes} bytes, the run's "
                           f"model ({model.get('path')}) {model.get('size_bytes')}: give the run's model with --model")
    bad = [t for t in prompt if not 0 <= t < runtime.n_vocab]
    if bad:
        raise AuditRefused(f"model mismatch: prompt token {bad[0]} is outside this model's vocabulary")


def cmd_audit(args) -> int:
    """``spec-inspector audit``: prints the per-width table and the verdict, or "identical to plain
    decoding"; returns 0, or 1 (``EXIT_USAGE`` for a sampled run) after one line saying why not."""
    if not args.file.exists():
        return fail(f"cannot read receipts {args.file}: no such file")
    try:
        doc = load_document(args.file)
        prompt, generated, settings, draft_max = run_of(doc)
    except ReceiptsFileError as exc:
        return fail(str(exc))
    except AuditRefused as exc:
        return fail(str(exc), EXIT_USAGE if "greedy runs only" in str(exc) else 1)
    model = doc.get("model") or {}
    path = args.model or model.get("path")
    if not path:
        return fail("the receipts name no model: give it with --model")
    if not Path(path).exists():
        return fail(f"the run's model {path} is not here: give it with --model")
    try:
        n_batch, context = context_from_values(loaded_context(model.get("llama_cpp")))
        n_ctx = int(model.get("n_ctx") or 2048)
        print(f"loading {path} ...", file=sys.stderr, flush=True)
        runtime = open_target(path, n_ctx=n_ctx, n_batch=n_batch, n_seq_max=2, n_threads=args.threads,
                              context=context)  # llama.cpp loads here, not when the command line starts
    except (ModelFileError, EngineError, ValueError) as exc:
        return fail(str(exc))
    try:
        check_model(runtime, model, prompt)
        windows = windows_of(doc.get("windows") or (), (doc.get("sessions") or {}).get("main"))
        return audit_run(runtime, prompt, generated, settings, args.max_width or min(draft_max + 1, MAX_AUDIT_WIDTH),
                         windows)
    except AuditRefused as exc:
        return fail(str(exc))
    except (EngineError, ValueError, KeyError) as exc:
        return fail(f"audit failed: {exc}")
    finally:
        runtime.close()


def audit_run(runtime, prompt: list[int], generated: list[int], settings: GenerationSettings, max_width: int,
              windows: tuple[VerifiedWindow, ...] = ()) -> int:
    """Plain-decode ``prompt`` with ``settings``, compare with ``generated`` (token ids) and print the audit
    of the first difference (widths ``1..max_width`` rows), with the KV prefix built as plain decoding
    built it; when no width explains it and the run's ``windows`` are known, again with the KV prefix
    the run's windows built. Returns 0."""
    scheduler = RuntimeScheduler(runtime)
    print(f"plain decoding of the same prompt ({len(prompt)} tokens, up to {len(generated)} new) ...",
          file=sys.stderr, flush=True)
    plain = plain_generation(scheduler, prompt, replace(settings, draft_max=0)).generated
    p = first_difference(plain, generated)
    if p is None:
        print(f"identical to plain decoding ({len(generated)} tokens)")
        return 0
    text = runtime.token_text
    print(f"speculative output parts from plain decoding at generated token {p} (KV position {len(prompt) + p}): "
          f"speculative {_shown(text, generated, p)}, plain {_shown(text, plain, p)}")
    print(f"context: {text_tail(runtime, prompt + generated[:p])!r}")

    def audit(prefix_windows) -> AuditResult:
        return scheduler.execute("audit", -1, lambda rt: audit_divergence(
            rt, prompt, generated, plain, max_width, settings.sampling, text, prefix_windows)).value

    result = audit(())
    print_result(result, text, "the KV before them as plain decoding built it")
    if not result.explained and windows:
        print(f"  (with that KV: {result.verdict})")
        result = audit(windows)
        print_result(result, text, "the KV before them as the run's windows built it")
    print(f"verdict: {result.verdict}")
    return 0


def print_result(result: AuditResult, text, prefix: str) -> None:
    """The per-width table of ``result`` under a heading naming the KV ``prefix``."""
    print(f"the target's pick for that position at each verify width, {prefix} (places: the rows a window of "
          f"that width could have put it at; margin: top-1 minus top-2 logit):")
    print("\n".join(result.table(text)))


def compare_verdicts(scheduler, prompt: list[int], result, sampling: SamplingSettings) -> list[str]:
    """One line per ``compare`` row (``CompareResult.rows``) whose output differs from the plain row's
    (greedy only): where it parts and the audit's verdict (widths 1..its draft max + 1 rows, the KV prefix
    as plain decoding built it). Empty without a plain row or when ``sampling`` is not greedy."""
    plain = next((r.generated_tokens for r in result.rows if r.config.source == PLAIN and not r.error), None)
    if plain is None or not sampling.greedy:
        return []
    lines = []
    for row in result.rows:
        if row.same_output_as_plain is not False:
            continue
        width = min(row.config.draft_max + 1, MAX_AUDIT_WIDTH)
        try:
            audit = scheduler.execute("audit", -1, lambda rt: audit_divergence(
                rt, prompt, list(row.generated_tokens), list(plain), width, sampling, rt.token_text)).value
        except (EngineError, ValueError) as exc:
            lines.append(f"differs: {row.config.label}: not audited ({exc})")
            continue
        if audit is not None:
            lines.append(f"differs: {row.config.label} at generated token {audit.position}: {audit.verdict}")
    return lines


def _shown(text, stream: list[int], p: int) -> str:
    return f"{text(stream[p])!r} ({stream[p]})" if p < len(stream) else "(ended)"


def text_tail(runtime, tokens: list[int], chars: int = 60) -> str:
    """The last ``chars`` characters of ``tokens``' text (to show where the streams part)."""
    return runtime.detokenize(tokens[-32:])[-chars:]
