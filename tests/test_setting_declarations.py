"""Each llama.cpp context and sampling setting is declared once (issue 38): the command line's flags,
the window's controls, the typed settings objects (and so the receipts), and llama-server's arguments
are all made from ``inspector.engine.llama_settings``. Shown by adding one context setting and one
sampling setting there, and nothing else, in a fresh interpreter: every front end has them. No model."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import inspector
from inspector.cli.main import build_parser
from inspector.engine import llama_settings
from inspector.engine.settings import SETTING_RULES, SamplingSettings
from inspector.llama.context_settings import CONTEXT_KEYS, ContextSettings
from inspector.sources.server_flags import parse_context_arguments, parse_sampling_arguments, server_arguments

SETTINGS_FILE = Path(llama_settings.__file__)

# Loaded before anything imports it (``inspector.engine``'s package imports the sampling settings), with
# two declarations more; then the command line, the window and llama-server's flags are made as usual.
SCRIPT = textwrap.dedent(f"""
    import importlib.util, sys, types
    import inspector
    spec = importlib.util.spec_from_file_location("inspector.engine.llama_settings", {str(SETTINGS_FILE)!r})
    ls = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = ls
    spec.loader.exec_module(ls)
    ls.CONTEXT["n_threads_k"] = ls.Setting(
        "n_threads_k", "int", 3, ("-tk", "--threads-k"), metavar="N", minimum=1, server_default=2,
        server_flags=("-tk", "--threads-k"), cparam="n_threads_k", control=(1, 64, 1), label="-tk",
        help="a context setting llama.cpp does not have")
    ls.SAMPLING["top_q"] = ls.Setting(
        "top_q", "float", 0.5, ("--top-q",), server_default=1.0, server_flags=("--top-q",), label="top-q",
        control=(0.0, 1.0, 0.05), help="a sampling setting llama.cpp does not have",
        rule=ls.SettingRule("float", 0.0, 1.0, valid="a number from 0 to 1"))

    from PySide6.QtWidgets import QApplication
    from inspector.cli.context import context_from_args
    from inspector.cli.main import build_parser
    from inspector.cli.sampling import sampling_from_args
    from inspector.gui.panel.context_controls import ContextControls
    from inspector.gui.panel.control_panel import ControlPanel
    from inspector.llama.context_settings import ContextSettings
    from inspector.llama.server_parity import llama_cpp_settings
    from inspector.sources.server_flags import parse_context_arguments, parse_sampling_arguments, server_arguments

    # the command line: the flags, their defaults, the typed objects
    args = build_parser().parse_args(["run", "--prompt", "x", "-tk", "7", "--top-q", "0.25"])
    context = context_from_args(args)
    sampling, _notes = sampling_from_args(args)
    assert (context.n_threads_k, sampling.top_q) == (7, 0.25), (context, sampling)
    assert sampling.to_json()["top_q"] == 0.25  # the receipts' settings.sampling
    defaults = build_parser().parse_args(["compare"])
    assert (defaults.n_threads_k, defaults.top_q) == (3, 0.5)
    try:
        build_parser().parse_args(["run", "--prompt", "x", "--top-q", "2"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("--top-q 2 was taken")

    # the window: a control each, at the default, with the flags in the tooltip; their values reach the run
    app = QApplication([])
    c = ContextControls()
    assert c.controls["n_threads_k"].value() == 3 and "--threads-k" in c.controls["n_threads_k"].toolTip()
    c.apply_values({{"n_threads_k": 5}})
    assert c.settings().n_threads_k == 5 and "-tk 5" in c.line.text()
    p = ControlPanel()
    assert "--top-q" in p.sampling_controls["top_q"].toolTip()
    p.sampling_controls["top_q"].setValue(0.75)
    assert p.generation_settings().sampling.top_q == 0.75 and p.values()["top_q"] == 0.75

    # llama-server's arguments, both ways
    argv = server_arguments("none", context=context, sampling=sampling)
    assert argv[argv.index("-tk") + 1] == "7" and argv[argv.index("--top-q") + 1] == "0.25", argv
    assert "-tk" not in ContextSettings(n_threads_k=2).server_args()
    assert parse_context_arguments(["--threads-k", "9"])["context"].n_threads_k == 9
    assert parse_sampling_arguments(["--top-q", "0.125"]).top_q == 0.125

    # the runtime: set on llama.cpp's context parameters, recorded in the model's llama_cpp block
    cparams = types.SimpleNamespace(n_batch=512, n_ubatch=0, flash_attn_type=0, type_k=0, type_v=0, n_threads_k=0)
    context.apply(cparams)
    assert cparams.n_threads_k == 7 and cparams.n_ubatch == 512
    runtime = types.SimpleNamespace(swa_full=False, n_swa=0, asked=context, context=context, n_batch=512,
                                    n_ubatch=512, n_seq_max=1)
    block = llama_cpp_settings(runtime)
    assert block["n_threads_k"] == 7 and "-tk 7" in " | ".join(block["differs_from_llama_server"]), block
    print("every front end has them")
""")


def test_a_declaration_added_reaches_the_flags_the_window_the_settings_and_llama_server():
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env,
                       cwd=Path(inspector.__file__).parent.parent)
    assert p.returncode == 0 and "every front end has them" in p.stdout, p.stderr[-3000:]


def test_the_objects_fields_and_rules_are_the_declarations():
    assert tuple(f for f in SamplingSettings.__slots__) == tuple(llama_settings.SAMPLING)
    assert all(SETTING_RULES[name] is s.rule for name, s in llama_settings.SAMPLING.items())
    assert CONTEXT_KEYS == tuple(llama_settings.CONTEXT)
    assert tuple(ContextSettings().values()) == tuple(s.name for s in llama_settings.context_object_settings())
    for s in (*llama_settings.CONTEXT.values(), *llama_settings.SAMPLING.values()):
        assert s.flags and s.help and s.server_flags, s.name  # every one has llama.cpp's and llama-server's flag


def test_every_flag_name_and_alias_of_the_settings_is_taken_by_run():
    parser = build_parser()
    for s in (*llama_settings.CONTEXT.values(), *llama_settings.SAMPLING.values(), llama_settings.N_CTX):
        value = next(iter(s.choices)) if s.kind == "choice" else "1"
        for flag in s.flags:
            assert getattr(parser.parse_args(["run", "--prompt", "x", flag, value]), s.name) == s.type(value), flag


def test_llama_servers_defaults_give_no_flag_and_read_back_as_they_were():
    assert ContextSettings().server_args() == []
    assert parse_context_arguments([])["context"] == ContextSettings()
    sampling = SamplingSettings(temperature=0.8, seed=5)  # llama-server's defaults but the seed
    assert server_arguments("none", sampling=sampling) == ["--seed", "5"]
    assert parse_sampling_arguments(["--seed", "5"]) == sampling


def test_the_windows_context_and_threads_boxes_take_their_ranges_and_defaults_from_the_declarations(qtbot):
    from inspector.engine.llama_settings import N_CTX, N_THREADS
    from inspector.gui.panel.generation_groups import LimitsGroup

    g = LimitsGroup()
    qtbot.addWidget(g)
    for box, s in ((g.n_ctx, N_CTX), (g.threads, N_THREADS)):
        assert (box.minimum(), box.maximum(), box.value()) == (s.control[0], s.control[1], s.default), s.name
        assert s.flags[0] in box.toolTip() or s.label in box.toolTip()
