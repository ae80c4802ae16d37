"""Source descriptors (issue 12, item 4): each source declares its options once; the CLI flags,
``--source-option`` / compare ``--config`` checks, the single unknown-source error and the
window's source pages come from the declarations. Model-free (fake runtimes, offscreen Qt)."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from inspector.engine import GenerationSettings
from inspector.sources import registry
from inspector.sources.descriptors import Option, SourceDescriptor, descriptor_from
from inspector.sources.registry import (SourceContext, UnknownSource, check_source_name, check_source_options,
                                        describe_source, make_source, resolve_source)


class Quiet:
    """A do-nothing proposal source."""

    name = "quiet"

    def propose(self, request):
        return None

    def report(self, receipt):
        pass

    def discard(self, decision_id, reason):
        pass


def declared_factory(calls):
    """A third-party factory declaring its options with an ``options`` attribute (an
    ``Option``, and plain dicts as a package that does not import inspector would)."""

    def make(context, **options):
        calls.append(options)
        return Quiet()

    make.options = [
        Option("k", "int", 3, "tokens to propose", minimum=1, maximum=8),
        {"name": "mode", "kind": "choice", "default": "near", "choices": {"near": "close tokens", "far": "any"}},
        {"name": "temperature", "kind": "float", "default": 0.5, "minimum": 0.0, "maximum": 2.0, "step": 0.1},
        {"name": "table", "kind": "path", "default": "", "help": "a lookup table", "required": True,
         "missing": "Choose a lookup table."},
        {"name": "note", "kind": "text", "default": "hi"},
    ]
    make.capabilities = ("settings",)
    make.help = "proposes quietly"
    return make


def undeclared_factory(calls):
    def make(context, **options):
        calls.append(options)
        return Quiet()

    return make


@pytest.fixture
def plugins(monkeypatch):
    """Offer ``quiet`` (declared options) and ``raw`` (none declared) as entry points would."""
    calls = {"quiet": [], "raw": []}
    factories = {"quiet": declared_factory(calls["quiet"]), "raw": undeclared_factory(calls["raw"])}
    monkeypatch.setattr(registry, "available_sources", lambda: {**registry.BUILTIN, **factories})
    return calls


# -- the one unknown-source decision -----------------------------------------------------------

def test_an_unknown_source_is_decided_in_one_function_with_every_known_name():
    with pytest.raises(UnknownSource) as err:
        resolve_source("nope")
    message = str(err.value)
    known = ", ".join([*registry.BUILTIN, "none"])
    assert message == f"unknown proposal source 'nope': expected one of {known}"
    assert known.startswith("ngram, scripted, draft, replay, ") and "ngram-mod" in known and "suffix" in known
    assert isinstance(err.value, ValueError) and err.value.name == "nope" and err.value.known[-1] == "none"
    for call in (lambda: check_source_name("nope"), lambda: check_source_options("nope", {}),
                 lambda: make_source("nope", SourceContext(None), {}), lambda: describe_source("nope")):
        with pytest.raises(UnknownSource, match="unknown proposal source 'nope'"):
            call()
    assert resolve_source("none") is None and check_source_name("none") == "none"
    assert make_source("none", SourceContext(None), {}) is None
    with pytest.raises(ValueError, match="source none takes no options, observed n_max"):
        make_source("none", SourceContext(None), {"n_max": 3})


def test_compare_configurations_use_the_same_decision_and_declarations():
    from inspector.bench.compare import parse_config, registry_source_factory

    with pytest.raises(ValueError, match="configuration 'nope': unknown proposal source 'nope'"):
        parse_config("nope")
    with pytest.raises(ValueError, match="takes no options"):
        parse_config("none:n_max=3")
    with pytest.raises(ValueError, match="draft_max must be a whole number >= 1"):
        parse_config("draft:draft_model=d.gguf,draft_max=0")
    assert parse_config("ngram:draft_max=4,n_min=1").options == {"n_min": "1"}
    make = registry_source_factory(None, GenerationSettings())
    from inspector.bench.compare_result import CompareConfig

    with pytest.raises(UnknownSource):
        make(CompareConfig("x", "nope", 4))
    assert make(CompareConfig("plain", "none", 0)) is None
    src = make(CompareConfig("n", "ngram", 4, {"n_max": "3", "n_min": "1"}))
    assert (src.n_max, src.n_min) == (3, 1)


# -- checking options by the declarations ---------------------------------------------------------

@pytest.mark.parametrize("source, options, message", [
    ("ngram", {"n_max": "0"}, "source ngram option n_max must be a whole number 1 <= n_max <= 16, observed '0'"),
    ("ngram", {"n_min": 1.5}, "source ngram option n_min must be a whole number 1 <= n_min <= 16, observed 1.5"),
    ("ngram", {"n_max": "1"}, "source ngram options must satisfy 1 <= n_min <= n_max, observed "
                              "n_min=2 (the default), n_max=1"),
    ("ngram", {"length": "long"}, "source ngram option length must be fixed or adaptive, observed 'long'"),
    ("ngram", {"bogus": "1"}, "unknown option for source ngram: bogus (expected n_max, n_min, length, "
                              "branches, row_cost_ratio, row_costs)"),
    ("ngram", {"row_cost_ratio": "-1"}, "source ngram option row_cost_ratio must be auto or a finite number >= 0"),
    ("ngram", {"row_costs": "1,x"}, "source ngram option row_costs must be linear or positive milliseconds"),
    ("draft", {"draft_max": 0}, "source draft option draft_max must be a whole number >= 1, observed 0"),
    ("draft", {"draft_min": "-1"}, "source draft option draft_min must be a whole number 0 <= draft_min <= 64"),
    ("draft", {"p_min": "2"}, "source draft option p_min must be a number 0 <= p_min <= 1, observed '2'"),
    ("draft", {"a": 1, "b": 2}, "unknown options for source draft: a, b (expected draft_model, draft_max, "
                                "draft_min, p_min, p_split, n_gpu_layers)"),
])
def test_check_source_options_keeps_its_messages(source, options, message):
    with pytest.raises(ValueError) as err:
        check_source_options(source, options)
    assert message in str(err.value)


def test_check_source_options_converts_only_what_is_given():
    assert check_source_options("ngram", {"n_max": "5", "length": "adaptive", "row_costs": "1,2.5"}) == \
        {"n_max": 5, "length": "adaptive", "row_costs": [1.0, 2.5]}
    assert check_source_options("draft", {"p_min": "0.25", "draft_model": "d.gguf"}) == \
        {"p_min": 0.25, "draft_model": "d.gguf"}
    assert check_source_options("ngram", {"row_cost_ratio": "auto"}) == {"row_cost_ratio": None}


def test_a_declared_plugin_gets_typed_options_with_defaults_and_an_undeclared_one_gets_them_as_given(plugins):
    d = describe_source("quiet")
    assert d.declared and [o.name for o in d.options] == ["k", "mode", "temperature", "table", "note"]
    assert d.help == "proposes quietly" and d.capabilities == {"settings"}
    ctx = SourceContext(None, GenerationSettings())
    assert isinstance(make_source("quiet", ctx, {"k": "5", "table": "t.bin"}), Quiet)
    assert plugins["quiet"] == [{"k": 5, "mode": "near", "temperature": 0.5, "table": "t.bin", "note": "hi"}]
    with pytest.raises(ValueError, match="source quiet option k must be a whole number 1 <= k <= 8, observed '9'"):
        make_source("quiet", ctx, {"k": "9"})
    with pytest.raises(ValueError, match="unknown option for source quiet: kk"):
        check_source_options("quiet", {"kk": "1"})
    assert len(plugins["quiet"]) == 1  # refused before the factory ran
    assert not describe_source("raw").declared
    make_source("raw", ctx, {"anything": "x"})
    assert plugins["raw"] == [{"anything": "x"}]
    assert check_source_options("raw", {"anything": "x"}) == {"anything": "x"}


def test_an_option_taken_from_a_generation_setting_comes_from_the_context(monkeypatch):
    seen = []

    def fake_draft(ctx, **options):  # the draft factory without a model: what it would receive
        seen.append(options)
        return Quiet()

    monkeypatch.setattr(registry, "available_sources", lambda: {**registry.BUILTIN, "draft": fake_draft})
    make_source("draft", SourceContext(None, GenerationSettings(draft_max=5)), {"draft_model": "d.gguf"})
    assert seen == [{"draft_model": "d.gguf", "draft_max": 5, "draft_min": 0, "p_min": 0.0, "p_split": 0.0,
                     "n_gpu_layers": -1}]
    make_source("draft", SourceContext(None, GenerationSettings(draft_max=5)), {"draft_model": "d", "draft_max": 2})
    assert seen[-1]["draft_max"] == 2


def test_built_in_sources_are_made_through_make_source_without_a_model():
    rt = SimpleNamespace(tokenize=lambda text, add_special, parse_special: [ord(c) for c in text])
    ctx = SourceContext(rt, GenerationSettings(), row_costs=(1.0, 1.5, 2.0))
    ngram = make_source("ngram", ctx, {"n_max": "3", "n_min": "1", "length": "adaptive"})
    assert (ngram.n_max, ngram.n_min, ngram.length) == (3, 1, "adaptive")
    assert ngram.policy.row_costs is not None  # the context's stored cost table
    assert make_source("ngram", ctx, {"length": "adaptive", "row_costs": "linear"}).policy.row_costs is None
    scripted = make_source("scripted", ctx, {"script": "ab"})
    assert scripted.settings() == {"mode": "continuation", "tokens": [97, 98]}
    assert registry.source_settings(scripted) == scripted.settings() and registry.source_settings(Quiet()) == {}


def test_declarations_are_read_from_descriptor_or_options_and_malformed_ones_are_refused():
    d = SourceDescriptor("mine", (Option("x", "int", 1),), help="h")
    assert descriptor_from("other", SimpleNamespace(descriptor=d)).name == "other"
    assert not descriptor_from("plain", lambda ctx: None).declared
    with pytest.raises(ValueError, match="descriptor must be a SourceDescriptor"):
        descriptor_from("bad", SimpleNamespace(descriptor={"x": 1}))
    with pytest.raises(ValueError, match="bad option declaration"):
        descriptor_from("bad", SimpleNamespace(options=[{"name": "x", "colour": "red"}]))
    with pytest.raises(ValueError, match="options must be a sequence of Option"):
        descriptor_from("bad", SimpleNamespace(options={"x": 1}))
    with pytest.raises(ValueError, match="kind must be one of"):
        Option("x", "complex")
    with pytest.raises(ValueError, match="option names repeat"):
        SourceDescriptor("twice", (Option("x"), Option("x")))


def test_entry_points_are_loaded_for_their_declarations(monkeypatch):
    calls = []
    target = declared_factory(calls)

    class FakeEntryPoint:
        name, value = "quiet", "quiet_pkg:make"

        def load(self):
            return target

    class Clash(FakeEntryPoint):
        name = "ngram"

    reads = []
    monkeypatch.setattr(registry, "entry_points", lambda group: reads.append(group) or [FakeEntryPoint(), Clash()])
    registry.refresh_installed_sources()
    factories = registry.available_sources()
    assert list(factories) == [*registry.BUILTIN, "quiet"]
    assert list(registry.available_sources()) == list(factories) and len(reads) == 1  # read once, not per request
    assert factories["ngram"] is registry.BUILTIN["ngram"]  # a clashing name is ignored
    assert describe_source("quiet").option("k").maximum == 8
    make_source("quiet", SourceContext(None), {"table": "t"})
    assert calls[0]["k"] == 3
    monkeypatch.undo()
    registry.refresh_installed_sources()  # the real entry points again for the tests after this one
    assert "quiet" not in registry.available_sources()


# -- CLI flags from the declarations ------------------------------------------------------------

def test_the_run_flags_keep_their_names_and_defaults():
    from inspector.cli.main import build_parser

    args = build_parser().parse_args(["run", "--prompt", "x"])
    assert (args.ngram_max, args.ngram_min, args.ngram_length) == (4, 2, "fixed")
    assert (args.draft_model, args.draft_min, args.p_min, args.draft_max) == (None, 0, 0.0, None)  # None: auto
    assert (args.replay, args.script, args.script_file, args.source_option) == (None, None, None, [])
    args = build_parser().parse_args(["run", "--prompt", "x", "--ngram-max", "6", "--p-min", "0.5",
                                      "--draft-model", "d.gguf", "--script-file", "s.txt", "--replay", "r.json"])
    assert (args.ngram_max, args.p_min, str(args.draft_model), str(args.script_file), str(args.replay)) == \
        (6, 0.5, "d.gguf", "s.txt", "r.json")


def parse_run(*argv, descriptors=None, monkeypatch=None):
    from inspector.cli.sources import add_source_flags

    if descriptors is not None:
        monkeypatch.setattr(registry, "BUILTIN_DESCRIPTORS", descriptors)

    class Refuse(argparse.ArgumentParser):
        def error(self, message):
            raise ValueError(message)

    p = Refuse(prog="run")
    p.add_argument("--source", default="ngram")
    p.add_argument("--source-option", action="append", default=[])
    p.add_argument("--draft-max", type=int, default=8)
    add_source_flags(p)
    return p.parse_args(list(argv))


def test_a_declaration_generates_typed_checked_flags(monkeypatch):
    from inspector.cli.sources import source_options_from_args

    demo = SourceDescriptor("demo", (
        Option("width", "int", 3, "how wide", minimum=1, flag="--demo-width"),
        Option("ratio", "float", 0.5, "how much", minimum=0.0, maximum=1.0, flag="--demo-ratio"),
        Option("mode", "choice", "a", "which", choices=("a", "b"), flag="--demo-mode"),
        Option("notes", "text", "", "what", flag="--demo-notes", file_flag="--demo-notes-file", required=True,
               metavar="TEXT"),
        Option("depth", "int", 8, "from the setting", minimum=1, from_setting="draft_max"),
        Option("hidden", "text", "", "no flag"),
    ))
    descriptors = {"demo": demo}
    args = parse_run("--source", "demo", "--demo-notes", "n", descriptors=descriptors, monkeypatch=monkeypatch)
    assert (args.demo_width, args.demo_ratio, args.demo_mode, args.demo_notes) == (3, 0.5, "a", "n")
    assert source_options_from_args(args) == {"width": 3, "ratio": 0.5, "mode": "a", "notes": "n", "depth": 8}
    with pytest.raises(ValueError, match="source demo option width must be a whole number >= 1, observed '0'"):
        parse_run("--demo-width", "0", descriptors=descriptors, monkeypatch=monkeypatch)
    with pytest.raises(ValueError, match="option ratio must be a number 0 <= ratio <= 1"):
        parse_run("--demo-ratio", "3", descriptors=descriptors, monkeypatch=monkeypatch)
    with pytest.raises(ValueError, match="invalid choice"):
        parse_run("--demo-mode", "c", descriptors=descriptors, monkeypatch=monkeypatch)
    args = parse_run("--source", "demo", descriptors=descriptors, monkeypatch=monkeypatch)
    with pytest.raises(ValueError, match="--source demo needs --demo-notes TEXT or --demo-notes-file F"):
        source_options_from_args(args)


def test_source_options_from_the_flags_and_source_option(tmp_path):
    from inspector.cli.main import build_parser
    from inspector.cli.sources import SourceFlagError, source_options_from_args

    def opts(*argv):
        return source_options_from_args(build_parser().parse_args(["run", "--prompt", "x", *map(str, argv)]))

    assert opts() == {"n_max": 4, "n_min": 2, "length": "fixed"}
    assert opts("--source-option", "row_costs=1,2", "--source-option", " n_max =7") == \
        {"n_max": "7", "n_min": 2, "length": "fixed", "row_costs": "1,2"}
    assert opts("--source", "draft", "--draft-model", "d.gguf", "--draft-max", "5") == \
        {"draft_model": "d.gguf", "draft_max": 5, "draft_min": 0, "p_min": 0.0, "n_gpu_layers": -1}
    script = tmp_path / "s.txt"
    script.write_text("the script\n", "utf-8")
    assert opts("--source", "scripted", "--script-file", script) == {"script": "the script\n"}
    assert opts("--source", "replay", "--replay", "r.json") == {"replay": "r.json"}
    assert opts("--source", "none") == {}
    for argv, message in [
        (("--source", "draft"), "--source draft needs --draft-model PATH"),
        (("--source", "replay"), "--source replay needs --replay FILE"),
        (("--source", "scripted"), "--source scripted needs --script TEXT or --script-file F"),
        (("--source", "scripted", "--script-file", tmp_path / "no.txt"), "script file"),
        (("--ngram-min", "3", "--ngram-max", "2"), "1 <= n_min <= n_max, observed n_min=3, n_max=2"),
        (("--source-option", "x"), "--source-option 'x': expected KEY=VALUE"),
        (("--source", "draft", "--draft-model", "d", "--draft-max", "0"), "draft_max must be a whole number >= 1"),
    ]:
        with pytest.raises(SourceFlagError) as err:
            opts(*map(str, argv))
        assert message in str(err.value)


# -- the window's source pages from the declarations ------------------------------------------------

def test_a_plugin_that_declares_options_gets_its_controls_in_the_window(qtbot, plugins):
    from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QLineEdit, QSpinBox

    from inspector.gui.panel.control_panel import ControlPanel

    p = ControlPanel()
    qtbot.addWidget(p)
    names = [p.source.itemText(i) for i in range(p.source.count())]
    assert names[:4] == ["ngram", "draft", "scripted", "replay"] and names[-3:] == ["quiet", "raw", "none"]
    assert p.set_source("quiet")
    assert p.source_pages.currentWidget() is p.source_choice.pages["quiet"]
    c = p.option_controls["quiet"]
    assert isinstance(c["k"].widget, QSpinBox) and (c["k"].widget.minimum(), c["k"].widget.maximum()) == (1, 8)
    assert isinstance(c["mode"].widget, QComboBox) and c["mode"].widget.currentText() == "near"
    assert isinstance(c["temperature"].widget, QDoubleSpinBox) and c["temperature"].widget.maximum() == 2.0
    assert isinstance(c["table"].widget, QLineEdit) and c["table"].open_button is not None
    assert ("quiet", "table", c["table"].open_button) in p.option_buttons()
    assert p.source_options() == {"k": 3, "mode": "near", "temperature": 0.5, "table": "", "note": "hi"}
    assert p.source_problem() == ("No table", "Choose a lookup table.")
    c["k"].widget.setValue(6)
    c["mode"].widget.setCurrentText("far")
    c["table"].widget.setText("  /data/t.bin ")
    assert p.source_problem() is None
    assert p.source_options() == {"k": 6, "mode": "far", "temperature": 0.5, "table": "/data/t.bin", "note": "hi"}
    assert not hasattr(p, "quiet.k")  # third-party keys are stored, never panel attributes
    values = p.values()
    assert values["quiet.k"] == 6 and values["quiet.table"] == "  /data/t.bin "
    # The values come back in a new panel (QSettings hands back strings).
    q = ControlPanel()
    qtbot.addWidget(q)
    q.apply_values({k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v
                    for k, v in values.items()})
    assert q.source.currentText() == "quiet" and q.source_options() == p.source_options()
    # The options reach the factory as the source makes them.
    make_source("quiet", SourceContext(None, GenerationSettings()), q.source_options())
    assert plugins["quiet"][-1]["k"] == 6

    # A plugin without declarations: the "other" page, made with no options.
    assert p.set_source("raw")
    assert p.source_pages.currentWidget() is p.source_choice.pages["other"] and "no options" in p.other_note.text()
    assert p.source_options() == {} and p.source_problem() is None


def test_built_in_pages_keep_their_controls_and_a_saved_session_shows_its_source_options(qtbot):
    from inspector.gui.panel.control_panel import ControlPanel

    p = ControlPanel()
    qtbot.addWidget(p)
    assert {"ngram", "draft", "scripted", "replay", "other"} <= set(p.source_choice.pages)
    assert {"ngram-map-k", "ngram-mod", "ngram-cache", "suffix"} <= set(p.source_choice.pages)  # pages from their declarations
    assert (p.ngram_max.maximum(), p.ngram_min.value(), p.ngram_length.currentText()) == (16, 2, "fixed")
    assert (p.draft_min.maximum(), p.p_min.maximum(), p.draft_type.currentText()) == (64, 1.0, "Q4_0")
    p.set_source("ngram")
    p.ngram_min.setValue(5)
    assert p.source_problem()[0] == "ngram options" and "n_min <= n_max" in p.source_problem()[1]
    p.set_source("draft")
    p.draft_max.setValue(0)
    assert p.source_options()["draft_max"] == 1  # the draft's draft_max is at least 1
    assert p.source_problem()[0] == "No draft model"
    p.set_source("replay")
    assert p.source_problem() == ("No receipts file", "The replay source needs a receipts file (Open…).")
    p.set_source("scripted")
    assert p.source_problem()[0] == "No script"
    p.show_saved({"source": {"name": "ngram", "settings": {"n_max": 6, "n_min": 3, "length": "adaptive"}},
                  "draft_max": 12}, "saved prompt", "m.gguf")
    assert (p.source.currentText(), p.ngram_max.value(), p.ngram_min.value(), p.ngram_length.currentText(),
            p.draft_max.value()) == ("ngram", 6, 3, "adaptive", 12)
    p.show_live()
    assert (p.source.currentText(), p.ngram_min.value(), p.ngram_length.currentText()) == ("scripted", 5, "fixed")


def test_key_value_options_are_split_at_the_first_equals_sign_and_a_part_without_one_is_named():
    from inspector.sources.descriptors import parse_options, split_option

    assert split_option(" path = a=b.bin ") == ("path", "a=b.bin")
    assert parse_options("n_max=4, n_min=2,,") == {"n_max": "4", "n_min": "2"}
    with pytest.raises(ValueError, match="'n_max' is not key=value"):
        parse_options("n_min=1, n_max")
    with pytest.raises(ValueError, match="'=3' is not key=value"):
        split_option("=3")
