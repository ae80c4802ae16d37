"""The grammar ``spec-inspector serve`` writes for a JSON schema (``inspector.serve.json_grammar``) accepts the
same texts as the one a real llama-server (llama.cpp 0c1e570) writes for it: each schema below goes to
llama-server's ``/completion`` as ``json_schema`` (its grammar read back from ``generation_settings.grammar``),
and llama.cpp's own grammar engine (``llama_sampler_init_grammar`` on the bundled model's vocabulary, the
text's tokens fed one by one, then the end-of-text token, allowed only when the grammar is complete) decides
for both grammars on JSON texts written by hand: ``good`` ones (valid instances) must be accepted by both,
``bad`` ones refused by both, ``either`` ones (where llama.cpp's grammar is looser or stricter than the
schema) treated alike. Also: the grammar text is llama-server's, and the schemas llama-server refuses are
refused here with its message.
"""

from __future__ import annotations

import math

import httpx
import llama_cpp
import pytest

from inspector.bench.server_process import LlamaServerProcess
from inspector.serve.constraint_params import parse_constraints
from inspector.serve.errors import ApiError
from inspector.serve.json_grammar import schema_grammar

pytestmark = pytest.mark.slow

ADDRESS = {"properties": {"street": {"title": "Street", "type": "string"},
                          "zip": {"anyOf": [{"type": "string", "pattern": "^[0-9]{5}$"}, {"type": "null"}],
                                  "default": None, "title": "Zip"}},
           "required": ["street"], "title": "Address", "type": "object"}
PERSON = {"$defs": {"Address": ADDRESS, "Role": {"enum": ["admin", "user"], "title": "Role", "type": "string"}},
          "properties": {"name": {"title": "Name", "type": "string"}, "address": {"$ref": "#/$defs/Address"},
                         "role": {"$ref": "#/$defs/Role", "default": "user"},
                         "tags": {"items": {"type": "string"}, "title": "Tags", "type": "array"}},
          "required": ["name", "address"], "title": "Person", "type": "object"}
"""What pydantic writes for a model with a nested model, an enum, an Optional field and a list."""
NODE = {"type": "object", "properties": {"v": {"type": "integer"},
                                         "next": {"anyOf": [{"$ref": "#/definitions/Node"}, {"type": "null"}]}}}
BASH = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": False,
        "properties": {"command": {"type": "string", "description": "The command to execute"},
                       "timeout": {"type": "number", "description": "Optional timeout in ms", "maximum": 600000},
                       "description": {"type": "string"}, "run_in_background": {"type": "boolean"}},
        "required": ["command"]}
"""Shaped as Claude Code's Bash tool."""
TODOS = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": False,
         "properties": {"todos": {"type": "array", "items": {
             "type": "object", "additionalProperties": False, "required": ["content", "status", "id"],
             "properties": {"content": {"type": "string", "minLength": 1},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                            "id": {"type": "string"}}}}},
         "required": ["todos"]}
"""Shaped as Claude Code's TodoWrite tool."""
SHELL = {"type": "object", "additionalProperties": False, "required": ["command"],
         "properties": {"command": {"type": "array", "items": {"type": "string"}},
                        "workdir": {"type": ["string", "null"]}, "timeout_ms": {"type": "integer", "minimum": 0}}}
"""Shaped as Codex's shell tool."""

CASES = [  # (name, schema, good, bad, either)
    ("anyOf Optional", {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Name"},
     ['"x"', "null", '""'], ["1", "nul", '"x', "true"], []),
    ("type array", {"type": ["string", "null"], "maxLength": 3},
     ['"abc"', "null", '""'], ['"abcd"', "0"], []),
    ("oneOf", {"oneOf": [{"type": "integer", "minimum": 1, "maximum": 5}, {"type": "boolean"}]},
     ["1", "5", "true", "false"], ["0", "6", "1.5", '"1"', "-1"], []),
    ("pydantic $defs and $ref", PERSON,
     ['{"name":"A","address":{"street":"S"}}',
      '{"name":"A","address":{"street":"S","zip":"12345"},"role":"admin","tags":["x","y"]}',
      '{"name": "A", "address": {"street": "S", "zip": null}, "tags": []}'],
     ['{"address":{"street":"S"},"name":"A"}', '{"name":"A","address":{"street":"S","zip":"1234"}}',
      '{"name":"A","address":{"street":"S"},"role":"root"}', '{"name":"A"}',
      '{"name":"A","address":{"street":"S"},"extra":1}'], []),
    ("recursive definitions", {"$ref": "#/definitions/Node", "definitions": {"Node": NODE}},
     ['{"v":1,"next":{"v":2,"next":null}}', "{}", '{"next":{"next":{}}}'],
     ['{"next":{"v":"x"}}', '{"v":1,"next":1}', '{"next":{"next":{"w":1}}}'], []),
    ("allOf of a $ref and an object",
     {"allOf": [{"$ref": "#/$defs/Base"},
                {"type": "object", "properties": {"extra": {"type": "boolean"}}, "required": ["extra"]}],
      "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}}},
     ['{"id":1,"extra":true}'], ['{"id":1}', '{"extra":true,"id":1}', '{"id":"1","extra":true}'], []),
    ("allOf of enums", {"allOf": [{"enum": ["a", "b", "c"]}, {"enum": ["b", "c", "d"]}]},
     ['"b"', '"c"'], ['"a"', '"d"'], []),
    ("integer between", {"type": "integer", "minimum": -5, "maximum": 120},
     ["-5", "-1", "0", "7", "99", "120"], ["-6", "121", "1000", "1.0"], ["-0", "007"]),
    ("integer exclusiveMinimum", {"type": "integer", "exclusiveMinimum": 0},
     ["1", "10", "123456"], ["0", "-1"], ["01"]),
    ("integer exclusiveMaximum", {"type": "integer", "exclusiveMaximum": 100},
     ["99", "-3", "0"], ["100", "101"], []),
    ("integer fractional bounds", {"type": "integer", "minimum": 1.5, "maximum": 1e3},
     ["2", "1000"], ["1", "1001"], []),
    ("integer negative minimum", {"type": "integer", "minimum": -300},
     ["-300", "-1", "0", "5000"], ["-301", "-1000"], []),
    ("integer negative maximum", {"type": "integer", "maximum": -17},
     ["-17", "-100"], ["-16", "0", "17"], []),
    ("integer wide range", {"type": "integer", "minimum": 12345, "maximum": 987654321},
     ["12345", "987654321", "500000"], ["12344", "987654322", "1000000000"], []),
    ("format date", {"type": "string", "format": "date"},
     ['"2024-02-29"'], ['"2024-13-01"', '"2024-2-01"'], ['"2023-02-31"']),
    ("format time", {"type": "string", "format": "time"},
     ['"23:59:59Z"', '"01:02:03.456+05:30"'], ['"24:00:00Z"', '"12:00:00"'], []),
    ("format date-time", {"type": "string", "format": "date-time"},
     ['"2024-01-31T12:00:00Z"'], ['"2024-01-31 12:00:00Z"'], []),
    ("format uuid", {"type": "string", "format": "uuid"},
     ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123e4567e89b12d3a456426614174000"'], []),
    ("format llama.cpp ignores", {"type": "string", "format": "email"}, ['"not an email"'], ["1"], []),
    ("prefixItems", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
     ['["a",1]', '[ "a", 1 ]'], ['["a"]', '["a",1,2]', '[1,"a"]'], []),
    ("items count", {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
     ["[1]", "[1,2,3]"], ["[]", "[1,2,3,4]", '["1"]'], []),
    ("string length", {"type": "string", "minLength": 2, "maxLength": 3},
     ['"ab"', '"abc"', '"\\n\\t"'], ['"a"', '"abcd"'], []),
    ("additionalProperties next to properties",
     {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}},
     ['{"a":"x","b":1}', '{"b":1,"c":2}', "{}", '{"a":"x"}', '{"ab":1}'],
     ['{"b":"x"}', '{"a":1}', '{"b":1,"a":"x"}'], []),
    ("const and enum",
     {"type": "object", "properties": {"kind": {"const": "circle"}, "unit": {"enum": ["cm", "in", None, 1.5]}},
      "required": ["kind"]},
     ['{"kind":"circle"}', '{"kind":"circle","unit":null}', '{"kind":"circle","unit":1.5}'],
     ['{"kind":"square"}', '{"kind":"circle","unit":"mm"}', '{"kind":"circle","unit":1.50}'], []),
    ("pattern", {"type": "string", "pattern": "^[a-z]+(-[a-z0-9]+)*$"},
     ['"abc"', '"a-b1-c"'], ['"Abc"', '"a-"', '"-a"', '""'], []),
    ("pattern with counted groups", {"type": "string", "pattern": "^(ab|cd){2,3}x?$"},
     ['"abab"', '"cdabcdx"'], ['"ab"', '"abababab"', '"ababy"'], []),
    ("pattern llama.cpp does not convert", {"type": "string", "pattern": "^\\d+$"},
     ['"abc"', '"12"'], ["12"], []),
    ("pattern not anchored", {"type": "string", "pattern": "a+"}, ['"bbb"'], ["1"], []),
    ("discriminated anyOf",
     {"anyOf": [{"type": "object", "properties": {"type": {"const": "a"}, "x": {"type": "integer"}},
                 "required": ["type", "x"]},
                {"type": "object", "properties": {"type": {"const": "b"}, "y": {"type": "string"}},
                 "required": ["type"]}]},
     ['{"type":"a","x":1}', '{"type":"b"}', '{"type":"b","y":"s"}'], ['{"type":"a"}', '{"type":"c"}'], []),
    ("non-ASCII names with additional properties",
     {"type": "object", "properties": {"é": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}},
     ['{"é":1}', '{"x":true}', '{"é":1,"ü":false}'], ['{"é":true}'], []),
    ("number", {"type": "number", "minimum": 0}, ["1", "-1.5e10", "0.25"], ["01", "1.", ".5", "+1"], []),
    ("numbers and escapes as llama.cpp's JSON writes them",
     {"type": "object", "properties": {
         'q"uo\\te': {"enum": [1e15, 1e-5, 0.1, -0.0, 1180591620717411303424]},
         "c": {"const": {"b": "\u0001/\\é", "a": [True, None]}}}},
     ['{"q\\"uo\\\\te":1e+15}', '{"q\\"uo\\\\te":-0.0}', '{"q\\"uo\\\\te":1.1805916207174113e+21}',
      '{"c":{"b":"\\u0001/\\\\é","a":[true,null]}}'],
     ['{"q\\"uo\\\\te":1000000000000000.0}', '{"q\\"uo\\\\te":0.00001}', '{"c":{"b":"\\u0001/\\\\é"}}'], []),
    ("Claude Code Bash tool", BASH,
     ['{"command":"ls -la"}', '{"command":"ls","timeout":1000,"run_in_background":true}',
      '{\n  "command": "echo \\"hi\\"",\n  "description": "say hi"\n}'],
     ['{"timeout":5}', '{"command":"ls","extra":1}', '{"command":"ls","run_in_background":"yes"}',
      ' {"command":"ls"}'], []),
    ("Claude Code TodoWrite tool", TODOS,
     ['{"todos":[{"content":"x","status":"pending","id":"1"}]}', '{"todos":[]}'],
     ['{"todos":[{"content":"","status":"pending","id":"1"}]}',
      '{"todos":[{"content":"x","status":"done","id":"1"}]}'], []),
    ("Codex shell tool", SHELL,
     ['{"command":["ls","-la"],"workdir":null,"timeout_ms":0}', '{"command":[],"workdir":"/tmp"}'],
     ['{"command":["ls"],"timeout_ms":-1}', '{"command":"ls"}'], []),
]
REFUSED = [  # schemas llama-server refuses: its message must be ours
    {"$ref": "https://example.com/schema.json"},
    {"$ref": "#/$defs/Missing", "$defs": {}},
    {"type": "object", "properties": {"a": True}},
    {"type": "integer", "exclusiveMinimum": True},
    {"type": "string", "pattern": "^(a$"},
    {"type": "widget"},
]


@pytest.fixture(scope="module")
def theirs(llama_server_binary, runtime):
    """llama-server's grammar for each case (name -> GBNF) and its error message for each refused schema."""
    grammars, errors = {}, []
    with LlamaServerProcess(llama_server_binary, runtime.model_path, args=["--verbose"], threads=1,
                            n_ctx=1024) as server:
        with httpx.Client(base_url=server.url, timeout=120, trust_env=False) as client:
            for name, schema, *_ in CASES:
                r = client.post("/completion", json={"prompt": "x", "n_predict": 1, "json_schema": schema})
                assert r.status_code == 200, f"{name}: {r.text[:300]}"
                grammars[name] = r.json()["generation_settings"]["grammar"]
            for schema in REFUSED:
                r = client.post("/completion", json={"prompt": "x", "n_predict": 1, "json_schema": schema})
                errors.append((r.status_code, r.json().get("error", {}).get("message")))
    return grammars, errors


@pytest.fixture(scope="module")
def accepts(runtime):
    """``accepts(gbnf, text)``: llama.cpp's grammar engine takes every token of ``text`` and then the end."""
    vocab = llama_cpp.llama_model_get_vocab(runtime.model)
    eos = llama_cpp.llama_vocab_eos(vocab)

    def allowed(sampler, token: int) -> bool:
        one = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 1.0, 0.0))
        arr = llama_cpp.llama_token_data_array(data=one, size=1, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(sampler, llama_cpp.ctypes.byref(arr))
        return one[0].logit != -math.inf

    def check(gbnf: str, text: str) -> bool:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
        assert sampler, f"llama.cpp does not parse the grammar:\n{gbnf}"
        try:
            for token in runtime.tokenize(text, add_special=False, parse_special=False):
                if not allowed(sampler, token):
                    return False
                llama_cpp.llama_sampler_accept(sampler, token)
            return allowed(sampler, eos)
        finally:
            llama_cpp.llama_sampler_free(sampler)

    return check


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_our_grammar_accepts_what_llama_servers_accepts(case, theirs, accepts):
    name, schema, good, bad, either = case
    theirs_gbnf, ours_gbnf = theirs[0][name], schema_grammar(schema)
    wrong = []
    for text in good + bad + either:
        a, b = accepts(ours_gbnf, text), accepts(theirs_gbnf, text)
        if a != b:
            wrong.append(f"{text!r}: ours {'accepts' if a else 'refuses'}, llama-server's "
                         f"{'accepts' if b else 'refuses'}")
        elif text in good and not a:
            wrong.append(f"{text!r} (valid) refused by both")
        elif text in bad and a:
            wrong.append(f"{text!r} (invalid) accepted by both")
    assert not wrong, "\n".join(wrong)


def test_the_grammar_text_is_llama_servers(theirs):
    differ = [name for name, schema, *_ in CASES if schema_grammar(schema) != theirs[0][name]]
    assert not differ, differ


def test_schemas_llama_server_refuses_are_refused_with_its_message(theirs):
    for schema, (status, message) in zip(REFUSED, theirs[1]):
        assert status == 400, (schema, message)
        with pytest.raises(ApiError) as e:
            parse_constraints({"json_schema": schema}, "completion")
        assert e.value.status == 400
        # llama-server's field parser puts "Field 'json_schema': " before the converter's message
        assert message.endswith(e.value.message), (schema, message, e.value.message)
