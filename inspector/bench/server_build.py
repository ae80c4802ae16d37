"""Build llama-server once from the llama.cpp that llama-cpp-python 0.3.36 vendors (commit 0c1e570).

llama-server is our reference for comparisons only (same kernels as our runtime, so greedy
texts can be compared token for token); nothing here is on the decode path. The build is
``pip download`` of the llama-cpp-python sdist, its ``vendor/llama.cpp`` extracted into a
temporary folder in the cache folder (without ``vendor/llama.cpp/.git``, a link to the shallow
submodule clone the sdist also carries under ``.git/modules``), then cmake. Followed at
llama.cpp 0c1e570:

- ``CMakeLists.txt``: the options (``LLAMA_BUILD_TESTS``, ``LLAMA_BUILD_EXAMPLES``,
  ``LLAMA_BUILD_TOOLS``, ``LLAMA_BUILD_SERVER``, ``LLAMA_OPENSSL``; ``LLAMA_CURL`` is only a
  deprecation warning there, so it is not passed) and ``LLAMA_BUILD_NUMBER`` /
  ``LLAMA_BUILD_COMMIT``, which it takes as given when defined and otherwise from
  ``cmake/build-info.cmake`` (``git rev-parse --short HEAD``, ``git rev-list --count HEAD``,
  "unknown" without git, and the enclosing repository's HEAD inside another clone).
  ``ggml/CMakeLists.txt`` asks git too (``find_program(GIT_EXE ...)``, ``rev-parse``,
  ``diff-index``). We pass both numbers and a stand-in git (``GIT_EXECUTABLE``, ``GIT_EXE``)
  that answers those questions with commit 0c1e570, build 0.
- ``common/build-info.cpp.in``: the numbers reach ``llama_print_build_info`` (``--version``,
  ``common/arg.cpp``; printed to stderr as ``version: 0.5.0-dev (build 0, commit 0c1e570)``
  then ``built with <compiler> for <target>``) and ``llama_build_info()`` (``b0-0c1e570``,
  ``/props``' ``build_info`` in ``tools/server/server-context.cpp``).
- ``tools/ui/CMakeLists.txt`` and ``scripts/ui-assets.cmake``: by default the build downloads
  the web UI from a Hugging Face bucket; ``LLAMA_USE_PREBUILT_UI=OFF`` (and
  ``LLAMA_BUILD_UI=OFF``, no npm) builds without an embedded UI (we start it with ``--no-ui``).
- ``BUILD_SHARED_LIBS=OFF``: one self-contained binary that can be moved into the cache
  (a shared build's rpath points into the build folder).

The binary lands at ``<cache>/llama-server-0.3.36-0c1e570/bin/llama-server`` (moved into place
in one rename, so an interrupted build leaves none); a file lock keeps two processes from
building at once; the build log stays in the cache folder. Each step (pip, cmake and the
compilers it starts) runs in a process group of its own: a cancelled or interrupted build kills the
whole group and removes its temporary folder, so the next build starts over.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from inspector.llama.server_parity import LLAMA_CPP_COMMIT

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
LLAMA_CPP_BUILD_NUMBER = 0
"""What our build reports as llama.cpp's build number: the sdist's copy of the submodule's git
folder is a shallow clone (no history to count), and we leave its link out anyway."""
SERVER_BUILD_MINUTES = "7-15"
"""How long the build takes on 2 cores, for messages."""
VERSION_TIMEOUT_S = 10.0

_NAME = f"llama-server-{LLAMA_CPP_PYTHON_VERSION}-{LLAMA_CPP_COMMIT}"
_VERSION_RE = re.compile(r"version: (\S+) \(build (-?\d+), commit ([^)\s]+)\)")
_BUILT_WITH_RE = re.compile(r"built with (.+)")
_PERCENT_RE = re.compile(r"^\[\s*(\d+)%\]")
_NINJA_RE = re.compile(r"^\[(\d+)/(\d+)\]")
_ERROR_RE = re.compile(r"\berror\b|\bfatal\b", re.IGNORECASE)
_FOOTER_RE = re.compile(r"^(g?make(\[\d+\])?: \*\*\*|ninja: build stopped|CMake Error: Generator|-- Configuring incomplete)")

_FAKE_GIT = f"""#!/bin/sh
# Stand-in for git in llama.cpp's cmake (cmake/build-info.cmake, ggml/CMakeLists.txt): the sdist
# has no .git, so answer as commit {LLAMA_CPP_COMMIT}, build {LLAMA_CPP_BUILD_NUMBER}, clean tree.
case "$*" in
  "--version") echo "git version 2.0.0" ;;
  "rev-parse --short HEAD") echo "{LLAMA_CPP_COMMIT}" ;;
  "rev-list --count HEAD") echo "{LLAMA_CPP_BUILD_NUMBER}" ;;
  diff-index*) exit 0 ;;
  *) exit 1 ;;
esac
"""


class ServerBuildError(RuntimeError):
    """Building llama-server failed; the message is one line: the step, the last meaningful
    output line and where the full log is."""


class ServerBuildCancelled(ServerBuildError):
    """The build was cancelled (``build_llama_server(cancel=...)``): its processes are killed and its
    temporary folder removed."""


class NotALlamaServer(ValueError):
    """A path that is not a runnable llama.cpp binary (one-line message)."""


@dataclass(frozen=True)
class ServerVersion:
    """What ``llama-server --version`` reports: llama.cpp's build number and short commit,
    the version string (e.g. ``0.5.0-dev``) and the ``built with`` line's text."""

    build_number: int
    commit: str
    version: str = ""
    built_with: str = ""


def cache_dir() -> Path:
    """The spec-inspector cache folder: ``$SPEC_INSPECTOR_CACHE`` if set, else
    ``$XDG_CACHE_HOME/spec-inspector``, else ``~/.cache/spec-inspector``. Not created here."""
    if os.environ.get("SPEC_INSPECTOR_CACHE"):
        return Path(os.environ["SPEC_INSPECTOR_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "spec-inspector"


def cached_server_path() -> Path:
    """Where the built binary lives: ``<cache>/llama-server-0.3.36-0c1e570/bin/llama-server``
    (it may not exist yet)."""
    return cache_dir() / _NAME / "bin" / "llama-server"


def build_log_path() -> Path:
    """The log of the last build attempt: ``<cache>/llama-server-0.3.36-0c1e570-build.log``."""
    return cache_dir() / f"{_NAME}-build.log"


def find_llama_server() -> Path | None:
    """The llama-server to use: ``$SPEC_INSPECTOR_LLAMA_SERVER`` if set (a path, returned as
    given: check it with ``server_version``), else the cached build if it exists, else None."""
    given = os.environ.get("SPEC_INSPECTOR_LLAMA_SERVER")
    if given:
        return Path(given).expanduser()
    cached = cached_server_path()
    return cached if cached.is_file() else None


def server_version(binary: Path | str) -> ServerVersion:
    """Run ``binary --version`` (10 s at most) and parse llama.cpp's
    ``version: V (build N, commit C)`` line (printed to stderr; both streams are read).

    Raises ``NotALlamaServer`` (one line) when the file is missing, is a folder, is not
    executable, cannot be run, does not finish in time, or prints something else.
    """
    path = Path(binary).expanduser()
    if not path.exists():
        raise NotALlamaServer(f"no llama-server at {path}: the file does not exist")
    path = path.absolute()  # "./llama-server" runs this folder's file, not one found on PATH
    if path.is_dir():
        raise NotALlamaServer(f"{path} is a folder, not a llama-server binary")
    if not os.access(path, os.X_OK):
        raise NotALlamaServer(f"{path} is not executable, so it is not a llama-server binary")
    try:
        done = subprocess.run([str(path), "--version"], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=VERSION_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise NotALlamaServer(f"{path} --version did not finish within {VERSION_TIMEOUT_S:g} s: "
                              "not a llama-server") from None
    except OSError as e:
        raise NotALlamaServer(f"{path} cannot be run ({e.strerror or e}): not a llama-server binary") from None
    out = (done.stderr + b"\n" + done.stdout).decode("utf-8", "replace")
    found = _VERSION_RE.search(out)
    if found is None:
        first = next((ln.strip() for ln in out.splitlines() if ln.strip()), "")
        shown = f"printed {first[:120]!r}" if first else "printed nothing"
        raise NotALlamaServer(f"{path} is not a llama-server: its --version {shown} (exit code {done.returncode}); "
                              "expected 'version: V (build N, commit C)'")
    built = _BUILT_WITH_RE.search(out)
    return ServerVersion(int(found.group(2)), found.group(3), found.group(1),
                         built.group(1).strip() if built else "")


def build_llama_server(progress: Callable[[str], None] | None = None,
                       cancel: threading.Event | None = None) -> Path:
    """Build llama-server from llama-cpp-python 0.3.36's vendored llama.cpp (commit 0c1e570)
    unless the cache already has it; return the binary's path (``cached_server_path()``).

    Takes SERVER_BUILD_MINUTES (7-15) minutes on 2 cores and needs the network (PyPI), cmake
    and a C++ compiler. ``progress`` gets one-line messages ("downloading ...", "configuring",
    "building llama-server: 37%"). Uses ``$CMAKE_BUILD_PARALLEL_LEVEL`` jobs, else one per CPU.
    Waits for another process's build (file lock). Raises ``ServerBuildError`` (one line: the
    step that failed, its last meaningful output line and the log path). ``cancel`` (set from
    any thread) stops it within a second: the step's processes are killed, its temporary folder
    removed, and ``ServerBuildCancelled`` raised (the next build starts over).
    """
    say = progress or (lambda _msg: None)
    target = cached_server_path()
    if target.is_file():
        return target
    cache = cache_dir()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ServerBuildError(f"cannot create the cache folder {cache}: {e.strerror or e}") from None
    with open(cache / f"{_NAME}.lock", "w") as lock:
        _take_lock(lock, say, cancel)
        if target.is_file():
            return target
        for stale in cache.glob(f".{_NAME}-tmp-*"):  # left by a killed build; we hold the lock
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{_NAME}-tmp-", dir=cache))
        try:
            _build_in(work, target, say, cancel)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    say(f"llama-server built: {target}")
    return target


def _take_lock(lock, say: Callable[[str], None], cancel: threading.Event | None) -> None:
    """Hold the build lock (``lock``, an open file), waiting for another process's build; a
    ``cancel`` set meanwhile raises ``ServerBuildCancelled``."""
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        say(f"waiting for another process's llama-server build (lock {lock.name})")
    if cancel is None:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return
    while True:
        _check_cancel(cancel)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            cancel.wait(0.5)


def _check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise ServerBuildCancelled("llama-server build cancelled")


def configure_arguments(source: Path, build: Path, git: Path) -> list[str]:
    """The cmake configure command for ``source`` (a llama.cpp tree) into ``build``, with
    ``git`` the stand-in git script. Returns the argument list (``cmake`` first)."""
    return [
        "cmake", "-S", str(source), "-B", str(build),
        "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
        "-DGGML_NATIVE=OFF", "-DGGML_RPC=ON",
        "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
        f"-DLLAMA_BUILD_COMMIT={LLAMA_CPP_COMMIT}", f"-DLLAMA_BUILD_NUMBER={LLAMA_CPP_BUILD_NUMBER}",
        f"-DGIT_EXECUTABLE={git}", f"-DGIT_EXE={git}",
    ]


def _build_in(work: Path, target: Path, say: Callable[[str], None], cancel: threading.Event | None = None) -> None:
    log_path = build_log_path()
    cmake = shutil.which("cmake")
    if cmake is None:
        raise ServerBuildError("building llama-server needs cmake, which is not on PATH (install cmake 3.18 or newer)")
    with open(log_path, "w", encoding="utf-8") as log:
        say(f"downloading the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist")
        # --no-binary for this package only: with ":all:" pip would also build the sdist's build
        # requirements (scikit-build-core, ...) from source while preparing its metadata.
        _run_step("download", [sys.executable, "-m", "pip", "download", "--no-deps",
                               "--no-binary", "llama-cpp-python", f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
                               "-d", str(work / "sdist")], work, log, log_path, cancel=cancel)
        _check_cancel(cancel)
        say("extracting vendor/llama.cpp")
        source = _extract_llama_cpp(work / "sdist", work / "src", log_path)
        _check_cancel(cancel)
        git = work / "git"
        git.write_text(_FAKE_GIT, encoding="utf-8")
        git.chmod(0o755)
        say("configuring")
        argv = configure_arguments(source, work / "build", git)
        _run_step("configure", [cmake, *argv[1:]], work, log, log_path, cancel=cancel)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        say(f"building llama-server with {jobs} jobs ({SERVER_BUILD_MINUTES} minutes on 2 cores)")
        _run_step("build", [cmake, "--build", str(work / "build"), "--target", "llama-server", "-j", jobs],
                  work, log, log_path, say, cancel)
        built = next((p for p in (work / "build" / "bin" / "llama-server", work / "build" / "llama-server")
                      if p.is_file()), None)
        if built is None:
            found = sorted(str(p.relative_to(work)) for p in (work / "build").rglob("llama-server") if p.is_file())
            raise ServerBuildError(f"the build finished but made no build/bin/llama-server (found: {found or 'none'}); "
                                   f"full log: {log_path}")
        try:
            version = server_version(built)
        except NotALlamaServer as e:
            raise ServerBuildError(f"the built llama-server does not run: {e}; full log: {log_path}") from None
        if version.commit != LLAMA_CPP_COMMIT:
            raise ServerBuildError(f"the built llama-server reports commit {version.commit}, expected {LLAMA_CPP_COMMIT}; "
                                   f"full log: {log_path}")
        stage = work / "stage"
        (stage / "bin").mkdir(parents=True)
        shutil.copy2(built, stage / "bin" / "llama-server")
        (stage / "BUILD").write_text(
            f"llama-server from llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} sdist, llama.cpp {LLAMA_CPP_COMMIT}\n"
            f"{' '.join(a for a in argv[5:] if not a.startswith('-DGIT_'))}\n", encoding="utf-8")
        final = target.parent.parent
        if final.exists():  # a folder without the binary (copied or damaged by hand)
            shutil.rmtree(final)
        os.replace(stage, final)


def _run_step(step: str, argv: list[str], cwd: Path, log, log_path: Path,
              say: Callable[[str], None] | None = None, cancel: threading.Event | None = None) -> None:
    """Run one step's command in a process group of its own (``start_new_session``), its output into
    ``log``; ``cancel`` (or an exception here, e.g. Ctrl+C) kills the whole group: make and every
    compiler it started."""
    _check_cancel(cancel)
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    lines: list[str] = []
    last_shown = -1
    try:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    except OSError as e:
        raise ServerBuildError(f"llama-server {step} step could not start {argv[0]}: {e.strerror or e}") from None
    ended = threading.Event()
    if cancel is not None:  # the read below blocks: a watcher kills the group when cancel is set
        threading.Thread(target=_kill_on_cancel, args=(proc, cancel, ended), daemon=True,
                         name="llama-server-build-cancel").start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            lines.append(line.rstrip())
            del lines[:-400]
            percent = _build_percent(line)
            if say is not None and percent is not None and percent != last_shown:
                last_shown = percent
                say(f"building llama-server: {percent}%")
        rc = proc.wait()
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        ended.set()
    log.flush()
    if cancel is not None and cancel.is_set():
        raise ServerBuildCancelled(f"llama-server build cancelled during its {step} step")
    if rc != 0:
        raise ServerBuildError(f"llama-server {step} step failed (exit code {rc}): {_meaningful_line(lines)}; "
                               f"full log: {log_path}")


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s process group (a step and every process it started) and reap ``proc``; nothing
    once ``proc`` was reaped (its number may name another group by then)."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


def _kill_on_cancel(proc: subprocess.Popen, cancel: threading.Event, ended: threading.Event) -> None:
    while not ended.is_set():
        if cancel.wait(0.2):
            if not ended.is_set():
                _kill_group(proc)
            return


def _build_percent(line: str) -> int | None:
    found = _PERCENT_RE.match(line)
    if found:
        return int(found.group(1))
    found = _NINJA_RE.match(line)
    if found and int(found.group(2)) > 0:
        return int(100 * int(found.group(1)) / int(found.group(2)))
    return None


def _meaningful_line(lines: Iterable[str]) -> str:
    useful = [ln.strip() for ln in lines if ln.strip() and not _FOOTER_RE.match(ln.strip())]
    at = next((i for i, ln in enumerate(useful) if _ERROR_RE.search(ln)), None)
    if at is None:
        return useful[-1][:300] if useful else "(no output)"
    chosen = useful[at]
    if chosen.endswith(":") and at + 1 < len(useful):  # "CMake Error at X (message):" + the message
        chosen = f"{chosen} {useful[at + 1]}"
    return chosen if len(chosen) <= 300 else chosen[:297] + "..."


def _extract_llama_cpp(folder: Path, dest: Path, log_path: Path) -> Path:
    sdists = sorted(folder.glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        raise ServerBuildError(f"pip download left no llama_cpp_python-*.tar.gz in {folder}; full log: {log_path}")
    # <top>/vendor/llama.cpp/... only: the sdist also holds <top>/.git/modules/vendor/llama.cpp
    # (a shallow clone's git folder) and vendor/llama.cpp/.git, a link to it that we leave out.
    wanted = re.compile(r"^([^/]+)/vendor/llama\.cpp/(?!\.git$)")
    try:
        with tarfile.open(sdists[0]) as tar:
            members = [m for m in tar.getmembers() if wanted.match(m.name) and ".." not in m.name.split("/")]
            if not members:
                raise ServerBuildError(f"{sdists[0].name} has no vendor/llama.cpp folder; full log: {log_path}")
            top = wanted.match(members[0].name).group(1)
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, members=members, filter="data")
            else:
                tar.extractall(dest, members=members)
    except (tarfile.TarError, OSError) as e:
        raise ServerBuildError(f"cannot extract vendor/llama.cpp from {sdists[0].name}: {e}; full log: {log_path}") from None
    source = dest / top / "vendor" / "llama.cpp"
    if not (source / "CMakeLists.txt").is_file():
        raise ServerBuildError(f"{sdists[0].name}'s vendor/llama.cpp has no CMakeLists.txt; full log: {log_path}")
    return source
