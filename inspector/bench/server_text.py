"""llama-server's greedy text of one prompt: the reference of ``spec-inspector audit --llama-server``.

The prompt's token ids go to llama-server in one greedy ``/completion`` request (the run's
penalties as ``penalty_fields``, the same ``n_predict``), plain decoding on its side (no
speculative flags): a llama-server binary is started on 127.0.0.1 for the request
(``LlamaServerProcess``: its own thread count, our context size and context settings) and stopped
after it; a URL is used as it is. Every failure is a ``ServerError`` or ``NotALlamaServer`` with
a one-line message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from inspector.bench.server_client import LlamaServerClient
from inspector.bench.server_compare import is_url, version_note
from inspector.bench.server_http import REQUEST_DEADLINE_S
from inspector.bench.server_process import LlamaServerProcess, ServerDeadlines, penalty_fields
from inspector.engine.settings import SamplingSettings

SERVER_THREADS = 1
"""CPU threads of the llama-server the audit starts: its own small share, beside ours (the text does
not depend on the thread count: each output value is summed by one thread)."""
START_TIMEOUT_S = 120.0
"""Seconds a started llama-server may take to load the model and answer ``/health``."""


def llama_server_tokens(target: str, *, model: str | Path, prompt_tokens: Sequence[int], n_predict: int,
                        sampling: SamplingSettings, n_ctx: int, context=None, threads: int = SERVER_THREADS,
                        request_timeout_s: float = REQUEST_DEADLINE_S,
                        start_timeout_s: float = START_TIMEOUT_S) -> tuple[tuple[int, ...], str]:
    """(llama-server's generated token ids, a note) for ``prompt_tokens`` (token ids), greedy, at most
    ``n_predict`` tokens, with ``sampling``'s penalties.

    ``target``: a llama-server binary (started with ``threads`` threads, context ``n_ctx`` positions,
    ``model``, ``context``'s settings; ready within ``start_timeout_s`` seconds) or a running server's
    URL (used as it is: the note says its flags cannot be checked). ``request_timeout_s``: the
    request's deadline (seconds). The tokens hold an end-of-generation token when it stopped on one,
    as ours do. The note is "" when there is nothing to say. Raises ``ServerError`` (does not start, does not answer, answers badly) and
    ``NotALlamaServer`` (a file that is not a llama-server), each with a one-line message."""
    fields = penalty_fields(sampling)
    if is_url(target):
        client = LlamaServerClient(target, timeout_s=request_timeout_s)
        client.check_reachable()
        done = client.complete(prompt_tokens, n_predict, fields)
        note = f"a running server at {target}: its flags and model cannot be checked"
    else:
        note = version_note(target)
        with LlamaServerProcess(target, Path(model), threads=threads, n_ctx=n_ctx, context=context,
                                deadlines=ServerDeadlines(start_timeout_s, request_timeout_s)) as server:
            done = server.client.complete(prompt_tokens, n_predict, fields)
    return tuple(int(t) for t in done.tokens), note
