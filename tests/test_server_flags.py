"""Take it to llama-server (issue 16): each configuration's printed arguments parse back to it."""

from __future__ import annotations

import shlex

import pytest

from inspector.sources.registry import describe_source
from inspector.sources.server_flags import (
    NoServerEquivalent,
    parse_server_arguments,
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
    assert r.stdout.strip().startswith("llama-server --spec-type ngram-mod") and "--spec-ngram-mod-n-min 16" in r.stdout
    bad = cli("flags", "ngram")
    assert bad.returncode == 2 and "no llama-server equivalent" in bad.stderr


def test_the_window_copies_the_chosen_sources_llama_server_flags(qtbot, runtime, tmp_path):
    from PySide6.QtGui import QGuiApplication

    from tests.test_gui_support import make_window

    w = make_window(qtbot, runtime, tmp_path)
    w.panel.source.setCurrentText("ngram-mod")
    line = w.analysis.copy_server_flags()
    assert line is not None and "--spec-type ngram-mod" in line and line.startswith("llama-server -m ")
    assert QGuiApplication.clipboard().text() == line and "copied" in w.status_state.text()
    # The whole line is readable in the banner, with what the flags do not carry (our draft max cap).
    assert "--spec-ngram-mod-n-max 64" in w.banner.text() and "caps each proposal at draft max" in w.banner.text()
    source, options, _ = parse_server_arguments(shlex.split(line))
    assert source == "ngram-mod" and options["n_min"] == describe_source("ngram-mod").option("n_min").default
    w.panel.source.setCurrentText("ngram")
    assert w.analysis.copy_server_flags() is None and "no llama-server equivalent" in w.last_error


def test_the_notes_say_what_the_flags_do_not_carry():
    from inspector.sources.server_flags import server_notes

    cap = server_notes("ngram-simple", {}, draft_max=8)
    assert len(cap) == 1 and "draft max 8" in cap[0] and "up to 48 tokens" in cap[0]
    assert server_notes("ngram-simple", {}, draft_max=48) == []
    assert "changes nothing" in server_notes("ngram-cache", {}, draft_max=16)[0]
    assert "up to 8 tokens" in server_notes("ngram-cache", {}, draft_max=4)[0]
    assert "--model-draft PATH" in server_notes("draft", {}, draft_max=8)[0]
    assert server_notes("none", {}, draft_max=8) == [] and server_notes("suffix", {}, draft_max=8) == []
