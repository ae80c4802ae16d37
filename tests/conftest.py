"""Shared fixtures: the bundled model is loaded once per test session."""

from __future__ import annotations

import os

import json  # noqa: E402
import tempfile  # noqa: E402

# Cost models measured by tests (bench, compare, the Cost model tab) must not steer later
# tests' adaptive n-gram lengths or auto draft max, nor come from the user's cache: a cache
# file per test (``_own_cost_cache``), and one per session for code outside a test.
_TEST_DIR = tempfile.mkdtemp(prefix="spec-inspector-tests-")
os.environ["SPEC_INSPECTOR_COST_CACHE"] = os.path.join(_TEST_DIR, "cost-models.json")

SCREENS = {"desk": (0, 0, 1920, 1080), "small": (1920, 0, 1024, 640)}
"""The offscreen platform's screens (name: x, y, width, height): the windows open on ``desk`` (the
first, primary), where the window's 1280x800 fits; ``small`` is a 1024x640 screen beside it
(tests/test_gui_screen_fit.py). Offscreen's own default is one 800x800 screen."""
if os.environ.get("QT_QPA_PLATFORM", "offscreen") == "offscreen":
    _screens = os.path.join(_TEST_DIR, "screens.json")
    with open(_screens, "w", encoding="utf-8") as _fh:
        json.dump({"screens": [dict(name=k, x=x, y=y, width=w, height=h) for k, (x, y, w, h) in SCREENS.items()]},
                  _fh)
    os.environ["QT_QPA_PLATFORM"] = f"offscreen:configfile={_screens}"

import pytest  # noqa: E402

from inspector.bench.server_build import (  # noqa: E402
    SERVER_BUILD_MINUTES,
    NotALlamaServer,
    ServerBuildError,
    build_llama_server,
    cached_server_path,
    find_llama_server,
    server_version,
)
from inspector.bench.server_process import LlamaServerProcess, ServerDeadlines  # noqa: E402
from inspector.llama.server_parity import LLAMA_CPP_COMMIT  # noqa: E402
from inspector.engine import Generation, GenerationObserver, GenerationSettings, RuntimeScheduler  # noqa: E402
from inspector.llama import bundled_model_path  # noqa: E402
from inspector.thread_pools import limit_thread_pools  # noqa: E402
from inspector.serve.server import InspectorServer  # noqa: E402
from serve_helpers import serve_options  # noqa: E402

N_CTX = 1024


MODEL_FIXTURES = frozenset({"model_path", "runtime", "scheduler", "make_generation", "chat_tokens", "qtbot"})
"""Fixtures that load the bundled model or start Qt: ``--pure-only`` leaves their tests out."""
COMMAND_NAMES = frozenset({"cli", "subprocess", "run_cli", "main"})
"""Names a test calls to run a ``spec-inspector`` command (another process, or ``main`` in this one, which
loads the model): ``--pure-only`` leaves those tests out too."""


def pytest_addoption(parser):
    parser.addoption("--pure-only", action="store_true",
                     help="run only the tests that need no model and no Qt (the mutation run's selection: "
                          "docs: architecture.md, Mutation testing)")


def pytest_collection_modifyitems(config, items):
    """``--pure-only``: deselect every test that asks for the model or Qt (directly or through a fixture) or
    runs a command."""
    if not config.getoption("--pure-only"):
        return
    def pure(item) -> bool:
        if MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            return False
        code = getattr(getattr(item, "function", None), "__code__", None)  # a test that runs a command
        return code is None or not COMMAND_NAMES.intersection(code.co_names)

    keep = [item for item in items if pure(item)]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


SKIPS_FILE_ENV = "SPEC_INSPECTOR_SKIPS_FILE"
"""A file the session writes every skipped test to, one JSON line each (``nodeid``, ``reason``), and an
empty file when none skipped: ``.ci/run`` names it and ``.ci/check-skips`` fails CI on any skip not on
``.ci/allowed-skips``. Unset (the README's command run by hand): nothing is written."""
_skips_file: str | None = None
_skipped: list[dict[str, str]] = []


def pytest_configure(config):
    """Take ``$SPEC_INSPECTOR_SKIPS_FILE`` out of the environment, so a process a test starts (a pytest of its
    own) cannot write over this session's record."""
    global _skips_file
    _skips_file = os.environ.pop(SKIPS_FILE_ENV, None) or None


def _note_skip(report) -> None:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    _skipped.append({"nodeid": report.nodeid, "reason": str(reason)})


def pytest_runtest_logreport(report):
    """A test skipped in its setup (a fixture), its call or by a mark; an expected failure (``xfail``) is
    no skip."""
    if report.skipped and not hasattr(report, "wasxfail"):
        _note_skip(report)


def pytest_collectreport(report):
    """A whole module skipped while it is collected (``pytest.importorskip`` at its top, say)."""
    if report.skipped:
        _note_skip(report)


def pytest_sessionfinish(session, exitstatus):
    if _skips_file is not None:
        with open(_skips_file, "w", encoding="utf-8") as fh:
            fh.writelines(json.dumps(skip) + "\n" for skip in _skipped)


def pytest_collection_finish(session):
    """Test modules may load another BLAS (scipy's, for statistics): cap it too, so no pool of ours
    spins beside llama.cpp's threads in the tests either (``inspector.thread_pools``)."""
    limit_thread_pools()


@pytest.fixture(autouse=True)
def _own_cost_cache(tmp_path, monkeypatch):
    """Each test starts with no stored cost model (``inspector.llama.cost_cache``)."""
    monkeypatch.setenv("SPEC_INSPECTOR_COST_CACHE", str(tmp_path / "cost-models.json"))


@pytest.fixture(scope="session")
def model_path():
    return bundled_model_path()


@pytest.fixture(scope="session")
def runtime(model_path):
    """The real llama.cpp runtime on the bundled SmolLM2-135M (one per test session)."""
    from inspector.llama.runtime import LlamaRuntime

    rt = LlamaRuntime(model_path, n_ctx=N_CTX, n_batch=256, n_seq_max=4)
    yield rt
    rt.close()


@pytest.fixture(scope="session")
def scheduler(runtime):
    return RuntimeScheduler(runtime)


class KvChecker(GenerationObserver):
    """Checks the SPEC invariant after every window: KV length == canonical_position."""

    def __init__(self, scheduler, inner: GenerationObserver | None = None):
        self.scheduler = scheduler
        self.inner = inner or GenerationObserver()
        self.checked = 0

    def on_receipt(self, receipt):
        sid = receipt.session_id
        kv = self.scheduler.execute("stats", sid, lambda rt: rt.kv_length(sid)).value
        assert kv == receipt.canonical_position, (
            f"window {receipt.window_index}: KV length {kv}, canonical position {receipt.canonical_position}"
        )
        self.checked += 1
        self.inner.on_receipt(receipt)

    def on_event(self, event):
        self.inner.on_event(event)

    def on_proposal(self, window, proposal):
        self.inner.on_proposal(window, proposal)

    def on_discard(self, discard):
        self.inner.on_discard(discard)

    def on_token(self, token, text):
        return self.inner.on_token(token, text)

    def before_commit(self, window, row, token, position):
        self.inner.before_commit(window, row, token, position)

    def on_finish(self, reason):
        self.inner.on_finish(reason)


@pytest.fixture
def make_generation(scheduler):
    """Factory for ``Generation`` on the shared runtime (or on ``on=``, a scheduler of
    a proxy of it: ``tests/scenarios.py``). Every window's KV length is checked
    against its canonical position; sessions are dropped after the test."""
    made: list[Generation] = []

    def make(source, prompt_tokens, observer: GenerationObserver | None = None, on: RuntimeScheduler | None = None,
             **settings) -> Generation:
        faults = settings.pop("faults", None)
        sched = on or scheduler
        g = Generation(sched, source, prompt_tokens, GenerationSettings(**settings), faults=faults,
                       observer=KvChecker(sched, observer))
        made.append(g)
        return g

    yield make
    for g in made:
        g.close()


@pytest.fixture(scope="session")
def chat_tokens(runtime):
    """Prompt text -> token ids through the model's chat template (cached)."""
    cache: dict[str, list[int]] = {}

    def tokens(text: str) -> list[int]:
        if text not in cache:
            cache[text] = runtime.prompt_tokens(text)
        return list(cache[text])

    return tokens


@pytest.fixture(scope="session")
def llama_server_binary(request):
    """A llama-server of llama.cpp 0c1e570 (``$SPEC_INSPECTOR_LLAMA_SERVER`` or the cached build),
    built once when there is none (``inspector.bench.server_build``), with its progress on the
    terminal. A failed build fails the test with the build's one-line error (not a skip)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    shown = {"percent": -10}

    def say(message: str) -> None:
        if message.startswith("building llama-server: ") and message.endswith("%"):
            percent = int(message.rsplit(" ", 1)[1].rstrip("%"))
            if percent < shown["percent"] + 10 and percent != 100:
                return
            shown["percent"] = percent
        if reporter is None:
            return
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(f"llama-server: {message}")
        else:
            reporter.write_line(f"llama-server: {message}")

    problem = None
    binary = find_llama_server()
    if binary is None:
        say(f"building llama-server from llama.cpp {LLAMA_CPP_COMMIT} once ({SERVER_BUILD_MINUTES} minutes on "
            f"2 cores), cached in {cached_server_path().parent.parent}")
        try:
            binary = build_llama_server(say)
        except ServerBuildError as exc:
            problem = str(exc)
    if problem is None:
        try:
            server_version(binary)
        except NotALlamaServer as exc:
            origin = "SPEC_INSPECTOR_LLAMA_SERVER" if os.environ.get("SPEC_INSPECTOR_LLAMA_SERVER") else "cached build"
            problem = f"{origin}: {exc}"
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    return binary


@pytest.fixture
def start_llama_server(llama_server_binary, model_path):
    """Factory: ``start_llama_server(args=(), threads=1, n_ctx=1024)`` starts a llama-server on the
    bundled model (``LlamaServerProcess``, ready for requests); every one is stopped after the test."""
    started: list[LlamaServerProcess] = []

    def start(args=(), threads: int = 1, n_ctx: int = N_CTX, timeout_s: float = 120,
              metrics: bool = True) -> LlamaServerProcess:
        server = LlamaServerProcess(llama_server_binary, model_path, args=args, threads=threads, n_ctx=n_ctx,
                                    deadlines=ServerDeadlines(start_s=timeout_s), metrics=metrics)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def serve(scheduler, runtime, tmp_path):
    """Factory: a started ``InspectorServer`` on the shared runtime (``serve_helpers.serve_options`` and the
    keywords given), every one stopped after the test."""
    started = []

    def start(**kw) -> InspectorServer:
        server = InspectorServer(scheduler, str(runtime.model_path), serve_options(tmp_path, **kw))
        server.start()
        assert server.wait_started(), "uvicorn did not start within 10 s"
        started.append(server)
        return server

    yield start
    for s in started:
        s.stop()
