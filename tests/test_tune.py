"""The what-if tuner (issue 28 part 3): replayed windows equal a real run's, time is predicted from the
recording's own c(k), and ``spec-inspector tune`` prints the best configurations in seconds."""

from __future__ import annotations

import json

import pytest

from inspector.bench.tune import (Recording, cold_replay_note, costs_from_document, verify, costs_from_record, grid, predict,
                                  recording_from_document, recording_from_record, replay, NotReplayable)
from inspector.engine import Generation, GenerationSettings
from inspector.llama.cost_model import CostModel
from inspector.prompts import example_prompt
from inspector.receipts.document import load_document
from inspector.session.record_from_file import record_from_document
from inspector.sources.registry import SourceContext, make_source

from test_cli import cli, one_clear_line

N = 64


def _real(scheduler, runtime, tokens, source_name, options, draft_max):
    source = None if source_name == "none" else make_source(source_name, SourceContext(runtime, memory={}), options)
    g = Generation(scheduler, source, tokens, GenerationSettings(max_new_tokens=N, draft_max=draft_max))
    try:
        g.run()
    finally:
        g.close()
    return g


@pytest.mark.parametrize("example", ["copy-with-corrections", "code-rewrite"])
def test_replayed_windows_equal_the_real_runs_windows_whenever_the_output_is_the_recorded_one(
        example, scheduler, runtime, chat_tokens):
    tokens = chat_tokens(example_prompt(example))
    recorded = _real(scheduler, runtime, tokens, "none", {}, 8)
    rec = Recording(tuple(tokens), tuple(recorded.generated), N, runtime.n_batch, runtime.n_ctx, runtime.is_eog)
    compared = 0
    for name, options, draft_max in [("ngram", {}, 6), ("ngram-simple", {"size_n": 3, "size_m": 16}, 16),
                                     ("ngram-map-k", {"size_n": 3, "size_m": 16}, 12),
                                     ("ngram-mod", {"n_match": 8, "n_min": 2, "n_max": 16}, 16),
                                     ("suffix", {"length": "score"}, 8),
                                     # adaptive: a fixed c(k), not refitted from this run's timings
                                     ("suffix", {"row_costs": "10,15,18,20,23,25,28,30,33"}, 8)]:
        real = _real(scheduler, runtime, tokens, name, options, draft_max)
        if real.generated != recorded.generated:  # a near-tie flipped by batch arithmetic: not comparable
            continue
        source = make_source(name, SourceContext(runtime, memory={}), options)
        windows, plain, _ms = replay(source, rec, draft_max)
        assert [(w.decode_step, w.proposal, w.accepted, w.committed) for w in windows] == \
            [(r.decode_step, r.proposal_token_ids, r.accepted_proposal_tokens, r.canonical_prediction_count)
             for r in real.receipts], name
        assert plain == real.plain_steps, name
        compared += 1
    assert compared >= 3, "too few configurations kept the recorded output to compare"


def test_c_k_comes_from_the_recordings_verification_times_and_plain_steps_interpolated_between():
    doc = {"lock_operations": [{"kind": "step", "hold_us": 10_000}, {"kind": "step", "hold_us": 12_000},
                               {"kind": "verify", "hold_us": 1}],
           "windows": [{"verification_rows": 3, "verification_elapsed_us": 30_000},
                       {"verification_rows": 5, "verification_elapsed_us": 40_000}]}
    assert costs_from_document(doc).row_ms == (11.0, 20.5, 30.0, 35.0, 40.0)
    assert costs_from_document({"lock_operations": [], "windows": []}) is None


class WordRuntime:
    """Tokenizes "1 2 3" into [1, 2, 3]: enough for the scripted source's factory (pure logic, no model)."""

    @staticmethod
    def tokenize(text, add_bos=False, special=True):
        return [int(t) for t in text.split()]


def test_predicted_time_is_c_of_each_windows_rows_plus_c1_per_plain_step_plus_the_proposal_time():
    """Walked by hand (issue 42: the expectation no longer comes from ``replay``, which ``predict`` calls).
    Output 1 2 3 1 2 3 1 2 (8 tokens, the first from the prefill); the script agrees with it for 4 tokens.
    Window 1 (after 1 generated token, cap min(8-1-1, 3) = 3): proposes 2 3 1, all accepted, commits 4.
    Generated 5 = 1 2 3 1 2, the script's 5th token is 9: it left the script, proposes nothing, so
    tokens 6, 7 and 8 are plain steps. Time: c(4) + 3 c(1) = 13 + 30 ms, plus the proposal time;
    plain decoding of the 7 tokens after the first costs 7 c(1) = 70 ms."""
    rec = Recording((1, 2, 3), (1, 2, 3, 1, 2, 3, 1, 2), 8, 64, 256)
    costs = CostModel((10.0, 11.0, 12.0, 13.0))
    row = predict("scripted", {"script": "1 2 3 1 9 9 9 9"}, 3, rec, costs, runtime=WordRuntime())
    assert (row.windows, row.proposed, row.accepted, row.plain_steps) == (1, 3, 3, 3)
    assert row.decode_ms - row.proposal_ms == pytest.approx(43.0)
    assert row.speedup == pytest.approx(70.0 / row.decode_ms)
    assert len(grid(["ngram"], [4, 8])) == 3 * 2 * 2 * 2  # n_max, n_min, branches (chain or tree), draft max


def test_replay_caps_each_proposal_as_the_engine_does_and_counts_plain_steps_where_none_is_asked():
    """By hand: after 1 generated token the cap is min(8-1-1, 3) = 3: 2 3 1 accepted (commits 4, bonus 2);
    after 5 it is min(8-5-1, 3) = 2: 3 9 fits, 3 is accepted and 9 corrected to 1 (commits 2); after 7
    the cap is 0: the source is not asked (its third proposal is never handed out), a plain step ends it."""
    from inspector.sources.scripted import ScriptedSource

    rec = Recording((1, 2, 3), (1, 2, 3, 1, 2, 3, 1, 2), 8, 64, 256)
    source = ScriptedSource(proposals=[(2, 3, 1), (3, 9), (2,)])
    windows, plain, _ms = replay(source, rec, 3)
    assert [(w.decode_step, w.proposal, w.accepted, w.committed) for w in windows] == [
        (0, (2, 3, 1), 3, 4), (1, (3, 9), 1, 2)]
    assert plain == 1


def test_a_sampled_or_stop_string_run_is_refused_with_the_reason():
    doc = {"settings": {"sampling": {"temperature": 0.7}, "max_new_tokens": 8},
           "output": {"token_ids": [1], "finish_reason": "length"}, "prompt": {"token_ids": [1]}}
    with pytest.raises(NotReplayable, match="temperature > 0"):
        recording_from_document(doc)
    doc["settings"]["sampling"]["temperature"] = 0
    doc["output"]["finish_reason"] = "stop"
    with pytest.raises(NotReplayable, match="stop string"):
        recording_from_document(doc)


def test_tune_prints_the_best_configurations_and_refuses_a_sampled_recording(tmp_path):
    out = tmp_path / "r.json"
    r = cli("run", "--example", "copy-with-corrections", "--max-tokens", "48", "--receipts", str(out))
    assert r.returncode == 0, r.stderr
    t = cli("tune", str(out), "--source", "ngram-simple", "--source", "ngram-mod", "--draft-max", "4",
            "--draft-max", "16", "--json", str(tmp_path / "t.json"))
    assert t.returncode == 0, t.stderr
    table = json.loads((tmp_path / "t.json").read_text())
    assert len(table) == 2 * (5 * 2 + 4 * 4)  # ngram-simple's and ngram-mod's grids at two draft max values
    speedups = [row["speedup"] for row in table]
    assert speedups == sorted(speedups, reverse=True)
    assert table[0]["label"] in t.stdout and "best llama.cpp proposer: llama-server --spec-type" in t.stdout
    # The synthetic-acceptance table of the same c(k): at tau 1 each window verifies one wrong token (2 rows)
    # and commits 1 token, so a free draft runs at c(1)/c(2) of plain decoding.
    lines = t.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("synthetic acceptance, predicted"))
    costs = costs_from_document(load_document(out))
    free = lines[head + 2].split()
    assert free[:2] == ["0", "c(1)"] and float(free[2].rstrip("*x")) == pytest.approx(costs.cost(1) / costs.cost(2),
                                                                                        abs=0.006)
    assert [line.split()[0] for line in lines[head + 2:head + 5]] == ["0", "0.25", "0.5"]
    v = cli("tune", str(out), "--source", "ngram-simple", "--draft-max", "8", "--verify", "1", "--repeats", "2")
    assert v.returncode == 0, v.stderr
    line = v.stdout.splitlines()[-1]
    assert line.split()[0].startswith("ngram-simple:draft_max=8") and float(line.split()[1]) > 0, line
    assert line.endswith(("same as replayed", "n/a: the output differed from the recording")), line
    assert "differ from the replay" not in v.stdout
    doc = load_document(out)  # the window's way in, a SessionRecord, gives the same recording and c(k)
    for record in (record_from_document(doc), record_from_document(doc, out)):
        assert recording_from_record(record) == recording_from_document(doc)
        assert costs_from_record(record).row_ms == costs_from_document(doc).row_ms
    sampled = tmp_path / "s.json"
    assert cli("run", "--example", "copy-exact", "--max-tokens", "8", "--temperature", "0.7",
               "--receipts", str(sampled)).returncode == 0
    bad = cli("tune", str(sampled))
    assert bad.returncode == 2 and "temperature > 0" in one_clear_line(bad.stderr)


def test_the_stored_cost_curve_is_scaled_to_the_recordings_level_not_interpolated_between_its_few_sizes():
    from inspector.bench.tune import fitted_costs, measured_points

    stored = CostModel((10.0, 18.0, 24.0, 25.0))
    points = measured_points([20_000, 20_000, 22_000], [(4, 50_000), (4, 50_000)])
    assert points == [(1, 20.0), (4, 50.0)]
    fitted = fitted_costs(stored, points)
    assert fitted.row_ms == (20.0, 36.0, 48.0, 50.0)  # scale 2 (the median of 20/10 and 50/25): c(2) is not 30


def test_beyond_the_measured_rows_the_cost_grows_by_the_upper_halfs_mean_slope():
    c = CostModel((10.0, 20.0, 24.0, 28.0, 30.0, 31.0))
    assert c.cost(8) == pytest.approx(31.0 + 2 * (31.0 - 24.0) / 3)
    assert CostModel((4.0,)).cost(3) == 12.0


def test_a_warm_source_or_a_later_conversation_turn_is_said_to_be_replayed_cold():
    assert cold_replay_note(None, None) is None and cold_replay_note("", 1) is None
    warm = cold_replay_note("1,204 tokens remembered from 3 earlier requests", 3)
    assert "started warm (1,204 tokens remembered from 3 earlier requests)" in warm and "starts cold" in warm
    later = cold_replay_note(None, 2)
    assert later.startswith("turn 2 of a conversation") and "suffix" in later


def test_verify_repeats_each_configuration_and_reports_medians_over_every_repeat(scheduler, runtime, chat_tokens):
    tokens = chat_tokens(example_prompt("copy-exact"))[:60]
    recorded = _real(scheduler, runtime, tokens, "none", {}, 8)
    rec = Recording(tuple(tokens), tuple(recorded.generated[:16]), 16, runtime.n_batch, runtime.n_ctx, runtime.is_eog)
    costs = CostModel((10.0, 12.0, 14.0, 16.0, 18.0))
    row = predict("ngram-simple", {"size_n": 3, "size_m": 8}, 4, rec, costs)
    [v] = verify(scheduler, rec, [row], runtime, repeats=3)
    assert v.repeats == 3 and v.measured_tokens_per_s > 0 and v.measured_speedup > 0
    with pytest.raises(ValueError, match="observed 0"):
        verify(scheduler, rec, [row], runtime, repeats=0)


def test_a_conversation_replays_turn_after_turn_with_one_memory():
    from inspector.bench.tune_turns import recordings_of, replay_turns

    first = Recording((1, 2), (50, 51, 52, 53, 54, 55, 56, 57), 16, 64, 256)
    # The second turn's prompt does not hold the first answer: only the memory of it can propose.
    second = Recording((3, 4), (50, 51, 52, 53, 54, 55, 56, 57), 16, 64, 256)
    costs = CostModel((10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0))
    both = replay_turns("suffix", {"length": "score"}, 8, [first, second], costs)
    assert [len(w) for w in both.windows][0] == 0 and len(both.windows[1]) > 0
    assert both.windows[1][0].proposal[0] == 51 + both.windows[1][0].decode_step
    alone = predict("suffix", {"length": "score"}, 8, second, costs)
    assert alone.windows == 0 and both.row.windows == len(both.windows[1])
    assert both.row.speedup == pytest.approx((7 + 7) * 10.0 / both.row.decode_ms)
    doc = {"settings": {"sampling": {"temperature": 0}, "max_new_tokens": 8},
           "output": {"token_ids": [5, 6], "finish_reason": "length"}, "prompt": {"token_ids": [1]}}
    assert recordings_of(doc) == [recording_from_document(doc)]
    assert len(recordings_of({"kind": "conversation", "turns": [doc, doc]})) == 2


def test_a_replayed_conversation_has_the_windows_of_the_real_one_in_every_turn_that_kept_its_output(
        scheduler, runtime):
    """The suffix source remembers across turns (its memory and its learned acceptance): replaying the
    plain conversation's turns in order gives the real run's windows, turn by turn, while the real
    conversation's output is the plain one (a near-tie flipped by batch arithmetic ends the comparison)."""
    from inspector.bench.compare import run_compare
    from inspector.bench.compare_result import CompareConfig
    from inspector.bench.tune_turns import replay_turns
    from inspector.prompts import turns_path
    from inspector.session.conversation import read_turns

    turns = read_turns(turns_path("agent-edits"))[:3]
    options = {"row_costs": "10,13,15,16,18,19,21,22,24"}  # cheap rows: the source proposes often
    result = run_compare(scheduler, [], [CompareConfig("plain", "none", 0), CompareConfig("s", "suffix", 8, options)],
                         GenerationSettings(max_new_tokens=40), turns=turns, keep_runs=True)
    plain, real = result.runs
    assert result.rows[0].warm == ""  # plain decoding remembers nothing; suffix remembers turn 1 from turn 2
    assert result.rows[1].warm.startswith("turns 2-3 began warm (turn 3: "), result.rows[1].warm
    recs = [Recording(tuple(g.tokens[:g.prompt_token_count]), tuple(g.generated), 40, runtime.n_batch,
                      runtime.n_ctx, runtime.is_eog) for g in plain.generations]
    replayed = replay_turns("suffix", options, 8, recs, CostModel((10.0,)))
    compared = 0
    for rec, gen, windows in zip(recs, real.generations, replayed.windows):
        if tuple(gen.generated) != rec.output:
            break
        assert [(w.decode_step, w.proposal, w.accepted, w.committed) for w in windows] == \
            [(r.decode_step, r.proposal_token_ids, r.accepted_proposal_tokens, r.canonical_prediction_count)
             for r in gen.receipts], compared
        compared += 1
    assert compared >= 2 and sum(len(w) for w in replayed.windows[:compared]) > 0
