"""Hostile receipts files: a clear ReceiptsFileError or a valid document, never another exception."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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


@pytest.fixture(scope="module")
def real_document(runtime, chat_tokens):
    """A receipts document of a short real n-gram run on the bundled model."""
    from inspector.engine import Generation, GenerationSettings, RuntimeScheduler
    from inspector.session.document import build_document
    from inspector.sources import NgramSource

    g = Generation(RuntimeScheduler(runtime), NgramSource(3, 1), chat_tokens("Copy this twice: red, green, blue."),
                   GenerationSettings(max_new_tokens=24))
    try:
        g.run()
    finally:
        g.close()
    doc = build_document(g, runtime, prompt_text="Copy this twice: red, green, blue.", templated_text=None, raw=False)
    assert doc["windows"], "the run verified no window"
    return doc


def big_document(doc: dict, megabytes: int) -> dict:
    """``doc`` with its windows repeated until the JSON is about ``megabytes`` MB."""
    w = doc["windows"]
    per_window = len(json.dumps(w[0])) + 2
    n = megabytes * 1_000_000 // per_window
    return {**doc, "windows": [dict(w[i % len(w)], window_index=i + 1) for i in range(n)],
            "summary": {**doc["summary"], "windows": n}}  # the summary counts the windows (checked on load)


def test_a_50_mb_receipts_file_loads_and_validates(tmp_path, real_document):
    f = tmp_path / "big.json"
    big = big_document(real_document, 50)
    f.write_text(json.dumps(big))
    assert f.stat().st_size > 45_000_000
    doc = load_document(f)
    assert len(doc["windows"]) == len(big["windows"]) > 10_000


def test_a_50_mb_file_with_one_bad_window_names_that_window(tmp_path, real_document):
    f = tmp_path / "big-bad.json"
    big = big_document(real_document, 50)
    bad = len(big["windows"]) // 2
    big["windows"][bad]["base_position"] = -3
    f.write_text(json.dumps(big))
    with pytest.raises(ReceiptsFileError, match=f"windows/{bad}/base_position"):
        load_document(f)


@pytest.mark.parametrize("value", [-1, 2**70, "12", None, 1.5])
def test_negative_huge_or_mistyped_numbers_are_a_clear_error(tmp_path, real_document, value):
    doc = json.loads(json.dumps(real_document))
    doc["windows"][0]["canonical_position"] = value
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(ReceiptsFileError, match="windows/0/canonical_position"):
        load_document(f)


def test_a_missing_field_is_a_clear_error(tmp_path, real_document):
    doc = json.loads(json.dumps(real_document))
    del doc["windows"][0]["committed_tokens"]
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(ReceiptsFileError, match="committed_tokens"):
        load_document(f)


def test_a_written_receipts_file_gets_the_usual_permissions_not_owner_only(tmp_path):
    """The trial: exported receipts were mode 0600 (the temporary file's), unreadable to others."""
    import os

    from inspector.receipts.document import _umask, write_document

    doc = json.loads((Path(__file__).parent / "data" / "receipts-v1.json").read_text("utf-8"))
    path = write_document(doc, tmp_path / "r.json")
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert os.access(path, os.R_OK)
