"""The sampling flags of run, compare and flags (issue 26): llama.cpp's penalties with its names reach the
settings the receipts and the comparison record; a value llama.cpp refuses is a usage error."""

from __future__ import annotations

import json

from test_cli import cli

PENALTY_ARGS = ("--repeat-penalty", "1.2", "--repeat-last-n", "32", "--presence-penalty", "0.5",
                "--frequency-penalty", "0.1")
PENALTIES = {"repeat_penalty": 1.2, "repeat_last_n": 32, "presence_penalty": 0.5, "frequency_penalty": 0.1}


def test_run_and_compare_take_llama_cpps_penalty_flags_and_record_them(tmp_path):
    out = tmp_path / "r.json"
    r = cli("run", "--prompt", "Say hi.", "--max-tokens", "2", "--threads", "1", *PENALTY_ARGS, "--receipts", out)
    assert r.returncode == 0, r.stderr
    sampling = json.loads(out.read_text("utf-8"))["settings"]["sampling"]
    assert {k: sampling[k] for k in PENALTIES} == PENALTIES
    table = tmp_path / "c.json"
    r = cli("compare", "--prompt", "Say hi.", "--config", "none", "--max-tokens", "2", "--threads", "1",
            *PENALTY_ARGS, "--json", table)
    assert r.returncode == 0, r.stderr
    sampling = json.loads(table.read_text("utf-8"))["settings"]["sampling"]
    assert {k: sampling[k] for k in PENALTIES} == PENALTIES


def test_penalty_values_llama_cpp_refuses_are_usage_errors_with_its_meaning():
    for flag, value, said in (("--repeat-penalty", "0", "repeat_penalty must be a number from 1e-9 to 1e9"),
                              ("--repeat-last-n", "-1", "repeat_last_n must be a whole number >= 0"),
                              ("--presence-penalty", "nan", "presence_penalty must be a number from -1e9 to 1e9")):
        r = cli("run", "--prompt", "hi", flag, value)
        assert r.returncode == 2 and said in r.stderr, r.stderr
    helped = " ".join(cli("run", "--help").stdout.split())  # argparse wraps the help
    assert "--repeat-last-n" in helped and "prompt included" in helped and "1.0 = disabled" in helped
    assert "--frequency-penalty" in cli("compare", "--help").stdout


def test_compare_with_llama_server_refuses_sampling_it_would_not_send():
    r = cli("compare", "--prompt", "hi", "--llama-server", "--temperature", "0.8")
    assert r.returncode == 2 and "compares greedy decoding" in r.stderr, r.stderr
