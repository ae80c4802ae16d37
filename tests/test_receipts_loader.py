"""Hostile receipts files: a clear ReceiptsFileError or a valid document, never another exception."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st

from inspector.receipts import ReceiptsFileError, load_document

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=30,
)
KEYS = ["schema", "schema_version", "tool", "model", "settings", "prompt", "output", "windows", "discards",
        "events", "summary"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(KEYS), json_values, max_size=len(KEYS)), st.booleans())
def test_random_documents_give_a_clear_error_or_load(tmp_path, doc, right_schema):
    if right_schema:
        doc["schema"] = "spec-inspector/receipts"
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    try:
        assert isinstance(load_document(f), dict)
    except ReceiptsFileError as exc:
        assert str(f) in str(exc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_random_bytes_give_a_clear_error(tmp_path, data):
    f = tmp_path / "r.json"
    f.write_bytes(data)
    try:
        load_document(f)
    except ReceiptsFileError as exc:
        assert str(f) in str(exc)


def test_deeply_nested_json_is_refused_without_a_crash(tmp_path):
    f = tmp_path / "deep.json"
    f.write_text("[" * 100_000 + "]" * 100_000)
    try:
        load_document(f)
        raise AssertionError("a deeply nested file must not load")
    except ReceiptsFileError as exc:
        assert "deep.json" in str(exc)


def test_a_number_too_long_to_parse_is_a_clear_error(tmp_path):
    f = tmp_path / "huge.json"
    f.write_text('{"schema": "spec-inspector/receipts", "schema_version": ' + "9" * 10_000 + "}")
    try:
        load_document(f)
        raise AssertionError("must not load")
    except ReceiptsFileError as exc:
        assert "huge.json" in str(exc)
