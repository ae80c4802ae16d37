"""The HTTP routes of ``spec-inspector serve``: llama-server's API on Starlette (issue 35).

Routes as llama.cpp 0c1e570 ``tools/server/server.cpp`` registers them: ``GET /health`` (also
``/v1/health``), ``GET /v1/models`` (``/models``), ``GET /props``, ``POST /tokenize``,
``POST /detokenize``, ``GET /metrics``, ``POST /completion`` (``/completions``), ``POST /v1/completions``,
``POST /v1/chat/completions`` (``/chat/completions``). Unknown paths get llama-server's 404.
With an API key every route but ``/health`` needs ``Authorization: Bearer KEY`` (or ``X-Api-Key``),
compared in constant time (``hmac.compare_digest``); a wrong one gets llama-server's 401.

Prompts are tokenized under the runtime's lock (``RuntimeScheduler.execute``; a runtime in a child
process answers one call at a time) in Starlette's thread pool, never on the event loop; the engine runs
on the slot's thread. Streams are Server-Sent Events (sse-starlette), one event per token; a client
that goes away (or stops reading for ``SEND_TIMEOUT_S``) cancels its request (``ServeSlot.cancel``).
Where llama-server answers malformed JSON with 500, we answer 400 (it is the client's input).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from dataclasses import dataclass, field

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from inspector.receipts.document import json_problem
from inspector.serve.errors import AUTHENTICATION, EXCEED_CONTEXT, NOT_FOUND, SERVER, TOO_LARGE, ApiError
from inspector.serve.metrics import CONTENT_TYPE, ServeMetrics
from inspector.serve.constraint_params import resolve_constraints
from inspector.serve.params import ServeDefaults, parse_request
from inspector.serve.replies import FINGERPRINT, Replies, generation_settings, piece_json
from inspector.serve.slot import ServeSlot
from inspector.serve.job import Job, JobResult, TokenOut

MAX_BODY_BYTES = 16 << 20
"""Largest request body (``--max-body-mb``); a larger one gets 413."""
SEND_TIMEOUT_S = 30.0
"""A stream whose client reads nothing for this long is ended and its request cancelled."""
PUBLIC = ("/health", "/v1/health")
"""Routes that answer without the API key (llama-server's public endpoints)."""


@dataclass
class ServeState:
    """What the routes need: the slot, the metrics, the names the model answers to, the request
    defaults, the key (None: no key) and the body limit (bytes)."""

    slot: ServeSlot
    metrics: ServeMetrics
    model_name: str
    aliases: tuple = ()
    defaults: ServeDefaults = field(default_factory=ServeDefaults)
    api_key: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    started: float = field(default_factory=time.time)

    @property
    def runtime(self):
        return self.slot.runtime

    def names(self) -> tuple[str, ...]:
        """The model names a request may give (its path, file name, file name without ``.gguf``, aliases)."""
        path = self.model_name
        base = path.replace("\\", "/").rsplit("/", 1)[-1]
        return (path, base, base.removesuffix(".gguf"), *self.aliases)


async def _body(request: Request, limit: int):
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(f"the request body ({declared} bytes) is larger than the limit ({limit} bytes; "
                       "spec-inspector serve --max-body-mb)", TOO_LARGE)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(f"the request body is larger than the limit ({limit} bytes; spec-inspector serve "
                           "--max-body-mb)", TOO_LARGE)
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ApiError(f"malformed JSON in the request body: {json_problem(exc)}") from None


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


def _prepare(state: ServeState, p) -> dict:
    """The request's prompt tokens, text and receipts blocks (runs under the runtime's lock)."""
    rt = state.runtime

    def work(rt):
        p.constraints = resolve_constraints(rt, p.constraints)  # logit_bias texts, the grammar checked
        if p.endpoint == "chat":
            text = rt.chat_messages_prompt([dict(m) for m in p.messages])
            return text, rt.tokenize(text, add_special=True, parse_special=True)
        tokens = _tokens_of(rt, p.prompt)
        return (p.prompt if isinstance(p.prompt, str) else rt.detokenize(tokens)), tokens

    try:
        text, tokens = state.slot.scheduler.execute("stats", -1, work).value
    except ApiError:
        raise
    except Exception as exc:  # a model without a chat template, a tokenizer error
        raise ApiError(str(exc) or type(exc).__name__) from None
    if not tokens:
        raise ApiError("the prompt is empty after tokenization")
    if len(tokens) >= rt.n_ctx:
        raise ApiError(f"request ({len(tokens)} tokens) exceeds the available context size ({rt.n_ctx} tokens), "
                       "try increasing it", EXCEED_CONTEXT, n_prompt_tokens=len(tokens), n_ctx=rt.n_ctx)
    conversation, prompt_text, templated = None, text, None
    if p.endpoint == "chat":
        templated = text
        last = p.messages[-1]
        prompt_text = last["content"]
        if last["role"] == "user":
            conversation = {"turn": 1, "turns": 1, "history": [dict(m) for m in p.messages[:-1]],
                            "user_text": last["content"]}
    return {"tokens": tokens, "prompt_text": prompt_text, "templated": templated, "conversation": conversation}


def build_app(state: ServeState) -> Starlette:
    """The Starlette application of one server."""
    key = state.api_key.encode() if state.api_key else None

    async def completion(request: Request, endpoint: str):
        p = parse_request(await _body(request, state.max_body_bytes), endpoint, state.defaults)
        if endpoint != "completion" and p.model is not None and p.model not in state.names():
            raise ApiError(f"model '{p.model}' is not served here; this server serves '{state.model_name}' "
                           "(GET /v1/models; spec-inspector serve --alias NAME adds a name)", NOT_FOUND)
        prep = await run_in_threadpool(_prepare, state, p)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def deliver(item) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        client = f"{request.client.host}:{request.client.port}" if request.client else ""
        job = Job(request.url.path, p, prep["tokens"], prep["prompt_text"], deliver,
                  templated_text=prep["templated"], conversation=prep["conversation"], client=client)
        slot = state.slot
        max_tokens = p.n_predict if p.n_predict >= 0 else state.runtime.n_ctx - len(prep["tokens"])
        replies = Replies(p, state.model_name, prep["templated"] or prep["prompt_text"], len(prep["tokens"]),
                          state.runtime.token_piece,
                          generation_settings(p, state.runtime.n_ctx, slot.source, max_tokens))
        slot.submit(job)
        if p.stream:
            return EventSourceResponse(_stream(slot, job, queue, replies, endpoint), sep="\n",
                                       send_timeout=SEND_TIMEOUT_S, ping=15)
        tokens: list[TokenOut] = []
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), 0.25)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        slot.cancel(job)
                        return Response(status_code=499)
                    continue
                if isinstance(item, JobResult):
                    break
                tokens.append(item)
        except asyncio.CancelledError:
            slot.cancel(job)
            raise
        if item.ended_as in ("error", "cancelled") and not item.tokens:
            raise ApiError(item.error or item.ended_as, SERVER)
        body = replies.completion_final(item, tokens, False) if endpoint == "completion" else \
            replies.openai_final(item, tokens)
        return JSONResponse(body)

    async def tokenize(request: Request):
        body = await _body(request, state.max_body_bytes)
        if not isinstance(body, dict) or not isinstance(body.get("content"), str):
            raise ApiError("'content' (a string) is required")
        add_special = bool(body.get("add_special", False))
        parse_special = bool(body.get("parse_special", True))
        text = body["content"]
        ids = (await run_in_threadpool(state.slot.scheduler.execute, "stats", -1,
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
        text = (await run_in_threadpool(state.slot.scheduler.execute, "stats", -1,
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
            "default_generation_settings": {"n_ctx": rt.n_ctx, "params": {
                "n_predict": d.n_predict, "temperature": d.sampling.temperature, "top_k": d.sampling.top_k,
                "top_p": d.sampling.top_p, "min_p": d.sampling.min_p, "seed": -1 if d.random_seed else d.sampling.seed,
                "speculative.types": "none" if state.slot.source == "none" else f"none,{state.slot.source}"}},
            "total_slots": 1, "model_path": str(getattr(rt, "model_path", "")), "model_alias": state.model_name,
            "chat_template": rt.chat_template() or "", "build_info": FINGERPRINT, "modalities": {"vision": False,
                                                                                               "audio": False},
            "endpoint_slots": False, "endpoint_props": False, "endpoint_metrics": True, "is_sleeping": False,
            "spec_inspector": {"source": state.slot.source, "source_options": state.slot.source_options}})

    async def metrics(request: Request):
        return Response(state.metrics.text(), media_type=CONTENT_TYPE)

    def route(endpoint):
        async def handler(request: Request):
            return await completion(request, endpoint)
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
        ("/detokenize", detokenize, "POST"), ("/metrics", metrics, "GET"),
        ("/completion", route("completion"), "POST"), ("/completions", route("completion"), "POST"),
        ("/v1/completions", route("completions"), "POST"),
        ("/v1/chat/completions", route("chat"), "POST"), ("/chat/completions", route("chat"), "POST"))]
    app = Starlette(routes=routes, exception_handlers={ApiError: api_error, 404: not_found, 405: not_found,
                                                       Exception: failed})

    if key is not None:
        inner = app

        async def guarded(scope, receive, send):
            if scope["type"] == "http" and scope["path"] not in PUBLIC:
                headers = dict(scope.get("headers") or [])
                given = headers.get(b"authorization", b"")
                given = given[7:] if given[:7].lower() == b"bearer " else headers.get(b"x-api-key", b"")
                if not hmac.compare_digest(given, key):
                    err = ApiError("Invalid API Key", AUTHENTICATION)
                    await JSONResponse(err.body(), status_code=401)(scope, receive, send)
                    return
            await inner(scope, receive, send)

        return guarded
    return app


async def _stream(slot: ServeSlot, job: Job, queue: asyncio.Queue, replies: Replies, endpoint: str):
    """The SSE events of one streamed request; cancelled (client gone, or not reading) -> the request is."""
    done = False
    try:
        first = replies.openai_first() if endpoint != "completion" else None
        if first is not None:
            yield {"data": json.dumps(first, ensure_ascii=False)}
        while True:
            item = await queue.get()
            if isinstance(item, JobResult):
                break
            chunk = replies.completion_chunk(item) if endpoint == "completion" else replies.openai_chunk(item)
            yield {"data": json.dumps(chunk, ensure_ascii=False)}
        done = True
        if item.ended_as in ("error", "cancelled") and item.error:
            yield {"data": json.dumps(ApiError(item.error, SERVER).body(), ensure_ascii=False)}
            return
        if endpoint == "completion":
            yield {"data": json.dumps(replies.completion_final(item, [], True), ensure_ascii=False)}
            return
        for last in replies.openai_last(item):
            yield {"data": json.dumps(last, ensure_ascii=False)}
        yield {"data": "[DONE]"}
    finally:
        if not done:
            slot.cancel(job)
