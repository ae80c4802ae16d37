"""The HTTP routes of ``spec-inspector serve``: llama-server's API on Starlette (issue 35).

Routes as llama.cpp 0c1e570 ``tools/server/server.cpp`` registers them: ``GET /health`` (also
``/v1/health``), ``GET /v1/models`` (``/models``), ``GET /props``, ``POST /tokenize``,
``POST /detokenize``, ``GET /metrics``, ``POST /completion`` (``/completions``), ``POST /v1/completions``,
``POST /v1/chat/completions`` (``/chat/completions``), ``POST /v1/messages`` (Anthropic) and
``/v1/messages/count_tokens``, ``POST /v1/responses`` (``/responses``; OpenAI Responses) and
``/v1/responses/input_tokens`` (``/responses/input_tokens``), ``GET /slots``. Unknown paths get llama-server's 404.
The agents' APIs are chat requests in other shapes: their body is converted to a chat body
(``inspector.serve.anthropic_api``, ``inspector.serve.responses_api``: ``to_chat``) and runs the chat
path; a ``Renderer`` per API writes the replies.
CORS and the API key are checked before any route (``inspector.serve.http_policy``). ``/metrics`` answers
501 unless the server was started with ``--metrics``, ``/slots`` unless ``--no-slots`` (llama-server's
defaults, ``common/common.h``). A request's ``model`` names nothing to check: with one model loaded,
llama-server answers whatever name a client sends (many clients send a fixed one).

Prompts are tokenized under the runtime's lock (``RuntimeScheduler.execute``; a runtime in a child
process answers one call at a time) in Starlette's thread pool, never on the event loop; the engine runs
on the slots' threads. Streams are Server-Sent Events (``inspector.serve.event_stream``), one event per token,
a ``:`` comment after ``sse_ping_interval`` seconds of silence as llama-server; a client that goes away (or
stops reading for ``SEND_TIMEOUT_S``) cancels its request (``ServeSlots.cancel``); a
request cut short by the server's stop answers 503 ``unavailable_error`` "the server is stopping" (a
stream: as its last event). A body holding a lone surrogate (``"\ud800"``, valid JSON, no text) is
refused with 400 naming the field.
Where llama-server answers malformed JSON with 500, we answer 400 (it is the client's input).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field, replace

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from inspector.receipts.document import json_problem
from inspector.serve.loop_mail import LoopMail
from inspector.serve.chat_tools import prepare_tools
from inspector.serve.reasoning import prepare_reasoning
from inspector.serve.direct_stream import DirectStream, Raw, transport_of
from inspector.serve.event_stream import PING, EventStream, Pinger, encode_event
from inspector.serve.errors import EXCEED_CONTEXT, NOT_SUPPORTED, SERVER, TOO_LARGE, UNAVAILABLE, ApiError
from inspector.serve.http_policy import CorsPolicy, HttpPolicy
from inspector.serve.metrics import CONTENT_TYPE, ServeMetrics
from inspector.serve.constraint_params import resolve_constraints
from inspector.serve.params import ServeDefaults, parse_request, unicode_problem
from inspector.serve import anthropic_api, responses_api
from inspector.serve.replies import FINGERPRINT, Renderer, Replies, generation_settings, piece_json, slots_json
from inspector.serve.slot import STOPPING
from inspector.serve.slots import ServeSlots
from inspector.serve.job import Job, JobPrompt, JobResult, TokenOut

MAX_BODY_BYTES = 16 << 20
"""Largest request body (``--max-body-mb``); a larger one gets 413."""
SEND_TIMEOUT_S = 30.0
"""A stream whose client reads nothing for this long is ended and its request cancelled."""


@dataclass
class ServeState:
    """What the routes need: the slot, the metrics, the names the model answers to, the request
    defaults, the key (None: no key), the body limit (bytes), CORS, and whether ``/metrics`` and
    ``/slots`` answer (llama-server's ``--metrics``, ``--slots``). ``started``: seconds since the epoch
    (``Process-Start-Time-Unix``)."""

    slots: ServeSlots
    metrics: ServeMetrics
    model_name: str
    aliases: tuple = ()
    defaults: ServeDefaults = field(default_factory=ServeDefaults)
    api_key: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    started: float = field(default_factory=time.time)
    cors: CorsPolicy = field(default_factory=CorsPolicy)
    metrics_endpoint: bool = False
    slots_endpoint: bool = True
    template_tools: dict = field(default_factory=dict)
    """The chat template's ``TemplateTools`` once found (``inspector.serve.chat_tools.template_tools``)."""

    @property
    def runtime(self):
        return self.slots.runtime


async def _body(request: Request, limit: int):
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(f"the request body ({declared} bytes) is larger than the limit ({limit} bytes; "
                       "spec-inspector serve --max-body-mb)", TOO_LARGE)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(f"the request body is larger than the limit ({limit} bytes; spec-inspector serve "
                               "--max-body-mb)", TOO_LARGE)
            chunks.append(chunk)
    except ClientDisconnect:  # gone, or closed by its body deadline (http_guard): nobody reads the reply
        raise ApiError("the request body did not arrive (the connection closed)", ("invalid_request_error", 408)) \
            from None
    raw = b"".join(chunks)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ApiError(f"malformed JSON in the request body: {json_problem(exc)}") from None
    problem = unicode_problem(body)  # a lone surrogate (\ud800) is valid JSON but no text
    if problem:
        raise ApiError(problem)
    return body


def _tokens_of(rt, prompt) -> list[int]:
    """llama-server's ``tokenize_mixed``: strings tokenized (the first with BOS when the model adds one,
    special tokens parsed), token ids taken as they are (checked against the vocabulary)."""
    if isinstance(prompt, str):
        return rt.tokenize(prompt, add_special=True, parse_special=True)
    out: list[int] = []
    for i, part in enumerate(prompt):
        if isinstance(part, str):
            out += rt.tokenize(part, add_special=i == 0, parse_special=True)
        elif not 0 <= part < rt.n_vocab:
            raise ApiError(f"prompt token id {part} is out of the vocabulary (0..{rt.n_vocab - 1})")
        else:
            out.append(part)
    return out


def _prompt_of(state: ServeState, p) -> tuple[str, list[int]]:
    """The request's prompt text (a chat's templated) and tokens (runs under the runtime's lock)."""

    def work(rt):
        p.constraints = resolve_constraints(rt, p.constraints)  # logit_bias texts, the grammar checked
        if p.endpoint == "chat":
            messages = prepare_tools(rt, p, state.template_tools)
            kwargs = prepare_reasoning(rt, p, state.template_tools, messages)
            text = rt.chat_messages_prompt(messages, list(p.tools), kwargs)
            return text, rt.tokenize(text, add_special=True, parse_special=True)
        tokens = _tokens_of(rt, p.prompt)
        return (p.prompt if isinstance(p.prompt, str) else rt.detokenize(tokens)), tokens

    try:
        return state.slots.scheduler.execute("stats", -1, work).value
    except ApiError:
        raise
    except Exception as exc:  # a model without a chat template, a tokenizer error
        raise ApiError(str(exc) or type(exc).__name__) from None


def _prepare(state: ServeState, p) -> JobPrompt:
    """The request's prompt tokens, text and receipts blocks (runs under the runtime's lock)."""
    n_ctx = state.slots.n_ctx_slot  # a slot's context (llama-server's n_ctx_slot)
    text, tokens = _prompt_of(state, p)
    if not tokens:
        raise ApiError("the prompt is empty after tokenization")
    if len(tokens) >= n_ctx:
        raise ApiError(f"request ({len(tokens)} tokens) exceeds the available context size ({n_ctx} tokens), "
                       "try increasing it", EXCEED_CONTEXT, n_prompt_tokens=len(tokens), n_ctx=n_ctx)
    conversation, prompt_text, templated = None, text, None
    if p.endpoint == "chat":
        templated = text
        last = p.messages[-1]
        prompt_text = last["content"]
        if last["role"] == "user":
            conversation = {"turn": 1, "turns": 1, "user_text": last["content"],
                            "history": [{"role": m["role"], "content": m["content"]} for m in p.messages[:-1]]}
    return JobPrompt(tokens, prompt_text, templated, conversation)


def build_app(state: ServeState, inner=None) -> Starlette:
    """The Starlette application of one server, behind its CORS and key checks (an ASGI app); ``inner``: what
    wraps the routes inside those checks (the server's request limit, so its 503 carries CORS too)."""

    mails: dict = {}  # the event loop's LoopMail (one loop per server run)

    def submit(request: Request, p, prep: JobPrompt, api, before: list, arrived: float,
               direct: bool = False) -> Submitted:
        """Queue one prompt's job on the slot (``ApiError`` 503 when the queue is full); ``api``: None or
        the agents' API module whose ``Renderer`` writes the replies; ``before``: the request's prompts queued
        already (they count once against the limit and share the reply's id); ``direct``: a stream the slot's
        thread may write itself when the connection allows (``inspector.serve.direct_stream``)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        if mails.get("loop") is not loop:
            mails["loop"], mails["mail"] = loop, LoopMail(loop)
        mail = mails["mail"]

        def deliver(item) -> None:
            mail.post(queue, item)  # dropped once the loop closed: the server stopped, this client is gone

        client = f"{request.client.host}:{request.client.port}" if request.client else ""
        job = Job(request.url.path, p, prep, deliver, client=client, arrived=arrived)
        n_ctx = state.slots.n_ctx_slot
        max_tokens = p.n_predict if p.n_predict >= 0 else n_ctx - len(prep.tokens)
        replies = Replies(p, state.model_name, prep.templated_text or prep.text, len(prep.tokens),
                          state.runtime.token_piece, generation_settings(p, n_ctx, state.slots.source, max_tokens))
        if before:  # one request, one id (llama-server's completion_id for all its tasks)
            replies.id, replies.created = before[0].render.replies.id, before[0].render.replies.created
        render = (Renderer if api is None else api.Renderer)(replies, job)
        transport = transport_of(request.scope) if direct else None
        if transport is not None:
            try:
                job.direct = DirectStream(transport, render)
            except OSError:  # no duplicate descriptor: the loop writes
                pass
        try:
            state.slots.submit(job, len(before))
        except BaseException:
            if job.direct is not None:
                job.direct.finish()
            raise
        return Submitted(job, queue, render)

    async def completion(request: Request, endpoint: str, api=None):
        """One request's generations (a completion may hold several prompts, answered in turn); ``api``:
        None, or the agents' API module whose ``to_chat`` converts the body."""
        arrived = time.time()  # before its body and its tokenization (which waits for the runtime lock)
        body = await _body(request, state.max_body_bytes)
        p = parse_request(body if api is None else api.to_chat(body), endpoint, state.defaults)
        parts = [p] if len(p.prompts) <= 1 else [replace(p, prompt=x, index=i) for i, x in enumerate(p.prompts)]
        preps = [await run_in_threadpool(_prepare, state, q) for q in parts]
        slots = state.slots
        runs: list[Submitted] = []
        try:
            for q, prep in zip(parts, preps):
                runs.append(submit(request, q, prep, api, runs, arrived, direct=p.stream and len(parts) == 1))
        except ApiError:
            for r in runs:
                slots.cancel(r.job)
            raise
        if p.stream:
            return EventStream(_stream(slots, runs), SEND_TIMEOUT_S)
        bodies = []
        try:
            for r in runs:
                got = await _collect(request, r)
                if got is None:
                    return Response(status_code=499)
                item, tokens = got
                if item.stopped:  # an answer cut short by the stop would look whole
                    raise ApiError(STOPPING, UNAVAILABLE)
                if item.ended_as in ("error", "cancelled") and not item.tokens:
                    raise ApiError(item.error or item.ended_as, SERVER)
                bodies.append(r.render.final(item, tokens))
        finally:
            for r in runs:  # the client left, or one prompt failed: the rest are not run
                if r.job.result is None:
                    slots.cancel(r.job)
        if len(bodies) == 1:
            return JSONResponse(bodies[0])
        if endpoint == "completion":  # several prompts: an array (llama-server, handle_completions_impl)
            return JSONResponse(bodies)
        merged = bodies[0]
        merged["choices"] = [b["choices"][0] for b in bodies]
        return JSONResponse(merged)

    async def count_tokens(request: Request, api):
        """``/v1/messages/count_tokens``, ``/v1/responses/input_tokens``: the converted chat's prompt tokens."""
        p = parse_request(api.to_chat(await _body(request, state.max_body_bytes)), "chat", state.defaults)
        _text, tokens = await run_in_threadpool(_prompt_of, state, p)
        return JSONResponse(api.count_reply(len(tokens)))

    async def tokenize(request: Request):
        body = await _body(request, state.max_body_bytes)
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            raise ApiError("'content' (a string) is required")
        add_special = bool(body.get("add_special", False))
        parse_special = bool(body.get("parse_special", True))
        text = body["content"]
        ids = (await run_in_threadpool(state.slots.scheduler.execute, "stats", -1,
                                       lambda rt: rt.tokenize(text, add_special, parse_special))).value
        if body.get("with_pieces"):
            piece = state.runtime.token_piece
            return JSONResponse({"tokens": [{"id": t, "piece": piece_json(piece(t))} for t in ids]})
        return JSONResponse({"tokens": ids})

    async def detokenize(request: Request):
        body = await _body(request, state.max_body_bytes)
        ids = body.get("tokens") if isinstance(body, dict) else None
        n = state.runtime.n_vocab
        if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < n
                                                for t in ids):
            raise ApiError(f"'tokens' must be an array of token ids 0..{n - 1}")
        text = (await run_in_threadpool(state.slots.scheduler.execute, "stats", -1,
                                        lambda rt: rt.detokenize(ids))).value
        return JSONResponse({"content": text})

    async def health(request: Request):
        return JSONResponse({"status": "ok"})

    async def models(request: Request):
        name = state.model_name
        return JSONResponse({
            "models": [{"name": name, "model": name, "modified_at": "", "size": "", "digest": "", "type": "model",
                        "description": "", "tags": [""], "capabilities": ["completion"], "parameters": "",
                        "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""],
                                    "parameter_size": "", "quantization_level": ""}}],
            "object": "list",
            "data": [{"id": name, "aliases": list(state.aliases) or [name], "tags": [], "object": "model",
                      "created": int(state.started), "owned_by": "llamacpp",
                      "meta": {"n_ctx_train": state.runtime.n_ctx, "n_vocab": state.runtime.n_vocab}}]})

    async def props(request: Request):
        rt = state.runtime
        d = state.defaults
        return JSONResponse({
            "default_generation_settings": {"n_ctx": state.slots.n_ctx_slot, "params": {
                "n_predict": d.n_predict, "temperature": d.sampling.temperature, "top_k": d.sampling.top_k,
                "top_p": d.sampling.top_p, "min_p": d.sampling.min_p, "seed": -1 if d.random_seed else d.sampling.seed,
                "speculative.types": "none" if state.slots.source == "none" else f"none,{state.slots.source}"}},
            "total_slots": state.slots.n_parallel, "model_path": str(getattr(rt, "model_path", "")), "model_alias": state.model_name,
            "chat_template": rt.chat_template() or "", "build_info": FINGERPRINT, "modalities": {"vision": False,
                                                                                               "audio": False},
            "endpoint_slots": state.slots_endpoint, "endpoint_props": False,
            "endpoint_metrics": state.metrics_endpoint, "is_sleeping": False,
            "spec_inspector": {"source": state.slots.source, "source_options": state.slots.source_options}})

    async def metrics(request: Request):
        if not state.metrics_endpoint:
            raise ApiError("This server does not support metrics endpoint. Start it with `--metrics`", NOT_SUPPORTED)
        return Response(state.metrics.text(), media_type=CONTENT_TYPE,
                        headers={"Process-Start-Time-Unix": str(int(state.started))})

    async def slots(request: Request):
        if not state.slots_endpoint:
            raise ApiError("This server does not support slots endpoint. Start it with `--slots`", NOT_SUPPORTED)
        return JSONResponse(slots_json(state.slots, state.slots.n_ctx_slot))

    def route(endpoint, api=None):
        async def handler(request: Request):
            return await completion(request, endpoint, api)
        return handler

    def counter(api):
        async def handler(request: Request):
            return await count_tokens(request, api)
        return handler

    async def api_error(request: Request, exc: ApiError):
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    async def not_found(request: Request, exc):
        return JSONResponse({"error": {"message": "File Not Found", "type": "not_found_error", "code": 404}},
                            status_code=404)

    async def failed(request: Request, exc: Exception):
        return JSONResponse(ApiError(str(exc) or type(exc).__name__, SERVER).body(), status_code=500)

    routes = [Route(path, fn, methods=[m]) for path, fn, m in (
        ("/health", health, "GET"), ("/v1/health", health, "GET"), ("/v1/models", models, "GET"),
        ("/models", models, "GET"), ("/props", props, "GET"), ("/tokenize", tokenize, "POST"),
        ("/detokenize", detokenize, "POST"), ("/metrics", metrics, "GET"), ("/slots", slots, "GET"),
        ("/completion", route("completion"), "POST"), ("/completions", route("completion"), "POST"),
        ("/v1/completions", route("completions"), "POST"),
        ("/v1/chat/completions", route("chat"), "POST"), ("/chat/completions", route("chat"), "POST"),
        (anthropic_api.PATH, route("chat", anthropic_api), "POST"),
        (anthropic_api.COUNT_PATH, counter(anthropic_api), "POST"),
        *((path, route("chat", responses_api), "POST") for path in responses_api.PATHS),
        *((path, counter(responses_api), "POST") for path in responses_api.COUNT_PATHS))]
    app = Starlette(routes=routes, exception_handlers={ApiError: api_error, 404: not_found, 405: not_found,
                                                       Exception: failed})

    return HttpPolicy(app if inner is None else inner(app), state.cors, state.api_key)


@dataclass
class Submitted:
    """One prompt's job on the slot, the queue its tokens and result arrive on, and what writes its replies."""

    job: Job
    queue: asyncio.Queue
    render: Renderer


async def _collect(request: Request, run: Submitted):
    """Wait for ``run``'s tokens and result: ``(JobResult, [TokenOut])``, or None when the client went away
    (the caller cancels what is not done)."""
    tokens: list[TokenOut] = []
    queue = run.queue
    while True:
        try:
            item = queue.get_nowait() if not queue.empty() else await asyncio.wait_for(queue.get(), 0.25)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                return None
            continue
        if isinstance(item, JobResult):
            return item, tokens
        tokens.append(item)


async def _stream(slots: ServeSlots, runs: list[Submitted]):
    """The SSE events of a streamed request (bytes: ``encode_event``), as each prompt's ``Renderer`` writes
    them, the prompts in turn (the slot runs them in order; OpenAI's ``[DONE]`` after the last one only);
    cancelled (client gone, or not reading) -> every job not done is."""
    try:
        for i, run in enumerate(runs):
            last = i == len(runs) - 1
            async for event in _stream_one(run, last):
                yield event
            r = run.job.result
            if r is not None and r.ended_as in ("error", "cancelled") and r.error:
                return
    finally:
        for run in runs:
            if run.job.result is None:
                slots.cancel(run.job)


async def _stream_one(run: Submitted, last: bool):
    """One prompt's SSE events: the first ones, a chunk per token (``PING`` after the request's
    ``sse_ping_interval`` seconds without one), then the last ones (an error event when it failed). With a
    ``DirectStream`` the slot's thread writes the token chunks itself once the loop has written what came
    before (``inspector.serve.direct_stream``); what it posts instead comes here."""
    render, queue, direct = run.render, run.queue, run.job.direct
    pinger = Pinger(queue, run.job.params.sse_ping_interval, asyncio.get_running_loop(),
                    None if direct is None else direct.quiet_since)
    try:
        for event in render.first():
            yield encode_event(event)
        if direct is not None:
            direct.start()
        while True:
            item = await queue.get()
            if isinstance(item, JobResult):
                break
            if item is PING:
                if direct is None or not direct.ping(item):
                    yield item
                continue
            pinger.seen()
            if isinstance(item, Raw):
                direct.write_raw(item)
                continue
            for event in render.chunk(item):
                yield encode_event(event)
            if direct is not None:
                direct.consumed_one()
    finally:
        pinger.close()
        if direct is not None:
            direct.finish()
    if item.ended_as in ("error", "cancelled") and item.error:
        failure = ApiError(STOPPING, UNAVAILABLE) if item.stopped else ApiError(item.error, SERVER)
        yield encode_event(render.error(failure))
        return
    for event in render.last(item):
        if last or event.get("data") != "[DONE]":
            yield encode_event(event)