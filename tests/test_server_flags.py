"""Take it to llama-server (issue 16): each configuration's printed arguments parse back to it."""

from __future__ import annotations

import shlex

import pytest

from inspector.engine.llama_settings import SEED_MAX
from inspector.engine.settings import SamplingSettings
from inspector.llama.context_settings import ContextSettings
from inspector.sources.registry import describe_source
from inspector.sources.server_flags import (
    NoServerEquivalent,
    context_server_arguments,
    parse_context_arguments,
    parse_sampling_arguments,
    parse_server_arguments,
    sampling_server_arguments,
    server_arguments,
    server_command,
    server_sources,
)

CONFIGS = [
    ("ngram-simple", {"size_n": 4, "size_m": 16}, None),
    ("ngram-map-k", {"size_n": 3, "size_m": 24, "min_hits": 2}, None),
    ("ngram-map-k4v", {}, None),
    ("ngram-mod", {"n_match": 16, "n_min": 8, "n_max": 32}, None),
    ("ngram-cache", {}, None),
    ("draft", {"draft_model": "/models/draft.gguf", "draft_min": 2, "p_min": 0.75, "n_gpu_layers": 20}, 6),
]


def test_every_llama_cpp_proposer_and_the_draft_model_have_llama_server_flags():
    assert set(server_sources()) == {"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
                                     "draft"}


@pytest.mark.parametrize("source, options, draft_max", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_a_configurations_llama_server_arguments_parse_back_to_the_same_configuration(source, options, draft_max):
    d = describe_source(source)
    argv = shlex.split(server_command(source, options, draft_max=draft_max, model="target.gguf"))
    assert argv[:3] == ["llama-server", "-m", "target.gguf"]
    back, parsed, back_draft_max = parse_server_arguments(argv)
    assert back == source and back_draft_max == draft_max
    expected = d.with_defaults(d.check_options(options))
    expected = {k: v for k, v in expected.items() if v not in ("", None) and not (v == -1 and d.option(k).default == -1)
                and d.option(k).from_setting is None}
    assert d.with_defaults(parsed) == d.with_defaults(expected)


def test_a_llama_cpp_type_names_its_spec_type_and_its_own_flags():
    args = server_arguments("ngram-mod", {"n_min": 16})
    assert args[:2] == ["--spec-type", "ngram-mod"]
    assert args[args.index("--spec-ngram-mod-n-min") + 1] == "16"


def test_a_source_llama_server_lacks_is_refused_naming_those_it_has():
    for source in ("ngram", "suffix", "scripted"):
        with pytest.raises(NoServerEquivalent, match="no llama-server equivalent; these do: draft, ngram-simple"):
            server_arguments(source, {"script": "x"} if source == "scripted" else {})


def test_plain_decoding_has_no_speculative_flags_and_parses_back_to_none():
    assert server_arguments("none", model="m.gguf") == ["-m", "m.gguf"]
    assert parse_server_arguments(["llama-server", "-m", "m.gguf", "-c", "4096"]) == ("none", {}, None)


def test_an_unknown_spec_type_is_refused():
    with pytest.raises(ValueError, match="--spec-type eagle3 is not one spec-inspector reproduces"):
        parse_server_arguments(["--spec-type", "eagle3"])


def test_the_flags_command_prints_one_llama_server_line_and_refuses_a_source_without_one():
    from tests.test_cli import cli

    r = cli("flags", "ngram-mod:n_min=16,draft_max=64")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("llama-server ") and "--spec-type ngram-mod" in r.stdout
    assert "--spec-ngram-mod-n-min 16" in r.stdout and "--temp 0" in r.stdout  # run's greedy default
    bad = cli("flags", "ngram")
    assert bad.returncode == 2 and "no llama-server equivalent" in bad.stderr


def test_the_window_copies_the_chosen_sources_llama_server_flags(qtbot, runtime, tmp_path):
    from PySide6.QtGui import QGuiApplication

    from inspector.gui.panel.control_panel import ControlPanel
    from tests.test_gui_support import make_window, part

    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    panel.source.setCurrentText("ngram-mod")
    line = model.commands.copy_server_flags()
    assert line is not None and "--spec-type ngram-mod" in line and line.startswith("llama-server -m ")
    assert QGuiApplication.clipboard().text() == line and "copied" in model.status_text
    # The whole line is readable in the banner, with what the flags do not carry (our draft max cap).
    assert "--spec-ngram-mod-n-max 64" in model.banner_html and "caps each proposal at draft max" in model.banner_html
    source, options, _ = parse_server_arguments(shlex.split(line))
    assert source == "ngram-mod" and options["n_min"] == describe_source("ngram-mod").option("n_min").default
    # With draft max auto, the note names the value the last run resolved (the panel's "→ 7"), not the default.
    panel.draft_max.setValue(-1)
    panel.show_draft_max_used({"draft_max": 7, "draft_max_from": "auto: the stored cost model"})
    model.commands.copy_server_flags()
    assert "at draft max 7;" in model.banner_html
    panel.source.setCurrentText("ngram")
    assert model.commands.copy_server_flags() is None and "no llama-server equivalent" in model.last_error


def test_the_notes_say_what_the_flags_do_not_carry():
    from inspector.sources.server_flags import server_notes

    cap = server_notes("ngram-simple", {}, draft_max=8)
    assert len(cap) == 1 and "draft max 8" in cap[0] and "up to 48 tokens" in cap[0]
    assert server_notes("ngram-simple", {}, draft_max=48) == []
    assert "changes nothing" in server_notes("ngram-cache", {}, draft_max=16)[0]
    assert "up to 8 tokens" in server_notes("ngram-cache", {}, draft_max=4)[0]
    assert "--model-draft PATH" in server_notes("draft", {}, draft_max=8)[0]
    assert server_notes("none", {}, draft_max=8) == [] and server_notes("suffix", {}, draft_max=8) == []


SAMPLINGS = [
    SamplingSettings(),  # our greedy default: --temp 0 (llama-server's default is 0.8) and our seed
    SamplingSettings(temperature=0.7, top_k=0, top_p=0.9, min_p=0.0, seed=12345),
    SamplingSettings(temperature=0.8, seed=SEED_MAX, repeat_penalty=1.3, repeat_last_n=0, presence_penalty=0.5,
                     frequency_penalty=-0.25),
    SamplingSettings(repeat_penalty=1.1, repeat_last_n=256),
]


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_sampling_flags_name_what_differs_from_llama_servers_defaults_and_parse_back(sampling):
    argv = shlex.split(server_command("ngram-mod", {}, draft_max=64, model="t.gguf", sampling=sampling))
    assert parse_sampling_arguments(argv) == sampling
    args = sampling_server_arguments(sampling)
    assert args[args.index("--seed") + 1] == str(sampling.seed)  # llama-server's seed is random: always given
    assert ("--temp" in args) == (sampling.temperature != 0.8)
    for flag, value, default in (("--repeat-penalty", sampling.repeat_penalty, 1.0),
                                 ("--repeat-last-n", sampling.repeat_last_n, 64),
                                 ("--presence-penalty", sampling.presence_penalty, 0.0),
                                 ("--frequency-penalty", sampling.frequency_penalty, 0.0)):
        assert (flag in args) == (value != default), (flag, args)


def test_a_greedy_run_exports_temp_0_and_llama_servers_defaults_parse_to_its_sampling():
    assert sampling_server_arguments(SamplingSettings()) == ["--temp", "0", "--seed", "0"]
    server = parse_sampling_arguments(["llama-server", "-m", "m.gguf", "--seed", "7"])
    assert (server.temperature, server.top_k, server.top_p, server.min_p, server.seed) == (0.8, 40, 0.95, 0.05, 7)
    assert not server.penalized
    # llama.cpp's other spellings; -sys is not -s with "ys"
    assert parse_sampling_arguments(["--temperature=-1", "-s", "3", "-sys", "x"]) == SamplingSettings(seed=3)
    with pytest.raises(ValueError, match="--top-k must be a whole number"):
        parse_sampling_arguments(["--top-k", "many"])


def test_context_flags_are_given_where_they_differ_from_llama_servers_and_parse_back():
    assert context_server_arguments(2048, 2048, ContextSettings()) == ["-c", "2048"]  # its -c 0 is the model's
    context = ContextSettings(n_ubatch=64, flash_attn="on", type_k="q8_0", type_v="q4_0")
    argv = server_arguments("none", model="m.gguf", n_ctx=4096, n_batch=512, context=context,
                            sampling=SamplingSettings())
    assert argv[:2] == ["-m", "m.gguf"] and "-b" in argv and argv[argv.index("-ctv") + 1] == "q4_0"
    assert parse_context_arguments(argv) == {"n_ctx": 4096, "n_batch": 512, "context": context}
    assert parse_context_arguments([]) == {"n_ctx": None, "n_batch": 2048, "context": ContextSettings()}
    assert parse_server_arguments(argv) == ("none", {}, None) and parse_sampling_arguments(argv) == SamplingSettings()


def test_the_notes_say_the_system_prompt_goes_in_the_requests_messages():
    from inspector.sources.server_flags import server_notes

    for source in ("none", "ngram-mod", "suffix"):
        notes = server_notes(source, {}, draft_max=64, system_prompt="Be brief.")
        assert any("no system prompt flag" in n and '"role": "system"' in n for n in notes), notes
        assert not any("system" in n for n in server_notes(source, {}, draft_max=64))


def test_the_flags_command_adds_the_context_and_sampling_flags():
    from tests.test_cli import cli

    r = cli("flags", "none", "-c", "4096", "--temperature", "0.5", "--repeat-penalty", "1.2", "-ub", "128",
            "-sys", "Be brief.")
    assert r.returncode == 0, r.stderr
    argv = shlex.split(r.stdout.strip())
    assert parse_context_arguments(argv)["n_ctx"] == 4096 and parse_context_arguments(argv)["context"].n_ubatch == 128
    sampling = parse_sampling_arguments(argv)
    assert (sampling.temperature, sampling.repeat_penalty, sampling.seed) == (0.5, 1.2, 0)
    assert "no system prompt flag" in r.stderr


def test_the_window_copies_its_sampling_and_context_as_llama_server_flags(qtbot, tmp_path):
    from inspector.gui.panel.control_panel import ControlPanel
    from tests.test_gui_support import make_window, part

    w = make_window(qtbot, None, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    p = panel
    p.source.setCurrentText("none")
    p.penalties["repeat_penalty"].setValue(1.25)
    p.llama_context.n_ubatch.setValue(256)
    p.system_prompt.setText("Be brief.")
    argv = shlex.split(model.commands.copy_server_flags())
    assert parse_sampling_arguments(argv) == p.generation_settings().sampling  # greedy: --temp 0
    assert parse_context_arguments(argv) == {"n_ctx": p.n_ctx.value(), "n_batch": p.llama_context.n_batch.value(),
                                             "context": p.llama_context.settings()}
    assert "no system prompt flag" in model.banner_html


def test_our_ngram_names_its_nearest_llama_server_type_with_sizes_from_its_own_options():
    with pytest.raises(NoServerEquivalent) as err:
        server_arguments("ngram", {"n_min": 3, "n_max": 5}, draft_max=6)
    assert ("Nearest: llama-server --spec-type ngram-simple --spec-ngram-simple-size-n 3 "
            "--spec-ngram-simple-size-m 6") in str(err.value)
    assert "tries 5 down to 3" in str(err.value)
    with pytest.raises(NoServerEquivalent) as err:
        server_arguments("suffix", {})
    assert "Nearest" not in str(err.value)


def test_the_threads_a_run_set_are_copied_as_dash_t():
    assert server_arguments("none", n_threads=1)[:2] == ["-t", "1"]
    assert "-t" not in server_arguments("none", n_threads=0) and "-t" not in server_arguments("none")


def test_the_window_copies_the_threads_it_runs_with(qtbot, tmp_path):
    from inspector.gui.panel.control_panel import ControlPanel
    from tests.test_gui_support import make_window, part

    w = make_window(qtbot, None, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    panel.source.setCurrentText("none")
    panel.threads.setValue(1)
    argv = shlex.split(model.commands.copy_server_flags())
    assert argv[argv.index("-t") + 1] == "1"

