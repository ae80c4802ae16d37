"""The `spec-inspector` command line, run as a user would (real processes, real model).

Nothing here relies on the model's words (they differ between CPUs): runs that
need a window use single-token n-gram matches (``--ngram-min 1``: the first query
always proposes, since a templated prompt's last token, a newline, occurs earlier
in the prompt), so window 1 exists and commits at least one token; token counts
are checked against the run's own finish reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from inspector import asset_path
from inspector.llama.model_file import ModelFileError, check_gguf
from inspector.receipts import load_document

COPY_PROMPT = asset_path("prompts/copy-with-corrections.txt")


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "inspector", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def one_clear_line(stderr: str) -> str:
    lines = [l for l in stderr.strip().splitlines() if l.strip() and not l.startswith("loading ")]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_run_on_the_copy_with_corrections_prompt_prints_text_summary_and_valid_receipts(tmp_path):
    out = tmp_path / "r.json"
    p = cli("run", "--prompt-file", COPY_PROMPT, "--ngram-min", "1", "--max-tokens", "64", "--receipts", out)
    assert p.returncode == 0, p.stderr
    assert "accepted/proposed:" in p.stdout and "mean accepted length:" in p.stdout and "decode tokens/s:" in p.stdout
    doc = load_document(out)  # validates against assets/receipts.schema.json
    assert doc["summary"]["windows"] == len(doc["windows"]) > 0
    assert doc["model"]["architecture"] == "llama" and doc["model"]["n_vocab"] == 49152
    # The text may be empty: the model may end its turn at once.
    assert doc["output"]["token_ids"] and doc["output"]["text"].strip() in p.stdout

    v = cli("view", out)
    assert v.returncode == 0 and "accepted/proposed:" in v.stdout


def test_an_injected_callback_error_is_reported_and_resume_finishes(tmp_path):
    out = tmp_path / "r.json"
    p = cli("run", "--prompt", "Copy this line exactly: one two three four five six seven eight",
            "--ngram-min", "1", "--max-tokens", "24", "--inject", "callback_error@1:1", "--resume", "--events",
            "--receipts", out)
    assert p.returncode == 0, p.stderr
    assert "generation error: token callback failed (injected)" in p.stderr
    doc = load_document(out)
    kinds = [e["kind"] for e in doc["events"] if e["window"] == 1]
    assert kinds[:4] == ["verify", "commit", "repair", "error"]
    assert doc["discards"][0]["reason"] == "execution_failed"
    # The printed text is the committed text, the token whose callback failed included.
    printed = p.stdout.split("--- summary ---")[0].replace("\n", "")
    assert doc["output"]["text"].replace("\n", "") in printed


def test_case_truncated_gguf_is_refused_with_one_line_naming_the_file(tmp_path, model_path):
    """cases.json `truncated-gguf` (CLI part)."""
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(Path(model_path).read_bytes()[:1_000_000])
    p = cli("run", "--prompt", "Hello", "--model", bad)
    assert p.returncode == 1
    line = one_clear_line(p.stderr)
    assert str(bad) in line and "truncated" in line


@pytest.mark.parametrize("args, status, needle", [
    (["run", "--prompt", "x", "--max-tokens", "zero"], 2, "expected a whole number"),
    (["run", "--prompt", "x", "--bogus"], 2, "unrecognized arguments: --bogus"),
    (["run", "--prompt-file", "/no/such/prompt.txt"], 2, "no such file"),
    (["run", "--prompt", "x", "--inject", "explode"], 2, "unknown fault"),
    (["run", "--prompt", "x", "--model", "/no/such/model.gguf"], 1, "no such file"),
    (["view", "/no/such/receipts.json"], 1, "cannot read receipts"),
])
def test_bad_input_exits_non_zero_with_one_clear_line(args, status, needle):
    p = cli(*args)
    assert p.returncode == status
    assert needle in one_clear_line(p.stderr)


def test_a_prompt_longer_than_the_context_is_refused(tmp_path):
    p = cli("run", "--prompt", "word " * 200, "--n-ctx", "64")
    assert p.returncode == 1
    assert "context holds 64" in one_clear_line(p.stderr)


def test_a_file_that_is_no_gguf_is_named_by_its_first_bytes_as_text_not_python_notation(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"not a model at all")
    with pytest.raises(ModelFileError) as err:
        check_gguf(f)
    assert 'it begins "not "' in str(err.value) and "b'" not in str(err.value)
    f.write_bytes(b"\x00\xff\x1a\x02rest")
    with pytest.raises(ModelFileError) as err:
        check_gguf(f)
    assert "it begins with the bytes 00 ff 1a 02" in str(err.value)


@pytest.mark.parametrize("content, problem", [
    (b"", "empty"),
    (b"not a model at all", "not a GGUF file"),
    (b"GGUF\x03\x00\x00\x00garbage", "damaged GGUF header|truncated"),
])
def test_damaged_model_files_are_named_with_their_problem(tmp_path, content, problem):
    f = tmp_path / "m.gguf"
    f.write_bytes(content)
    with pytest.raises(ModelFileError, match=problem) as err:
        check_gguf(f)
    assert str(f) in str(err.value)


def test_a_directory_is_not_a_model(tmp_path):
    with pytest.raises(ModelFileError, match="directory"):
        check_gguf(tmp_path)


def test_a_receipts_file_with_the_wrong_schema_is_refused(tmp_path):
    from inspector.receipts import ReceiptsFileError

    f = tmp_path / "r.json"
    f.write_text(json.dumps({"schema": "something-else"}))
    with pytest.raises(ReceiptsFileError, match="expected 'spec-inspector/receipts'"):
        load_document(f)
    f.write_text(json.dumps({"schema": "spec-inspector/receipts", "schema_version": 1}))
    with pytest.raises(ReceiptsFileError, match="does not match schema"):
        load_document(f)


@pytest.mark.parametrize("cut", [5, 24, 200, 5_000, 2_000_000, -10])
def test_a_gguf_cut_anywhere_is_refused_as_truncated_or_damaged(tmp_path, model_path, cut):
    data = Path(model_path).read_bytes()
    f = tmp_path / "cut.gguf"
    f.write_bytes(data[:cut])
    with pytest.raises(ModelFileError, match="truncated|damaged") as err:
        check_gguf(f)
    assert str(f) in str(err.value)


def test_the_header_check_agrees_with_the_gguf_package(model_path):
    from gguf import GGUFReader

    info = check_gguf(model_path)
    reader = GGUFReader(str(model_path))
    assert info.tensor_count == len(reader.tensors)
    assert info.n_vocab == len(reader.fields["tokenizer.ggml.tokens"].data)


def test_a_trace_of_a_receipts_file_parses_and_has_one_verify_slice_per_window(tmp_path):
    """Window 1 (the first query's) is cancelled before it commits anything; after the
    resume the same query proposes again: a failed and a verified window whatever the
    model says."""
    out = tmp_path / "r.json"
    p = cli("run", "--prompt", "Copy this line exactly: one two three four five six seven eight",
            "--ngram-min", "1", "--max-tokens", "24", "--inject", "cancel@1:1", "--resume", "--quiet",
            "--receipts", out)
    assert p.returncode == 0, p.stderr
    trace_path = tmp_path / "trace.json"
    t = cli("trace", out, "-o", trace_path)
    assert t.returncode == 0, t.stderr
    trace = json.loads(trace_path.read_text())
    events = trace["traceEvents"]
    assert all({"name", "ph", "ts", "pid", "tid"} <= set(e) for e in events)
    doc = load_document(out)
    verify = [e for e in events if e["name"] == "verify" and e["ph"] == "X"]
    assert len(verify) == len(doc["windows"]) > 0
    assert {e["args"]["window_index"] for e in verify} == {w["window_index"] for w in doc["windows"]}
    assert any(e["ph"] == "C" for e in events) and any(e["name"] == "lock wait" or e["name"].startswith("lock hold") for e in events)
    assert any(e["name"] == "verify (window failed)" for e in events)


def test_bench_on_a_tiny_setting_prints_a_table_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    p = cli("bench", "--tasks", "copy-with-corrections", "--max-tokens", "6", "--k-max", "3", "--repeats", "1",
            "--json", out)
    assert p.returncode == 0, p.stderr
    assert "adapt/plain" in p.stdout and "ceiling" in p.stdout
    result = json.loads(out.read_text())
    assert len(result["cost_model"]["row_ms"]) == 3 and all(v > 0 for v in result["cost_model"]["row_ms"])
    assert result["cost_model"]["ceiling"] >= 1.0
    task = result["tasks"][0]
    assert task["task"] == "copy-with-corrections" and task["plain_tps"] > 0 and task["ngram_tps"] > 0


def test_the_cost_model_gives_positive_medians_and_a_ceiling_of_at_least_one(scheduler, chat_tokens):
    from inspector.llama.cost_model import measure_cost_model

    cm = measure_cost_model(scheduler, chat_tokens("Count from one to twenty."), k_max=16, repeats=1)
    assert len(cm.row_ms) == 16 and all(v > 0 for v in cm.row_ms)
    assert cm.ceiling >= 1.0
    assert cm.break_even(1) == 0.0


def test_run_with_baseline_reports_the_plain_comparison_and_stores_it_in_the_receipts(tmp_path):
    out = tmp_path / "r.json"
    p = cli("run", "--prompt", "Copy this: The library opens at nine.", "--max-tokens", "12", "--baseline",
            "--quiet", "--receipts", out)
    assert p.returncode == 0, p.stderr
    line = next(l for l in p.stdout.splitlines() if l.startswith("baseline:"))
    doc = json.loads(out.read_text())
    plain, ours = doc["baseline"]["plain_token_ids"], doc["output"]["token_ids"]
    assert len(plain) >= 1
    same = plain == ours  # decided here from the two streams, not from the code's verdict
    assert doc["baseline"]["identical"] == same == (doc["baseline"]["divergence"] is None)
    assert (f"identical to plain decoding ({len(ours)} tokens)" in line) if same else ("diverges from plain decoding" in line)
    v = cli("view", out)
    assert v.returncode == 0 and "baseline:" in v.stdout


def test_run_takes_a_bundled_example_by_name(tmp_path):
    out = tmp_path / "r.json"
    p = cli("run", "--example", "copy-with-corrections", "--max-tokens", "4", "--quiet", "--receipts", out)
    assert p.returncode == 0, p.stderr
    doc = load_document(out)
    assert doc["prompt"]["text"] == Path(COPY_PROMPT).read_text("utf-8").removesuffix("\n")
    n = doc["summary"]["generated_tokens"]
    assert n == 4 or (doc["summary"]["finish_reason"] == "eog" and 0 < n < 4)  # the model may end its answer
    assert f"generated tokens:     {n}\n" in p.stdout


def test_compare_prints_a_table_and_writes_json_and_csv(tmp_path):
    js, cs = tmp_path / "c.json", tmp_path / "c.csv"
    p = cli("compare", "--prompt", "Copy this: The library opens at nine.", "--max-tokens", "8",
            "--config", "none", "--config", "ngram:draft_max=4", "--json", js, "--csv", cs)
    assert p.returncode == 0, p.stderr
    assert "ngram draft_max 4" in p.stdout and "vs plain" in p.stdout
    doc = json.loads(js.read_text())
    assert [r["config"]["source"] for r in doc["rows"]] == ["none", "ngram"]
    assert cs.read_text().count("\n") == 3


def test_compare_refuses_an_unknown_source_before_loading_the_model():
    p = cli("compare", "--config", "nope")
    assert p.returncode == 2
    assert "unknown proposal source 'nope'" in one_clear_line(p.stderr)


def test_a_gguf_of_an_architecture_llama_cpp_cannot_load_is_one_clear_line(tmp_path):
    import gguf
    import numpy as np

    f = tmp_path / "alien.gguf"
    w = gguf.GGUFWriter(str(f), "alien-arch")
    w.add_name("alien test model")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    check_gguf(f)  # a well-formed GGUF: only llama.cpp can tell
    p = cli("run", "--prompt", "hi", "--model", f)
    assert p.returncode == 1
    line = one_clear_line(p.stderr)
    assert str(f) in line and "'alien-arch'" in line and "could not load" in line


def test_an_unknown_source_option_is_refused_by_name():
    p = cli("run", "--prompt", "hi", "--max-tokens", "2", "--source-option", "bogus=1")
    assert p.returncode == 2  # a usage error, said before the model loads
    line = one_clear_line(p.stderr)
    assert "--source-option bogus: unknown option for --source ngram" in line and "n_max" in line


def test_run_with_draft_max_auto_takes_the_stored_cost_models_best_window(tmp_path, monkeypatch):
    """The curve is stored for the bundled file and 2 threads in a fresh cache: its best window
    is 4 rows (at 90% acceptance too), so draft max is 3 and no window proposes more (whatever
    the model says)."""
    import os

    from inspector.llama import bundled_model_path
    from inspector.llama.cost_cache import store_cost_model
    from inspector.llama.cost_model import CostModel

    cache = tmp_path / "cost-models.json"
    monkeypatch.setenv("SPEC_INSPECTOR_COST_CACHE", str(cache))
    curve = CostModel((10.0, 12.0, 14.0, 16.0, 30.0, 36.0, 42.0, 48.0))  # 4 * 10 / 16 = 2.5x, the best
    assert store_cost_model(bundled_model_path(), 2, curve) == cache
    env = dict(os.environ)
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "inspector", "run", "--prompt-file", str(COPY_PROMPT), "--ngram-min",
                        "1", "--max-tokens", "24", "--threads", "2", "--receipts", str(out)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    assert "draft max:            3 (auto: the most tokens per ms on the stored cost model if 90% of" in p.stdout
    doc = json.loads(out.read_text())
    assert doc["settings"]["draft_max"] == 3 and "ceiling 2.50x" in doc["settings"]["draft_max_from"]
    assert doc["windows"] and all(w["proposal_token_count"] <= 3 for w in doc["windows"])
    load_document(out)  # validates
    # A given draft max is used as given, with no auto note.
    p = subprocess.run([sys.executable, "-m", "inspector", "run", "--prompt-file", str(COPY_PROMPT), "--ngram-min",
                        "1", "--max-tokens", "8", "--threads", "2", "--draft-max", "5", "--receipts", str(out)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0 and "draft max:" not in p.stdout
    assert "draft_max_from" not in json.loads(out.read_text())["settings"]


def test_draft_max_auto_reads_c_k_at_the_runs_own_context_length(tmp_path, monkeypatch):
    """A curve stored after 64 positions picks 3 tokens; one stored after 130 positions (as bench
    --context-lengths stores them) is steep: a second row costs little more than one, a third 3x one,
    so at 90% acceptance one proposal token is best. The copy prompt (129 tokens) and 24 tokens put the
    run's windows at about 141 positions: the steep curve decides."""
    from inspector.llama import bundled_model_path
    from inspector.llama.cost_cache import store_context_costs, store_cost_model
    from inspector.llama.cost_model import CostModel

    monkeypatch.setenv("SPEC_INSPECTOR_COST_CACHE", str(tmp_path / "cost-models.json"))
    assert store_cost_model(bundled_model_path(), 2, CostModel((10.0, 12.0, 14.0, 16.0, 30.0, 36.0, 42.0, 48.0)))
    assert store_context_costs(bundled_model_path(), 2, [(130, CostModel((10.0, 12.0, 30.0, 40.0, 50.0, 60.0,
                                                                          70.0, 80.0)))])
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "inspector", "run", "--prompt-file", str(COPY_PROMPT), "--ngram-min",
                        "1", "--max-tokens", "24", "--threads", "2", "--receipts", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    why = json.loads(out.read_text())["settings"]["draft_max_from"]
    assert json.loads(out.read_text())["settings"]["draft_max"] == 1
    assert "c(k) at 141 KV positions, from the curves stored at 64, 130" in why, why


def test_every_source_that_needs_no_file_runs_from_the_command_line_with_its_defaults(tmp_path):
    """A path option left empty (ngram-cache's lookup caches, suffix's memory file) means "no file":
    argparse once turned the empty default into Path(".") and refused the directory."""
    from inspector.sources.registry import BUILTIN_DESCRIPTORS

    names = [d.name for d in BUILTIN_DESCRIPTORS.values() if not any(o.required for o in d.options or ())]
    assert {"ngram", "ngram-cache", "ngram-mod", "suffix"} <= set(names)
    for name in names:
        r = cli("run", "--example", "copy-exact", "--source", name, "--max-tokens", "4", "--quiet",
                "--receipts", tmp_path / f"{name}.json")
        assert r.returncode == 0, (name, r.stderr)
        assert load_document(tmp_path / f"{name}.json")["settings"]["source"]["name"] == name


def test_a_fault_that_never_fires_is_named_with_the_reason(tmp_path):
    r = cli("run", "--example", "copy-exact", "--ngram-min", "1", "-n", "12", "--inject", "callback_error@:64",
            "--quiet", "--receipts", tmp_path / "r.json")
    assert r.returncode == 0, r.stderr
    most = max(len(w["committed_tokens"]) for w in load_document(tmp_path / "r.json")["windows"])
    assert f"fault callback_error at commit token 64 of a window (the 64th token one window commits) never fired: " \
           f"no window committed 64 tokens (the most one committed: {most})" in r.stderr, r.stderr


def test_view_prints_the_same_windows_vs_plain_line_as_the_run(tmp_path):
    out = tmp_path / "r.json"
    run = cli("run", "--example", "copy-with-corrections", "-n", "64", "--quiet", "--receipts", out)
    assert run.returncode == 0, run.stderr
    line = [l for l in run.stdout.splitlines() if l.startswith("windows vs plain:")]
    assert len(line) == 1, run.stdout
    view = cli("view", out)
    assert view.returncode == 0, view.stderr
    assert [l for l in view.stdout.splitlines() if l.startswith("windows vs plain:")] == line


def test_run_n_minus_one_runs_until_the_end_of_generation_or_a_full_context(tmp_path):
    """Issue 54 item 6: ``-n -1`` is llama.cpp's "no limit": the run ends at an end-of-generation token or
    when the context is full, never at a token count, and says nothing about raising -c for it."""
    out = tmp_path / "r.json"
    p = cli("run", "--prompt", "Count from one to one hundred, one number per line.", "-n", "-1", "-c", "96",
            "--receipts", out)
    assert p.returncode == 0, p.stderr
    doc = load_document(out)
    assert doc["output"]["finish_reason"] in ("eog", "context_full"), doc["output"]["finish_reason"]
    assert "raise --n-ctx" not in p.stderr
    bad = cli("run", "--prompt", "Hi", "-n", "-2")
    assert bad.returncode == 2 and "max_new_tokens" in one_clear_line(bad.stderr)
