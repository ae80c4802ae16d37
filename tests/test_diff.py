"""``spec-inspector diff A B`` (issue 57): the pure comparison on tiny documents, then real runs of the bundled
model compared through the command line."""

from __future__ import annotations

import copy
import json

import pytest

from inspector.session.diff import DiffRefused, diff_documents, format_diff, matched_requests, setup_differences
from test_cli import COPY_PROMPT, cli, one_clear_line


def _window(base: int, accepted: int, proposed: int = 4) -> dict:
    return {"base_position": base, "accepted_proposal_tokens": accepted, "proposal_elapsed_us": 100,
            "verification_elapsed_us": 2000, "proposal_token_ids": [], "verification_row_predictions": []}


def _doc(tokens, windows=(), source="ngram", weights="Q4_1", prompt=(1, 2, 3), tps=100.0) -> dict:
    """The parts of a request document the diff reads."""
    return {
        "model": {"path": "/m/model.gguf", "sha256": "abc", "weights": weights, "n_threads": 2, "n_ctx": 2048,
                  "n_batch": 512, "layers": "all layers on the CPU",
                  "llama_cpp": {"commit": "0c1e570", "n_ubatch": 512, "flash_attn": "on", "type_k": "f16",
                                "type_v": "f16"}},
        "settings": {"source": {"name": source, "settings": {}}, "draft_max": 8, "sampling": {"temperature": 0.0},
                     "max_new_tokens": 64, "verification": "sample_match"},
        "prompt": {"text": "p", "token_ids": list(prompt)},
        "output": {"token_ids": list(tokens), "token_texts": [f"t{t}" for t in tokens]},
        "windows": list(windows), "discards": [], "events": [], "lock_operations": [],
        "summary": {"generated_tokens": len(tokens), "windows": len(windows), "plain_steps": 0,
                    "acceptance_by_position": [0.5, 0.25], "decode_tokens_per_s": tps, "prefill_elapsed_us": 1000},
    }


def test_equal_outputs_have_no_parting_and_the_figures_ratio_is_b_over_a():
    d = diff_documents(_doc([5, 6, 7], tps=100.0), _doc([5, 6, 7], tps=150.0))
    assert d.outputs_equal and d.parting is None and d.setup == ()
    tps = next(f for f in d.figures if f.name == "decode tokens/s")
    assert (tps.a, tps.b, tps.ratio) == (100.0, 150.0, 1.5)
    assert [(f.name, f.a, f.b) for f in d.by_position] == [("draft position 1", 0.5, 0.5),
                                                                ("draft position 2", 0.25, 0.25)]


def test_outputs_part_at_the_first_different_token_and_when_one_stops_early():
    # Tokens without figures: no margin (the documents have no windows or plain-step figures).
    d = diff_documents(_doc([5, 6, 7, 8]), _doc([5, 6, 9, 8]))
    assert not d.outputs_equal and (d.parting.index, d.parting.a_token, d.parting.b_token) == (2, 7, 9)
    assert d.parting.a_margin is None
    d = diff_documents(_doc([5, 6, 7]), _doc([5, 6]))
    assert (d.parting.index, d.parting.a_token, d.parting.b_token, d.parting.b_text) == (2, 7, None, "(ended)")
    assert "parts at generated token 2 (A 3 tokens, B 2): A 't7' (7, margin - logits), B ended there" in \
        format_diff(d)


def test_the_setup_names_what_differs_in_order():
    b = _doc([1], source="suffix", weights="Q8_0")
    assert [(s.name, s.a, s.b) for s in setup_differences(_doc([1]), b)] == [("weights", "Q4_1", "Q8_0"),
                                                                             ("source", "ngram", "suffix")]


def test_the_machine_and_the_build_are_named_when_they_differ_and_unrecorded_reads_as_dash():
    a, b = _doc([1]), _doc([1])
    a["model"]["machine"] = {"cpu": "AMD EPYC", "logical_cores": 2, "llama_cpp_python": "0.3.36",
                             "llama_cpp_system_info": "CPU : AVX2 = 1 |"}
    b["model"]["machine"] = {**a["model"]["machine"], "cpu": "Apple M2", "llama_cpp_system_info": "CPU : NEON = 1 |"}
    assert [(s.name, s.a, s.b) for s in setup_differences(a, b)] == [
        ("llama.cpp features", "CPU : AVX2 = 1 |", "CPU : NEON = 1 |"), ("CPU", "AMD EPYC", "Apple M2")]
    older = _doc([1])  # a file of schema v3 names no machine
    assert ("CPU", None, "AMD EPYC") in [(s.name, s.a, s.b) for s in setup_differences(older, a)]
    assert "CPU" in format_diff(diff_documents(older, a)) and "-  ->  AMD EPYC" in format_diff(diff_documents(older, a))


def test_windows_at_the_same_position_that_gained_and_lost_are_ranked_by_the_change():
    a = _doc([1], windows=[_window(10, 1), _window(20, 4), _window(30, 2), _window(40, 0)])
    b = _doc([1], windows=[_window(10, 4), _window(20, 1), _window(30, 3), _window(50, 4)])
    d = diff_documents(a, b)
    assert [(c.base_position, c.change) for c in d.gained] == [(10, 3), (30, 1)]
    assert [(c.base_position, c.change) for c in d.lost] == [(20, -3)]  # 40 and 50 are in one run only


def test_documents_of_different_prompts_are_refused_in_one_line():
    with pytest.raises(DiffRefused, match="not the same prompt"):
        diff_documents(_doc([1], prompt=(1, 2)), _doc([1], prompt=(1, 3)))


def test_conversation_turns_are_matched_by_prompt_each_used_once():
    t = [_doc([1], prompt=(1,)), _doc([2], prompt=(2,)), _doc([3], prompt=(1,))]
    a = {"kind": "conversation", "turns": t}
    b = {"kind": "conversation", "turns": [t[1], t[0], _doc([9], prompt=(7,))]}
    assert matched_requests(a, b) == ([(0, 1), (1, 0)], [2], [2])
    assert matched_requests(t[1], b) == ([(0, 0)], [], [1, 2])  # a request against a conversation's turns
    with pytest.raises(DiffRefused, match="no request of A"):
        matched_requests(_doc([1], prompt=(8,)), b)


# -- real runs of the bundled model ---------------------------------------------------------------------------


def _run(tmp_path, name, *extra) -> str:
    out = tmp_path / name
    p = cli("run", "--prompt-file", COPY_PROMPT, "--max-tokens", "32", "--threads", "1", "--receipts", out, *extra)
    assert p.returncode == 0, p.stderr
    return str(out)


def test_the_same_run_twice_is_equal_with_the_same_windows(tmp_path):
    a, b = _run(tmp_path, "a.json", "--ngram-min", "1"), _run(tmp_path, "b.json", "--ngram-min", "1")
    p = cli("diff", a, b, "--json", tmp_path / "d.json", "--fail-on-divergence")
    assert p.returncode == 0, p.stderr
    d = json.loads((tmp_path / "d.json").read_text())["pairs"][0]
    da, db = (json.loads(open(x).read()) for x in (a, b))
    assert d["outputs_equal"] and d["parting"] is None and d["setup"] == []
    assert da["output"]["token_ids"] == db["output"]["token_ids"]  # the diff's "equal" is the documents' own
    figures = {f["name"]: f for f in d["figures"]}
    assert figures["windows"]["a"] == len(da["windows"]) and figures["windows"]["ratio"] == 1.0
    assert figures["accepted tokens"]["ratio"] in (1.0, None)
    assert "output: equal" in p.stdout and "setup:\n  the same" in p.stdout


def test_plain_against_ngram_names_the_source_and_parts_where_the_documents_part(tmp_path):
    a, b = _run(tmp_path, "plain.json", "--source", "none"), _run(tmp_path, "ngram.json", "--ngram-min", "1")
    p = cli("diff", a, b, "--json", tmp_path / "d.json")
    assert p.returncode == 0, p.stderr
    d = json.loads((tmp_path / "d.json").read_text())["pairs"][0]
    assert ("source", "none", "ngram") in [(s["name"], s["a"], s["b"]) for s in d["setup"]]
    ta, tb = (json.loads(open(x).read())["output"]["token_ids"] for x in (a, b))
    first = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), None)
    if ta == tb:
        assert d["outputs_equal"] and d["parting"] is None
    else:  # greedy speculation parts from plain decoding only at a near-tie: where the token ids part
        assert d["parting"]["index"] == (first if first is not None else min(len(ta), len(tb)))
    assert {f["name"]: f["b"] for f in d["figures"]}["windows"] > 0 == {f["name"]: f["a"] for f in
                                                                          d["figures"]}["windows"]


def test_an_output_that_parts_fails_with_the_flag_and_names_the_place(tmp_path):
    a = _run(tmp_path, "a.json")
    doc = json.loads(open(a).read())
    changed = copy.deepcopy(doc)
    k = len(doc["output"]["token_ids"]) // 2
    changed["output"]["token_ids"][k] = (doc["output"]["token_ids"][k] + 1) % doc["model"]["n_vocab"]
    b = tmp_path / "b.json"
    b.write_text(json.dumps(changed))
    p = cli("diff", a, b, "--fail-on-divergence")
    assert p.returncode == 1, p.stderr
    assert f"output: parts at generated token {k} " in p.stdout
    assert cli("diff", a, b).returncode == 0  # without the flag a divergence is a finding, not a failure


def test_compare_given_two_receipts_files_points_to_diff():
    p = cli("compare", "a.json", "b.json")
    assert p.returncode == 2 and "spec-inspector diff A.json B.json" in one_clear_line(p.stderr)


def test_a_broken_or_unrelated_file_gets_one_line_and_status_2(tmp_path):
    a = _run(tmp_path, "a.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema": ')
    p = cli("diff", a, broken)
    assert p.returncode == 2 and str(broken) in one_clear_line(p.stderr)
    other = tmp_path / "other.json"
    p = cli("run", "--prompt", "Name three colours.", "--max-tokens", "8", "--threads", "1", "--receipts", other)
    assert p.returncode == 0, p.stderr
    p = cli("diff", a, other)
    assert p.returncode == 2 and "not the same prompt" in one_clear_line(p.stderr)


def test_the_q8_0_form_of_the_model_names_the_weights_and_parts_where_the_token_ids_part(tmp_path):
    a, b = _run(tmp_path, "q4.json"), _run(tmp_path, "q8.json", "--target-weights", "Q8_0")
    p = cli("diff", a, b, "--json", tmp_path / "d.json")
    assert p.returncode == 0, p.stderr
    d = json.loads((tmp_path / "d.json").read_text())["pairs"][0]
    da, db = (json.loads(open(x).read()) for x in (a, b))
    setup = {s["name"]: (s["a"], s["b"]) for s in d["setup"]}
    assert setup["weights"] == (da["model"]["weights"], "Q8_0") and da["model"]["weights"] != "Q8_0"
    assert "model file" not in setup  # the same model, converted: the file it came from is named
    ta, tb = da["output"]["token_ids"], db["output"]["token_ids"]
    if ta == tb:
        assert d["outputs_equal"]
    else:  # other weights may pick other tokens: the diff names the first place they part, and its margins
        first = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
        assert d["parting"]["index"] == first and f"parts at generated token {first} " in p.stdout


def test_ngram_against_suffix_on_the_bundled_conversation_gives_a_row_per_turn(tmp_path):
    docs = {}
    for source in ("ngram", "suffix"):
        out = tmp_path / f"{source}.json"
        p = cli("run", "--turns", "agent-edits", "--source", source, "--max-tokens", "12", "--threads", "1",
                "--receipts", out)
        assert p.returncode == 0, p.stderr
        docs[source] = str(out)
    p = cli("diff", docs["ngram"], docs["suffix"], "--json", tmp_path / "d.json")
    assert p.returncode == 0, p.stderr
    d = json.loads((tmp_path / "d.json").read_text())
    turns = [json.loads(open(docs[s]).read())["turns"] for s in ("ngram", "suffix")]
    assert len(turns[0]) == len(turns[1]) >= 2
    # A turn's prompt holds the turns before it: where an output parts (a near-tie), the later prompts differ
    # and those turns stand unmatched; up to there, turn i pairs with turn i.
    parted = next((i for i, (x, y) in enumerate(zip(*turns)) if x["output"]["token_ids"] != y["output"]["token_ids"]),
                  len(turns[0]) - 1)
    assert len(d["pairs"]) >= parted + 1 and p.stdout.count("== request") == len(d["pairs"])
    for i, pair in enumerate(d["pairs"][:parted + 1]):  # each names the source and compares the outputs
        assert ("source", "ngram", "suffix") in [(s["name"], s["a"], s["b"]) for s in pair["setup"]]
        ta, tb = (t[i]["output"]["token_ids"] for t in turns)
        assert pair["outputs_equal"] == (ta == tb)
    if parted == len(turns[0]) - 1:
        assert d["a_unmatched"] == d["b_unmatched"] == [] and len(d["pairs"]) == len(turns[0])
