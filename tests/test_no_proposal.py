"""Why a decode step ran without a window (issue 28): every plain step's event names its reason, the
engine's own or the source's declared one, and the reasons plus the windows count every decode step."""

from __future__ import annotations

import pytest

from inspector.engine import Generation, GenerationSettings, RuntimeScheduler
from inspector.engine.no_proposal import ENGINE_REASONS, NoProposal, count_reasons, no_room_detail, reason_code
from inspector.engine.proposal import Proposal
from inspector.engine.records import EngineEvent
from inspector.prompts import example_prompt
from inspector.sources.registry import SourceContext, describe_source, make_source

from fake_runtime import FakeRuntime


class Answers:
    """Answers each query with the next of ``answers`` (an exception is raised), then None."""

    name = "answers"

    def __init__(self, answers):
        self.answers = list(answers)

    def propose(self, request):
        a = self.answers.pop(0) if self.answers else None
        if isinstance(a, Exception):
            raise a
        return a

    def report(self, receipt):
        pass

    def discard(self, decision_id, reason):
        pass


def _steps(g: Generation) -> list[str]:
    return [e.detail for e in g.events if e.kind == "step"]


def _run_fake(source, n=6, **settings) -> Generation:
    g = Generation(RuntimeScheduler(FakeRuntime()), source, [1, 2, 3],
                   GenerationSettings(max_new_tokens=n, **settings))
    g.run()
    return g


def test_each_plain_step_names_why_no_window_ran_in_the_engines_words():
    g = _run_fake(Answers([None, NoProposal("no_match", "no 3-gram"), ValueError("boom"),
                           Proposal(b"long", (5,) * 40), Proposal(b"ok", (7,))]), n=7)
    # the prefill commits token 1; then: None, NoProposal, an error, a too-long proposal, a window, the last token
    assert _steps(g) == ["not_said", "no_match: no 3-gram", "source_error: ValueError",
                         "discarded: invalid_token_count", "no_room: the last token of max tokens"]
    assert len(g.receipts) == 1


def test_plain_decoding_and_draft_max_zero_are_reasons_too():
    assert set(_steps(_run_fake(None))) == {"plain_decoding"}
    assert set(_steps(_run_fake(Answers([]), draft_max=0))) == {"no_room: draft max is 0"}


def test_reasons_are_counted_by_code_from_events_or_their_json():
    events = [EngineEvent(0, 0, "step", 0, detail="no_match: no 2-gram"), EngineEvent(1, 0, "step", 0, detail="no_match"),
              EngineEvent(2, 0, "verify", 0, window=1), EngineEvent(3, 0, "step", 0, detail="")]
    assert count_reasons(events) == {"no_match": 2, "": 1}
    assert count_reasons([e.to_json() for e in events]) == {"no_match": 2, "": 1}
    assert reason_code("below_n_min: walked 3 of n_min 48") == "below_n_min"


@pytest.mark.parametrize("args, words", [((5, 8, 0, 100), "draft max is 0"), ((1, 8, 4, 100), "the last token"),
                                         ((5, 1, 4, 100), "n_batch 1"), ((5, 8, 4, 1), "1 free context position")])
def test_no_room_says_which_limit_left_no_proposal_row(args, words):
    assert words in no_room_detail(*args)


def test_the_engine_reasons_and_every_built_in_sources_reasons_are_declared_with_meanings():
    from inspector.sources.registry import source_names

    assert all(meaning for meaning in ENGINE_REASONS.values())
    for name in source_names():
        d = describe_source(name)
        assert all(code and code == code.lower() and " " not in code and meaning
                   for code, meaning in d.reasons.items()), name


# -- the real model -------------------------------------------------------------------------------

@pytest.mark.parametrize("name, options", [("ngram", {}), ("ngram-mod", {}), ("ngram-simple", {}), ("suffix", {})])
def test_on_the_model_plain_steps_plus_windows_are_every_decode_step_and_each_reason_is_declared(
        name, options, scheduler, runtime, chat_tokens):
    source = make_source(name, SourceContext(runtime, memory={}), options)
    g = Generation(scheduler, source, chat_tokens(example_prompt("copy-with-corrections")),
                   GenerationSettings(max_new_tokens=40))
    try:
        g.run()
    finally:
        g.close()
    counts = count_reasons(g.events)
    assert sum(counts.values()) + len(g.receipts) == g.decode_step
    declared = set(describe_source(name).reasons) | set(ENGINE_REASONS)
    assert set(counts) <= declared, f"undeclared reasons: {set(counts) - declared}"


def test_ngram_mods_default_n_min_is_the_reason_it_proposes_nothing_on_a_short_copy(scheduler, runtime, chat_tokens):
    source = make_source("ngram-mod", SourceContext(runtime, memory={}), {})  # llama-server's n_min 48
    g = Generation(scheduler, source, chat_tokens(example_prompt("copy-exact")),
                   GenerationSettings(max_new_tokens=24, draft_max=64))
    try:
        g.run()
    finally:
        g.close()
    counts = count_reasons(g.events)
    assert counts["below_n_min"] > 0 and set(counts) <= {"below_n_min", "no_room"}, counts


def test_run_and_view_print_the_plain_steps_by_reason_with_their_meaning(tmp_path):
    from test_cli import cli

    out = tmp_path / "r.json"
    r = cli("run", "--example", "copy-exact", "--source", "ngram-mod", "--max-tokens", "24", "--receipts", str(out))
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("why no window:"))
    n = int(line.split()[3])
    listed = [x for x in r.stdout.splitlines() if x.startswith("  ") and ": " in x and x.split()[0].isdigit()]
    assert sum(int(x.split()[0]) for x in listed) == n
    assert any(x.split()[1] == "below_n_min:" and "n_min" in x for x in listed), listed
    v = cli("view", str(out))
    assert line in v.stdout


def test_run_prints_what_its_windows_saved_and_lost_against_plain_decoding_at_its_own_c1():
    from test_cli import cli

    r = cli("run", "--example", "copy-with-corrections", "--max-tokens", "48", "--draft-max", "6")
    assert r.returncode == 0, r.stderr
    windows = next(x for x in r.stdout.splitlines() if x.startswith("windows:"))
    assert int(windows.split()[1]) > 0 and int(windows.split("plain steps ")[1].split(";")[0]) > 0, windows
    line = next(x for x in r.stdout.splitlines() if x.startswith("windows vs plain:"))
    saved = int(line.split(" in ")[1].split()[0])
    lost = int(line.split(" in ")[2].split()[0].rstrip(";"))
    assert saved + lost == int(windows.split()[1]) and line.endswith("(plain steps of this run)"), line


def test_a_second_request_on_the_same_memory_is_said_to_be_warm_and_the_first_is_not(scheduler, runtime, chat_tokens):
    from inspector.engine.settings import GenerationSettings as GS
    from inspector.session.run import RunRequest, SessionRun

    memory: dict = {}
    warm = []
    for name in ("ngram-mod", "suffix", "ngram-map-k"):
        said = []
        for _ in range(2):
            run = SessionRun(scheduler, RunRequest("", GS(max_new_tokens=16), name, {},
                                                   prompt_token_ids=tuple(chat_tokens(example_prompt("copy-exact"))),
                                                   source_memory=memory), lambda record: None)
            run.tokenize()
            run.make_source()
            g = run.open()
            try:
                run.start()
                for _ in run.steps():
                    pass
            finally:
                run.end(g.finish_reason or "error")
                run.close_source()
                g.close()
            said.append(run.settings_json()["source"].get("warm", ""))
        warm.append((name, said))
    assert all(not first and second for _name, (first, second) in warm), warm
