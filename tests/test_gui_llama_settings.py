"""llama.cpp's settings in the window (issue 26): the penalties in the Sampling group and the context
settings (-b, -ub, -fa, -ctk, -ctv), with llama.cpp's names, remembered, locked during a run, shown
read only from a file. No model's words are looked at."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from inspector.engine.settings import PENALTY_DEFAULTS, PENALTY_FIELDS, SamplingSettings
from inspector.gui.shell.main_window import MainWindow
from inspector.llama.context_settings import DEFAULT_CONTEXT, loaded_context
from inspector.session.run_states import IDLE, RUNNING

from inspector.gui.panel.control_panel import ControlPanel
from test_gui_support import make_window, part, run_to_end

PENALTIES = {"repeat_penalty": 1.3, "repeat_last_n": 128, "presence_penalty": 0.5, "frequency_penalty": -0.25}


def test_the_penalty_boxes_have_llama_cpps_names_and_reach_the_runs_sampling(qtbot, tmp_path):
    w = make_window(qtbot, None, tmp_path)
    panel = part(w, ControlPanel)
    p = panel
    assert p.generation_settings().sampling == SamplingSettings()  # llama-server's defaults: no penalty
    for name, flag in zip(PENALTY_FIELDS, ("--repeat-penalty", "--repeat-last-n", "--presence-penalty",
                                            "--frequency-penalty")):
        assert flag in p.penalties[name].toolTip() and "default" in p.penalties[name].toolTip()
        assert p.penalties[name].value() == PENALTY_DEFAULTS[name]
    # The limits are the settings' rules: repeat penalty > 0, repeat-last-n >= 0.
    assert 0 < p.penalties["repeat_penalty"].minimum() <= 0.01 and p.penalties["repeat_last_n"].minimum() == 0
    assert p.penalties["presence_penalty"].minimum() < 0
    for name, value in PENALTIES.items():
        p.penalties[name].setValue(value)
    sampling = p.generation_settings().sampling
    assert {name: getattr(sampling, name) for name in PENALTY_FIELDS} == pytest.approx(PENALTIES)
    assert sampling.penalized


def test_the_penalties_are_remembered_and_locked_during_a_run(qtbot, tmp_path):
    w = make_window(qtbot, None, tmp_path)
    panel = part(w, ControlPanel)
    for name, value in PENALTIES.items():
        panel.penalties[name].setValue(value)
    w.run.set_state(RUNNING)
    assert not any(box.isEnabled() for box in panel.penalties.values())
    w.run.set_state(IDLE)
    assert all(box.isEnabled() for box in panel.penalties.values())
    w.save_settings()
    x = MainWindow(None, settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat),
                   data_dir=tmp_path / "data")
    x_panel = part(x, ControlPanel)
    qtbot.addWidget(x)
    assert {n: b.value() for n, b in x_panel.penalties.items()} == pytest.approx(PENALTIES)


def test_a_file_without_the_penalties_shows_llama_servers_defaults_and_one_with_them_its_own(qtbot, tmp_path):
    w = make_window(qtbot, None, tmp_path)
    panel = part(w, ControlPanel)
    p = panel
    for name, value in PENALTIES.items():
        p.penalties[name].setValue(value)
    old = {"sampling": {"temperature": 0.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "seed": 0}}
    p.show_saved(old, "a prompt", "m.gguf")  # written before the penalties existed
    assert {n: b.value() for n, b in p.penalties.items()} == PENALTY_DEFAULTS
    p.show_live()
    p.show_saved({"sampling": {**old["sampling"], "repeat_penalty": 1.5, "repeat_last_n": 0}}, "a prompt", "m.gguf")
    assert (p.penalties["repeat_penalty"].value(), p.penalties["repeat_last_n"].value()) == (1.5, 0)
    p.show_live()
    assert {n: b.value() for n, b in p.penalties.items()} == pytest.approx(PENALTIES)


def test_the_context_controls_have_llama_cpps_names_and_are_remembered_and_locked(qtbot, tmp_path):
    w = make_window(qtbot, None, tmp_path)
    panel = part(w, ControlPanel)
    c = panel.llama_context
    assert c.values() == DEFAULT_CONTEXT  # run's defaults: -b 512, llama-server's -ub 512, -fa auto, f16
    for key, names in (("n_batch", ("-b", "--batch-size", "2048")), ("n_ubatch", ("-ub", "--ubatch-size")),
                       ("flash_attn", ("-fa", "--flash-attn")), ("type_k", ("-ctk", "--cache-type-k")),
                       ("type_v", ("-ctv", "--cache-type-v"))):
        tip = c.controls[key].toolTip()
        assert all(n in tip for n in names) and "next model load" in tip and "llama-server's" in tip, tip
    c.apply_values({"n_batch": 256, "n_ubatch": 128, "flash_attn": "on", "type_k": "q8_0", "type_v": "q4_0"})
    assert "-ub 128" in c.line.text() and "-ctv q4_0" in c.line.text()
    w.run.set_state(RUNNING)
    assert not any(x.isEnabled() for x in c.controls.values())
    w.run.set_state(IDLE)
    assert all(x.isEnabled() for x in c.controls.values())
    w.save_settings()
    x = MainWindow(None, settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat),
                   data_dir=tmp_path / "data")
    x_panel = part(x, ControlPanel)
    qtbot.addWidget(x)
    assert x_panel.llama_context.values() == {"n_batch": 256, "n_ubatch": 128, "flash_attn": "on",
                                              "type_k": "q8_0", "type_v": "q4_0"}


def test_a_combination_llama_cpp_refuses_is_one_line_and_nothing_loads(qtbot, tmp_path):
    w = make_window(qtbot, None, tmp_path)
    model = w.model
    panel = part(w, ControlPanel)
    c = panel.llama_context
    assert c.refused.isHidden()
    c.flash_attn.setCurrentText("off")
    c.type_v.setCurrentText("q8_0")
    assert not c.refused.isHidden() and "-ctv q8_0" in c.refused.text() and "-fa off" in c.refused.text()
    assert "\n" not in c.refused.text() and "refused" in c.line.text()
    assert not w.load_selected_model() and "-ctv q8_0" in model.last_error and model.state == IDLE
    assert not model.commands.start_run() and model.state == IDLE
    c.type_v.setCurrentText("f16")
    c.n_batch.setValue(1)  # no room for a proposal row: refused for a speculative source, not for plain decoding
    assert "n_batch 1" in c.problem(speculative=True) and c.problem(speculative=False) == ""


def test_the_window_runs_with_the_loaded_models_context_and_reloads_with_other_settings(qtbot, runtime, tmp_path):
    w = make_window(qtbot, runtime, tmp_path, max_tokens=4)
    model = w.model
    panel = part(w, ControlPanel)
    c = panel.llama_context
    # The window shows the loaded runtime's settings (as its context size) and runs on it without a reload.
    assert c.values() == loaded_context(runtime.describe()["llama_cpp"]) and c.values()["n_batch"] == runtime.n_batch
    assert model.worker.is_loaded(str(runtime.model_path), runtime.n_ctx, "", None, c.values())
    assert "next model load" not in c.line.text()
    c.n_ubatch.setValue(64)
    c.flash_attn.setCurrentText("on")
    assert "next model load" in c.line.text()
    assert not model.worker.is_loaded(str(runtime.model_path), runtime.n_ctx, "", None, c.values())
    states: list[tuple[str, str]] = []
    model.worker.stateChanged.connect(lambda state, detail: states.append((state, detail)))
    reason, _end = run_to_end(qtbot, w)
    assert model.worker.runtime is not runtime and model.session.tokens
    # The reload says so and goes straight on to the run: never idle in between (Run would be enabled).
    first_loading = next(i for i, (st, _d) in enumerate(states) if st == "loading")
    assert "reloading" in states[first_loading][1]
    assert states[first_loading + 1][0] == "running", states[:first_loading + 3]
    block = model.session.header.model["llama_cpp"]  # the receipts' record, as a headless run writes it
    assert (block["n_ubatch"], block["flash_attn_asked"]) == (64, "on") and "-ub" in block["server_args"]
    assert c.values()["n_ubatch"] == 64 and "next model load" not in c.line.text()
