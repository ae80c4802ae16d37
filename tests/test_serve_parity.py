"""``spec-inspector serve`` answers as llama-server answers: the same HTTP requests to both (issue 35).

For every llama.cpp proposal source (and plain decoding) our ``InspectorServer`` on the shared runtime
and a real llama-server built from the same llama.cpp (``llama_server_binary``), started with the
equivalent flags (``server_arguments``; our logical and physical batch, ``server_context``), get the same
greedy ``/v1/chat/completions`` requests on 127.0.0.1, one server after the other (never both decoding:
two llama.cpp processes on 2 cores slow each other): a two-request conversation (the bundled
``file-edits``: the second request's messages are the first's, the answer and the next user message),
then every bundled example as a chat, so the slot's prompt cache and the source's memory across
requests matter (a conversation's next request continues the slot's tokens; an example does not). Compared per request: the answer, the finish reason, the usage, and ``timings``'
``cache_n``, ``prompt_n``, ``predicted_n``, ``draft_n`` and ``draft_n_accepted``; afterwards
``/metrics``' speculative counters and accepted tokens per draft position. Nothing here names the
model's words: whatever this CPU's arithmetic gives, both programs must give it.
"""

from __future__ import annotations

import httpx
import pytest

from inspector.bench.server_client import ServerMetrics, parse_metrics
from inspector.engine import GenerationSettings
from inspector.engine.baseline import top2_after
from inspector.engine.settings import SamplingSettings
from inspector.llama.server_parity import server_context
from inspector.prompts import EXAMPLES, example_prompt, turns_path
from inspector.serve.params import ServeDefaults
from inspector.serve.server import InspectorServer, ServeOptions
from inspector.session.conversation import read_turns
from inspector.sources.server_flags import server_arguments

pytestmark = pytest.mark.slow

N_PREDICT = 64
SERVER_THREADS = 1
"""llama-server's thread count: a thread count does not change llama.cpp's CPU arithmetic, and the two
servers never decode at once."""
NO_DEADLINE_MS = 600_000.0
"""Our proposal deadline: on a busy machine a late draft would be discarded, a rule llama-server does not
have (it waits for its proposer; docs: run.md, "Differences that remain")."""
CONVERSATION = "file-edits"
"""A settings file, then "change one line, show the whole file": the second answer copies the first."""
SOURCES = {
    # source: (options, draft max). Each n-gram type's draft max equals its own maximum (size_m, n_max,
    # ngram-cache's fixed 8) so our cap limits nothing llama-server's type would not (as
    # test_llama_server_parity's configurations).
    "none": ({}, 0),
    "ngram-simple": ({"size_n": 3, "size_m": 16}, 16),
    "ngram-map-k": ({"size_n": 3, "size_m": 16}, 16),
    "ngram-map-k4v": ({"size_n": 3, "size_m": 16}, 16),
    "ngram-mod": ({"n_match": 8, "n_min": 4, "n_max": 16}, 16),
    "ngram-cache": ({}, 8),
}
COUNTS = ("prompt_tokens_total", "prompt_tokens_cached_total", "tokens_predicted_total")
"""``/metrics`` counters of tokens (not time): equal on both sides."""
SPEC_COUNTS = ("spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total",
               "spec_decode_num_drafts_total")
"""``/metrics``' speculative counters: equal where the drafts are."""
DRAFTS = ("draft_n", "draft_n_accepted")
KNOWN_DIFFERENCES = {
    # source: (the first request whose drafts may differ, why). Requests: 0-1 the conversation, 2.. the
    # examples. Found by this test; not in inspector/serve but in the sources' memory across requests.
}
"""Where our serve's drafts are not llama-server's yet (reported with this test's evidence). The
answers, the prompt cache and every request before the first named one are compared all the same."""


def _facts(reply: dict) -> dict:
    """What must be equal in a chat reply (ids, times and speeds are not compared)."""
    choice, usage, t = reply["choices"][0], reply["usage"], reply["timings"]
    return {"content": choice["message"]["content"], "finish_reason": choice["finish_reason"],
            "prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"],
            "cached_tokens": usage.get("prompt_tokens_details", {}).get("cached_tokens"),
            "cache_n": t["cache_n"], "prompt_n": t["prompt_n"], "predicted_n": t["predicted_n"],
            "draft_n": t.get("draft_n"), "draft_n_accepted": t.get("draft_n_accepted")}


def _session(url: str) -> tuple[list[tuple[str, list[dict], dict]], ServerMetrics]:
    """Send every request to the server at ``url``, in order, one at a time: the conversation's two
    requests (the second built from the first's answer), then each example alone; returns (name,
    messages, reply) per request and ``/metrics`` afterwards."""
    out = []
    turns = read_turns(turns_path(CONVERSATION))
    with httpx.Client(base_url=url, timeout=600, trust_env=False) as client:
        def chat(name, messages):
            r = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": N_PREDICT,
                                                          "temperature": 0})
            assert r.status_code == 200, f"{url} {name}: HTTP {r.status_code} {r.text[:300]}"
            out.append((name, messages, r.json()))
            return r.json()["choices"][0]["message"]["content"]

        first = [{"role": "user", "content": turns[0]}]
        answer = chat(f"{CONVERSATION} 1", first)
        chat(f"{CONVERSATION} 2", first + [{"role": "assistant", "content": answer},
                                           {"role": "user", "content": turns[1]}])
        for name in EXAMPLES:
            chat(name, [{"role": "user", "content": example_prompt(name)}])
        metrics = client.get("/metrics")
        assert metrics.status_code == 200, metrics.text
    return out, parse_metrics(metrics.text)


def _where_they_part(runtime, scheduler, messages, ours: str, theirs: str) -> str:
    """Evidence for a differing answer: the first differing token (both answers tokenized here) and our
    target's top-2 logit margin after the common part (a near-tie is < 1; plain decoding's arithmetic)."""
    prompt = runtime.tokenize(runtime.chat_messages_prompt(messages), add_special=True, parse_special=True)
    a = runtime.tokenize(ours, add_special=False, parse_special=True)
    b = runtime.tokenize(theirs, add_special=False, parse_special=True)
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    top, second, margin = top2_after(scheduler, prompt + a[:i], len(prompt))
    return (f"first different token {i}: ours {a[i:i + 1]}, llama-server's {b[i:i + 1]}; our target's top-2 "
            f"after the common part {top}/{second}, margin {margin:.3f}")


@pytest.fixture
def our_server(scheduler, runtime):
    """Factory: an ``InspectorServer`` serving ``source`` on the shared runtime (stopped after the test)."""
    started = []

    def start(source: str, options: dict, draft_max: int) -> InspectorServer:
        template = GenerationSettings(draft_max=draft_max, proposal_deadline_ms=NO_DEADLINE_MS)
        server = InspectorServer(scheduler, str(runtime.model_path),
                                 ServeOptions(port=0, source=source, source_options=dict(options), template=template,
                                              defaults=ServeDefaults(SamplingSettings(temperature=0.8)),
                                              receipts=None, metrics_endpoint=True))
        started.append(server)
        server.start()
        assert server.wait_started(), "uvicorn did not start within 10 s"
        return server

    yield start
    for s in started:
        s.stop()


@pytest.mark.parametrize("source", list(SOURCES))
def test_serve_answers_every_request_as_llama_server_does(source, runtime, scheduler, our_server,
                                                          start_llama_server):
    options, draft_max = SOURCES[source]
    ours_server = our_server(source, options, draft_max)
    ours, ours_metrics = _session(ours_server.address)
    ours_server.stop()  # idle either way; stopped so only one program holds a model's threads
    flags = [] if source == "none" else server_arguments(source, options, draft_max=draft_max)
    flags += ["-b", str(runtime.n_batch), *server_context(runtime).server_args()]
    server = start_llama_server(args=flags, threads=SERVER_THREADS, n_ctx=runtime.n_ctx)
    theirs, theirs_metrics = _session(server.url)
    server.stop()

    assert len(ours) == len(theirs) == len(EXAMPLES) + 2
    known_from, why = KNOWN_DIFFERENCES.get(source, (len(ours), ""))
    wrong, known = [], []
    for i, ((name, messages, a), (_n, their_messages, b)) in enumerate(zip(ours, theirs)):
        fa, fb = _facts(a), _facts(b)
        diff = {k: (fa[k], fb[k]) for k in fa if fa[k] != fb[k]}
        if i >= known_from and diff and set(diff) <= set(DRAFTS):
            known.append(f"{name}: {diff}")
        elif diff:
            note = ""
            if "content" in diff and messages == their_messages:
                note = " " + _where_they_part(runtime, scheduler, messages, fa["content"], fb["content"])
            wrong.append(f"{name}: (ours, llama-server's) {diff}{note}")
    assert not wrong, "\n".join(wrong)
    counts = {k: (ours_metrics.values.get(k), theirs_metrics.values.get(k)) for k in COUNTS}
    assert all(a == b for a, b in counts.values()), counts
    # what makes the comparison show something
    assert _facts(ours[1][2])["cache_n"] > 0, "the conversation's second request reused nothing from the cache"
    if source != "none":
        assert ours_metrics.draft_tokens > 0, f"{source} proposed nothing in {len(ours)} requests"
    if known:
        pytest.xfail(f"{source}: drafts differ from request {known_from} on ({'; '.join(known)}): {why}")
    spec = {k: (ours_metrics.values.get(k, 0), theirs_metrics.values.get(k, 0)) for k in SPEC_COUNTS}
    assert all(a == b for a, b in spec.values()), spec
    # every per-position line, zeros included (one per position of the type's maximum = our draft max)
    assert ours_metrics.accepted_per_position == theirs_metrics.accepted_per_position, \
        (ours_metrics.accepted_per_position, theirs_metrics.accepted_per_position)
    assert source not in KNOWN_DIFFERENCES, f"{source} now drafts as llama-server does: remove it from KNOWN_DIFFERENCES"
