"""What the serve tests share: a server's options on the shared runtime, and waiting for its requests."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import openai

from inspector.bench.server_process import LlamaServerProcess
from inspector.engine import GenerationSettings
from inspector.engine.settings import SamplingSettings
from inspector.llama.server_parity import server_context
from inspector.serve.params import ServeDefaults
from inspector.serve.receipts_dir import ReceiptsDir
from inspector.serve.server import InspectorServer, ServeOptions


def serve_options(tmp_path, **kw) -> ServeOptions:
    """A test server's options: ngram-simple (3, 16), draft max 16, llama-server's sampling defaults, receipts
    in ``tmp_path/served``, ``/metrics`` on, any free port; ``kw`` overrides."""
    kw.setdefault("source", "ngram-simple")
    kw.setdefault("source_options", {"size_n": 3, "size_m": 16})
    kw.setdefault("template", GenerationSettings(draft_max=16))
    kw.setdefault("defaults", ServeDefaults(SamplingSettings(temperature=0.8)))
    kw.setdefault("receipts", ReceiptsDir(tmp_path / "served"))
    kw.setdefault("metrics_endpoint", True)
    return ServeOptions(port=0, **kw)


def wait_done(server, n: int, timeout_s: float = 60) -> list:
    """The server's traffic rows once its first ``n`` requests are done; ``AssertionError`` after ``timeout_s``."""
    t = time.monotonic() + timeout_s
    while time.monotonic() < t:
        rows = server.slots.snapshot_rows()
        if len(rows) >= n and all(r.state == "done" for r in rows[:n]):
            return rows
        time.sleep(0.05)
    raise AssertionError(f"requests not done after {timeout_s} s: {[(r.id, r.state) for r in server.slots.snapshot_rows()]}")


def cases_on_ours(scheduler, runtime, template: Path, cases: dict, folder: Path) -> dict:
    """Each case's result (``cases``: name -> ``send(address)``) from an ``InspectorServer`` on the shared runtime
    given the chat ``template`` file as ``--chat-template-file`` gives it, greedy-ready defaults, no speculation."""
    runtime.vocabulary.template_override = template.read_text()
    try:
        ours = InspectorServer(scheduler, str(runtime.model_path), ServeOptions(
            port=0, source="none", template=GenerationSettings(draft_max=0),
            defaults=ServeDefaults(SamplingSettings(temperature=0.8)), receipts=ReceiptsDir(folder)))
        ours.start()
        try:
            assert ours.wait_started(), "uvicorn did not start within 10 s"
            return {name: send(ours.address) for name, send in cases.items()}
        finally:
            ours.stop()
    finally:
        runtime.vocabulary.template_override = None


def cases_on_llama_server(binary, runtime, template: Path, cases: dict) -> dict:
    """Each case's result from a real llama-server on the runtime's model and context settings, with
    ``--jinja --chat-template-file template`` (its host prompt cache on, as ours)."""
    flags = ["-b", str(runtime.n_batch), *server_context(runtime).server_args(), "--jinja",
             "--chat-template-file", str(template)]
    with LlamaServerProcess(binary, runtime.model_path, args=flags, threads=1, n_ctx=runtime.n_ctx) as server:
        return {name: send(server.url) for name, send in cases.items()}


def ask_at_once(address: str, prompts, max_tokens: int = 16) -> tuple[list, list[threading.Thread]]:
    """Send ``prompts`` at once, a thread each; each reply (or the exception a failed one raised) lands in the list."""
    out: list = []
    barrier = threading.Barrier(len(prompts))

    def go(text: str) -> None:
        try:
            client = openai.OpenAI(base_url=address + "/v1", api_key="none", max_retries=0, timeout=60)
            barrier.wait(10)
            out.append(client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}],
                                                      max_tokens=max_tokens, temperature=0))
        except Exception as exc:  # a failed request may raise: the test reads the traffic rows
            out.append(exc)

    threads = [threading.Thread(target=go, args=(p,), daemon=True) for p in prompts]
    for t in threads:
        t.start()
    return out, threads
