"""Verification rules with temperature > 0: the output keeps the target's distribution.

A pure check of rejection sampling on toy distributions, and a statistical
check on the real model: over 1,000 seeded short generations per rule, the
histograms of the first generated tokens match plain sampling
(chi-square test of homogeneity, p > 0.001; a statistical test, not a timing one).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import chi2_contingency  # loads scipy's BLAS at collection: conftest caps it then

from inspector.engine import Generation, GenerationSettings, SamplingSettings
from inspector.engine.classify import classify_window
from inspector.engine.sampling import distribution, rejection_predictions

P_THRESHOLD = 0.001
RUNS = 1000


def chi2_p_value(a: Counter, b: Counter) -> float:
    keys = sorted(set(a) | set(b), key=lambda k: -(a[k] + b[k]))
    rows, other = [], [0, 0]
    for k in keys:
        if a[k] + b[k] >= 10:
            rows.append([a[k], b[k]])
        else:
            other[0] += a[k]
            other[1] += b[k]
    if sum(other):
        rows.append(other)
    if len(rows) < 2:
        return 1.0
    return float(chi2_contingency(np.array(rows)).pvalue)


def test_rejection_sampling_commits_tokens_distributed_as_the_target():
    rng = np.random.default_rng(0)
    s = SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    p_logits = np.log(np.array([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]]))
    q = np.array([0.1, 0.2, 0.7])
    counts = Counter()
    for _ in range(20000):
        x = int(rng.choice(3, p=q))
        preds = rejection_predictions(p_logits, [x], [q], s, rng)
        d = classify_window([x], preds, 0, 8, lambda t: False)
        counts[preds[0]] += 1
        assert d.commit_count >= 1
    observed = np.array([counts[i] for i in range(3)]) / 20000
    assert np.allclose(observed, [0.6, 0.3, 0.1], atol=0.015)


def test_distribution_applies_top_k_top_p_min_p_then_temperature():
    logits = np.log(np.array([0.5, 0.25, 0.15, 0.07, 0.03]))
    p = distribution(logits, SamplingSettings(temperature=1.0, top_k=4, top_p=0.85, min_p=0.0))
    assert np.count_nonzero(p) == 3 and np.isclose(p.sum(), 1.0)
    p = distribution(logits, SamplingSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.4))
    assert np.count_nonzero(p) == 2


@pytest.fixture(scope="module")
def draft_runtime(model_path, runtime, tmp_path_factory):
    from inspector.llama.quantize import make_draft
    from inspector.llama.runtime import LlamaRuntime

    path = make_draft(model_path, "Q4_0", tmp_path_factory.mktemp("drafts"))
    d = LlamaRuntime(path, n_ctx=runtime.n_ctx, n_batch=64, n_seq_max=1)
    yield d
    d.close()


def first_tokens(scheduler, prompt, rule, draft=None, runs=RUNS):
    from inspector.sources.draft import DraftModelSource

    firsts, seconds = Counter(), Counter()
    source = None
    for seed in range(runs):
        sampling = SamplingSettings(temperature=0.8, seed=seed)
        if draft is not None:
            if source is None:
                source = DraftModelSource(draft, draft_max=1, sampling=sampling)
            source.sampling = sampling
            source._rng = np.random.default_rng(seed + 10_000)
        g = Generation(scheduler, source, prompt,
                       GenerationSettings(max_new_tokens=2, draft_max=1, sampling=sampling, verification=rule))
        g.run()
        g.close()
        firsts[g.generated[0]] += 1
        if len(g.generated) > 1:
            seconds[g.generated[1]] += 1
        if draft is not None:
            assert all(r.verification_rule == rule for r in g.receipts)
    if source is not None:
        source.close()
    return firsts, seconds


@pytest.mark.slow
def test_sample_match_and_rejection_keep_the_plain_sampling_distribution(scheduler, runtime, draft_runtime):
    prompt = runtime.tokenize("The", True, False)  # one token: nothing to prefill, runs stay cheap
    assert len(prompt) == 1
    plain = first_tokens(scheduler, prompt, "sample_match")
    for rule in ("sample_match", "rejection"):
        spec = first_tokens(scheduler, prompt, rule, draft=draft_runtime)
        for position, (a, b) in enumerate(zip(plain, spec)):
            p = chi2_p_value(a, b)
            print(f"{rule} token {position}: chi-square p = {p:.4f}; plain top {a.most_common(3)}, spec top {b.most_common(3)}")
            assert p > P_THRESHOLD, f"{rule}: token {position} histogram differs from plain sampling (p={p:.2e})"
