"""Shared fixtures: the bundled model is loaded once per test session."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

from inspector.engine import Generation, GenerationObserver, GenerationSettings, RuntimeScheduler  # noqa: E402
from inspector.llama import bundled_model_path  # noqa: E402

N_CTX = 1024


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


@pytest.fixture
def make_generation(scheduler):
    """Factory for ``Generation`` on the shared runtime; its sessions are dropped after the test."""
    made: list[Generation] = []

    def make(source, prompt_tokens, observer: GenerationObserver | None = None, **settings) -> Generation:
        faults = settings.pop("faults", None)
        g = Generation(scheduler, source, prompt_tokens, GenerationSettings(**settings), faults=faults, observer=observer)
        made.append(g)
        return g

    yield make
    for g in made:
        if g.session_id is not None and not g.session_retired:
            sid = g.session_id
            scheduler.execute("drop", sid, lambda rt: rt.drop_session(sid))


@pytest.fixture(scope="session")
def chat_tokens(runtime):
    """Prompt text -> token ids through the model's chat template (cached)."""
    cache: dict[str, list[int]] = {}

    def tokens(text: str) -> list[int]:
        if text not in cache:
            cache[text] = runtime.prompt_tokens(text)
        return list(cache[text])

    return tokens
