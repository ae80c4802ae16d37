"""llama.cpp's settings in the window (issue 26): the penalties in the Sampling group and the context
settings (-b, -ub, -fa, -ctk, -ctv), with llama.cpp's names, remembered, locked during a run, shown
read only from a file. No model's words are looked at."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from inspector.engine.settings import PENALTY_DEFAULTS, PENALTY_FIELDS, SamplingSettings
from inspector.gui import worker as W
from inspector.gui.main_window import MainWindow

from test_gui_support import make_window

PENALTIES = {"repeat_penalty": 1.3, "repeat_last_n": 128, "presence_penalty": 0.5, "frequency_penalty": -0.25}


def test_the_penalty_boxes_have_llama_cpps_names_and_reach_the_runs_sampling(qtbot, tmp_path):
    w = make_window(qtbot, None, tmp_path)
    p = w.panel
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
    for name, value in PENALTIES.items():
        w.panel.penalties[name].setValue(value)
    w.set_state(W.RUNNING)
    assert not any(box.isEnabled() for box in w.panel.penalties.values())
    w.set_state(W.IDLE)
    assert all(box.isEnabled() for box in w.panel.penalties.values())
    w.save_settings()
    x = MainWindow(None, settings=QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat),
                   data_dir=tmp_path / "data")
    qtbot.addWidget(x)
    assert {n: b.value() for n, b in x.panel.penalties.items()} == pytest.approx(PENALTIES)


def test_a_file_without_the_penalties_shows_llama_servers_defaults_and_one_with_them_its_own(qtbot, tmp_path):
    w = make_window(qtbot, None, tmp_path)
    p = w.panel
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
