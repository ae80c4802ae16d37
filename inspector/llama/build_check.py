"""Recognise a llama-cpp-python build that crashes on this machine, before a model loads.

``pip install llama-cpp-python`` without the README's ``CMAKE_ARGS`` compiles llama.cpp for the build
machine's exact CPU (``GGML_NATIVE``). On an Intel Xeon with AMX that build uses AMX tile instructions
(llama.cpp's system info then reads ``AMX_INT8 = 1``), and in some virtual machines a process dies with
a segmentation fault or an illegal instruction once they run: a user sees ``Fatal Python error:
Segmentation fault`` and learns nothing (issue 36). A crash cannot be caught in the process it kills,
so for such a build ``check_build`` loads a small model and decodes a few tokens in a child process
once (``inspector.llama.build_probe``), remembers the answer per library file, and raises
``UnsafeBuild`` (one line: what to reinstall, and why) when the child died by a signal. A build
without those instructions (``-DGGML_NATIVE=OFF``, the README's) is never probed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable

from inspector.llama.model_file import ModelFileError, bundled_model_path

RISKY_FEATURES = ("AMX_INT8", "AMX_BF16", "AMX_TILE")
"""llama.cpp system-info features of a build for one CPU that crash in some virtual machines."""
REINSTALL = ('CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_RPC=on" pip install --force-reinstall --no-cache-dir '
             'llama-cpp-python==0.3.36')
"""The README's build for any x86-64 CPU with AVX2 (about 7 minutes on 2 cores)."""
PROBE_TIMEOUT_S = 300.0
PROBING_ENV = "SPEC_INSPECTOR_BUILD_PROBE"
"""Set in the probing child: its own load is the probe, not checked again."""


class UnsafeBuild(ModelFileError):
    """The installed llama-cpp-python crashes on this machine (a ``ModelFileError``: every front end
    shows it as the one line a model that cannot load gets)."""


def risky_features(system_info: str) -> list[str]:
    """The ``RISKY_FEATURES`` that llama.cpp's system info (``llama_print_system_info``) says the build
    uses (``NAME = 1``), in order."""
    return [f for f in RISKY_FEATURES if re.search(rf"\b{f} = 1\b", system_info)]


def probe_crash(model_path: str, command: list[str] | None = None, timeout: float = PROBE_TIMEOUT_S) -> str:
    """Load ``model_path`` and decode a few tokens in a child process (``command``: another child, for
    tests). Returns "" when it exits normally, else how it died ("SIGSEGV", "exit status 3", "no answer
    in 300 s")."""
    cmd = command or [sys.executable, "-m", "inspector.llama.build_probe", str(model_path)]
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=timeout, env={**os.environ, PROBING_ENV: "1"})
    except subprocess.TimeoutExpired:
        return f"no answer in {timeout:.0f} s"
    if done.returncode == 0:
        return ""
    if done.returncode < 0:
        try:
            return signal.Signals(-done.returncode).name
        except ValueError:
            return f"signal {-done.returncode}"
    return f"exit status {done.returncode}"


def cache_file() -> Path:
    """Where probe answers are kept: ``$XDG_CACHE_HOME/spec-inspector/build-probes.json`` (~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spec-inspector" / "build-probes.json"


def library_key(library: str) -> str:
    """The library file's path, size and modification time: a reinstall makes a new key."""
    try:
        st = os.stat(library)
    except OSError:
        return library
    return f"{library}|{st.st_size}|{st.st_mtime_ns}"


def llama_library_path() -> str:
    """llama.cpp's CPU backend library inside the installed llama-cpp-python (the file a reinstall
    replaces; "" when not found)."""
    spec = importlib.util.find_spec("llama_cpp")
    folder = Path(spec.origin).parent / "lib" if spec is not None and spec.origin else None
    if folder is None or not folder.is_dir():
        return ""
    for pattern in ("libggml-cpu.*", "ggml-cpu.*", "libllama.*", "llama.*"):
        found = sorted(folder.glob(pattern))
        if found:
            return str(found[0].resolve())
    return ""


def probe_model(model_path: str) -> str:
    """The model a probe loads: the bundled small one when it is installed (a few seconds), else
    ``model_path``."""
    try:
        return str(bundled_model_path())
    except ModelFileError:
        return str(model_path)


_checked: dict[str, str] = {}
_lock = threading.Lock()


def check_build(model_path: str, system_info: str, library: str,
                probe: Callable[[str], str] = probe_crash, cache: Path | None = None) -> None:
    """Raise ``UnsafeBuild`` when the build (``system_info``, its shared ``library`` file) uses
    ``RISKY_FEATURES`` and a child process loading ``model_path`` with it died (``probe``). The answer is
    kept per library file in ``cache`` (default ``cache_file()``) and in this process, so a build is
    probed once. Nothing is probed for a build without those features or inside the probe itself."""
    features = risky_features(system_info)
    if not features or os.environ.get(PROBING_ENV):
        return
    key = library_key(library)
    path = cache or cache_file()
    with _lock:
        died = _checked.get(key)
        if died is None:
            try:
                died = json.loads(path.read_text("utf-8")).get(key)
            except (OSError, ValueError, AttributeError):
                died = None
        if died is None:
            died = probe(model_path)
            try:
                known = json.loads(path.read_text("utf-8")) if path.exists() else {}
                known = known if isinstance(known, dict) else {}
                known[key] = died
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(known, indent=1), "utf-8")
            except (OSError, ValueError):
                pass  # asked again next time
        _checked[key] = died
    if died:
        raise UnsafeBuild(model_path, f"the installed llama-cpp-python crashes on this machine: it was compiled "
                                      f"for this exact CPU and uses its {', '.join(features)} instructions (llama.cpp "
                                      f"system info), and a test load in a child process ended with {died}; "
                                      f"reinstall it for any x86-64 CPU (about 7 minutes): {REINSTALL}")
