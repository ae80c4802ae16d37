"""A llama-cpp-python build that crashes on this machine is named before a model loads (issue 36, 7).

The decision on system-info strings with scripted probe answers (no model), the probe's child process
on a real crash (a child that dies by SIGSEGV) and on the real build and bundled model (it survives),
and the real runtime loading as before on the README's build, which has no AMX and is never probed."""

from __future__ import annotations

import sys

import llama_cpp
import pytest

from inspector.llama import build_check
from inspector.llama.build_check import REINSTALL, UnsafeBuild, check_build, probe_crash, risky_features
from inspector.llama.model_file import bundled_model_path

NATIVE_AMX = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | "
              "OPENMP = 1 | REPACK = 1 |")
"""What llama.cpp's system info read on the machine where a plain ``pip install`` crashed."""
PORTABLE = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | LLAMAFILE = 1 |"


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.setattr(build_check, "_checked", {})
    monkeypatch.delenv(build_check.PROBING_ENV, raising=False)


def test_only_a_build_with_amx_is_risky():
    assert risky_features(NATIVE_AMX) == ["AMX_INT8"]
    assert risky_features(PORTABLE) == []
    assert risky_features("AMX_INT8 = 0 | AMX_BF16 = 1") == ["AMX_BF16"]


def test_a_portable_build_is_never_probed(tmp_path):
    asked = []
    check_build("m.gguf", PORTABLE, str(tmp_path / "lib.so"), probe=lambda m: asked.append(m) or "SIGSEGV",
                cache=tmp_path / "c.json")
    assert asked == [] and not (tmp_path / "c.json").exists()


def test_an_amx_build_whose_probe_died_is_refused_with_the_reinstall_command(tmp_path):
    lib = tmp_path / "libggml-cpu.so"
    lib.write_bytes(b"x")
    with pytest.raises(UnsafeBuild) as err:
        check_build("m.gguf", NATIVE_AMX, str(lib), probe=lambda m: "SIGSEGV", cache=tmp_path / "c.json")
    line = str(err.value)
    assert "\n" not in line and "AMX_INT8" in line and "SIGSEGV" in line and REINSTALL in line


def test_a_build_is_probed_once_then_remembered_across_processes(tmp_path, monkeypatch):
    lib = tmp_path / "libggml-cpu.so"
    lib.write_bytes(b"x")
    asked = []
    for _ in range(3):
        check_build("m.gguf", NATIVE_AMX, str(lib), probe=lambda m: asked.append(m) or "", cache=tmp_path / "c.json")
    assert asked == ["m.gguf"]
    monkeypatch.setattr(build_check, "_checked", {})  # a new process reads the file
    check_build("m.gguf", NATIVE_AMX, str(lib), probe=lambda m: asked.append(m) or "", cache=tmp_path / "c.json")
    assert asked == ["m.gguf"]
    lib.write_bytes(b"a reinstalled library")  # a new build is probed again
    with pytest.raises(UnsafeBuild):
        check_build("m.gguf", NATIVE_AMX, str(lib), probe=lambda m: "SIGILL", cache=tmp_path / "c.json")


def test_the_probe_names_the_signal_a_crashing_child_died_of():
    assert probe_crash("", command=[sys.executable, "-c", "import ctypes; ctypes.string_at(0)"]) == "SIGSEGV"
    assert probe_crash("", command=[sys.executable, "-c", "raise SystemExit(3)"]) == "exit status 3"


def test_the_real_build_survives_the_probe_on_the_bundled_model():
    assert probe_crash(str(bundled_model_path())) == ""


def test_the_installed_build_is_the_portable_one_the_readme_installs():
    """The README's CMAKE_ARGS build: no AMX, so loading never probes (and the real runtime loads)."""
    assert risky_features(llama_cpp.llama_print_system_info().decode()) == []
