"""The ``audit`` command: why did my output change? (issue 39, item 1)

``spec-inspector audit RECEIPTS`` loads the run's model (or ``--model``) with the run's context
settings, reruns plain one-token decoding of the same prompt with the same settings and, where the
two streams part, prints the target's pick for that position at every verify width 1..k (k = the
run's draft max + 1, at most 16 rows) with the top-2 logit margin, and the verdict
(``inspector.session.audit``, ``inspector.session.audit_run``). Greedy runs only. ``--llama-server
[PATH|URL]`` then generates the same prompt greedily through llama-server (plain decoding on its
side, the same ``n_predict`` and penalties; ``inspector.bench.server_text``) and, where its text parts
from ours, audits that position the same way (llama-server's token against ours).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from inspector.bench.server_build import NotALlamaServer
from inspector.bench.server_client import SERVER_LIMITS_HELP
from inspector.bench.server_compare import check_llama_server, is_url
from inspector.bench.server_http import REQUEST_DEADLINE_S, ServerError
from inspector.bench.server_text import SERVER_THREADS, llama_server_tokens
from inspector.cli.common import EXIT_USAGE, fail
from inspector.cli.context import add_threads_flag
from inspector.cli.ranges import positive, whole_number
from inspector.cli.server_target import our_llama_server
from inspector.engine import RuntimeScheduler
from inspector.engine.baseline import first_difference
from inspector.engine.errors import EngineError
from inspector.engine.settings import SamplingSettings
from inspector.llama.context_settings import context_from_values, loaded_context
from inspector.llama.model_file import ModelFileError
from inspector.llama.quantize import open_target
from inspector.llama.server_parity import server_context
from inspector.receipts import ReceiptsFileError, load_document
from inspector.session.audit import MAX_AUDIT_WIDTH, AuditResult, audit_divergence
from inspector.session.audit_run import (LLAMA_SERVER, PLAIN_DECODING, AuditInputs, AuditRefused, RunAudit,
                                         audit_run_against, check_model, inputs_from_document, plain_reference)
from inspector.sources.registry import PLAIN


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
    add_threads_flag(a)
    a.add_argument("--llama-server", nargs="?", const="", default=None, metavar="PATH|URL",
                   help="also generate the prompt greedily through llama-server (same n_predict and penalties) "
                        "and audit where its text parts from ours: a llama-server binary (started on 127.0.0.1 "
                        f"with {SERVER_THREADS} thread, stopped after), a running server's URL, or nothing: the one "
                        "built from our llama.cpp (built once on first use)")
    a.add_argument("--llama-server-timeout", type=whole_number(1, 86400, name="seconds"),
                   default=int(REQUEST_DEADLINE_S), metavar="S", help=SERVER_LIMITS_HELP)


def run_of(doc: dict) -> AuditInputs:
    """The audit inputs of a receipts document (one run); see ``inspector.session.audit_run.inputs_from_document``."""
    return inputs_from_document(doc)


def cmd_audit(args) -> int:
    """``spec-inspector audit``: prints the per-width table and the verdict, or "identical to plain
    decoding" (and the same against llama-server's text with ``--llama-server``); returns 0, or 1
    (``EXIT_USAGE`` for a sampled run) after one line saying why not."""
    if not args.file.exists():
        return fail(f"cannot read receipts {args.file}: no such file")
    try:
        doc = load_document(args.file)
        inputs = run_of(doc)
    except ReceiptsFileError as exc:
        return fail(str(exc))
    except AuditRefused as exc:
        return fail(str(exc), EXIT_USAGE if "greedy runs only" in str(exc) else 1)
    except (KeyError, TypeError, ValueError) as exc:
        return fail(f"the receipts' windows are not usable: {exc}")
    model = doc.get("model") or {}
    path = args.model or model.get("path")
    if not path:
        return fail("the receipts name no model: give it with --model")
    if not Path(path).exists():
        return fail(f"the run's model {path} is not here: give it with --model")
    target = getattr(args, "llama_server", None)
    if target:  # a path or URL that cannot serve is said before the model loads
        try:
            check_llama_server(target, args.llama_server_timeout)
        except (ServerError, NotALlamaServer) as exc:
            return fail(str(exc))
    elif target is not None:
        target = our_llama_server()
        if target is None:
            return 1
    try:
        n_batch, context = context_from_values(loaded_context(model.get("llama_cpp")))
        n_ctx = int(model.get("n_ctx") or 2048)
        print(f"loading {path} ...", file=sys.stderr, flush=True)
        runtime = open_target(path, n_ctx=n_ctx, n_batch=n_batch, n_seq_max=2, n_threads=args.n_threads,
                              **context.values())  # llama.cpp loads here, not when the command line starts
    except (ModelFileError, EngineError, ValueError) as exc:
        return fail(str(exc))
    try:
        check_model(runtime, model, inputs.prompt)
        print(f"plain decoding of the same prompt ({len(inputs.prompt)} tokens, up to {len(inputs.generated)} new) ...",
              file=sys.stderr, flush=True)
        inputs = replace(inputs, plain=plain_reference(RuntimeScheduler(runtime), inputs))
        status = audit_run(runtime, inputs, args.max_width)
        if target is not None:
            status = audit_llama_server(runtime, inputs, target, args.max_width,
                                        getattr(args, "llama_server_timeout", REQUEST_DEADLINE_S))
        return status
    except AuditRefused as exc:
        return fail(str(exc))
    except (EngineError, ValueError, KeyError) as exc:
        return fail(f"audit failed: {exc}")
    finally:
        runtime.close()


def audit_run(runtime, inputs: AuditInputs, max_width: int | None = None) -> int:
    """Plain-decode the run's prompt with its settings, compare with its tokens and print the audit
    of the first difference (widths ``1..max_width`` rows; default ``inputs.max_width``), with the KV
    prefix built as plain decoding built it; when no width explains it and the run's windows are
    known, again with the KV prefix the run's windows built. ``inputs.plain``: plain decoding's tokens
    when already decoded. Returns 0."""
    scheduler = RuntimeScheduler(runtime)
    plain = plain_reference(scheduler, inputs)
    audit = audit_run_against(scheduler, inputs, plain, PLAIN_DECODING, max_width, runtime.token_text)
    if audit.identical:
        print(f"identical to plain decoding ({len(inputs.generated)} tokens)")
        return 0
    print_audit(runtime, audit, "speculative output parts from plain decoding", "speculative", "plain")
    return 0


def audit_llama_server(runtime, inputs: AuditInputs, target: str, max_width: int | None = None,
                       timeout_s: float = REQUEST_DEADLINE_S) -> int:
    """Generate the run's prompt greedily through llama-server ``target`` (a binary, started with
    ``SERVER_THREADS`` threads and our context, or a URL), say whether its text equals ours and, where
    they part, print the audit of that position (llama-server's token against ours); with ``inputs.plain``,
    also whether it equals our plain decoding. Returns 0, or
    1 after one line when llama-server cannot answer (``timeout_s``: the request's deadline)."""
    where = target if is_url(target) else f"{target}, {SERVER_THREADS} thread"
    print(f"llama-server: {where}: the same prompt, greedy, up to {len(inputs.generated)} tokens ...",
          file=sys.stderr, flush=True)
    try:
        theirs, note = llama_server_tokens(target, model=runtime.model_path, prompt_tokens=inputs.prompt,
                                           n_predict=len(inputs.generated), sampling=inputs.settings.sampling,
                                           n_ctx=runtime.n_ctx, context=server_context(runtime),
                                           request_timeout_s=timeout_s)
    except (ServerError, NotALlamaServer) as exc:
        return fail(f"llama-server: {exc}")
    if note:
        print(f"llama-server note: {note}")
    if inputs.plain is not None:  # llama-server's plain decoding against ours: the same kernels give the same text
        q = first_difference(list(inputs.plain), list(theirs))
        print("llama-server's text equals our plain decoding's" if q is None else
              f"llama-server's text parts from our plain decoding at generated token {q}")
    scheduler = RuntimeScheduler(runtime)
    audit = audit_run_against(scheduler, inputs, theirs, LLAMA_SERVER, max_width, runtime.token_text)
    if audit.identical:
        print(f"llama-server: same text as ours ({len(theirs)} tokens)")
        return 0
    print_audit(runtime, audit, "llama-server's text parts from ours", "ours", "llama-server", "llama-server ")
    return 0


def print_audit(runtime, audit: RunAudit, headline: str, ours: str, theirs: str, prefix: str = "") -> None:
    """Print where the streams of ``audit`` part (``headline``; the run's token named ``ours``, the
    reference's ``theirs``), the context, each table tried and the verdict (``prefix`` before
    "verdict: ")."""
    text = runtime.token_text
    first = audit.tried[0]
    p = first.position
    print(f"{headline} at generated token {p} (KV position {audit.prompt_length + p}): "
          f"{ours} {_shown(text, audit.generated, p)}, {theirs} {_shown(text, audit.reference_tokens, p)}")
    print(f"context: {audit.context!r}")
    print_result(first, text, "the KV before them as plain decoding built it")
    if len(audit.tried) > 1:
        print(f"  (with that KV: {first.verdict})")
        print_result(audit.tried[1], text, "the KV before them as the run's windows built it")
    print(f"{prefix}verdict: {audit.result.verdict}")


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
