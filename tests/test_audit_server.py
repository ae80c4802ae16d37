"""``spec-inspector audit RECEIPTS --llama-server [PATH|URL]`` (issue 39, item 1) against the real llama-server
built from our llama.cpp (``llama_server_binary``: built once when there is none, cached outside the clone;
a failed build fails these tests, never skips them): the same prompt generated greedily through it, whether
its text equals ours and, where they part, the audit of that position. What llama-server says is decided
here from its own reply, never from the command's answer; no particular word of the model is asserted. The
audits run on one thread (on a busy 2-core machine two spinning threads are several times slower)."""

from __future__ import annotations

import json

import pytest

from inspector.bench.server_process import LlamaServerProcess
from inspector.cli.main import main
from inspector.engine.baseline import first_difference
from inspector.session.audit import NOT_EXPLAINED

MAX_TOKENS = 10
ALTERED = 4
"""The generated token replaced on purpose in the altered receipts."""


@pytest.fixture(scope="module")
def receipts(tmp_path_factory, model_path):
    """A short greedy n-gram run's receipts (copy-exact, draft max 3)."""
    path = tmp_path_factory.mktemp("audit-server") / "r.json"
    assert main(["run", "--example", "copy-exact", "--max-tokens", str(MAX_TOKENS), "--draft-max", "3", "--quiet",
                 "--receipts", str(path)]) == 0
    return path


def server_text(binary, model_path, doc) -> list[int]:
    """llama-server's greedy tokens for the run's prompt, asked here directly (one thread, the run's context)."""
    with LlamaServerProcess(binary, model_path, threads=1, n_ctx=int(doc["model"]["n_ctx"])) as server:
        return list(server.client.complete(doc["prompt"]["token_ids"], len(doc["output"]["token_ids"])).tokens)


def test_audit_against_a_started_llama_server_says_whether_its_text_equals_ours(
        capsys, llama_server_binary, model_path, receipts):
    doc = json.loads(receipts.read_text("utf-8"))
    theirs = server_text(llama_server_binary, model_path, doc)
    capsys.readouterr()
    assert main(["audit", str(receipts), "--llama-server", str(llama_server_binary), "--threads", "1"]) == 0
    out = capsys.readouterr().out
    q = first_difference(theirs, doc["output"]["token_ids"])
    if q is None:
        assert f"llama-server: same text as ours ({MAX_TOKENS} tokens)" in out, out
        assert "llama-server verdict" not in out
    else:  # where llama-server parts from ours, that position is audited (both tokens named)
        assert f"llama-server's text parts from ours at generated token {q} " in out, out
        assert f"({theirs[q]})" in out and "llama-server verdict: " in out, out


def test_an_altered_output_is_audited_where_llama_server_parts_from_it(
        tmp_path, capsys, llama_server_binary, model_path, receipts):
    """The run's output with one token replaced: llama-server (a running server, by its URL) parts from it
    at that token at the latest, and no verify width explains the replaced token."""
    doc = json.loads(receipts.read_text("utf-8"))
    altered = list(doc["output"]["token_ids"])
    altered[ALTERED] = next(t for t in range(1000, 2000) if t != altered[ALTERED])
    path = tmp_path / "altered.json"
    path.write_text(json.dumps({**doc, "output": {**doc["output"], "token_ids": altered}}), "utf-8")
    with LlamaServerProcess(llama_server_binary, model_path, threads=1, n_ctx=int(doc["model"]["n_ctx"])) as server:
        theirs = list(server.client.complete(doc["prompt"]["token_ids"], len(altered)).tokens)
        capsys.readouterr()
        assert main(["audit", str(path), "--llama-server", server.url, "--threads", "1"]) == 0
    out = capsys.readouterr().out
    q = first_difference(theirs, altered)
    before = first_difference(theirs, doc["output"]["token_ids"])  # where it parted from the unaltered run, if ever
    assert q == min(ALTERED, ALTERED if before is None else before)
    assert f"llama-server's text parts from ours at generated token {q} " in out, out
    verdict = next(line for line in out.splitlines() if line.startswith("llama-server verdict: "))
    assert q < ALTERED or verdict.startswith(f"llama-server verdict: {NOT_EXPLAINED}"), verdict
    assert "its flags and model cannot be checked" in out  # a URL is used as it is


def test_a_llama_server_that_does_not_answer_is_one_line(tmp_path, capsys, receipts):
    assert main(["audit", str(receipts), "--llama-server", "http://127.0.0.1:9", "--llama-server-timeout", "5"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "127.0.0.1:9" in err, err
    assert main(["audit", str(receipts), "--llama-server", str(tmp_path / "no-such-server")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no-such-server" in err, err
