"""Issue 37, items 11, 13 and 14: ``tune`` and ``bench --turns`` on the real bundled model (real
processes, real signals); never the model's words."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from test_bad_inputs_37 import cli, one_line


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    """A greedy run's receipts with plain steps (tune predicts from its own times)."""
    r = tmp_path_factory.mktemp("rec") / "r.json"
    p = cli("run", "--example", "open-ended", "--max-tokens", "24", "--threads", "1", "--quiet", "--receipts", r)
    assert p.returncode == 0, p.stderr
    return json.loads(r.read_text("utf-8"))


def edited(tmp_path, doc, edit) -> str:
    doc = json.loads(json.dumps(doc))
    edit(doc)
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    return str(f)


@pytest.mark.parametrize("field, value, said", [("path", "m\0.gguf", "NUL"), ("n_threads", 2147483647, "0..512")])
def test_tune_verify_checks_the_documents_model_values_as_flags(tmp_path, recording, field, value, said):
    f = edited(tmp_path, recording, lambda d: d["model"].__setitem__(field, value))
    line = one_line(cli("tune", f, "--verify", "1"), 2)  # llama.cpp aborted (rc 134) on 2147483647 threads
    assert said in line and field in line


def test_tune_refuses_recorded_times_of_zero(tmp_path, recording):
    def zero(d):
        for w in d["windows"]:
            w["verification_elapsed_us"] = 0
        for op in d["lock_operations"]:
            op["hold_us"] = 0
    assert "times are zero" in one_line(cli("tune", edited(tmp_path, recording, zero), "--costs", "run"), 1)


def test_a_repeated_source_gives_each_row_once(tmp_path, recording):
    f = edited(tmp_path, recording, lambda d: None)
    p = cli("tune", f, "--source", "ngram", "--source", "ngram", "--draft-max", "4", "--draft-max", "4", "--top", "99")
    assert p.returncode == 0, p.stderr
    rows = [l.split()[0] for l in p.stdout.splitlines() if l.startswith("ngram:")]
    assert rows and len(rows) == len(set(rows))


def test_tune_verify_warns_when_the_models_file_is_another_and_refuses_another_vocabulary(tmp_path, recording):
    f = edited(tmp_path, recording, lambda d: d["model"].__setitem__("sha256", "0" * 64))
    p = cli("tune", f, "--source", "ngram", "--draft-max", "4", "--verify", "1")
    assert p.returncode == 0, p.stderr
    assert any(l.startswith("warning:") and "another" in l for l in p.stderr.splitlines()), p.stderr
    f = edited(tmp_path, recording, lambda d: d["model"].__setitem__("n_vocab", 1000))
    assert "vocabulary" in one_line(cli("tune", f, "--source", "ngram", "--draft-max", "4", "--verify", "1"), 1)


def test_tune_verify_interrupted_names_the_json_it_wrote(tmp_path, recording):
    f, out = edited(tmp_path, recording, lambda d: None), tmp_path / "t.json"
    child = subprocess.Popen([sys.executable, "-m", "inspector", "tune", f, "--source", "ngram", "--verify", "1",
                              "--json", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = child.stderr.readline()  # "loading MODEL ...": the table is written, verification starts
    assert first.startswith("loading "), first
    child.send_signal(signal.SIGINT)
    _out, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    assert "nothing was written" not in err and str(out) in one_line(subprocess.CompletedProcess((), 130, "", err), 130)
    assert json.loads(out.read_text())


def test_bench_turns_whose_every_row_failed_exits_1_and_never_says_same(tmp_path):
    turns = tmp_path / "t.txt"
    turns.write_text("Say hi.\n---\n" + "word " * 2500)  # turn 2 is longer than the context
    p = cli("bench", "--turns", turns, "--k-max", "2", "--repeats", "1", "--max-tokens", "4", "--threads", "1")
    assert p.returncode == 1, p.stderr
    rows = [l for l in p.stdout.splitlines() if "error: turn 2" in l]
    assert len(rows) == 8 and not any(" yes " in r for r in rows)
