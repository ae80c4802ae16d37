"""``spec-inspector serve`` as a user starts it (issue 35): its help, its refusals, a real process on
127.0.0.1 answering the ``openai`` SDK, stopped with Ctrl-C, its session document opened by ``view``,
``tune`` and ``compare --turns``; and the request parameters as llama-server reads them (pure logic)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import openai
import pytest

from inspector.receipts import load_document
from inspector.serve.errors import ApiError
from inspector.serve.params import MAX_TOP_PROBS, ServeDefaults, parse_request
from inspector.serve.prompt_cache import common_prefix
from inspector.serve.slot import reused_prompt_tokens
from inspector.session.conversation import read_turns

from test_cli import cli, one_clear_line


def test_serve_help_states_the_bounds_and_what_expose_opens():
    p = cli("serve", "--help")
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    for words in ("--receipts-keep", "[1000]", "--receipts-max-mb", "[500]", "OPEN TO THAT NETWORK", "--api-key",
                  "--max-queue", "503", "-n", "--alias"):
        assert words in text, words


def test_another_address_without_expose_is_one_clear_line_before_the_model_loads():
    p = cli("serve", "--host", "0.0.0.0", timeout=60)
    assert p.returncode == 2
    assert "--expose" in one_clear_line(p.stderr)
    assert "loading" not in p.stderr


def _start(tmp_path, *extra):
    proc = subprocess.Popen([sys.executable, "-m", "inspector", "serve", "--port", "0", "-t", "2", "--temp", "0",
                             "--source", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                             "--receipts-dir", str(tmp_path / "served"), *map(str, extra)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("serving "):
            return proc, line.split(" on ", 1)[1].split()[0]
    proc.kill()
    raise AssertionError(f"serve did not start: {''.join(lines)} {proc.stderr.read()}")


def test_a_served_session_stops_on_ctrl_c_and_its_document_opens_in_view_tune_and_compare(tmp_path):
    session = tmp_path / "session.json"
    proc, address = _start(tmp_path, "--session", session)
    try:
        client = openai.OpenAI(base_url=address + "/v1", api_key="none", max_retries=0, timeout=120)
        messages = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
        model = client.models.list().data[0].id
        first = client.chat.completions.create(model=model, messages=messages, max_tokens=24)
        messages += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "Now the same function again, with a docstring."}]
        second = client.chat.completions.create(model=model, messages=messages, max_tokens=24)
        assert second.usage.prompt_tokens_details.cached_tokens > 0
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert out.count("/v1/chat/completions:") == 2, out  # one line per finished request
    doc = load_document(session)
    assert doc["kind"] == "conversation" and len(doc["turns"]) == 2
    assert doc["turns"][1]["served"]["prompt_reused"] == second.usage.prompt_tokens_details.cached_tokens
    assert read_turns(session) == [m["content"] for m in messages if m["role"] == "user"]
    v = cli("view", session)
    assert v.returncode == 0 and "turn 2" in v.stdout, v.stderr
    t = cli("tune", session, "--source", "ngram-simple", "--top", "3")
    assert t.returncode == 0, t.stderr
    assert "conversation: 2 turns" in t.stdout
    c = cli("compare", "--turns", session, "--config", "none", "--max-tokens", "8", timeout=300)
    assert c.returncode == 0, c.stderr


def test_a_busy_port_is_one_clear_line(tmp_path):
    proc, address = _start(tmp_path)
    try:
        port = address.rsplit(":", 1)[1]
        p = cli("serve", "--port", port, "--receipts-dir", tmp_path / "other", timeout=120)
        assert p.returncode == 1
        assert f"cannot listen on 127.0.0.1:{port}" in one_clear_line(p.stderr)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 143


# -- request parameters (no model) ---------------------------------------------------------------------

D = ServeDefaults()


def _refused(body, endpoint="completion") -> str:
    with pytest.raises(ApiError) as e:
        parse_request(body, endpoint, D)
    assert e.value.status == 400
    return e.value.message


def test_fields_that_only_name_their_off_value_are_taken_and_others_refused_by_name():
    p = parse_request({"prompt": "x", "mirostat": 0, "typical_p": 1.0, "n": 1, "top_n_sigma": -1.0,
                       "logit_bias": {}, "user": "me"}, "completion", D)
    assert p.prompt == "x"
    assert "mirostat" in _refused({"prompt": "x", "mirostat": 2})
    assert parse_request({"prompt": "x", "grammar": "root ::= \"a\""}, "completion", D).constraints.grammar
    assert "frobnicate" in _refused({"prompt": "x", "frobnicate": True})
    assert "tools" in _refused({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
                               "chat")


def test_request_values_are_checked_as_llama_server_checks_them():
    assert "type must be number" in _refused({"prompt": "x", "n_predict": "8"})
    assert "n_predict" in _refused({"prompt": "x", "n_predict": -2})
    assert "n_probs" in _refused({"prompt": "x", "n_probs": MAX_TOP_PROBS + 1})
    assert parse_request({"prompt": "x", "n_probs": 10}, "completion", D).n_probs == 10  # llama-server: any count
    assert parse_request({"prompt": "x", "n_probs": -3}, "completion", D).n_probs == 0
    assert parse_request({"prompt": "x", "logprobs": 3}, "completion", D).n_probs == 3  # n_probs' alias
    assert "top_p" in _refused({"prompt": "x", "top_p": 1.5})
    assert "prompt" in _refused({"n_predict": 3})
    several = parse_request({"prompt": ["a", [1, 2], {"prompt_string": "c"}]}, "completion", D)
    assert several.prompts == ("a", [1, 2], "c") and several.prompt == "a"  # three prompts, answered in turn
    assert parse_request({"prompt": [1, "a"]}, "completion", D).prompts == ([1, "a"],)  # a number: one prompt
    assert "multimodal" in _refused({"prompt": {"prompt_string": "a", "multimodal_data": ["AAAA"]}}).lower()
    assert "empty" in _refused({"prompt": []})
    p = parse_request({"prompt": [1, 2, "x"], "max_tokens": 5, "n_predict": 7, "stop": "\n"}, "completion", D)
    assert p.n_predict == 7 and p.stop == ("\n",)  # n_predict wins over max_tokens, as in llama-server
    c = parse_request({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                 {"type": "text", "text": "b"}]}],
                       "logprobs": True, "top_logprobs": 2, "temperature": 0}, "chat", D)
    assert c.messages == ({"role": "user", "content": "ab"},) and c.n_probs == 2 and c.sampling.greedy
    assert parse_request({"messages": [{"role": "user", "content": "a"}], "logprobs": True}, "chat", D).n_probs == 20
    assert "top_logprobs" in _refused({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 2}, "chat")


def test_request_defaults_are_the_servers_and_a_seed_is_drawn_when_none_is_given():
    p = parse_request({"prompt": "x"}, "completion", D)
    assert p.sampling.temperature == 0.8 and p.n_predict == -1 and p.cache_prompt
    seeds = {parse_request({"prompt": "x"}, "completion", D).sampling.seed for _ in range(5)}
    assert len(seeds) > 1
    assert parse_request({"prompt": "x", "seed": 7}, "completion", D).sampling.seed == 7


def test_the_prompt_cache_keeps_the_common_prefix_but_always_decodes_one_prompt_token():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert reused_prompt_tokens([1, 2, 3, 9], [1, 2, 3, 5, 6], True) == 3
    assert reused_prompt_tokens([1, 2, 3, 9], [1, 2, 3], True) == 2  # whole prompt cached: one decoded again
    assert reused_prompt_tokens([1, 2, 3], [1, 2, 3, 4], False) == 0
    assert reused_prompt_tokens([], [5], True) == 0


def test_a_conversation_document_is_a_turns_file(tmp_path):
    doc = {"kind": "conversation", "turns": [{"conversation": {"user_text": "a"}},
                                             {"conversation": {"user_text": "b"}}]}
    f = tmp_path / "c.json"
    f.write_text(json.dumps(doc))
    assert read_turns(f) == ["a", "b"]
    f.write_text(json.dumps({"kind": "request"}))
    with pytest.raises(ValueError, match="not a conversation"):
        read_turns(f)


def test_the_printed_try_line_works_as_printed_with_an_api_key(tmp_path):
    """Issue 54 item 5: with ``--api-key`` the "try:" curl line carries the key, so it answers 200, not 401."""
    proc, _ = _start(tmp_path, "--api-key", "s3cret key", "-n", "4")
    try:
        line = proc.stdout.readline()
        assert line.strip().startswith("try: curl"), line
        done = subprocess.run(line.strip()[len("try: "):] + " -s -o /dev/null -w '%{http_code}'", shell=True,
                              capture_output=True, text=True, timeout=120)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert done.stdout == "200", (line, done.stdout, done.stderr)
