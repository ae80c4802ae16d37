"""``spec-inspector serve``: a llama-server-compatible HTTP endpoint whose every request is a recorded
session (issue 35). Qt-free; the window and the command line both start it.

- ``errors``: llama-server's error JSON (``ApiError``).
- ``params``: a request body read as llama-server reads it (``/completion``, ``/v1/completions``,
  ``/v1/chat/completions``), every field checked, unknown ones refused.
- ``slot``: the one slot (llama-server ``-np 1``): a queue, one engine thread, the prompt cache
  (``cache_prompt``), the sources' memory across requests, cancellation.
- ``replies``: the response bodies and stream chunks in llama-server's and OpenAI's shapes; ``Renderer``,
  how one API writes a request's reply and stream events.
- ``anthropic_api``: ``/v1/messages`` (Anthropic Messages, Claude-Code-style agents) and its token count;
  ``responses_api``: ``/v1/responses`` (OpenAI Responses, Codex-style agents) and its token count. Each
  converts its body to a chat body as llama-server does (``to_chat``) and has its ``Renderer``.
- ``metrics``: ``/metrics`` with llama.cpp's metric names (prometheus-client).
- ``receipts_dir``: one receipts document per request, crash-safe, bounded; the session export.
- ``app``: the Starlette routes; ``server``: uvicorn on its own thread (start, address, stop).
"""
