"""Constrained generation on the real model: GBNF grammars through llama.cpp's grammar sampler and logit bias
(``inspector.engine.constraints``, ``inspector.llama.grammar``), plain and speculative.

Never the model's particular words: each test compares two runs on this machine (speculative against plain
decoding under the same constraints), or checks what a constraint guarantees (the text matches the grammar, a
banned token never appears). Cases that need a particular proposal are built from a plain run's own tokens.
"""

from __future__ import annotations

import math
import re

import pytest

from inspector.engine import Generation, GenerationSettings
from inspector.engine.constraints import Constraints
from inspector.engine.settings import SamplingSettings
from inspector.llama.grammar import GrammarRefused
from inspector.receipts.document import validate_document
from inspector.session.document import build_document
from inspector.sources import NgramSource, ScriptedSource

COPY = "Copy this list exactly, twice: 4, 8, 15, 16, 23, 42, 4, 8, 15, 16, 23, 42."
NUMBERS = r'root ::= item ("," " " item)*' + "\n" + r'item ::= [0-9]+'
NUMBERS_RE = re.compile(r"^[0-9]+(, [0-9]+)*$")
MAX = 32


def run(make_generation, chat_tokens, source, constraints, prompt=COPY, **settings):
    g = make_generation(source, chat_tokens(prompt), max_new_tokens=settings.pop("max_new_tokens", MAX), **settings)
    g.constraints = None if constraints is None or constraints.empty else constraints
    g.run()
    return g


def assert_same_or_near_tie(scheduler, prompt, a, b, c: Constraints | None) -> None:
    """``a == b``, or they first differ where the two tokens' (biased) logits are within 1 of each other: batch
    arithmetic may flip a near-tie (the SPEC's allowance); both tokens were allowed by the grammar there."""
    if a == b:
        return
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    assert k < min(len(a), len(b)), "one output is a prefix of the other"

    def measure(rt):
        sid = rt.open_session()
        try:
            rt.prefill(sid, list(prompt) + list(a[:k]), 0)
            return rt.last_logits(1)[0].copy()
        finally:
            rt.drop_session(sid)

    row = scheduler.execute("stats", -1, measure).value
    for token, bias in (c.logit_bias if c is not None else ()):
        row[token] += bias
    margin = abs(float(row[a[k]]) - float(row[b[k]]))
    print(f"near-tie divergence at token {k}: {a[k]} vs {b[k]}, logit margin {margin:.4f}")
    assert margin < 1.0, f"the outputs differ at token {k} where the target was sure (margin {margin:.3f})"


def text_of(runtime, g) -> str:
    return runtime.detokenize([t for t in g.generated if not runtime.is_eog(t)])


def test_speculative_output_under_a_grammar_equals_plain_decoding_and_matches_it(make_generation, chat_tokens,
                                                                                   runtime, scheduler):
    c = Constraints(grammar=NUMBERS)
    plain = run(make_generation, chat_tokens, None, c)
    spec = run(make_generation, chat_tokens, NgramSource(n_max=3, n_min=1), c)
    assert_same_or_near_tie(scheduler, chat_tokens(COPY), plain.generated, spec.generated, c)
    assert NUMBERS_RE.match(text_of(runtime, plain)), text_of(runtime, plain)
    assert spec.receipts, "the n-gram source proposed nothing"
    free = run(make_generation, chat_tokens, None, None)
    assert free.generated != plain.generated  # the grammar changed something (a chat answer is not only digits)


def test_a_proposed_token_the_grammar_forbids_is_never_accepted_and_the_receipt_says_so(make_generation,
                                                                                         chat_tokens, runtime,
                                                                                         tmp_path):
    c = Constraints(grammar=NUMBERS)
    plain = run(make_generation, chat_tokens, None, c)
    out = plain.generated
    letter = runtime.tokenize("Z")[0]  # never allowed by NUMBERS
    # window 1 proposes the plain run's next token (accepted), then a letter; window 2 a letter first
    script = ScriptedSource(proposals=[[out[1], letter, out[3]], [letter, out[3]]])
    g = run(make_generation, chat_tokens, script, c)
    assert g.generated == plain.generated
    first, second = g.receipts[0], g.receipts[1]
    assert (first.accepted_proposal_tokens, first.grammar_rejected_row) == (1, 1)
    assert (second.accepted_proposal_tokens, second.grammar_rejected_row) == (0, 0)
    assert letter not in g.generated
    doc = build_document(g, runtime, prompt_text=COPY, templated_text=None, raw=False)
    validate_document(doc)
    assert [w.get("grammar_rejected_row") for w in doc["windows"][:2]] == [1, 0]
    from inspector.gui.windows.table import entry_values  # the windows table says so (no Qt widget needed)
    from inspector.session.entries import WindowEntry

    assert entry_values(WindowEntry(1, first, None))[1] == f"{first.disposition} (grammar)"


def test_a_mismatch_the_grammar_allows_is_not_called_a_grammar_rejection(make_generation, chat_tokens, runtime):
    c = Constraints(grammar=NUMBERS)
    plain = run(make_generation, chat_tokens, None, c)
    out = plain.generated
    other = next(t for t in runtime.tokenize("0123456789") if t != out[1])  # allowed, not the target's choice
    g = run(make_generation, chat_tokens, ScriptedSource(proposals=[[other]]), c)
    assert g.generated == plain.generated
    if g.receipts[0].accepted_proposal_tokens == 0 and other != out[1]:
        assert g.receipts[0].grammar_rejected_row is None


def test_the_grammar_state_follows_the_committed_tokens_after_a_cancellation_and_resume(make_generation,
                                                                                       chat_tokens, runtime):
    from inspector.engine import Fault, FaultPlan

    c = Constraints(grammar=NUMBERS)
    plain = run(make_generation, chat_tokens, NgramSource(n_max=3, n_min=1), c)
    window = next(r.window_index for r in plain.receipts if r.canonical_prediction_count >= 2)
    g = make_generation(NgramSource(n_max=3, n_min=1), chat_tokens(COPY), max_new_tokens=MAX,
                        faults=FaultPlan([Fault("cancel", window=window, token=1)]))
    g.constraints = c
    with pytest.raises(Exception):
        g.run()
    g.resume()
    g.run()
    assert g.generated == plain.generated


def test_logit_bias_bans_the_first_token_greedy_and_speculative_agree(make_generation, chat_tokens, runtime,
                                                                      scheduler):
    free = run(make_generation, chat_tokens, None, None)
    banned = free.generated[0]
    c = Constraints(logit_bias=((banned, -math.inf),))
    plain = run(make_generation, chat_tokens, None, c)
    spec = run(make_generation, chat_tokens, NgramSource(n_max=3, n_min=1), c)
    assert banned not in plain.generated and banned not in spec.generated
    assert_same_or_near_tie(scheduler, chat_tokens(COPY), plain.generated, spec.generated, c)


def test_sampled_decoding_under_a_grammar_matches_it_and_repeats_with_its_seed(make_generation, chat_tokens,
                                                                             runtime):
    c = Constraints(grammar=NUMBERS, logit_bias=((runtime.tokenize("7")[0], 2.0),))
    sampling = SamplingSettings(temperature=0.8, seed=7)
    a = run(make_generation, chat_tokens, NgramSource(n_max=3, n_min=1), c, sampling=sampling)
    a.close()  # the same session's cells again: another KV layout changes the logits' last bits, and the draws
    b = run(make_generation, chat_tokens, NgramSource(n_max=3, n_min=1), c, sampling=sampling)
    assert a.generated == b.generated
    assert NUMBERS_RE.match(text_of(runtime, a)), text_of(runtime, a)


def test_a_grammar_llama_cpp_cannot_parse_is_refused_without_harm(make_generation, chat_tokens, runtime):
    with pytest.raises(GrammarRefused):
        run(make_generation, chat_tokens, None, Constraints(grammar="root ::= undefined-rule"))
    g = run(make_generation, chat_tokens, None, None, max_new_tokens=4)  # the runtime still works
    assert g.generated


def test_constraints_check_their_values():
    with pytest.raises(ValueError):
        Constraints(logit_bias=((-1, 1.0),))
    with pytest.raises(ValueError):
        Constraints(logit_bias=((5, math.nan),))
    assert Constraints(grammar="  ").empty
    assert Constraints(logit_bias=((5, -math.inf),)).to_json()["logit_bias"] == [[5, False]]


def test_a_runtime_in_a_child_process_constrains_as_the_local_one(model_path, make_generation, chat_tokens, runtime):
    """``RemoteRuntime`` forwards ``constrain`` and ``grammar_rejection``: the same grammar, bias and scripted
    proposals give the same tokens and receipts' grammar rejections as the shared local runtime."""
    from inspector.engine import RuntimeScheduler
    from inspector.llama.remote import RemoteRuntime

    c = Constraints(grammar=NUMBERS, logit_bias=((runtime.tokenize("4")[0], -2.0),))
    local_plain = run(make_generation, chat_tokens, None, c, max_new_tokens=12)
    out = local_plain.generated
    letter = runtime.tokenize("Z")[0]
    script = [[out[1], letter], [letter]]
    local = run(make_generation, chat_tokens, ScriptedSource(proposals=script), c, max_new_tokens=12)
    rt = RemoteRuntime(model_path, n_ctx=1024, n_batch=256, n_seq_max=4)
    try:
        g = Generation(RuntimeScheduler(rt), ScriptedSource(proposals=script), chat_tokens(COPY),
                       GenerationSettings(max_new_tokens=12), constraints=c)
        g.run()
        assert g.generated == local.generated
        assert [r.grammar_rejected_row for r in g.receipts] == [r.grammar_rejected_row for r in local.receipts]
        assert [r.grammar_rejected_row for r in g.receipts][:2] == [1, 0]
        g.close()
    finally:
        rt.close()


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "minLength": 1}},
     "required": ["a"]},
    {"type": "array", "items": {"enum": ["x", 1, None]}, "minItems": 1, "maxItems": 4},
    {"type": "object"}, {}, {"const": {"k": [1, 2]}},
    {"type": "object", "properties": {"o": {"type": "object", "properties": {"n": {"type": "number"}}}},
     "additionalProperties": False},
    {"type": "object", "additionalProperties": {"type": "boolean"}},
])
def test_converted_schemas_are_grammars_llama_cpp_parses(runtime, schema):
    from inspector.llama.grammar import check_grammar
    from inspector.serve.json_grammar import schema_grammar

    assert check_grammar(runtime, schema_grammar(schema))
    assert check_grammar(runtime, schema_grammar(schema, wrap_chat=True))


def test_schemas_llama_cpp_refuses_are_refused_with_its_message():
    from inspector.serve.json_grammar import schema_grammar
    from inspector.serve.json_schema_read import SchemaUnsupported

    head = "JSON schema conversion failed:\n"
    for schema, message in (  # llama-server 0c1e570's messages for these schemas, as it answered them
            ({"$ref": "#/x"}, "JSON schema error at #: cannot resolve $ref #/x, x not found"),
            ({"$ref": "http://x/y"}, "JSON schema error at #: unsupported $ref http://x/y, only references into "
                                     "the same document are supported"),
            ({"type": "object", "properties": {"a": True}}, "JSON schema error at #/properties/a: schema must be "
                                                             "an object"),
            ({"type": "string", "pattern": "^(a$"}, "Invalid pattern ^(a$: unbalanced parentheses")):
        with pytest.raises(SchemaUnsupported) as e:
            schema_grammar(schema)
        assert str(e.value) == head + message


def test_request_constraints_are_read_as_llama_server_reads_them():
    from inspector.serve.constraint_params import parse_constraints
    from inspector.serve.errors import ApiError

    r = parse_constraints({"logit_bias": [[5, False], ["ab", 1], [1], [2, "x"], [3, True]]}, "completion")
    assert r.bias == ((5, -math.inf), ("ab", 1.0)) and r.grammar is None
    r = parse_constraints({"logit_bias": {"12": -1, " 7": 2, "12x": 3, "": 4, "t": False}}, "completions")
    assert r.bias == ((12, -1.0), (7, 2.0), ("12x", 3.0), (0, 4.0), ("t", -math.inf))
    assert parse_constraints({"logit_bias": 5}, "completion") is None
    assert parse_constraints({"grammar": ""}, "completion") is None
    both = parse_constraints({"json_schema": {"type": "integer"}, "grammar": 'root ::= "a"'}, "completion")
    assert both.grammar == 'root ::= "a"'  # /completion: the grammar wins when both are sent
    assert 'root ::= ("-"? integral-part)\n' in parse_constraints({"json_schema": {"type": "integer"}}, "completion").grammar
    chat = parse_constraints({"response_format": {"type": "json_object"}}, "chat").grammar
    assert chat.splitlines()[-1].startswith("root ::= space space")
    assert parse_constraints({"response_format": {"type": "text"}}, "chat") is None
    with pytest.raises(ApiError) as e:
        parse_constraints({"json_schema": {}, "grammar": "x"}, "chat")
    assert e.value.status == 500
    with pytest.raises(ApiError) as e:
        parse_constraints({"response_format": {"type": "yaml"}}, "chat")
    assert e.value.status == 400


def test_a_grammar_whose_repetition_maximum_is_below_its_minimum_is_refused_before_llama_cpp_sees_it(runtime):
    """llama.cpp's grammar parser runs out of memory and aborts the process on ``{5,2}`` (llama-server dies):
    refused with one line, and the server's runtime still answers."""
    from inspector.serve.constraint_params import RequestConstraints, resolve_constraints
    from inspector.serve.errors import ApiError

    with pytest.raises(ApiError, match=r"\{5,2\}"):
        resolve_constraints(runtime, RequestConstraints('root ::= "a"{5,2}', ()))
    assert resolve_constraints(runtime, RequestConstraints('root ::= "a{5,2}" [{] "a"{2,5}', ())).grammar
