"""Issue 37, items 9, 11, 13 and 15: bad input refused with one line before any work (real processes,
real files; no model is loaded but where a test says so), and damaged files named as such."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_bounded_reads import one_line

V1 = Path(__file__).parent / "data" / "receipts-v1.json"


def cli(*args, timeout=300, env=None):
    return subprocess.run([sys.executable, "-m", "inspector", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env)




# -- 9: caps on work, stated in --help ------------------------------------------------------------------

def test_tune_refuses_more_draft_max_values_and_repeats_than_its_help_states(tmp_path):
    many = [a for n in range(1, 34) for a in ("--draft-max", n)]
    assert "at most 32 values" in one_line(cli("tune", V1, *many), 2)
    assert "1..20" in one_line(cli("tune", V1, "--verify", "1", "--repeats", "1000000000"), 2)
    assert "1..20" in one_line(cli("tune", V1, "--verify", "1000"), 2)
    help_text = " ".join(cli("tune", "--help").stdout.split())
    assert "at most 32 values" in help_text and "1..20" in help_text


@pytest.mark.parametrize("command", ["bench", "run", "compare"])
def test_a_turns_file_of_10000_turns_is_refused_before_the_model_loads(tmp_path, command):
    turns = tmp_path / "t.txt"
    turns.write_text("\n---\n".join(["Say A."] * 10000))
    line = one_line(cli(command, "--turns", turns, timeout=60), 2)
    assert "10000 turns" in line and "1000" in line
    assert "1..1000 turns" in " ".join(cli(command, "--help").stdout.split())


# -- 11: tracebacks that are one line now -------------------------------------------------------------

@pytest.mark.parametrize("command", ["run", "compare", "bench"])
def test_a_turns_file_nested_100000_deep_is_one_line(tmp_path, command):
    turns = tmp_path / "t.json"
    turns.write_text("[" * 100000 + "]" * 100000)
    assert "nested too deeply" in one_line(cli(command, "--turns", turns, timeout=60), 2)


def test_a_lone_surrogate_in_a_turns_file_is_named_with_its_turn(tmp_path):
    turns = tmp_path / "t.json"
    turns.write_text('["Say hi.", "and \\ud800 here"]')
    line = one_line(cli("run", "--turns", turns, timeout=60), 2)
    assert "turn 2" in line and "surrogate" in line


@pytest.mark.parametrize("threads", ["100000", "-1", "1000000000000"])
def test_rpc_server_threads_have_a_range(threads):
    assert "0..512" in one_line(cli("rpc-server", "--threads", threads, timeout=60), 2)


def autosave_of_v1(tmp_path, damage) -> Path:
    """An autosave holding the v1 document's windows as receipt lines; ``damage(records)`` edits them."""
    doc = json.loads(V1.read_text("utf-8"))
    records = [{"kind": "header", "prompt": "x", "model": "m.gguf", "source": "ngram", "n_ctx": 2048}]
    records += [{"kind": "receipt", "receipt": w} for w in doc["windows"]]
    damage(records)
    f = tmp_path / "a.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in records))
    return f


@pytest.mark.parametrize("field", ["decode_step", "proposal_token_count", "accepted_proposal_tokens"])
def test_view_of_an_autosave_with_a_string_where_a_count_belongs_skips_that_line(tmp_path, field):
    f = autosave_of_v1(tmp_path, lambda rs: rs[2]["receipt"].__setitem__(field, "many"))
    p = cli("view", f, "--windows")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "skipped:  1 incomplete or damaged line(s)" in p.stdout


def test_view_into_a_full_disk_is_one_line():
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "inspector", "view", str(V1), "--events"], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    assert "No space left on device" in one_line(p, 1)


# -- 13: a JSON object is no plain-text turn; no advice to call Python ---------------------------------

def test_a_json_object_with_a_byte_order_mark_is_not_taken_as_one_plain_text_turn(tmp_path):
    turns = tmp_path / "t.json"
    turns.write_bytes(b'\xef\xbb\xbf{"turns": ["Say hi."]}')
    assert "not a conversation receipts document" in one_line(cli("run", "--turns", turns, timeout=60), 2)


def test_a_number_of_5000_digits_is_named_without_advice_to_call_python(tmp_path):
    turns, receipts = tmp_path / "t.json", tmp_path / "r.json"
    turns.write_text("[" + "9" * 5000 + "]")
    receipts.write_text(V1.read_text("utf-8").replace('"n_ctx": 2048', '"n_ctx": ' + "9" * 5000, 1))
    for p, status in ((cli("run", "--turns", turns, timeout=60), 2), (cli("view", receipts), 1)):
        line = one_line(p, status)
        assert "5000 digits" in line and "set_int_max_str_digits" not in line


# -- 15: what was silently ignored or accepted ----------------------------------------------------------

def test_bench_config_without_llama_server_is_a_usage_error():
    assert "--llama-server" in one_line(cli("bench", "--config", "none", timeout=60), 2)


def test_a_source_option_that_a_flag_also_sets_is_refused():
    line = one_line(cli("run", "--prompt", "x", "--ngram-max", "3", "--source-option", "n_max=6", timeout=60), 2)
    assert "--ngram-max" in line and "n_max" in line


@pytest.mark.parametrize("flag", ["-sys", "--prompt"])
def test_bytes_that_are_not_utf8_name_their_option(flag):
    p = subprocess.run([sys.executable.encode(), b"-m", b"inspector", b"compare", flag.encode(), b"be \xff here"],
                       capture_output=True, text=True, timeout=60)
    line = one_line(p, 2)
    assert flag in line and "0xff" in line and "UTF-8" in line


def test_a_damaged_autosave_header_is_noted(tmp_path):
    def damage(rs):
        rs[0]["n_ctx"] = "big"
        rs[0]["conversation"] = {"turn": 5, "turns": 3}
    p = cli("view", autosave_of_v1(tmp_path, damage))
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "header" in p.stderr and "n_ctx" in p.stderr and "turn 5 of 3" in p.stderr


def test_a_turn_number_that_does_not_fit_its_conversation_is_refused(tmp_path):
    doc = json.loads(V1.read_text("utf-8"))
    doc["conversation"] = {"turn": 5, "turns": 3, "history": [], "user_text": "x"}
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    assert "turn 5 of 3" in one_line(cli("view", f), 1)


def test_no_window_in_an_autosave_whose_windows_were_damaged_says_they_were_skipped(tmp_path):
    def damage(rs):
        for r in rs[1:]:
            r["receipt"]["base_position"] = "x"
    line = one_line(cli("view", autosave_of_v1(tmp_path, damage), "--window", "1"), 1)
    assert "no verified windows" in line and "5 incomplete or damaged line(s) were skipped" in line
