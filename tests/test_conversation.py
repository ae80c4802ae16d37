"""Conversations (issue 16): turns files, run --turns and compare --turns on the bundled model.

No test expects the model's words: the checks are about turns, files, history and memory.
"""

from __future__ import annotations

import json

import pytest

from inspector.prompts import TURNS_EXAMPLES, turns_path
from inspector.receipts.document import load_document
from inspector.session.conversation import Conversation, TurnsFileError, chat_prompt, parse_turns, read_turns
from tests.test_cli import cli


def test_a_plain_text_turns_file_splits_at_lines_holding_only_three_dashes():
    assert parse_turns("first\nline two\n---\nsecond\n") == ["first\nline two", "second"]
    assert parse_turns("only one turn") == ["only one turn"]


def test_a_json_turns_file_takes_strings_or_user_messages():
    assert parse_turns('["a", {"role": "user", "content": "b"}]') == ["a", "b"]


@pytest.mark.parametrize("text, message", [
    ("", "holds no turns"),
    ("[]", "holds no turns"),
    ("[1, ", "not valid JSON"),
    ("[3]", "turn 1 is not a string"),
    ("one\n---\n   \n---\nthree", "turn 2 is empty"),
])
def test_a_bad_turns_file_is_refused_naming_the_problem_and_the_turn(text, message):
    with pytest.raises(TurnsFileError, match=message):
        parse_turns(text, "turns file t.txt")


def test_a_missing_turns_file_says_it_cannot_be_read(tmp_path):
    with pytest.raises(TurnsFileError, match="cannot read turns file"):
        read_turns(tmp_path / "nope.txt")


def test_the_bundled_conversation_has_several_turns_that_ask_to_change_the_earlier_answer():
    turns = read_turns(turns_path(TURNS_EXAMPLES[0]))
    assert len(turns) >= 3 and all("the function you wrote" in t for t in turns[1:])


def test_the_next_turns_prompt_holds_the_earlier_turn_and_its_answer(runtime):
    conv = Conversation()
    first = chat_prompt(runtime, conv.next_turn("Say hello.")["chat_messages"])[1]
    conv.add_answered(None, "Say hello.", "Hello there!")
    fields = conv.next_turn("Again.")
    second = chat_prompt(runtime, fields["chat_messages"])[1]
    text = runtime.detokenize(second)
    assert "Say hello." in text and "Hello there!" in text and "Again." in text
    assert len(second) > len(first) and conv.history.turns == 1 and fields["conversation"]["turn"] == 2


def test_run_turns_writes_one_conversation_document_holding_every_turn_with_the_turn_on_each_window(tmp_path):
    turns = tmp_path / "t.txt"
    turns.write_text("Repeat exactly: one two three four five six.\n---\n"
                     "Repeat your answer exactly once more.\n")
    r = cli("run", "--turns", turns, "--max-tokens", "12", "--quiet", "--receipts", tmp_path / "r.json")
    assert r.returncode == 0, r.stderr
    assert "--- turn 1/2: Repeat exactly: one two three four five six. ---" in r.stdout
    assert "--- turn 2/2: Repeat your answer exactly once more. ---" in r.stdout
    doc = load_document(tmp_path / "r.json")  # validates against the schema
    assert doc["kind"] == "conversation" and doc["conversation"]["turns"] == 2
    one, two = doc["turns"]
    assert one["conversation"]["turn"] == 1 and two["conversation"]["turns"] == 2
    assert two["conversation"]["history"][-1] == {"role": "assistant", "content": one["output"]["text"]}
    assert all(w["turn"] == 2 for w in two["windows"]) and all(w["turn"] == 1 for w in one["windows"])
    assert two["prompt"]["templated_text"].count(one["output"]["text"]) >= 1
    messages = doc["conversation"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 2
    assert messages[3]["content"] == two["output"]["text"]
    s = doc["summary"]
    assert s["windows"] == len(one["windows"]) + len(two["windows"])
    assert s["generated_tokens"] == len(one["output"]["token_ids"]) + len(two["output"]["token_ids"])
    v = cli("view", tmp_path / "r.json")
    assert v.returncode == 0 and "conversation, 2 turn(s)" in v.stdout and "turn 2: prompt" in v.stdout
    v2 = cli("view", tmp_path / "r.json", "--turn", "2", "--windows")
    assert v2.returncode == 0 and "--- turn 2/2: Repeat your answer" in v2.stdout and "--- windows and discards ---" in v2.stdout
    v3 = cli("view", tmp_path / "r.json", "--turn", "3")
    assert v3.returncode != 0 and "has no turn 3 (turns 1..2)" in v3.stderr
    tr = cli("trace", tmp_path / "r.json", "-o", tmp_path / "t.json")
    assert tr.returncode == 0, tr.stderr
    trace = json.loads((tmp_path / "t.json").read_text())
    assert {e["pid"] for e in trace["traceEvents"]} == {1, 2} and trace["metadata"]["turns"] == 2


def test_a_turn_that_no_longer_fits_the_context_is_named_and_earlier_turns_are_kept(tmp_path):
    turns = tmp_path / "t.json"
    # Each message is about 60 tokens: whatever the model answers, the third turn's history cannot fit 160.
    long = "Repeat exactly: " + " ".join(f"word{i}" for i in range(20))
    turns.write_text(json.dumps([long, long, long, long]))
    r = cli("run", "--turns", turns, "--max-tokens", "8", "--n-ctx", "160", "--quiet",
            "--receipts", tmp_path / "r.json")
    assert r.returncode != 0
    failed = next(line for line in r.stderr.splitlines() if "error: turn" in line)
    n = int(failed.split("error: turn ")[1].split()[0])
    assert n >= 2 and "context" in failed
    doc = load_document(tmp_path / "r.json")
    assert [t["conversation"]["turn"] for t in doc["turns"]] == list(range(1, n))
    assert doc["conversation"]["planned_turns"] == 4
    assert doc["conversation"]["stopped_at"].startswith(f"turn {n} could not start")


def test_compare_over_turns_gives_one_row_per_configuration_summing_every_turn(scheduler):
    from inspector.bench.compare import parse_config, run_compare
    from inspector.engine.settings import GenerationSettings

    turns = ["Repeat exactly: red green blue yellow.", "Repeat your answer exactly once more."]
    result = run_compare(scheduler, [], [parse_config("none"), parse_config("ngram:draft_max=4")],
                         GenerationSettings(max_new_tokens=10), turns=turns, keep_runs=True)
    plain, ngram = result.rows
    assert plain.error is None and ngram.error is None
    runs = result.runs[0].generations
    assert len(runs) == 2 and plain.summary.generated_tokens == sum(len(g.generated) for g in runs)  # every turn
    assert ngram.same_output_as_plain is not None and ngram.summary.windows >= 1


def test_bench_turns_gives_each_source_its_memory_and_proposal_time_over_the_conversation(scheduler):
    from inspector.bench.turns import format_turns_bench, memory_bytes, run_turns_bench
    from inspector.engine.settings import GenerationSettings
    from inspector.llama.cost_model import CostModel

    turns = ["Repeat exactly: red green blue yellow.", "Repeat your answer exactly once more."]
    cm = CostModel((10.0, 14.0, 18.0, 22.0))  # a made-up curve: only its ceiling is read here
    result = run_turns_bench(scheduler, turns, GenerationSettings(max_new_tokens=10), cm,
                             sources=("none", "ngram-map-k", "suffix"))
    rows = {r["source"]: r for r in result["rows"]}
    assert set(rows) == {"none", "ngram-map-k", "suffix"} and all(r["error"] is None for r in rows.values())
    assert rows["none"]["memory_bytes"] == 0 and rows["suffix"]["memory_bytes"] > 0  # suffix remembers outputs
    assert rows["none"]["speedup_vs_plain"] == pytest.approx(1.0)
    assert rows["ngram-map-k"]["fraction_of_ceiling"] == pytest.approx(rows["ngram-map-k"]["speedup_vs_plain"] / cm.ceiling)
    assert "suffix" in format_turns_bench(result)
    assert memory_bytes({"a": [1, 2, 3]}) > memory_bytes({})


def test_every_source_keeps_plain_greedys_output_over_a_conversation_or_parts_at_a_near_tie(scheduler):
    """Greedy verification commits the target's own tokens: a source's conversation equals plain
    decoding's, or parts from it where the plain run's top two logits nearly tie (< 1 logit,
    the baseline's rule); the bench reports where and the margin."""
    from inspector.bench.turns import SOURCES, run_turns_bench
    from inspector.engine.settings import GenerationSettings
    from inspector.llama.cost_model import CostModel

    turns = read_turns(turns_path("agent-edits"))[:2]
    result = run_turns_bench(scheduler, turns, GenerationSettings(max_new_tokens=32), CostModel((10.0, 14.0)),
                             sources=SOURCES)
    for r in result["rows"]:
        assert r["error"] is None, r
        if r["same_output_as_plain"] is False:
            d = r["divergence"]
            assert d is not None and d["plain_margin"] is not None and d["plain_margin"] < 1.0, r


def test_run_turns_prints_each_turns_whole_user_message_and_its_answer(tmp_path):
    """Issue 26: the heading shortens a long message; the output shows each turn's whole message, then
    ``answer:`` and the answer the receipts hold."""
    from inspector.session.transcript import message_text

    turns = tmp_path / "t.json"
    long = "Repeat exactly: " + " ".join(f"word{i}" for i in range(30))
    turns.write_text(json.dumps([long, "Say it once more.\nJust once."]))
    r = cli("run", "--turns", turns, "--max-tokens", "6", "--threads", "1", "--receipts", tmp_path / "r.json")
    assert r.returncode == 0, r.stderr
    doc = load_document(tmp_path / "r.json")
    out = r.stdout
    for n, (message, turn) in enumerate(zip([long, "Say it once more.\nJust once."], doc["turns"]), 1):
        heading = out.index(f"--- turn {n}/2:")
        shown = out.index(message_text("user", message) + "\nanswer:\n" + turn["output"]["text"], heading)
        assert shown < out.index("--- summary ---", heading)
    assert "user: Repeat exactly: " + long.split(": ", 1)[1] in out  # the whole of it, not the heading's 80 characters


def test_the_bench_over_several_conversations_sums_each_sources_decode_time_and_windows():
    from inspector.bench.turns import REPEATING, combine_turns_benches, format_combined

    def row(source, generated, tps, windows=0, mean=None, rate=None):
        return {"source": source, "generated_tokens": generated, "decode_tokens_per_s": tps, "windows": windows,
                "mean_accepted_length": mean, "acceptance_rate": rate, "error": None}

    results = {"a": {"rows": [row("none", 100, 50.0), row("suffix", 100, 100.0, 10, 5.0, 0.8)]},
               "b": {"rows": [row("none", 300, 100.0), row("suffix", 300, 100.0, 20, 3.0, 0.5)]}}
    rows = {r["source"]: r for r in combine_turns_benches(results)["rows"]}
    # none: 400 tokens in 2 s + 3 s; suffix: 400 tokens in 1 s + 3 s.
    assert rows["none"]["decode_tokens_per_s"] == pytest.approx(80.0)
    assert rows["suffix"]["decode_tokens_per_s"] == pytest.approx(100.0)
    assert rows["suffix"]["speedup_vs_plain"] == pytest.approx(1.25)
    # 40 + 40 accepted of 50 + 80 proposed in 30 windows.
    assert (rows["suffix"]["accepted"], rows["suffix"]["proposed"], rows["suffix"]["windows"]) == (80, 130, 30)
    assert rows["suffix"]["mean_accepted_length"] == pytest.approx(1 + 80 / 30)
    table = format_combined(combine_turns_benches(results))
    assert "suffix" in table and table.splitlines()[-1].endswith("fastest")
    assert set(REPEATING) <= set(TURNS_EXAMPLES)
    assert all(len(read_turns(turns_path(name))) >= 3 for name in REPEATING)
