"""Every source registered one way, and capabilities instead of name tests (issue 38, item 4): a
built-in source is a factory carrying its declaration, as a plugin's is; code outside ``sources/``
asks a declaration's capabilities, so a new source that declares one gets the behaviour without any
test of its name. Model-free except the window's test (the shared ``runtime``)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import inspector
from inspector.cli.run import rejection_note
from inspector.cli.tune import best_server_row
from inspector.sources import registry
from inspector.sources.descriptors import CAPABILITIES, Option, SourceDescriptor, descriptor_from
from inspector.sources.registry import describe_source, self_contained_sources

from test_source_descriptors import Quiet

ROOT = Path(inspector.__file__).parent


def plugin(monkeypatch, descriptor: SourceDescriptor):
    """Offer a factory carrying ``descriptor`` as an installed plugin would be; returns the factory."""

    def make(context, **options):
        return Quiet()

    make.descriptor = descriptor
    real = registry.available_sources
    monkeypatch.setattr(registry, "available_sources", lambda: {**real(), descriptor.name: make})
    return make


def test_every_built_in_source_is_a_factory_carrying_its_declaration_as_a_plugins_is():
    assert list(registry.BUILTIN) == ["ngram", "scripted", "draft", "replay", "ngram-simple", "ngram-map-k",
                                      "ngram-map-k4v", "ngram-mod", "ngram-cache", "suffix", "synthetic"]  # --source's order
    for factory in registry.BUILTIN_FACTORIES:
        d = factory.descriptor
        assert registry.BUILTIN[d.name] is factory
        assert describe_source(d.name) is d is descriptor_from(d.name, factory)
        assert set(d.capabilities) <= set(CAPABILITIES), d.name
    # ... and by no second route: no source module keeps a table of its own for the registry to read
    tables = [p.name for p in (ROOT / "sources").rglob("*.py")
              if any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "SOURCES" for t in n.targets)
                     for n in ast.parse(p.read_text("utf-8")).body)]
    assert tables == []


def test_draft_probabilities_a_source_declaring_them_is_verified_by_the_rejection_rule(monkeypatch):
    plugin(monkeypatch, SourceDescriptor("my-drafter", (), capabilities={"draft_probabilities"}))
    plugin(monkeypatch, SourceDescriptor("my-lookup", ()))
    assert rejection_note("my-drafter", "rejection", 0.8) == ""
    assert rejection_note("draft", "rejection", 0.8) == ""
    note = rejection_note("my-lookup", "rejection", 0.8)
    assert "the my-lookup source has none" in note and "sample_match" in note
    assert rejection_note("ngram", "rejection", 0.8) != ""
    assert rejection_note("my-lookup", "rejection", 0.0) == "" == rejection_note("my-lookup", "sample_match", 0.8)


def test_has_llama_server_equivalent_picks_the_tune_tables_best_server_row(monkeypatch):
    plugin(monkeypatch, SourceDescriptor("my-server-type", (), llama_server="ngram-simple"))
    rows = [SimpleNamespace(source=s) for s in ("suffix", "ngram", "my-server-type", "ngram-mod")]
    assert best_server_row(rows) is rows[2]
    assert best_server_row(rows[:2]) is None  # ngram and suffix: llama-server has no equivalent
    assert [s for s in registry.BUILTIN if describe_source(s).has_llama_server_equivalent] == [
        "draft", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"]


def test_self_contained_sources_are_those_tune_and_bench_turns_replay(monkeypatch):
    assert self_contained_sources() == ("ngram", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
                                        "ngram-cache", "suffix")
    mine = {"lookup": SourceDescriptor("lookup", (Option("k", "int", 3),)),
            "loader": SourceDescriptor("loader", (), capabilities={"loads_model"}),
            "needs-file": SourceDescriptor("needs-file", (Option("table", "path", "", required=True),)),
            "on-target": SourceDescriptor("on-target", (), capabilities={"runs_target"})}
    monkeypatch.setattr(registry, "BUILTIN_DESCRIPTORS", mine)
    assert self_contained_sources() == ("lookup",)


def test_compare_column_options_go_in_the_compare_windows_columns(qtbot, monkeypatch):
    from inspector.bench.compare_result import CompareConfig
    from inspector.gui.compare.configs import CompareConfigsPanel

    plugin(monkeypatch, SourceDescriptor("my-lookup", (
        Option("n_max", "int", 5, minimum=1, maximum=16, compare_column=True), Option("width", "int", 2))))
    panel = CompareConfigsPanel(["ngram", "my-lookup", "ngram-mod", "none"])
    qtbot.addWidget(panel)
    panel.set_configs([CompareConfig("mine", "my-lookup", 8, {"n_max": 6, "width": 3}),
                       CompareConfig("mod", "ngram-mod", 8, {"n_max": 64})])
    t = panel.configs
    assert t.cellWidget(0, 3).isEnabled() and t.cellWidget(0, 3).value() == 6  # its own n_max: the column
    assert not t.cellWidget(0, 4).isEnabled() and not t.cellWidget(0, 5).isEnabled()  # no n_min, no length
    assert panel.options_cell(0).text() == "width=3"
    assert not t.cellWidget(1, 3).isEnabled() and panel.options_cell(1).text() == "n_max=64"  # not a column one
    t.cellWidget(0, 3).setValue(7)
    mine, mod = panel.config_list()
    assert mine.options == {"n_max": 7, "width": "3"} and mod.options == {"n_max": "64"}  # the cell: as typed


def test_loads_model_a_source_declaring_it_waits_for_the_draft_being_made(qtbot, runtime, tmp_path, monkeypatch):
    from inspector.gui.panel.control_panel import ControlPanel
    from test_gui_support import make_window, part

    plugin(monkeypatch, SourceDescriptor("my-loader", (), capabilities={"loads_model"}))
    plugin(monkeypatch, SourceDescriptor("my-lookup", ()))
    w = make_window(qtbot, runtime, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    dialogs = []
    model.errorRaised.connect(lambda title, message, icon: dialogs.append(title))
    model.set_busy("draft", object())  # as SourceActions marks a draft being made

    def no_model():
        raise FileNotFoundError("no model here")

    w.run.chosen_model = no_model  # a run that passes the draft check stops at the model
    assert panel.set_source("my-loader")
    assert not model.commands.start_run() and dialogs == ["Draft in progress"]
    assert panel.set_source("my-lookup")
    assert not model.commands.start_run() and dialogs == ["Draft in progress", "No model"]
    model.set_busy("draft", None)  # no draft was really being made: nothing for the close to wait for
