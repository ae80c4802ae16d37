"""Backend sampling (issue 56): the figures computed in llama.cpp's graph equal the host path's.

Pure: the figures made from a row's sums (``inspector.engine.sampled_rows``) against ``summarise_rows`` on the
same logits. Real: ``run -bs`` on the bundled model against the same run on the host path: the same tokens and
windows, and every row's figures equal to float32 rounding.
"""

from __future__ import annotations

import json
import math

import numpy as np
import openai
import pytest

from inspector.bench.server_process import LlamaServerProcess
from inspector.engine import Generation, GenerationSettings, RuntimeScheduler
from inspector.engine.errors import EngineError
from inspector.engine.settings import SamplingSettings
from inspector.engine.probabilities import summarise_rows
from inspector.engine.sampled_rows import STATS, row_from_outputs, sampled_figures
from inspector.llama.runtime import LlamaRuntime
from inspector.llama.server_parity import server_context
from inspector.serve.server import InspectorServer
from serve_helpers import ask_at_once, serve_options, wait_done
from figures_helpers import figures_close, probability_blocks
from scenarios import plain_reference
from test_cli import COPY_PROMPT, cli, one_clear_line
from test_tree_windows import TreeFollower


def _graph_outputs(x: np.ndarray, k: int, proposed: int, rng) -> tuple[list[int], list[float]]:
    """What the figures sampler leaves for row ``x`` (figure_sampler.c), worked out here in float64: the k
    largest logits' ids in a shuffled order (ggml_top_k's are in none), their logits, then m, z, s, the
    proposed token's logit and the count of logits above it."""
    top = list(np.argsort(-x, kind="stable")[:k])
    rng.shuffle(top)
    m = float(x.max())
    d = np.maximum(x.astype(np.float64) - m, -87.0)
    e = np.exp(d)
    stats = [m, float(e.sum()), float((e * d).sum()), float(x[proposed]), int((x > x[proposed]).sum())]
    return [int(t) for t in top], [float(x[t]) for t in top] + stats


def test_figures_from_the_graphs_sums_equal_the_host_paths_on_every_row():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((6, 3000)) * 3).astype(np.float32)
    predictions = x.argmax(axis=1).tolist()
    # proposed tokens: the top one, the third, one far down the row (outside the candidates), and so on
    order = np.argsort(-x, axis=1, kind="stable")
    proposed = [int(order[0, 0]), int(order[1, 2]), int(order[2, 1500]), int(order[3, 7]), int(order[4, 2999])]
    rows = [row_from_outputs(*_graph_outputs(x[i], 8, proposed[i] if i < 5 else 0, rng)) for i in range(6)]
    got = sampled_figures(rows, proposed, predictions, top=5)
    want = summarise_rows(x, proposed, predictions, top=5)
    assert got.top_tokens == want.top_tokens and got.proposed_rank == want.proposed_rank
    assert got.proposed_rank[2] == 1501 and got.proposed_rank[5] is None  # outside the candidates; the bonus row
    assert got.predicted_rank == want.predicted_rank == (1,) * 6
    for name in ("proposed_p", "predicted_p", "entropy", "margin"):
        for a, b in zip(getattr(got, name), getattr(want, name)):
            assert (a is None and b is None) or math.isclose(a, b, rel_tol=1e-3, abs_tol=1e-6), (name, a, b)
    for a, b in zip(got.top_p, want.top_p):
        assert all(math.isclose(p, q, rel_tol=1e-3, abs_tol=1e-9) for p, q in zip(a, b))


def test_a_row_with_the_wrong_count_of_values_or_too_few_candidates_is_refused():
    with pytest.raises(EngineError, match="candidates"):
        row_from_outputs([1, 2], [0.5, 0.25, 0.0])
    row = row_from_outputs([3, 1], [1.0, 2.0] + [2.0, 1.5, -0.1, 0.0, 5])
    assert row.candidates == (1, 3) and row.logits == (2.0, 1.0)  # sorted largest first
    with pytest.raises(EngineError, match="the graph kept 2"):
        sampled_figures([row], [], [1], top=3)
    with pytest.raises(EngineError, match="not among"):
        sampled_figures([row], [], [9], top=2)
    assert STATS == 5


# -- the real model -----------------------------------------------------------------------------------------


def test_run_with_backend_sampling_gives_the_host_paths_tokens_windows_and_figures(tmp_path):
    docs = []
    for name, extra in (("host.json", ()), ("graph.json", ("-bs",))):
        out = tmp_path / name
        p = cli("run", "--prompt-file", COPY_PROMPT, "--ngram-min", "1", "--max-tokens", "48", "--threads", "1",
                "--receipts", out, *extra)
        assert p.returncode == 0, p.stderr
        docs.append(json.loads(out.read_text()))
    host, graph = docs
    assert graph["model"]["llama_cpp"]["backend_sampling"] is True
    assert host["model"]["llama_cpp"]["backend_sampling"] is False
    assert "-bs" in graph["model"]["llama_cpp"]["server_args"]
    assert graph["output"]["token_ids"] == host["output"]["token_ids"]
    assert [(w["base_position"], w["proposal_token_ids"], w["accepted_proposal_tokens"])
            for w in graph["windows"]] == [(w["base_position"], w["proposal_token_ids"],
                                            w["accepted_proposal_tokens"]) for w in host["windows"]]
    a, b = probability_blocks(host), probability_blocks(graph)
    assert len(a) == len(b) and len(a) > len(host["windows"])  # the windows' and the plain steps' rows
    rows = 0
    for (pa, x), (pb, y) in zip(a, b):
        assert pa == pb and x.keys() == y.keys()
        for key in x:
            assert figures_close(x[key], y[key]), (pa, key, x[key], y[key])
        rows += len(x["predicted_p"])
    assert rows >= 48


def test_backend_sampling_refuses_what_needs_the_logits_on_the_host_in_one_line():
    p = cli("run", "--prompt", "hi", "-bs", "--baseline", "--max-tokens", "4", "--threads", "1")
    assert p.returncode == 2 and "--baseline" in one_clear_line(p.stderr)
    p = cli("run", "--prompt", "hi", "-bs", "--temp", "0.8", "--max-tokens", "4", "--threads", "1")
    assert p.returncode == 2 and "--temp 0" in one_clear_line(p.stderr)
    p = cli("compare", "--prompt", "hi", "-bs", "--repeat-penalty", "1.1", "--max-tokens", "4", "--threads", "1")
    assert p.returncode == 2 and "penalties" in one_clear_line(p.stderr)
    assert "loading" not in p.stderr  # said before the model loads


@pytest.mark.slow
def test_plain_greedy_output_sampled_in_the_graph_equals_llama_server_with_bs(model_path, llama_server_binary):
    rt = LlamaRuntime(model_path, n_ctx=512, n_batch=512, n_seq_max=1, n_threads=1)
    try:
        rt.sample_in_graph(5)
        tokens = rt.prompt_tokens("Write two sentences about a lighthouse keeper.")
        g = Generation(RuntimeScheduler(rt), None, tokens, GenerationSettings(max_new_tokens=24))
        try:
            g.run()
        finally:
            g.close()
        assert rt.decode_calls >= 20 and rt.graph_figures is not None and not rt.local_logits
        with LlamaServerProcess(llama_server_binary, model_path, threads=1, n_ctx=512,
                                context=server_context(rt)) as server:
            assert server.argv[-1] == "-bs", server.argv
            theirs = list(server.client.complete(tokens, 24).tokens)
        assert g.generated and g.generated == theirs
    finally:
        rt.close()


def test_the_c_reading_of_a_verify_batch_equals_the_pure_reference_exactly(model_path):
    rt = LlamaRuntime(model_path, n_ctx=256, n_batch=64, n_seq_max=1, n_threads=1)
    try:
        rt.sample_in_graph(6)
        sid = rt.open_session(SamplingSettings())
        tokens = rt.prompt_tokens("Name three colours of the rainbow.")
        first = rt.prefill_predict(sid, tokens, 0)
        rows = [first, 13, 42, first, 7]  # a proposal of 4 tokens, some surely rejected
        predictions = rt.decode_rows(sid, rows, len(tokens))
        g = rt.graph_figures
        got = g.figures(range(5), rows[1:], predictions, 6)
        want = sampled_figures(g.rows(range(5)), rows[1:], predictions, 6)
        assert got == want and got.rows == 5 and got.proposed_rank[-1] is None
        assert all(len(t) == 6 for t in got.top_tokens) and list(got.predicted_rank) == [1] * 5
        with pytest.raises(EngineError, match="asked for"):
            g.figures(range(5), rows[1:], predictions, 7)  # the sampler keeps 6
    finally:
        rt.close()


def _served(model_path, tmp_path, name: str, in_graph: bool) -> tuple[dict, list[dict]]:
    """A 2-slot batched server (``serve -np 2``) on a runtime of its own, sampling in the graph or not: two greedy
    chat requests at once, then the same two one after the other (each step then holds one request's rows, so
    the arithmetic is the same on both servers), then one asking for logprobs. Returns the texts (by prompt, then
    the logprobs) and the receipts documents of the requests sent alone."""
    rt = LlamaRuntime(model_path, n_ctx=1024, n_batch=256, n_seq_max=2, n_threads=1)
    try:
        if in_graph:
            rt.sample_in_graph(64)
        server = InspectorServer(RuntimeScheduler(rt), str(model_path),
                                 serve_options(tmp_path / name, n_parallel=2, metrics_endpoint=False))
        server.start()
        try:
            assert server.wait_started(), "uvicorn did not start within 10 s"
            replies, threads = ask_at_once(server.address, PROMPTS, max_tokens=24)
            for t in threads:
                t.join(60)
            assert len(replies) == 2 and not [r for r in replies if isinstance(r, Exception)], replies
            out = {"at once": sorted(r.choices[0].message.content for r in replies)}
            wait_done(server, 2)
            client = openai.OpenAI(base_url=server.address + "/v1", api_key="none", max_retries=0, timeout=60)
            for text in PROMPTS:
                out[text] = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": text}], max_tokens=24,
                    temperature=0).choices[0].message.content
            logprobs = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": PROMPTS[0]}], max_tokens=8, temperature=0,
                logprobs=True, top_logprobs=3)
            wait_done(server, 5)
        finally:
            server.stop()
        out["logprobs"] = [(t.token, round(t.logprob, 3)) for t in logprobs.choices[0].logprobs.content]
        docs = [json.loads(p.read_text()) for p in sorted((tmp_path / name / "served").glob("*.json"))]
        return out, sorted(docs, key=lambda d: d["created"])[2:4]
    finally:
        rt.close()


PROMPTS = ["Repeat exactly: the cat sat on the mat, the cat sat on the mat.",
           "List the numbers from one to twelve in words."]


def test_a_batched_server_sampling_in_the_graph_answers_as_on_the_host(model_path, tmp_path):
    host, host_docs = _served(model_path, tmp_path, "host", False)
    graph, graph_docs = _served(model_path, tmp_path, "graph", True)
    assert graph == host  # the texts at once and alone, and the logprobs (that request took the host path)
    assert len(host_docs) == len(graph_docs) == 2
    for a, b in zip(host_docs, graph_docs):
        assert a["output"]["token_ids"] == b["output"]["token_ids"] and len(b["windows"]) > 0
        assert b["model"]["llama_cpp"]["backend_sampling"] and not a["model"]["llama_cpp"]["backend_sampling"]
        for (pa, x), (pb, y) in zip(probability_blocks(a), probability_blocks(b)):
            assert pa == pb and all(figures_close(x[k], y[k]) for k in x), (pa, [(k, x[k], y[k]) for k in x
                                                                          if not figures_close(x[k], y[k])])


def test_tree_windows_of_a_session_sampling_in_the_graph_take_the_host_path_and_plain_decodings_output(model_path):
    rt = LlamaRuntime(model_path, n_ctx=1024, n_batch=64, n_seq_max=1, n_threads=1)
    try:
        rt.sample_in_graph(5)
        scheduler = RuntimeScheduler(rt)
        tokens = rt.prompt_tokens(COPY_PROMPT.read_text().rstrip("\n"))
        g = Generation(scheduler, TreeFollower(scheduler, tokens), tokens, GenerationSettings(max_new_tokens=24))
        g.run()
        g.close()
        trees = [r for r in g.receipts if r.tree is not None]
        assert trees, [r.disposition for r in g.receipts]
        plain, _second = plain_reference(scheduler, tokens, len(g.generated))
        assert g.generated == plain[:len(g.generated)]
    finally:
        rt.close()
