"""``spec-inspector serve``: a llama-server-compatible endpoint whose every request is recorded (issue 35).

Takes ``run``'s model, source, context, thread and sampling flags (sampling defaults are llama-server's:
temperature 0.8, a random seed; a request's own fields override them), plus the server's: ``--host``
(127.0.0.1; another address needs ``--expose``), ``--port`` (8080), ``--api-key``, ``--alias``,
``-n``/``--n-predict`` (-1), ``--max-queue``, ``--receipts-dir`` and its bounds, ``--session OUT.json``
(the whole session as one conversation document, written when the server stops). The receipts folder
and the session document's folder are checked at start (exit 2 with one line when they cannot be
written). One line per finished request on stdout; Ctrl-C (SIGTERM) stops it (a running request ends
as ``cancelled`` with "the server stopped"), writes the session document and exits 130 (143).
"""

from __future__ import annotations

import argparse
import gc
import shlex
import sys
import threading
import time
from pathlib import Path

from inspector.cli.common import (RUNTIME_OPEN_ERRORS, EXIT_USAGE, UserError, add_backend_sampling_flag, fail,
                                  open_target_runtime, read_text, weight_type)
from inspector.cli.context import add_context_flags, add_n_ctx_flag, add_threads_flag
from inspector.cli.devices import add_offload_flags
from inspector.cli.interrupt import Interrupted, signals_held
from inspector.cli.ranges import draft_max as draft_max_value, setting, whole_number
from inspector.cli.sampling import add_sampling_flags, sampling_from_args
from inspector.cli.sources import SourceFlagError, add_source_flags, source_options_from_args
from inspector.engine import GenerationSettings, RuntimeScheduler
from inspector.engine.errors import EngineError

from inspector.engine.settings import check_n_batch_for_source, requested_draft_max


from inspector.llama.graph_figures import MAX_K as GRAPH_MAX_TOP
from inspector.llama.template_override import override_chat_template, template_problem
from inspector.receipts import ReceiptsFileError, write_document
from inspector.serve.http_policy import CorsPolicy
from inspector.serve.params import DEFAULT_PING_S, ServeDefaults
from inspector.serve.prompt_cache import DEFAULT_CACHE_RAM_MIB
from inspector.serve.receipts_dir import (DEFAULT_KEEP, DEFAULT_MAX_MB, ReceiptsDir, ReceiptsDirError,
                                          default_receipts_dir, session_document)
from inspector.serve.server import (DEFAULT_PORT, LOOPBACK, InspectorServer, ServeError, ServeOptions, check_host,
                                   slots_text)
from inspector.serve.slot import SERVER_STOPPED
from inspector.serve.slots import BATCHED, DEFAULT_MAX_QUEUE, MAX_PARALLEL, SCHEDULES, check_parallel
from inspector.sources.registry import PLAIN, source_names


def add_serve_command(sub) -> None:
    """The ``serve`` subcommand's arguments (on ``sub``, the CLI's subparsers)."""
    s = sub.add_parser(
        "serve", help="serve llama-server's HTTP API; every request is a recorded session",
        description="Serve llama-server's HTTP API (/completion, /v1/completions, /v1/chat/completions, "
                    "/v1/models, /health, /props, /tokenize, /detokenize, /slots, /metrics with --metrics) and the agents' APIs "
                    "(Anthropic /v1/messages and /v1/messages/count_tokens, OpenAI /v1/responses and "
                    "/v1/responses/input_tokens; text only) with one slot (requests run one at a time in arrival "
                    "order) or -np N slots (N at once, batched as llama-server batches them), each request "
                    "recorded as a receipts document. Point any OpenAI-compatible client at the "
                    "address it prints plus /v1; a Claude-Code-style agent at the address itself "
                    "(ANTHROPIC_BASE_URL).")
    s.add_argument("--model", "-m", type=Path, help="GGUF model (default: bundled SmolLM2-135M-Instruct Q4_1)")
    s.add_argument("--target-weights", type=weight_type, metavar="TYPE",
                   help="run the target in this weight type (converted once with llama.cpp's quantizer, cached)")
    s.add_argument("--alias", "-a", action="append", default=[], metavar="NAME",
                   help="another model name requests may give (llama-server's --alias); repeatable")
    net = s.add_argument_group("address")
    net.add_argument("--host", default=LOOPBACK,
                     help=f"address to listen on [{LOOPBACK}]; any other address needs --expose")
    net.add_argument("--port", type=whole_number(0, 65535, "port"), default=DEFAULT_PORT,
                     help=f"port (0 = any free port) [{DEFAULT_PORT}]")
    net.add_argument("--expose", action="store_true",
                     help="allow --host other than loopback: the endpoint is then OPEN TO THAT NETWORK (anyone "
                          "who reaches the port can run the model and read its answers; give --api-key)")
    net.add_argument("--api-key", metavar="KEY", default=None,
                     help="require 'Authorization: Bearer KEY' on every route but /health (llama-server's "
                          "--api-key; compared in constant time); a wrong key gets 401")
    http = s.add_argument_group("HTTP (llama-server's flags and defaults)")
    http.add_argument("--sse-ping-interval", type=whole_number(-1, 2**31 - 1, "sse_ping_interval"),
                      default=DEFAULT_PING_S, metavar="N",
                      help=f"seconds of silence before a stream gets a ':' comment (-1: never; default {DEFAULT_PING_S})")
    http.add_argument("--metrics", action="store_true", help="answer GET /metrics (Prometheus text); without it, 501")
    http.add_argument("--slots", action=argparse.BooleanOptionalAction, default=True,
                      help="answer GET /slots (the slot's state) [on]")
    http.add_argument("--cors-origins", default=CorsPolicy.origins, metavar="ORIGINS",
                      help="allowed origins for browsers (CORS); 'localhost' echoes only a localhost Origin; with "
                           "credentials on and '*', the Origin is echoed [*]")
    http.add_argument("--cors-methods", default=CorsPolicy.methods, metavar="METHODS",
                      help=f"allowed methods for CORS [{CorsPolicy.methods}]")
    http.add_argument("--cors-headers", default=CorsPolicy.headers, metavar="HEADERS",
                      help="allowed headers for CORS [*]")
    http.add_argument("--cors-credentials", action=argparse.BooleanOptionalAction, default=True,
                      help="allow credentials for CORS [on]")
    tpl = s.add_mutually_exclusive_group()
    tpl.add_argument("--chat-template", metavar="JINJA_TEMPLATE", default=None,
                     help="chat template (Jinja text) used instead of the model's (llama-server's flag)")
    tpl.add_argument("--chat-template-file", type=Path, metavar="FILE", default=None,
                     help="chat template read from FILE, used instead of the model's (llama-server's flag)")
    s.add_argument("--source", choices=source_names(), default="ngram",
                   help="proposal source of every request (none: plain decoding) [ngram]")
    s.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                   help="an option for the source's factory (repeatable)")
    add_source_flags(s)
    s.add_argument("--draft-max", "--draft", "--draft-n", "--spec-draft-n-max", type=draft_max_value, default=None, metavar="N|auto",
                   help="most proposal tokens per window, or auto (the stored cost model's best) [auto]")
    s.add_argument("-n", "--n-predict", "--predict", dest="n_predict", type=whole_number(-1, name="n_predict"), default=-1,
                   help="tokens to generate when a request does not say (-1 = until end of generation or a "
                        "full context, llama-server's default) [-1]")
    add_n_ctx_flag(s)  # -c, --ctx-size, --n-ctx
    add_threads_flag(s)
    add_offload_flags(s)
    add_context_flags(s)
    add_sampling_flags(s, "sampling defaults of a request (llama-server's)", server_defaults=True)
    s.add_argument("--proposal-deadline-ms", type=setting("proposal_deadline_ms", float), default=2000.0,
                   metavar="MS", help="a proposal that arrives later is discarded (> 0) [2000]")
    s.add_argument("--no-probabilities", dest="probabilities", action="store_false",
                   help="keep no per-row probability figures (a request asking n_probs or logprobs still gets them)")
    add_backend_sampling_flag(s)
    rec = s.add_argument_group("recording")
    rec.add_argument("--receipts-dir", type=Path, default=None, metavar="DIR",
                     help=f"one receipts document per request here [{default_receipts_dir()}]")
    rec.add_argument("--receipts-keep", type=whole_number(1, name="receipts_keep"), default=DEFAULT_KEEP, metavar="N",
                     help=f"most request documents the folder keeps, oldest removed first (logged) [{DEFAULT_KEEP}]")
    rec.add_argument("--receipts-max-mb", type=whole_number(1, 1 << 20, "receipts_max_mb"), default=DEFAULT_MAX_MB,
                     metavar="MB", help=f"most megabytes the folder's request documents take, oldest removed "
                                        f"first [{DEFAULT_MAX_MB}]")
    rec.add_argument("--no-receipts", action="store_true", help="record nothing on disk")
    rec.add_argument("--session", type=Path, metavar="OUT.json",
                     help="when the server stops, write this run's requests as one conversation document "
                          "(view, tune, compare --turns and the window open it)")
    par = s.add_argument_group("slots (llama-server's -np)")
    par.add_argument("-np", "--parallel", dest="n_parallel", type=whole_number(1, MAX_PARALLEL, "n_parallel"),
                     default=1, metavar="N",
                     help="slots: N requests run at once, each its own KV sequence [1]")
    par.add_argument("--schedule", choices=SCHEDULES, default=BATCHED,
                     help="with -np > 1: batched (every slot's rows of a step in one llama_decode, as llama-server) "
                          "or locked (each slot its own session under the one runtime lock) [batched]")
    par.add_argument("-kvu", "--kv-unified", dest="kv_unified", action="store_true",
                     help="one KV pool for all slots, each slot up to the whole context (llama-server's -kvu); "
                          "without it each slot gets n_ctx / N positions, as llama-server splits them")
    par.add_argument("--spec-max-active", type=whole_number(1, MAX_PARALLEL, "spec_max_active"), default=None,
                     metavar="M", help="drafts off (plain steps) while more than M slots are generating, decided "
                                       "per window (as vLLM and SGLang turn speculation off past a batch size; "
                                       "llama-server has no such rule) [no limit]")
    par.add_argument("-cram", "--cache-ram", dest="cache_ram_mib", type=whole_number(-1, 1 << 30, "cache_ram_mib"),
                     default=DEFAULT_CACHE_RAM_MIB, metavar="N",
                     help="prompt cache in host memory (llama-server's): MiB that slots' saved KV states may take, "
                          "restored when a later request shares their prefix; -1 no limit, 0 off "
                          f"[{DEFAULT_CACHE_RAM_MIB}]")
    par.add_argument("--cache-idle-slots", action=argparse.BooleanOptionalAction, default=True,
                     help="when a request starts, save idle slots to the prompt cache, and with -kvu empty them "
                          "(llama-server's) [on]")
    s.add_argument("--max-queue", type=whole_number(0, 100_000, "max_queue"), default=DEFAULT_MAX_QUEUE, metavar="N",
                   help=f"requests that may wait behind the running one; beyond, 503 with Retry-After "
                        f"[{DEFAULT_MAX_QUEUE}]")
    s.add_argument("--max-body-mb", type=whole_number(1, 4096, "max_body_mb"), default=16, metavar="MB",
                   help="largest request body; larger ones get 413 [16]")


def _check(args) -> None:
    try:
        check_host(args.host, args.expose)
    except ServeError as exc:
        raise UserError(str(exc)) from None
    try:
        check_n_batch_for_source(args.n_batch, speculative=args.source != PLAIN)
    except ValueError as exc:
        raise UserError(f"--n-batch: {exc}") from None
    try:
        check_parallel(args.n_parallel, args.n_ctx, min(args.n_batch, args.n_ctx))
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _options(args) -> ServeOptions:
    """The server's options from the flags; raises ``UserError``."""
    _check(args)
    try:
        source_options = source_options_from_args(args)
    except SourceFlagError as exc:
        raise UserError(str(exc)) from None
    try:
        sampling, _notes = sampling_from_args(args)
        draft_max, draft_max_auto = requested_draft_max(args.draft_max)
        template = GenerationSettings(draft_max=draft_max,
                                      proposal_deadline_ms=args.proposal_deadline_ms,
                                      probabilities=args.probabilities)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    receipts = None
    if not args.no_receipts:
        receipts = ReceiptsDir(args.receipts_dir or default_receipts_dir(), args.receipts_keep,
                               args.receipts_max_mb << 20, on_log=lambda line: print(line, flush=True))
    if args.session is not None and receipts is None:
        raise UserError("--session needs the request documents: leave out --no-receipts")
    try:  # at start, before the model loads: a server that cannot record would answer and keep nothing
        if receipts is not None:  # (--session is checked with every output path: inspector.cli.paths)
            receipts.check("--receipts-dir")
    except ReceiptsDirError as exc:
        raise UserError(str(exc)) from None
    return ServeOptions(host=args.host, port=args.port, expose=args.expose, source=args.source,
                        source_options=source_options, template=template, draft_max_auto=draft_max_auto,
                        defaults=ServeDefaults(sampling, args.n_predict, random_seed=args.seed == -1,
                                               sse_ping_interval=args.sse_ping_interval),
                        max_queue=args.max_queue, api_key=args.api_key, aliases=tuple(args.alias),
                        receipts=receipts, max_body_bytes=args.max_body_mb << 20,
                        cors=CorsPolicy(args.cors_origins, args.cors_methods, args.cors_headers, args.cors_credentials),
                        metrics_endpoint=args.metrics, slots_endpoint=args.slots, n_parallel=args.n_parallel,
                        schedule=args.schedule, kv_unified=args.kv_unified, spec_max_active=args.spec_max_active,
                        cache_ram_mib=args.cache_ram_mib, cache_idle_slots=args.cache_idle_slots)


def request_line(row) -> str:
    """One finished request as ``serve`` prints it."""
    acc = f"{row.accepted}/{row.proposed} accepted" if row.proposed else "no drafts"
    speed = f"{row.tokens_per_s:.1f} tok/s" if row.tokens_per_s else "- tok/s"
    warm = "warm" if row.warm else "cold"
    tail = f" ({row.error})" if row.error and (row.ended_as != "cancelled" or row.error == SERVER_STOPPED) else ""
    return (f"#{row.id} {row.endpoint}: {row.prompt_tokens} prompt tokens ({row.reused} reused), "
            f"{row.output_tokens} generated, {row.windows} windows, {acc}, {speed}, {warm}, {row.ended_as}{tail}")


def cmd_serve(args) -> int:
    """``spec-inspector serve``; returns the exit status (1 when it cannot start, 2 a bad flag, 128 + the
    signal's number when stopped)."""
    try:
        options = _options(args)
    except UserError as exc:
        return fail(str(exc), EXIT_USAGE)
    try:
        template = read_text(args.chat_template_file, "--chat-template-file") if args.chat_template_file \
            else args.chat_template
    except UserError as exc:
        return fail(str(exc), EXIT_USAGE)
    if template is not None and template_problem(template):
        return fail(template_problem(template), EXIT_USAGE)
    try:
        runtime = open_target_runtime(args, n_ctx=args.n_ctx, n_threads=args.n_threads or None,
                                      n_seq_max=args.n_parallel)
    except RUNTIME_OPEN_ERRORS as exc:
        return fail(str(exc))
    if args.backend_sampling:
        try:  # every greedy request without n_probs samples in the graph, as llama-server -bs
            runtime.sample_in_graph(GRAPH_MAX_TOP)
        except EngineError as exc:
            runtime.close()
            return fail(str(exc))
    if template is not None:
        runtime.apply(override_chat_template, template) if hasattr(runtime, "apply") else \
            override_chat_template(runtime, template)
    lock = threading.Lock()

    def on_change(row) -> None:
        if row.state == "done":
            with lock:
                print(request_line(row), flush=True)

    model_name = str(runtime.model_path)
    try:
        server = InspectorServer(RuntimeScheduler(runtime), model_name, options, on_change=on_change)
        address = server.start()
    except (ServeError, ValueError) as exc:
        runtime.close()
        return fail(str(exc))
    server.wait_started()
    # What lives for the whole serve (the model's objects, modules, the app) never needs a collector's visit:
    # frozen, a full collection walks only the requests' objects (measured: 28 ms each unfrozen, on the slot's
    # thread between two decode steps; 1.8 ms of collections per 64-token request in all).
    gc.collect()
    gc.freeze()
    where = f"; requests recorded in {options.receipts.folder}" if options.receipts else ""
    print(f"serving {Path(model_name).name} on {address} (source {options.source}; {slots_text(options)}){where}", flush=True)
    key = f" -H {shlex.quote('Authorization: Bearer ' + args.api_key)}" if args.api_key else ""
    print(f"  try: curl {address}/v1/chat/completions -H 'Content-Type: application/json'{key} "
          "-d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}]}'", flush=True)
    status = 0
    try:
        while server.running:
            time.sleep(0.2)
        status = fail("the HTTP server stopped")
    except Interrupted as exc:
        status = exc.status
        print(f"stopped ({exc.name})", file=sys.stderr, flush=True)
    finally:
        with signals_held():
            server.stop()
            status = _write_session(args, options, status)
            runtime.close()
    return status


def _write_session(args, options: ServeOptions, status: int) -> int:
    if args.session is None:
        return status
    if options.receipts is None:
        return fail("--session needs the request documents: leave out --no-receipts")
    try:
        doc = session_document(options.receipts.files(this_run_only=True))
        write_document(doc, args.session)
    except ValueError as exc:
        print(f"spec-inspector: note: no session document written: {exc}", file=sys.stderr)
        return status
    except (OSError, ReceiptsFileError) as exc:
        return fail(f"cannot write session document {args.session}: {exc}")
    print(f"session: {args.session} ({len(doc['turns'])} requests)", flush=True)
    return status
