"""Constrained requests to ``spec-inspector serve`` and to a real llama-server (same llama.cpp, 0c1e570):
``response_format`` with a JSON schema, ``json_schema`` and a GBNF ``grammar`` on ``/completion``, and
``logit_bias`` banning the token llama-server's unbiased answer began with, all greedy and with speculation on
(serve's ``ngram-simple`` source; llama-server with the equivalent flags, ``server_arguments``), one server after
the other (never both decoding). Also the ``logit_bias`` / grammar request forms each server takes or refuses.

Nothing names the model's words: whatever this CPU gives, both programs must give it.
"""

from __future__ import annotations

import json

import httpx
import jsonschema_rs
import pytest

from inspector.engine import GenerationSettings
from inspector.engine.settings import SamplingSettings
from inspector.llama.server_parity import server_context
from inspector.serve.params import ServeDefaults
from inspector.serve.server import InspectorServer, ServeOptions
from inspector.sources.server_flags import server_arguments

pytestmark = pytest.mark.slow

N = 40
SOURCE, OPTIONS, DRAFT_MAX = "ngram-simple", {"size_n": 3, "size_m": 16}, 16
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"},
                                           "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
          "required": ["name", "age"], "additionalProperties": False}
NUMBERS = 'root ::= item ("," " " item)*\nitem ::= [0-9]+\n'
COPY = "Copy this list exactly, twice: 4, 8, 15, 16, 23, 42, 4, 8, 15, 16, 23, 42.\n"
PERSON_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                                  "born": {"type": "integer"}},
                 "required": ["name", "born"], "additionalProperties": False}
"""A chat answer short enough to end within ``N`` tokens, so it can be validated."""
COMPACT = ('Reply with this JSON only, on one line, nothing else: {"name": "Ada Lovelace", "born": 1815}')
PERSON = "Describe the person Ada Lovelace, born 1815, as JSON with her name, age at death (36) and tags."


def _requests(ban: int) -> list[tuple[str, str, dict]]:
    """(name, path, body): the constrained requests, greedy, each at most ``N`` tokens."""
    base = {"temperature": 0, "n_predict": N}
    return [
        ("response_format", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": COMPACT}], "max_tokens": N, "temperature": 0,
          "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA}}}),
        ("json_object", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": PERSON}], "max_tokens": N, "temperature": 0,
          "response_format": {"type": "json_object"}}),
        ("grammar", "/completion", {"prompt": COPY, "grammar": NUMBERS, **base}),
        ("json_schema", "/completion", {"prompt": PERSON + "\n", "json_schema": SCHEMA, **base}),
        ("logit_bias", "/completion", {"prompt": COPY, "logit_bias": [[ban, False]], "return_tokens": True, **base}),
        ("logit_bias object", "/v1/completions", {"prompt": COPY, "logit_bias": {str(ban): -100}, "max_tokens": N,
                                                   "temperature": 0}),
    ]


FORMS = [
    ("array with a text", {"logit_bias": [["4", -5.0], [10, 1.5]]}),
    ("object with a text key", {"logit_bias": {"4": False, " the": -3, "12x": 2}}),
    ("malformed entries", {"logit_bias": [[1], [2, "x"], [3, True], "a", [99999999, -1]]}),
    ("a number", {"logit_bias": 5}),
    ("null", {"logit_bias": None}),
    ("a bad grammar", {"grammar": "root ::= missing"}),
    ("an empty grammar", {"grammar": ""}),
]
"""``/completion`` bodies (with a prompt, 4 greedy tokens) whose acceptance both servers must share."""
CHAT_FORMS = [
    ("response_format text", {"response_format": {"type": "text"}}),
    ("response_format of an unknown type", {"response_format": {"type": "yaml"}}),
    ("json_schema and grammar", {"json_schema": {"type": "object"}, "grammar": "root ::= \"a\""}),
    ("logit_bias on chat", {"logit_bias": {"4": False}}),
]
"""``/v1/chat/completions`` bodies (a short question, 4 greedy tokens) whose acceptance both servers must share."""


def _content(path: str, reply: dict) -> str:
    if path == "/v1/chat/completions":
        return reply["choices"][0]["message"]["content"]
    if path == "/v1/completions":
        return reply["choices"][0]["text"]
    return reply["content"]


def _session(url: str, ban: int) -> dict:
    out = {}
    with httpx.Client(base_url=url, timeout=600, trust_env=False) as client:
        for name, path, body in _requests(ban):
            r = client.post(path, json=body)
            out[name] = (r.status_code, r.json())
        for name, extra in FORMS:
            r = client.post("/completion", json={"prompt": COPY, "n_predict": 4, "temperature": 0, **extra})
            out["form: " + name] = (r.status_code, r.json())
        for name, extra in CHAT_FORMS:
            r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                          "max_tokens": 4, "temperature": 0, **extra})
            out["chat form: " + name] = (r.status_code, r.json())
    return out


def _first_token(url: str) -> int:
    with httpx.Client(base_url=url, timeout=600, trust_env=False) as client:
        r = client.post("/completion", json={"prompt": COPY, "n_predict": 1, "temperature": 0, "return_tokens": True})
        assert r.status_code == 200, r.text
        return r.json()["tokens"][0]


def test_constrained_requests_are_answered_as_llama_server_answers_them(runtime, scheduler, start_llama_server):
    flags = server_arguments(SOURCE, OPTIONS, draft_max=DRAFT_MAX)
    flags += ["-b", str(runtime.n_batch), *server_context(runtime).server_args()]
    server = start_llama_server(args=flags, threads=1, n_ctx=runtime.n_ctx)
    try:
        ban = _first_token(server.url)
        theirs = _session(server.url, ban)
    finally:
        server.stop()
    template = GenerationSettings(draft_max=DRAFT_MAX, proposal_deadline_ms=600_000.0)
    ours_server = InspectorServer(scheduler, str(runtime.model_path),
                                  ServeOptions(port=0, source=SOURCE, source_options=dict(OPTIONS), template=template,
                                               defaults=ServeDefaults(SamplingSettings(temperature=0.8)),
                                               receipts=None))
    ours_server.start()
    try:
        assert ours_server.wait_started()
        ours = _session(ours_server.address, ban)
    finally:
        ours_server.stop()

    wrong = []
    for name, path, _body in _requests(ban):
        (sa, a), (sb, b) = ours[name], theirs[name]
        if (sa, sb) != (200, 200):
            wrong.append(f"{name}: HTTP ours {sa} {str(a)[:200]}, llama-server's {sb} {str(b)[:200]}")
            continue
        ca, cb = _content(path, a), _content(path, b)
        if ca != cb:
            wrong.append(f"{name}: ours {ca!r}, llama-server's {cb!r}")
        da, db = ({k: x["timings"].get(k) for k in ("draft_n", "draft_n_accepted")} for x in (a, b))
        if da != db:  # speculation under the constraint: the same drafts, the same acceptance
            wrong.append(f"{name}: drafts ours {da}, llama-server's {db}")
    for name, _extra in FORMS:
        (sa, a), (sb, b) = ours["form: " + name], theirs["form: " + name]
        if sa != sb or (sa == 200 and a["content"] != b["content"]):
            wrong.append(f"form {name}: ours {sa} {str(a)[:160]}, llama-server's {sb} {str(b)[:160]}")
    for name, _extra in CHAT_FORMS:
        (sa, a), (sb, b) = ours["chat form: " + name], theirs["chat form: " + name]
        if sa != sb or (sa == 200 and _content("/v1/chat/completions", a) != _content("/v1/chat/completions", b)):
            wrong.append(f"chat form {name}: ours {sa} {str(a)[:160]}, llama-server's {sb} {str(b)[:160]}")
    assert not wrong, "\n".join(wrong)

    # what the constraints guarantee, on the answers both gave
    assert ban not in ours["logit_bias"][1]["tokens"]
    text = ours["json_schema"][1]["content"]
    if ours["json_schema"][1].get("stop_type") == "eos":
        jsonschema_rs.validate(SCHEMA, json.loads(text))
    assert ours["response_format"][1]["choices"][0]["finish_reason"] == "stop", "the chat answer did not end"
    jsonschema_rs.validate(PERSON_SCHEMA, json.loads(_content("/v1/chat/completions", ours["response_format"][1])))
    assert sum(ours[name][1]["timings"].get("draft_n", 0) for name in ("grammar", "json_schema", "logit_bias")) > 0, \
        "nothing was drafted under the constraints"
