"""Issue 25, items 6 and 7: documents checked beyond the schema (window positions, counts, turn
numbering, the model a replay was recorded on), NaN and autosaves named as such, and options of
another source refused with one line naming that source."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from inspector.receipts import ReceiptsFileError, load_document
from inspector.receipts.document import version_note

V1 = Path(__file__).parent / "data" / "receipts-v1.json"


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "inspector", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def error_lines(p) -> list[str]:
    assert "Traceback" not in p.stderr, p.stderr
    return [l for l in p.stderr.splitlines() if l.strip() and not l.startswith("loading ")]


def v1() -> dict:
    return json.loads(V1.read_text("utf-8"))


def write(tmp_path, doc, name="r.json") -> Path:
    f = tmp_path / name
    f.write_text(json.dumps(doc))
    return f


# -- NaN, autosaves ---------------------------------------------------------------------------------

@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_number_is_named_with_its_path_not_as_null(tmp_path, literal):
    text = V1.read_text("utf-8").replace('"proposal_deadline_ms": 2000.0', f'"proposal_deadline_ms": {literal}')
    assert literal in text
    f = tmp_path / "r.json"
    f.write_text(text)
    with pytest.raises(ReceiptsFileError) as e:
        load_document(f)
    msg = str(e.value)
    assert "settings/proposal_deadline_ms" in msg and "not a finite number" in msg and literal in msg, msg
    assert "null" not in msg and "r.json" in msg


def autosave(tmp_path) -> Path:
    f = tmp_path / "a.jsonl"
    f.write_text(json.dumps({"kind": "header", "prompt": "x", "model": "m.gguf", "source": "ngram"}) + "\n"
                 + json.dumps({"kind": "prefill", "kv_length": 3}) + "\n")
    return f


def test_an_autosave_given_as_receipts_says_it_is_an_autosave(tmp_path):
    f = autosave(tmp_path)
    with pytest.raises(ReceiptsFileError) as e:
        load_document(f)
    msg = str(e.value)
    assert "is an autosave" in msg and "spec-inspector view" in msg and "Extra data" not in msg, msg


def test_trace_of_an_autosave_is_one_line_naming_view(tmp_path):
    p = cli("trace", autosave(tmp_path), "-o", tmp_path / "t.json")
    assert p.returncode == 1, p.stderr
    lines = error_lines(p)
    assert len(lines) == 1 and "is an autosave" in lines[0] and "spec-inspector view" in lines[0], p.stderr
    assert not (tmp_path / "t.json").exists()


# -- options of another source --------------------------------------------------------------------

@pytest.mark.parametrize("argv, owner", [
    (["--source", "ngram", "--spec-ngram-mod-n-min", "4"], "ngram-mod"),
    (["--source", "scripted", "--script", "a b", "--ngram-max", "5"], "ngram"),
    (["--source", "ngram", "--source-option", "size_m=3"], "ngram-simple"),
    (["--source", "ngram", "--source-option", "draft_model=d.gguf"], "draft"),
])
def test_an_option_of_another_source_is_refused_naming_its_source(argv, owner):
    p = cli("run", "--prompt", "x", "--max-tokens", "1", "--threads", "1", *argv)
    assert p.returncode == 2, p.stderr
    lines = error_lines(p)
    assert len(lines) == 1, p.stderr
    assert f"source {owner}" in lines[0] and f"--source {argv[1]}" in lines[0], lines
    assert not any(l.startswith("loading ") for l in p.stderr.splitlines()), "refused only after loading the model"


def test_an_own_option_at_its_default_value_is_still_taken():
    from inspector.cli.main import build_parser
    from inspector.cli.sources import source_options_from_args

    args = build_parser().parse_args(["run", "--prompt", "x", "--source", "ngram", "--ngram-max", "4"])
    assert source_options_from_args(args)["n_max"] == 4


# -- request documents: window positions and counts -----------------------------------------------

def test_a_window_whose_position_after_verification_is_below_its_base_is_refused_naming_it(tmp_path):
    doc = v1()
    w = doc["windows"][2]
    w["position_after_verification"] = w["base_position"] - 1
    with pytest.raises(ReceiptsFileError) as e:
        load_document(write(tmp_path, doc))
    msg = str(e.value)
    assert "windows/2" in msg and "position_after_verification 119" in msg and "below base_position 120" in msg, msg


@pytest.mark.parametrize("field, value, words", [
    ("canonical_position", 140, "canonical_position 140"),
    ("trimmed_rows", 2, "trimmed_rows 2"),
    ("proposal_token_count", 3, "proposal_token_count 3"),
    ("verification_rows", 7, "verification_rows 7"),
])
def test_window_counts_that_disagree_are_refused_naming_the_window_and_field(tmp_path, field, value, words):
    doc = v1()
    doc["windows"][1][field] = value
    with pytest.raises(ReceiptsFileError) as e:
        load_document(write(tmp_path, doc))
    msg = str(e.value)
    assert "windows/1" in msg and words in msg, msg


def test_a_summary_that_counts_other_windows_is_refused(tmp_path):
    doc = v1()
    del doc["windows"][4]
    with pytest.raises(ReceiptsFileError) as e:
        load_document(write(tmp_path, doc))
    msg = str(e.value)
    assert "summary/windows" in msg and "5" in msg and "4" in msg, msg


def test_the_bundled_v1_document_still_loads():
    assert len(load_document(V1)["windows"]) == 5


def test_a_v3_document_written_before_the_machine_block_still_loads_and_says_its_version(tmp_path):
    v3 = Path(__file__).parent / "data" / "receipts-v3.json"  # a real run's document, written by schema v3's code
    doc = load_document(v3)
    assert doc["schema_version"] == 3 and "machine" not in doc["model"] and doc["windows"]
    assert version_note(doc) == "receipts schema v3"
    p = cli("view", v3, "--windows")
    assert p.returncode == 0 and len(p.stdout.splitlines()) > len(doc["windows"]), p.stderr


def test_a_new_documents_model_names_its_machine_in_schema_v4(tmp_path):
    out = tmp_path / "r.json"
    p = cli("run", "--prompt", "Name two colours.", "--max-tokens", "4", "--threads", "1", "--receipts", out)
    assert p.returncode == 0, p.stderr
    doc = load_document(out)
    machine = doc["model"]["machine"]
    assert doc["schema_version"] == 4 and machine["logical_cores"] >= 1
    assert machine["llama_cpp_python"] and "CPU" in machine["llama_cpp_system_info"] and machine["os"]
    assert doc["model"]["llama_cpp"]["backend_sampling"] is False


# -- conversation documents ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def conversation(tmp_path_factory):
    """A real two-turn conversation document of the bundled model (its words never asserted)."""
    d = tmp_path_factory.mktemp("conv")
    (d / "t.txt").write_text("Repeat: red green blue red green blue.\n---\nSay it again.\n")
    p = cli("run", "--turns", d / "t.txt", "--max-tokens", "16", "--threads", "1", "--receipts", d / "c.json")
    assert p.returncode == 0, p.stderr
    doc = json.loads((d / "c.json").read_text("utf-8"))
    assert doc["conversation"]["turns"] == len(doc["turns"]) == 2
    return doc


def test_a_whole_conversation_loads(tmp_path, conversation):
    assert len(load_document(write(tmp_path, conversation))["turns"]) == 2


def test_a_conversation_with_a_turn_deleted_is_refused_not_shown_as_two_turns(tmp_path, conversation):
    doc = json.loads(json.dumps(conversation))
    del doc["turns"][1]
    f = write(tmp_path, doc)
    with pytest.raises(ReceiptsFileError) as e:
        load_document(f)
    msg = str(e.value)
    assert "conversation/turns" in msg and "2" in msg and "holds 1" in msg, msg
    p = cli("view", f)
    assert p.returncode == 1 and "2 turn" not in p.stdout, p.stdout + p.stderr


def test_a_conversation_whose_summary_is_not_the_sum_of_its_turns_is_refused(tmp_path, conversation):
    doc = json.loads(json.dumps(conversation))
    doc["summary"]["generated_tokens"] += 5
    with pytest.raises(ReceiptsFileError) as e:
        load_document(write(tmp_path, doc))
    assert "summary/generated_tokens" in str(e.value), str(e.value)


def test_a_window_numbered_for_another_turn_is_refused(tmp_path, conversation):
    doc = json.loads(json.dumps(conversation))
    turn = next(k for k, t in enumerate(doc["turns"]) if t["windows"])
    doc["turns"][turn]["windows"][0]["turn"] = turn + 3
    with pytest.raises(ReceiptsFileError) as e:
        load_document(write(tmp_path, doc))
    msg = str(e.value)
    assert f"turns/{turn}/windows/0/turn" in msg and f"expected {turn + 1}" in msg, msg


# -- replay on another model -----------------------------------------------------------------------

class OtherModel:
    """A runtime stand-in: only what the replay source reads of the target."""

    def __init__(self, path: Path, n_vocab: int, name: str) -> None:
        self.model_path = str(path)
        self.n_vocab = n_vocab
        self.name = name

    def describe(self) -> dict:
        return {"path": self.model_path, "name": self.name, "n_vocab": self.n_vocab}


def test_a_replay_on_a_model_with_another_vocabulary_is_refused_naming_both(tmp_path):
    from inspector.sources.registry import SourceContext, make_source

    other = tmp_path / "other.gguf"
    other.write_bytes(b"not the recorded model")
    with pytest.raises(ValueError) as e:
        make_source("replay", SourceContext(runtime=OtherModel(other, 1000, "Other 1M")), {"replay": str(V1)})
    msg = str(e.value)
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in msg and "other.gguf" in msg and "49152" in msg and "1000" in msg, msg


def test_a_replay_on_another_file_of_the_same_vocabulary_warns_naming_both(tmp_path, caplog):
    from inspector.sources.registry import SourceContext, make_source

    other = tmp_path / "other.gguf"
    other.write_bytes(b"not the recorded model")
    with caplog.at_level(logging.WARNING):
        src = make_source("replay", SourceContext(runtime=OtherModel(other, 49152, "Other")), {"replay": str(V1)})
    assert src is not None
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in warnings[0] and "other.gguf" in warnings[0], warnings
