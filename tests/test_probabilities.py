"""Per-row probabilities (issue 15): the pure summary on tiny logits, then real runs on the bundled model.

No test expects the model's particular words: proposals follow the target's own
continuation (``Follower``) or are made wrong on purpose, and every figure is compared
with a separate decode of the same prefix on the same model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inspector.engine.probabilities import DEFAULT_NEAR_TIE_MARGIN, SAMPLER, SOFTMAX, summarise_rows
from inspector.engine.records import COMMIT, PREFILL, STEP
from inspector.engine.settings import SamplingSettings
from inspector.receipts.document import SCHEMA_VERSION, load_document, validate_document, version_note
from inspector.session.document import build_document
from inspector.session.record_from_file import record_from_autosave, record_from_document
from inspector.session.session_record import SessionRecord
from tests.scenarios import ALTERNATE, Follower

V1_FILE = Path(__file__).parent / "data" / "receipts-v1.json"
PROMPT = "Repeat exactly: the quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog."


def softmax(row) -> np.ndarray:
    x = np.asarray(row, dtype=np.float64)
    p = np.exp(x - x.max())
    return p / p.sum()


# -- the summary on tiny logits --------------------------------------------------------------------

def test_a_rows_top_five_are_sorted_by_probability_and_its_figures_match_a_full_softmax():
    logits = np.array([[0.0, 3.0, 1.0, 2.5, -1.0, 0.5, 2.0, 0.1]], dtype=np.float32)
    w = summarise_rows(logits, (), (1,))
    p = softmax(logits[0])
    assert w.basis == SOFTMAX
    assert w.top_tokens[0] == (1, 3, 6, 2, 5)
    assert list(w.top_p[0]) == sorted(w.top_p[0], reverse=True) and sum(w.top_p[0]) <= 1.0
    assert np.allclose(w.top_p[0], p[[1, 3, 6, 2, 5]], atol=1e-4)
    assert w.predicted_p[0] == pytest.approx(p[1], abs=1e-4)
    assert w.entropy[0] == pytest.approx(float(-(p * np.log(p)).sum()), abs=1e-4)
    assert w.margin[0] == pytest.approx(0.5, abs=1e-4)
    assert w.proposed_p == (None,) and w.proposed_rank == (None,)  # a plain step judges no proposal


def test_the_proposed_tokens_rank_counts_higher_logits_and_ties_go_to_the_lower_token_id():
    logits = np.zeros((3, 2000), dtype=np.float32)
    logits[:, 1500] = 5.0
    logits[:, 7] = 4.0
    logits[:, 900:910] = 3.0  # ten tokens tied at 3.0
    logits[:, 1999] = 1.0
    w = summarise_rows(logits, (1500, 905), (1500, 1500, 1500))
    assert w.proposed_rank[:2] == (1, 8)  # 1500, 7, then 900..904 before 905
    assert w.proposed_rank[2] is None  # the bonus row
    assert w.top_tokens[0] == (1500, 7, 900, 901, 902)
    w = summarise_rows(logits[:2], (1999,), (1500, 1500))
    assert w.proposed_rank[0] == 13


def test_the_top_five_search_over_blocks_agrees_with_a_full_sort_on_any_vocabulary_size():
    rng = np.random.default_rng(5)
    for n_vocab in (3, 6, 1024, 5000, 49152, 49153):
        logits = (rng.standard_normal((4, n_vocab)) * 4).astype(np.float32)
        w = summarise_rows(logits, (), logits.argmax(axis=1).tolist())
        ref = np.argsort(-logits, axis=1, kind="stable")[:, :5]
        assert [list(t) for t in w.top_tokens] == ref.tolist()


def test_ties_at_the_fifth_place_go_to_the_lower_ids_in_a_large_vocabulary():
    logits = np.zeros((2, 49152), dtype=np.float32)
    logits[:, 40000] = 9.0
    logits[:, [30001, 20002, 7003, 45004, 12005, 2006]] = 4.0  # six tied for places 2..7
    w = summarise_rows(logits, (45004,), (40000, 40000))
    assert w.top_tokens[0] == (40000, 2006, 7003, 12005, 20002)
    assert w.proposed_rank[0] == 7  # 40000, then 2006, 7003, 12005, 20002, 30001 before 45004


def test_a_row_with_hundreds_of_equal_logits_or_a_nan_still_gets_the_lowest_ids_first():
    logits = np.zeros((3, 5000), dtype=np.float32)  # row 0: all tied
    logits[1, 4000:] = 2.0  # row 1: a thousand tied at the top
    logits[2, 10] = np.nan  # row 2: a NaN among zeros, one clear top
    logits[2, 3000] = 1.0
    w = summarise_rows(logits, (), (0, 4000, 3000))
    assert w.top_tokens[0] == (0, 1, 2, 3, 4)
    assert w.top_tokens[1] == (4000, 4001, 4002, 4003, 4004)
    assert w.top_tokens[2][0] == 3000


def test_the_top_five_keeps_the_lowest_ids_first_among_ties_nans_and_minus_infinities_at_8192_tokens():
    logits = np.zeros((4, 8192), dtype=np.float32)  # eight 1024-logit blocks: the floor from their maxima
    logits[1, 5000:] = 2.0  # row 1: thousands tied at the top
    logits[2, 10] = np.nan  # row 2: a NaN in the first block, one clear top in another
    logits[2, 7000] = 1.0
    logits[3, :] = -np.inf  # row 3: five finite logits spread over three blocks
    logits[3, [8000, 3, 4000, 1030, 1029]] = [1.0, 1.0, 0.5, 0.5, 2.0]
    w = summarise_rows(logits, (), (0, 5000, 7000, 1029))
    assert w.top_tokens[0] == (0, 1, 2, 3, 4)
    assert w.top_tokens[1] == (5000, 5001, 5002, 5003, 5004)
    assert w.top_tokens[2][0] == 7000
    assert w.top_tokens[3] == (1029, 3, 8000, 1030, 4000)


def test_flat_and_minus_infinity_rows_have_the_entropy_of_their_finite_part():
    logits = np.full((2, 3000), -np.inf, dtype=np.float32)
    logits[0, :4] = 0.0  # four equal: entropy log 4
    logits[1] = 0.0
    logits[1, 2999] = -np.inf
    w = summarise_rows(logits, (), (0, 0))
    assert w.entropy[0] == pytest.approx(np.log(4), abs=1e-3)
    assert w.entropy[1] == pytest.approx(np.log(2999), abs=1e-3)
    assert w.top_p[0][:4] == (0.25, 0.25, 0.25, 0.25)


def test_the_sampler_basis_gives_the_tokens_the_chain_cuts_probability_zero():
    logits = np.array([[4.0, 3.0, 2.0, 1.0, 0.0, -1.0]], dtype=np.float32)
    s = SamplingSettings(temperature=0.7, top_k=3, top_p=1.0, min_p=0.0)
    w = summarise_rows(logits, (), (0,), s)
    assert w.basis == SAMPLER
    assert w.top_tokens[0] == (0, 1, 2, 3, 4) and w.top_p[0][3:] == (0.0, 0.0)
    assert sum(w.top_p[0]) == pytest.approx(1.0, abs=1e-3)
    assert w.margin[0] == pytest.approx(1.0)  # margins stay in logits


def test_a_probability_block_survives_its_json_form():
    logits = np.array([[0.0, 3.0, 1.0], [2.0, 0.0, 1.0]], dtype=np.float32)
    w = summarise_rows(logits, (1,), (1, 0), draft_q=(0.75,))
    from inspector.engine.probabilities import WindowProbabilities

    back = WindowProbabilities.from_json(json.loads(json.dumps(w.to_json())))
    assert back == w and back.row(0, (1,), (1, 0)).draft_q == 0.75 and back.row(1).draft_q is None


# -- real runs on the bundled model ----------------------------------------------------------------

@pytest.fixture
def alternating_run(make_generation, scheduler, chat_tokens):
    """A greedy run whose windows alternate a full accept and a sure first mismatch at index 1."""
    prompt = chat_tokens(PROMPT)
    g = make_generation(Follower(scheduler, ALTERNATE, prompt=prompt), prompt, max_new_tokens=20, draft_max=4)
    g.run()
    assert g.receipts, "the run verified no window"
    return g


def test_greedy_rows_give_accepted_tokens_rank_1_and_the_mismatched_proposal_a_lower_rank(alternating_run):
    mismatches = 0
    for r in alternating_run.receipts:
        p = r.probabilities
        # figures for the judged rows: through the first mismatch's row, or every row after a full accept
        judged = r.accepted_proposal_tokens + 1 if r.disposition == "first_mismatch" else r.verification_rows
        assert p is not None and p.basis == SOFTMAX and p.rows == judged, (r.disposition, p.rows, r.verification_rows)
        assert all(r.row_probabilities(i) is None for i in range(judged, r.verification_rows))
        for i in range(judged):
            row = r.row_probabilities(i)
            assert row.predicted == row.top[0][0], "a greedy row's prediction is its top-1 token"
            assert 0.0 <= row.predicted_p <= 1.0 and all(0.0 <= q <= 1.0 for _, q in row.top)
            tops = [q for _, q in row.top]
            assert tops == sorted(tops, reverse=True) and sum(tops) <= 1.0 + 5e-4  # five values rounded to 4 decimals
            assert row.margin >= 0.0 and row.entropy >= 0.0
        for i in range(r.accepted_proposal_tokens):
            assert r.row_probabilities(i).proposed_rank == 1
        if r.disposition == "first_mismatch":
            mismatches += 1
            row = r.row_probabilities(r.accepted_proposal_tokens)
            assert row.proposed_rank > 1 and row.proposed_p <= row.predicted_p
        if r.disposition == "full_accept":
            assert r.row_probabilities(r.verification_rows - 1).proposed is None  # the bonus row
    assert mismatches >= 1


def _step_figures(generation) -> dict[int, tuple[int, object]]:
    return {e.position: (e.token, e.probabilities) for e in generation.events if e.kind == STEP}


def _separate_plain_decode(scheduler, prompt, tokens, steps):
    """The one-row figures of each of the first ``steps`` generated tokens from a fresh session, on
    plain decoding's schedule: the first from the last row of a prefill of the whole prompt, then one
    decode per token of ``tokens`` (the prompt and the output), one by one."""
    def op(rt):
        sid = rt.open_session(None)
        try:
            pred = rt.prefill_predict(sid, prompt, 0)
            out = [rt.row_probabilities(1, (), (pred,))]
            for j in range(1, steps):
                pos = len(prompt) - 1 + j
                pred = rt.decode_rows(sid, (tokens[pos],), pos)
                out.append(rt.row_probabilities(1, (), pred))
            return out
        finally:
            rt.drop_session(sid)
    return scheduler.execute("reference", -1, op).value


def test_a_plain_steps_probabilities_equal_a_separate_plain_decode_of_the_same_prefix(
        make_generation, scheduler, chat_tokens):
    """Plain decoding's figures, the prefill's (its last row gives the first token) and every plain
    step's, equal those of a separate decode of the same prefix."""
    prompt = chat_tokens(PROMPT)
    g = make_generation(None, prompt, max_new_tokens=6)
    g.run()
    steps = _step_figures(g)
    # The first token comes from the prefill (its event carries the figures); each later one is a plain step's.
    prefill = [e for e in g.events if e.kind == PREFILL]
    assert [(e.token, e.position) for e in prefill] == [(g.generated[0], len(prompt))]
    assert len(steps) == len(g.generated) - 1 == g.plain_steps == g.decode_step
    assert len(prompt) not in steps
    steps[len(prompt)] = (prefill[0].token, prefill[0].probabilities)
    reference = _separate_plain_decode(scheduler, prompt, g.tokens, len(g.generated))
    assert len(reference) == len(g.generated)
    for j, ref in enumerate(reference):
        token, figures = steps[len(prompt) + j]
        assert token == g.generated[j]
        assert figures is not None and figures.top_tokens[0][0] == token
        # Same model and batch shapes in another KV sequence: the same arithmetic up to rounding. Tolerance
        # 1e-3 (values keep 4 significant digits); the top-5 sets agree except where two of them nearly tie.
        assert figures.top_tokens[0][0] == ref.top_tokens[0][0]
        assert np.allclose(figures.predicted_p, ref.predicted_p, atol=1e-3)
        assert np.allclose(sorted(figures.top_p[0]), sorted(ref.top_p[0]), atol=1e-3)
        assert np.allclose(figures.entropy, ref.entropy, atol=1e-3)


def test_committed_tokens_have_the_probabilities_of_plain_decoding_except_at_near_ties(
        make_generation, alternating_run, chat_tokens):
    prompt = chat_tokens(PROMPT)
    plain = make_generation(None, prompt, max_new_tokens=20)
    plain.run()
    baseline = _step_figures(plain)
    compared, parted = 0, False
    for r in alternating_run.receipts:
        for i, token in enumerate(r.committed_tokens):
            pos = r.base_position + i + 1
            if pos not in baseline:  # past the plain run's tokens: nothing later compares
                parted = True
                break
            if baseline[pos][0] != token:
                parted = True  # the streams parted (a near-tie under batch arithmetic): nothing later compares
                # ... which only a near-tie may do: plain decoding's own top two were that close there
                assert baseline[pos][1].margin[0] < DEFAULT_NEAR_TIE_MARGIN, (pos, baseline[pos][1].margin[0])
                break
            ref = baseline[pos][1]
            if ref.margin[0] < DEFAULT_NEAR_TIE_MARGIN:
                continue
            # A 5-row batch and a 1-row decode round differently: probabilities agree to 0.02.
            assert r.row_probabilities(i).predicted_p == pytest.approx(ref.predicted_p[0], abs=0.02)
            compared += 1
        if parted:
            break
    assert compared >= 5 or parted


def test_a_draft_sources_q_is_the_draft_models_softmax_at_that_position(make_generation, model_path, runtime,
                                                                        chat_tokens):
    from inspector.llama.runtime import LlamaRuntime
    from inspector.sources.draft import DraftModelSource

    prompt = chat_tokens(PROMPT)
    draft = LlamaRuntime(model_path, n_ctx=runtime.n_ctx, n_batch=64, n_seq_max=2)
    try:
        source = DraftModelSource(draft, runtime, draft_max=3)
        g = make_generation(source, prompt, max_new_tokens=8, draft_max=3)
        g.run()
        r = g.receipts[0]
        q = r.probabilities.draft_q
        assert q is not None and len(q) == r.proposal_token_count
        sid = draft.open_session(None)
        base = r.base_position  # the window's current token is the stream's token at this position
        draft.prefill(sid, g.tokens[:base], 0)
        current = g.tokens[base]
        for i, token in enumerate(r.proposal_token_ids):
            draft.decode_rows(sid, (current,), base + i)
            p = softmax(draft.row_logits(0))
            assert q[i] == pytest.approx(p[token], abs=1e-3)
            current = token
        source.close()
    finally:
        draft.close()


def test_turning_probabilities_off_writes_no_per_row_block_and_the_file_validates(
        make_generation, scheduler, runtime, chat_tokens, tmp_path):
    prompt = chat_tokens(PROMPT)
    g = make_generation(Follower(scheduler, ALTERNATE, prompt=prompt), prompt, max_new_tokens=10, draft_max=4,
                        probabilities=False)
    g.run()
    doc = build_document(g, runtime, prompt_text=PROMPT, templated_text=None, raw=False)
    validate_document(doc)
    assert doc["settings"]["probabilities"] is False
    assert all("probabilities" not in w for w in doc["windows"])
    assert all("probabilities" not in e for e in doc["events"])
    assert "turned off" in version_note(doc)


def test_a_runs_document_carries_the_blocks_and_reads_back_the_same(alternating_run, runtime, tmp_path):
    from inspector.receipts.document import write_document

    doc = build_document(alternating_run, runtime, prompt_text=PROMPT, templated_text=None, raw=False)
    assert doc["schema_version"] == SCHEMA_VERSION
    path = write_document(doc, tmp_path / "r.json")
    rec = record_from_document(load_document(path))
    assert [r.probabilities for r in rec.receipts] == [r.probabilities for r in alternating_run.receipts]
    assert all(e.kind != COMMIT or e.probabilities is None for e in rec.events)


def test_a_version_1_file_still_opens_and_says_which_version_it_is():
    doc = load_document(V1_FILE)
    assert doc["schema_version"] == 1 and "v1" in version_note(doc)
    rec = record_from_document(doc)
    assert rec.receipts and all(r.probabilities is None for r in rec.receipts)
    assert rec.receipts[0].row_probabilities(0) is None


def test_the_session_record_gives_each_committed_token_its_rows_figures(make_generation, scheduler, chat_tokens):
    prompt = chat_tokens(PROMPT)
    plan = ((3, None), None, (3, 1))  # a window, a plain step, a window with a mismatch
    g = make_generation(Follower(scheduler, plan, prompt=prompt), prompt, max_new_tokens=12, draft_max=3)
    g.run()
    rec = SessionRecord()
    rec.extend(g.receipts)
    rec.extend(g.events)
    assert rec.tokens and any(t.window is None for t in rec.tokens)
    for info in rec.tokens:
        row = rec.token_probabilities(info)
        assert row is not None and row.predicted == info.token and row.proposed == info.proposed


# -- headless ------------------------------------------------------------------------------------

def test_run_events_show_p_and_rank_and_view_prints_a_window_row_by_row(tmp_path):
    from tests.test_cli import cli

    out, auto = tmp_path / "r.json", tmp_path / "r.jsonl"
    r = cli("run", "--example", "copy-with-corrections", "--max-tokens", "16", "--draft-max", "4", "--quiet",
            "--events", "--receipts", out, "--autosave", auto)
    assert r.returncode == 0, r.stderr
    commits = [line for line in r.stdout.splitlines() if " commit " in line]
    assert commits and all(" p " in line for line in commits)
    accepted = [line for line in commits if line.rstrip().endswith("accepted")]
    assert all(" rank 1 " in line + " " for line in accepted)  # greedy: an accepted token is the top-1
    doc = load_document(out)
    window = doc["windows"][0]
    assert window["probabilities"]["top_token_texts"][0][0] == window["verification_row_prediction_texts"][0]
    v = cli("view", out, "--window", window["window_index"])
    assert v.returncode == 0, v.stderr
    rows = [line for line in v.stdout.splitlines() if line.strip().startswith("row ")]
    assert len(rows) == window["verification_rows"]
    judged = len(window["probabilities"]["predicted_p"])
    assert all("margin" in line and "top:" in line for line in rows[:judged])
    assert not any("margin" in line for line in rows[judged:])  # after the first mismatch: never judged
    assert f"schema v{SCHEMA_VERSION}" in v.stdout
    missing = cli("view", out, "--window", 999)
    assert missing.returncode != 0 and "no window 999" in missing.stderr
    rec = record_from_autosave(auto)  # the autosave carries the blocks too
    assert rec.receipts and all(r.probabilities is not None for r in rec.receipts)
    assert all(rec.token_probabilities(t) is not None for t in rec.tokens)


def test_view_of_a_version_1_file_prints_its_rows_without_figures_and_names_the_version():
    from tests.test_cli import cli

    v = cli("view", V1_FILE, "--window", 1)
    assert v.returncode == 0, v.stderr
    assert "schema v1" in v.stdout and "no probability figures" in v.stdout


def test_no_probabilities_on_the_command_line_leaves_the_blocks_out_of_both_files(tmp_path):
    from tests.test_cli import cli

    out, auto = tmp_path / "r.json", tmp_path / "r.jsonl"
    r = cli("run", "--example", "copy-exact", "--max-tokens", "12", "--quiet", "--no-probabilities",
            "--receipts", out, "--autosave", auto)
    assert r.returncode == 0, r.stderr
    doc = load_document(out)  # validates
    assert doc["settings"]["probabilities"] is False
    assert '"probabilities": {' not in out.read_text() and '"probabilities": {' not in auto.read_text()
    rec = record_from_autosave(auto)
    assert all(r.probabilities is None for r in rec.receipts)
