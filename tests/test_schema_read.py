"""How a JSON schema is read into kinds (``inspector.serve.json_schema_read``, a port of llama.cpp 0c1e570's
``common/json-schema.cpp``), on tiny schemas with the expected kinds written by hand; and the grammars of
llama.cpp's own converter tests (``tests/data/llama_cpp_json_schema_cases.json``: the cases and expected
grammars of its ``tests/test-json-schema-to-grammar.cpp``, taken as they are).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inspector.serve.json_grammar import SchemaRules, literal, schema_grammar
from inspector.serve.json_schema_read import INT64_MAX, INT64_MIN, SchemaUnsupported, read_schema

SPACE = '| " " | "\\n"{1,2} [ \\t]{0,20}'
CASES = json.loads((Path(__file__).parent / "data" / "llama_cpp_json_schema_cases.json").read_text("utf-8"))["cases"]


def kinds(node) -> list[str]:
    return [child.kind for child in node.children]


def refused(schema) -> str:
    with pytest.raises(SchemaUnsupported) as e:
        read_schema(schema)
    return str(e.value)


def test_an_empty_schema_and_annotations_alone_read_as_any_value():
    for schema in ({}, {"title": "T", "description": "d", "default": 3, "$schema": "x", "examples": [1]},
                   {"format": "email"}, {"additionalProperties": True}):
        assert read_schema(schema).kind == "any", schema


def test_a_type_array_reads_as_one_alternative_per_type_each_with_the_other_keywords():
    node = read_schema({"type": ["string", "null", "integer"], "maxLength": 3, "minimum": 2})
    assert node.kind == "anyOf" and kinds(node) == ["string", "null", "integer"]
    assert node.children[0].max_length == 3 and node.children[2].minimum == 2


def test_one_of_is_read_before_any_of_and_both_as_alternatives():
    node = read_schema({"anyOf": [{"type": "null"}], "oneOf": [{"type": "boolean"}, {"type": "number"}]})
    assert node.kind == "anyOf" and kinds(node) == ["boolean", "number"]
    assert kinds(read_schema({"anyOf": [{"type": "string"}, {"type": "null"}]})) == ["string", "null"]


def test_a_ref_wins_over_every_other_keyword_and_points_at_its_target():
    node = read_schema({"$ref": "#/$defs/A", "type": "string", "$defs": {"A": {"type": "integer"}}})
    assert node.kind == "ref" and node.ref == "#/$defs/A" and node.target.kind == "integer"


def test_definitions_and_array_indexes_resolve_and_a_cycle_reads_once():
    node = read_schema({"properties": {"n": {"$ref": "#/definitions/N"}, "l": {"$ref": "#/x/1"}},
                        "x": [{"type": "null"}, {"type": "boolean"}],
                        "definitions": {"N": {"properties": {"next": {"$ref": "#/definitions/N"}}}}})
    (_, n, _), (_, lst, _) = node.properties
    assert lst.target.kind == "boolean"
    assert n.target.kind == "object" and n.target.properties[0][1].target is n.target


def test_refs_llama_cpp_cannot_resolve_are_refused_with_its_messages():
    head = "JSON schema conversion failed:\nJSON schema error at "
    assert refused({"$ref": "https://example.com/s.json"}) == (
        head + "#: unsupported $ref https://example.com/s.json, only references into the same document are supported")
    assert refused({"$ref": "#/$defs/B", "$defs": {}}) == head + "#: cannot resolve $ref #/$defs/B, B not found"
    assert refused({"$ref": "#/a/3", "a": [1]}) == head + "#: cannot resolve $ref #/a/3, 3 is out of range"
    assert refused({"$ref": 7}) == head + "#: $ref must be a string"
    with pytest.raises(SchemaUnsupported) as e:
        read_schema({"$ref": 7})
    assert e.value.chat == "JSON schema error at #: $ref must be a string"  # the chat route's words
    assert refused({"$ref": "#/a", "a": True}) == head + "#/a: schema must be an object"


def test_const_and_enum_are_read_before_the_type():
    assert read_schema({"type": "string", "const": None}).kind == "const"
    node = read_schema({"type": "integer", "enum": ["a", 1]})
    assert node.kind == "enum" and node.values == ["a", 1]
    assert "enum must be a non-empty array" in refused({"enum": []})


def test_without_a_type_properties_then_all_of_then_items_then_string_keywords_decide():
    assert read_schema({"properties": {}, "allOf": [{}], "items": {}}).kind == "object"
    assert read_schema({"additionalProperties": False}).kind == "object"
    assert read_schema({"allOf": [{}], "items": {}}).kind == "allOf"
    assert read_schema({"prefixItems": [{}], "pattern": "^a$"}).kind == "tuple"
    assert read_schema({"items": {"type": "null"}, "pattern": "^a$"}).kind == "array"
    for schema in ({"pattern": "^a$"}, {"minLength": 1}, {"maxLength": 1}, {"format": "date"}):
        assert read_schema(schema).kind == "string", schema


def test_all_of_counts_on_a_string_or_an_object_without_properties_only():
    assert read_schema({"type": "string", "allOf": [{"enum": ["a"]}]}).kind == "allOf"
    assert read_schema({"type": "object", "allOf": [{"properties": {}}]}).kind == "allOf"
    assert read_schema({"type": "object", "properties": {}, "allOf": [{}]}).kind == "object"
    assert read_schema({"type": "integer", "allOf": [{"maximum": 3}]}).maximum == INT64_MAX


def test_integer_bounds_are_inclusive_rounded_inwards_and_exclusive_ones_moved_by_one():
    node = read_schema({"type": "integer"})
    assert (node.minimum, node.maximum) == (INT64_MIN, INT64_MAX)
    node = read_schema({"type": "integer", "minimum": 1.5, "maximum": 9.5})
    assert (node.minimum, node.maximum) == (2, 9)
    node = read_schema({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10})
    assert (node.minimum, node.maximum) == (1, 9)
    node = read_schema({"type": "integer", "exclusiveMinimum": 0.5, "exclusiveMaximum": 9.5})
    assert (node.minimum, node.maximum) == (1, 9)
    node = read_schema({"type": "integer", "minimum": 3, "exclusiveMinimum": 7})  # minimum wins
    assert node.minimum == 3


def test_a_draft_4_boolean_exclusive_bound_is_refused_as_llama_cpp_refuses_it():
    assert refused({"type": "integer", "exclusiveMinimum": True}).endswith("#: exclusiveMinimum must be a number")


def test_number_bounds_change_nothing():
    node = read_schema({"type": "number", "minimum": 0, "maximum": 1, "exclusiveMinimum": True})
    assert node.kind == "number"


def test_strings_keep_pattern_format_and_lengths_and_only_known_formats_count():
    node = read_schema({"type": "string", "pattern": "^[a-z]+$", "format": "date", "minLength": 2, "maxLength": 8})
    assert (node.pattern, node.format, node.min_length, node.max_length) == ("^[a-z]+$", "date", 2, 8)
    for fmt, kind in (("uuid", "uuid"), ("uuid3", "uuid"), ("uuid6", ""), ("time", "time"),
                      ("date-time", "date-time"), ("email", ""), ("uri", "")):
        assert read_schema({"type": "string", "format": fmt}).format == kind, fmt
    assert refused({"type": "string", "format": 3}).endswith("format must be a string")
    assert refused({"type": "string", "pattern": 3}).endswith("pattern must be a string")


def test_counts_must_be_non_negative_integers():
    for key in ("minItems", "maxItems"):
        for bad in (-1, 1.5, "2", True):
            assert refused({"type": "array", key: bad}).endswith(f"#: {key} must be a non-negative integer")
    assert refused({"type": "string", "maxLength": -2}).endswith("maxLength must be a non-negative integer")


def test_items_win_over_prefix_items_and_an_array_of_items_reads_as_a_tuple():
    node = read_schema({"type": "array", "items": {"type": "string"}, "prefixItems": [{}], "minItems": 1})
    assert node.kind == "array" and node.items.kind == "string" and node.min_items == 1
    node = read_schema({"type": "array", "prefixItems": [{"type": "null"}, {"type": "boolean"}], "minItems": -5})
    assert node.kind == "tuple" and kinds(node) == ["null", "boolean"]  # a tuple reads no counts
    node = read_schema({"type": "array"})
    assert node.items.kind == "any" and (node.min_items, node.max_items) == (0, -1)


def test_objects_keep_property_order_required_names_and_additional_properties():
    node = read_schema({"type": "object", "properties": {"b": {}, "a": {"type": "null"}},
                        "required": ["a", 3, "zz"], "additionalProperties": {"type": "integer"}})
    assert [(name, sub.kind, req) for name, sub, req in node.properties] == [("b", "any", False), ("a", "null", True)]
    assert node.additional.kind == "integer"
    assert read_schema({"type": "object"}).additional.kind == "any"
    assert read_schema({"type": "object", "properties": {}}).additional is None
    assert read_schema({"type": "object", "additionalProperties": False}).additional is None
    assert read_schema({"type": "object", "required": "a"}).properties == []
    assert refused({"type": "object", "additionalProperties": 1}).endswith(
        "additionalProperties must be a boolean or a schema")
    assert refused({"type": "object", "properties": []}).endswith("properties must be an object")


def test_type_errors_name_the_path_where_they_are():
    assert refused({"properties": {"a": {"type": "widget"}}}).endswith("#/properties/a: unrecognized type widget")
    assert refused({"anyOf": [{}, {"type": 3}]}).endswith("#/anyOf/1: type must be a string or an array of strings")
    assert refused({"type": []}).endswith("#: type must not be empty")
    assert refused({"oneOf": []}).endswith("#/oneOf: must not be empty")
    assert refused({"allOf": {}}).endswith("#/allOf: must be an array of schemas")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_llama_cpp_converter_tests_give_their_expected_grammars(case):
    if not case["ok"]:
        with pytest.raises(SchemaUnsupported):
            schema_grammar(case["schema"])
        return
    assert schema_grammar(case["schema"]) == case["grammar"]


def test_a_grammar_literal_escapes_the_backslash_as_llama_cpp_does():
    assert literal('a\\b"c\nd\re') == '"a\\\\b\\"c\\nd\\re"'


def test_tool_schemas_visited_by_path_get_rule_names_of_their_own():
    rules = SchemaRules()
    one = rules.visit({"type": "object", "properties": {"a": {"type": "integer"}}}, "/tools/0/function/parameters")
    two = rules.visit({"type": "object", "properties": {"a": {"type": "string"}}}, "/tools/1/function/parameters")
    assert (one, two) == ("tools-0-function-parameters", "tools-1-function-parameters")
    assert rules.rules["tools-1-function-parameters-a-kv"] == '"\\"a\\"" space ":" space string'
    assert "root" not in rules.rules


def test_a_repetition_llama_cpps_grammar_parser_would_abort_on_is_refused():
    with pytest.raises(SchemaUnsupported, match=r"\{19,15\}"):
        schema_grammar({"type": "integer", "minimum": 2**62})
    with pytest.raises(SchemaUnsupported, match=r"\{5,2\}"):
        schema_grammar({"type": "string", "pattern": "^a{5,2}$"})
    assert schema_grammar({"const": "{5,2}"}) == 'root ::= "\\"{5,2}\\""\nspace ::= ' + SPACE + "\n"  # a literal


def test_a_conversion_error_reads_the_same_on_the_chat_route_and_on_completion():
    with pytest.raises(SchemaUnsupported) as e:
        schema_grammar({"type": "string", "pattern": "^(a$"})
    assert e.value.chat == str(e.value) == "JSON schema conversion failed:\nInvalid pattern ^(a$: unbalanced parentheses"


def test_non_ascii_in_a_pattern_converts_as_llama_cpp_converts_it_bytewise():
    # llama-server 0c1e570 wrote this grammar for the pattern
    assert schema_grammar({"type": "string", "pattern": "^café[é-ü]x$"}) == (
        'root ::= "\\"" ("café" [é-ü] "x") "\\""\nspace ::= ' + SPACE + "\n")
    # there, a quantifier after "é" applies to its last UTF-8 byte: llama-server cannot parse its own grammar
    with pytest.raises(SchemaUnsupported, match="non-ASCII"):
        schema_grammar({"type": "string", "pattern": "^é+$"})
