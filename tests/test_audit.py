"""The losslessness audit (issue 39, item 1; ``inspector.session.audit``, ``spec-inspector audit``) on the
bundled model: an output altered on purpose is "not explained by batch shape"; near-ties found by
scanning the bundled examples are audited at every width (the flipping widths named when they flip,
every width agreeing with plain decoding when none does); the command's answers and refusals. No
particular word of the model is asserted."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from inspector.cli.audit import audit_run, compare_verdicts, run_of
from inspector.cli.main import main
from inspector.engine import GenerationSettings
from inspector.engine.baseline import plain_generation
from inspector.prompts import EXAMPLES, TURNS_EXAMPLES, example_prompt, example_prompts, turns_path
from inspector.session.conversation import read_turns
from inspector.sources.registry import PLAIN
from inspector.session.audit import (BATCH_SHAPE, NOT_EXPLAINED, audit_divergence, audit_position, compact,
                                     windows_of)


@pytest.fixture(scope="module")
def plain_run(runtime, scheduler):
    """(prompt ids, plain greedy generated ids) of the shortest bundled example, 20 tokens."""
    text = min(example_prompts().values(), key=len)
    prompt = runtime.prompt_tokens(text)
    return prompt, plain_generation(scheduler, prompt, GenerationSettings(max_new_tokens=20, draft_max=0)).generated


def test_an_output_altered_on_purpose_is_not_explained_by_batch_shape(runtime, plain_run):
    prompt, plain = plain_run
    p = 6
    altered = list(plain)
    altered[p] = next(t for t in range(1000, 2000) if t != plain[p])  # a token no width picks: not the top one
    kv_before = [runtime.kv_length(s) for s in range(runtime.n_seq_max)]
    result = audit_divergence(runtime, prompt, altered, plain, 4, token_text=runtime.token_text)
    assert result is not None and result.position == p
    assert result.speculative_token == altered[p] and result.plain_token == plain[p]
    assert [w.width for w in result.widths] == [1, 2, 3, 4]
    assert [len(w.places) for w in result.widths] == [1, 2, 3, 4]  # every place a window could put the row
    one = result.widths[0].places[0]
    assert one.token == plain[p] and one.margin >= 0  # width 1 at place 0 is plain decoding's own step
    assert result.verdict.startswith(NOT_EXPLAINED) and not result.explained
    assert repr(runtime.token_text(altered[p])) in result.verdict
    assert [runtime.kv_length(s) for s in range(runtime.n_seq_max)] == kv_before  # no session's KV touched
    assert audit_divergence(runtime, prompt, plain, plain, 4) is None  # identical streams: nothing to audit


def test_compare_prints_the_verdict_of_a_row_that_differs(scheduler, plain_run):
    prompt, plain = plain_run
    altered = list(plain)
    altered[5] = next(t for t in range(1000, 2000) if t != plain[5])

    def row(label, source, draft_max, tokens, same):
        return SimpleNamespace(config=SimpleNamespace(label=label, source=source, draft_max=draft_max),
                               generated_tokens=tuple(tokens), same_output_as_plain=same, error=None)

    result = SimpleNamespace(rows=(row("plain", PLAIN, 0, plain, True), row("same", "ngram", 3, plain, True),
                                   row("altered", "ngram", 2, altered, False)))
    greedy = GenerationSettings().sampling
    lines = compare_verdicts(scheduler, prompt, result, greedy)
    assert len(lines) == 1 and lines[0].startswith(f"differs: altered at generated token 5: {NOT_EXPLAINED}")
    assert "1..3" in lines[0]  # widths 1..draft max + 1


def tie_rows(runtime, prompt, generated) -> tuple[np.ndarray, np.ndarray]:
    """(top-2 logit margin, top-2 token ids) of the target's row for each generated position (one wide
    batch: a cheap first look, the audit then tries every width and place)."""
    sid = runtime.open_session()
    try:
        runtime.prefill(sid, prompt[:-1], 0)
        logits = runtime.decode_logits(sid, [prompt[-1]] + list(generated[:-1]), len(prompt) - 1)
    finally:
        runtime.drop_session(sid)
    order = np.argsort(logits, axis=1)[:, -2:]
    top2 = np.take_along_axis(logits, order, axis=1)
    return top2[:, 1] - top2[:, 0], order[:, ::-1]


SCAN_TOKENS = 12
"""Generated tokens scanned per bundled example (short: the scan stays a few seconds per example)."""
SCAN_WIDTH = 6
"""Verify widths 1..SCAN_WIDTH tried at each example's closest near-tie (rows)."""


def scanned_prompt(example: str) -> str:
    """The prompt scanned for ``example``: a bundled example's text, or a bundled conversation's first turn."""
    return example_prompt(example) if example in EXAMPLES else read_turns(turns_path(example))[0]


@pytest.mark.parametrize("example", EXAMPLES + TURNS_EXAMPLES)
def test_near_ties_found_by_scanning_are_audited_at_every_width(runtime, scheduler, example):
    """Per bundled example (``EXAMPLES``, and each bundled conversation's first turn; the long examples
    need an 8,192-position context, beyond this runtime's), scan a short plain run for its closest
    near-tie (the smallest top-2 margin
    of a row a window could verify) and audit the runner-up there as if a run had committed it, at every
    width and place. The verdict names the widths that pick each token: "batch-shape numerics" when
    some width picks the runner-up (a flip), else "not explained" (the bundled Q4_1 model has no batched
    kernels, so every width picking plain decoding's token is the common case here)."""
    prompt = runtime.prompt_tokens(scanned_prompt(example))
    plain = plain_generation(scheduler, prompt, GenerationSettings(max_new_tokens=SCAN_TOKENS, draft_max=0)).generated
    assert len(plain) >= 3, f"{example}: the plain run ended after {len(plain)} tokens, nothing to scan"
    margins, top2 = tie_rows(runtime, prompt, plain)
    p = min(range(1, len(plain)), key=lambda i: margins[i])  # the closest near-tie a window could predict
    runner_up = int(next(t for t in top2[p] if t != plain[p]))
    result = audit_divergence(runtime, prompt, list(plain[:p]) + [runner_up], plain, SCAN_WIDTH,
                              token_text=runtime.token_text)
    assert result.position == p and (result.speculative_token, result.plain_token) == (runner_up, plain[p])
    assert [w.width for w in result.widths] == list(range(1, SCAN_WIDTH + 1))
    assert [len(w.places) for w in result.widths] == [min(w, p) for w in range(1, SCAN_WIDTH + 1)]  # every place
    assert result.widths[0].places[0].token == plain[p]  # width 1, place 0: plain decoding's step, exactly
    picked = {t for w in result.widths for t in w.tokens}
    print(f"{example}: closest near-tie at generated token {p}, margin {margins[p]:.4f} logits (one wide batch); "
          f"{result.verdict}")
    named = f"widths {compact(result.widths_picking(plain[p]))} pick {runtime.token_text(plain[p])!r}"
    assert named in result.verdict, result.verdict
    flipped = runner_up in picked
    assert result.verdict.startswith(BATCH_SHAPE if flipped else NOT_EXPLAINED), result.verdict
    assert flipped == (f"pick {runtime.token_text(runner_up)!r}" in result.verdict), result.verdict


def test_audit_command_on_a_real_run(tmp_path, capsys, runtime, scheduler):
    receipts = tmp_path / "r.json"
    assert main(["run", "--example", "copy-exact", "--max-tokens", "8", "--draft-max", "3", "--quiet",
                 "--receipts", str(receipts)]) == 0
    capsys.readouterr()
    assert main(["audit", str(receipts), "--threads", "1"]) == 0  # one thread: fast on a busy machine too
    out = capsys.readouterr().out
    doc = json.loads(receipts.read_text("utf-8"))
    # decided here from the run's tokens and plain decoding of its prompt, not from the command's answer
    plain = plain_generation(scheduler, doc["prompt"]["token_ids"],
                             GenerationSettings(max_new_tokens=8, draft_max=0)).generated
    if list(plain) == doc["output"]["token_ids"]:
        assert "identical to plain decoding (8 tokens)" in out and "verdict: " not in out, out
    else:
        assert "verdict: " in out, out
        assert len([line for line in out.splitlines() if line.strip()[:1].isdigit()]) == 4  # widths 1..4
    sampled = {**doc, "settings": {**doc["settings"],
                                   "sampling": {**doc["settings"]["sampling"], "temperature": 0.7}}}
    (tmp_path / "sampled.json").write_text(json.dumps(sampled), "utf-8")
    assert main(["audit", str(tmp_path / "sampled.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "greedy runs only" in err and "0.7" in err
    other = {**doc, "model": {**doc["model"], "n_vocab": doc["model"]["n_vocab"] + 1}}
    (tmp_path / "other.json").write_text(json.dumps(other), "utf-8")
    assert main(["audit", str(tmp_path / "other.json")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "model mismatch" in err[-1]
    assert main(["audit", str(tmp_path / "missing.json")]) == 1
    assert "no such file" in capsys.readouterr().err

    # The run's own windows rebuild its KV: the widest window's own width and place give the token it committed.
    inputs = run_of(doc)
    prompt, generated, settings = list(inputs.prompt), list(inputs.generated), inputs.settings
    windows = windows_of(doc["windows"])
    assert inputs.windows == windows and inputs.max_width == 4  # draft max 3: widths 1..4
    assert windows  # a copy prompt: the n-gram source proposes
    w = max(windows, key=lambda v: len(v.proposal))
    place = len(w.proposal)  # the window's last row
    position = min(w.base + place + 1, w.canonical) - len(prompt)  # the token that row (or the last kept one) gave
    place = position - 1 + len(prompt) - w.base
    picks = audit_position(runtime, prompt, generated, position, len(w.proposal) + 1, settings.sampling, windows)
    assert picks[len(w.proposal)].places[place].token == generated[position]
    # An output altered on purpose, through the command's own steps: both KV prefixes tried, not explained.
    altered = list(generated)
    altered[4] = next(t for t in range(1000, 2000) if t != generated[4])
    assert audit_run(runtime, replace(inputs, generated=tuple(altered)), 4) == 0
    out = capsys.readouterr().out
    assert "as the run's windows built it" in out and f"verdict: {NOT_EXPLAINED}" in out
    assert out.count("(with that KV: " + NOT_EXPLAINED) == 1
