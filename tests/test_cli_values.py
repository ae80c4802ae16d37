"""Issue 11 "Small", headless part: value rules, the n_batch 1 message, one max-tokens default,
the no-"schema" message and readable decision ids. CLI cases run as a user would (real processes)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from inspector.engine.records import decision_id_text
from inspector.engine.settings import (DEFAULT_MAX_NEW_TOKENS, GenerationSettings, SamplingSettings, check_setting,
                                       interpret_setting, sampling_settings)
from inspector.engine.llama_settings import SEED_MAX
from inspector.receipts import ReceiptsFileError, load_document


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "inspector", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def one_line(stderr: str) -> str:
    lines = [l for l in stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# -- 1. bad values: refused in one line with the valid range, before the model loads ------------------

@pytest.mark.parametrize("flag, value, needles", [
    ("--seed", "-5", ["seed", "-5", "0 to 4294967294", "-1 for a random seed"]),
    ("--seed", "4294967296", ["seed", "4294967296", "0 to 4294967294"]),
    ("--temperature", "nan", ["temperature", "nan", "finite"]),
    ("--top-p", "2", ["top_p", "2.0", "0 to 1"]),
    ("--min-p", "5", ["min_p", "5.0", "0 to 1"]),
    ("--top-k", "1.5", ["--top-k", "whole number"]),
    ("--proposal-deadline-ms", "-1", ["proposal_deadline_ms", "-1.0", "> 0"]),
    ("--proposal-deadline-ms", "inf", ["proposal_deadline_ms", "inf", "finite"]),
    ("--max-tokens", "0", ["max_new_tokens", ">= 1"]),
    ("--draft-max", "-1", ["draft_max", "-1", ">= 0"]),
    ("--stop", "", ["stop string", "non-empty", "''"]),
])
def test_a_bad_run_value_is_refused_with_its_range_in_one_line(flag, value, needles):
    p = cli("run", "--prompt", "x", "--max-tokens", "1", flag, value)
    assert p.returncode == 2, p.stderr
    line = one_line(p.stderr)  # one line, and no "loading ..." line: refused before the model loads
    assert flag in line
    for n in needles:
        assert n in line, line


@pytest.mark.parametrize("config, needles", [
    ("ngram:draft_max=-3", ["draft_max", "-3", ">= 0"]),
    ("ngram:n_max=0", ["n_max", "'0'", "1 <= n_max"]),
    ("ngram:n_min=0", ["n_min", "'0'", "1 <= n_min"]),
    ("ngram:n_max=1", ["n_min=2 (the default)", "n_max=1", "n_min <= n_max"]),
    ("ngram:length=long", ["length", "fixed or adaptive", "'long'"]),
    ("draft:draft_model=d.gguf,draft_max=0", ["draft_max", ">= 1"]),
    ("none:n_max=3", ["takes no options", "n_max"]),
])
def test_a_bad_compare_config_is_refused_by_name_before_the_model_loads(config, needles):
    p = cli("compare", "--config", config)
    assert p.returncode == 2, p.stderr
    line = one_line(p.stderr)
    assert config in line
    for n in needles:
        assert n in line, line


def test_llama_cpp_meanings_are_accepted_with_a_note_each_and_recorded_as_they_act(tmp_path):
    """temperature < 0 is greedy, top_k <= 0 no limit, seed -1 a random seed (llama.cpp); the
    receipts hold what ran: temperature 0, top_k as given, the drawn seed."""
    out = tmp_path / "r.json"
    p = cli("run", "--prompt", "Say hi", "--source", "none", "--max-tokens", "2", "--quiet",
            "--temperature", "-1", "--top-k", "-3", "--seed", "-1", "--receipts", out)
    assert p.returncode == 0, p.stderr
    notes = [l for l in p.stderr.splitlines() if l.startswith("spec-inspector: note: ")]
    assert len(notes) == 3, p.stderr
    assert "temperature -1 < 0 means greedy decoding" in notes[0]
    assert "top_k -3 <= 0 means no top-k limit" in notes[1]
    seed = int(re.search(r"uses seed (\d+)", notes[2]).group(1))
    sampling = load_document(out)["settings"]["sampling"]
    assert sampling["temperature"] == 0.0 and sampling["top_k"] == -3 and sampling["seed"] == seed
    assert 0 <= seed <= SEED_MAX


def test_the_settings_refuse_bad_values_naming_field_value_and_range():
    cases = [
        (lambda: SamplingSettings(top_p=2.0), ["top_p", "2.0", "0 to 1"]),
        (lambda: SamplingSettings(min_p=-0.1), ["min_p", "-0.1", "0 to 1"]),
        (lambda: SamplingSettings(seed=-5), ["seed", "-5", "4294967294"]),
        (lambda: SamplingSettings(seed=0xFFFFFFFF), ["seed", "4294967295", "LLAMA_DEFAULT_SEED"]),
        (lambda: SamplingSettings(temperature=float("nan")), ["temperature", "nan", "finite"]),
        (lambda: SamplingSettings(temperature=-1.0), ["temperature", "-1.0", ">= 0"]),
        (lambda: GenerationSettings(proposal_deadline_ms=-1), ["proposal_deadline_ms", "-1", "> 0"]),
        (lambda: GenerationSettings(stop=("",)), ["stop string 1", "non-empty", "''"]),
        (lambda: GenerationSettings(max_new_tokens=0), ["max_new_tokens", "0", ">= 1"]),
        (lambda: GenerationSettings(draft_max=1.5), ["draft_max", "1.5", "whole number"]),
    ]
    for make, needles in cases:
        with pytest.raises(ValueError) as err:
            make()
        for n in needles:
            assert n in str(err.value), str(err.value)
    assert check_setting("top_k", 0) == 0 and check_setting("seed", SEED_MAX) == SEED_MAX
    s, notes = sampling_settings(temperature=-2.0, top_k=0, seed=7)
    assert s == SamplingSettings(0.0, 0, 0.95, 0.05, 7) and len(notes) == 2
    assert interpret_setting("top_p", 1.0) == (1.0, None)


# -- 2. n_batch 1: the real reason, decided before the model loads; the probe runs on any n_batch -------

def test_n_batch_1_is_refused_for_speculation_with_the_proposal_row_reason_and_plain_decoding_runs():
    p = cli("run", "--prompt", "x", "--max-tokens", "2", "--n-batch", "1")
    assert p.returncode == 2, p.stderr
    line = one_line(p.stderr)  # no "loading ..." line: decided before the model loads
    assert "no room for a proposal row" in line and "n_batch - 1" in line and "source none" in line
    assert "KV cache" not in line
    plain = cli("run", "--prompt", "x", "--max-tokens", "2", "--n-batch", "1", "--source", "none", "--quiet")
    assert plain.returncode == 0, plain.stderr


def test_the_rollback_probe_works_with_n_batch_1(model_path):
    """The misleading "needs a KV cache that can drop rejected rows" came from the probe decoding
    two rows in one batch; it decodes one row at a time now."""
    from inspector.llama.runtime import LlamaRuntime

    rt = LlamaRuntime(model_path, n_ctx=64, n_batch=1, n_seq_max=1, n_threads=1)
    try:
        probe = rt.rollback
        assert probe.ok, probe.detail
    finally:
        rt.close()


# -- 3. one default for max tokens ---------------------------------------------------------------------

def test_one_max_tokens_default_for_the_engine_and_the_cli():
    from inspector.cli.main import build_parser

    assert DEFAULT_MAX_NEW_TOKENS == 128 == GenerationSettings().max_new_tokens
    parser = build_parser()
    assert parser.parse_args(["run", "--prompt", "x"]).max_tokens == DEFAULT_MAX_NEW_TOKENS
    assert parser.parse_args(["compare"]).max_tokens == DEFAULT_MAX_NEW_TOKENS
    help_text = " ".join(cli("run", "--help").stdout.split())
    assert re.search(r"--max-tokens, -n, --predict, --n-predict MAX_TOKENS most tokens to generate \(llama.cpp -n; >= 1, or -1: until the end of generation or a full context\) \[128\]", help_text), help_text


# -- 4. a document without "schema" ----------------------------------------------------------------------

def test_a_document_without_a_schema_field_says_so(tmp_path):
    f = tmp_path / "r.json"
    f.write_text("{}")
    with pytest.raises(ReceiptsFileError, match='has no "schema" field'):
        load_document(f)
    p = cli("view", f)
    assert p.returncode == 1
    line = one_line(p.stderr)
    assert 'has no "schema" field' in line and "None" not in line
    f.write_text("[]")
    with pytest.raises(ReceiptsFileError, match="is a JSON array, not a JSON object"):
        load_document(f)
    f.write_text(json.dumps({"schema": None}))
    with pytest.raises(ReceiptsFileError, match="has schema null, expected 'spec-inspector/receipts'"):
        load_document(f)


# -- 5. readable decision ids ---------------------------------------------------------------------------

def test_decision_id_text_shows_printable_ids_as_text_and_others_as_hex():
    assert decision_id_text("6e6772616d3a313a6e323a4c32") == "ngram:1:n2:L2"
    assert decision_id_text(b"ngram:1:n2:L2") == "ngram:1:n2:L2"
    assert decision_id_text(bytearray(b"caf\xc3\xa9:1")) == "café:1"
    assert decision_id_text(b"\x00\x01\xff") == "0001ff"
    assert decision_id_text("0001ff") == "0001ff"
    assert decision_id_text(b"two\nlines") == b"two\nlines".hex()
    assert decision_id_text("not hex!") == "not hex!"


def test_run_events_and_view_show_decision_ids_as_text(tmp_path):
    out = tmp_path / "r.json"
    p = cli("run", "--prompt", "Copy this line exactly: one two three four five six seven eight", "--ngram-min", "1",
            "--max-tokens", "16", "--events", "--quiet", "--receipts", out)
    assert p.returncode == 0, p.stderr
    doc = load_document(out)
    ids = {w["window_index"]: w["decision_id"] for w in doc["windows"]}
    assert ids, "the n-gram source with n_min 1 proposes on this prompt"
    verify = [l for l in p.stdout.splitlines() if re.search(r" ms  verify ", l)]
    assert len(verify) == len(ids)
    for line in verify:
        window = int(re.search(r"window (\d+)", line).group(1))
        assert f"decision {decision_id_text(ids[window])}" in line
        assert "decision ngram:" in line and ids[window] not in line
    v = cli("view", out, "--windows", "--events")
    assert v.returncode == 0, v.stderr
    # a window line and a verify event per window, a discard line and a discard event per discard
    assert v.stdout.count("decision ngram:") == 2 * len(ids) + 2 * len(doc["discards"])
    assert not any(i in v.stdout for i in ids.values())
