"""Tree windows (issue 40): a proposal of several branches verified in one batch.

The pure rules (shape, branches, the walk) on tiny token lists; then the real model: trees built
from the target's own continuation (``TreeFollower``: the right continuation on a branch that is not
the first, a surely rejected token on the others), so windows accept from a second branch whatever
the model says. Every window's KV length is checked against its canonical position
(``make_generation``).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import threading

import llama_cpp
import pytest

from inspector.engine import Fault, FaultPlan, GenerationSettings, RuntimeScheduler
from inspector.engine.errors import DecodeAborted, RequestCancelled
from inspector.engine.proposal import Proposal, validate_proposal
from inspector.engine.records import receipt_from_json
from inspector.engine.tree import (INVALID_TREE, branch_rows, children, depths, is_chain, leaves, row_branches,
                                   tree_shape_error, walk_tree)
from inspector.receipts import load_document, write_document
from inspector.receipts.consistency import InconsistentDocument, check_window
from inspector.session.document import build_document
from scenarios import (Follower, NoEndOfTurn, assert_same_greedy_output, plain_reference,
                       run_resuming_after_each_error, wrong_token)

COPY = "Copy this sentence twice: The library opens at nine and closes at five."
STORY = "Write two sentences about a lighthouse keeper."
MAX = 40

# A tree of 6 tokens: row 1 (a) and row 2 (b) under the root; row 3 under 1; rows 4, 5 under 2; row 6 under 5.
TOKENS = (10, 20, 11, 21, 22, 23)
PARENTS = (0, 0, 1, 2, 2, 5)


# -- the pure rules ---------------------------------------------------------------------------------

def test_rows_know_their_depth_children_and_leaves():
    assert depths(PARENTS) == [0, 1, 1, 2, 2, 2, 3]
    assert children(PARENTS) == [[1, 2], [3], [4, 5], [], [], [6], []]
    assert leaves(PARENTS) == [3, 4, 6]


def test_each_row_is_on_the_branches_of_the_leaves_below_it():
    assert row_branches(PARENTS) == [(0, 1, 2), (0,), (1, 2), (0,), (1,), (2,), (2,)]


def test_a_branch_runs_from_the_roots_child_to_its_leaf():
    assert branch_rows(PARENTS, 6) == [2, 5, 6]
    assert branch_rows(PARENTS, 0) == []


def test_the_walk_follows_the_child_each_prediction_names():
    # Row 0 predicts 20 (row 2), row 2 predicts 22 (row 5), row 5 predicts 23 (row 6), row 6 predicts 99.
    predictions = [20, 0, 22, 0, 0, 23, 99]
    w = walk_tree(TOKENS, PARENTS, predictions)
    assert w.accepted_rows == (2, 5, 6)
    assert w.branch_rows == (2, 5, 6) and w.leaf == 6 and w.branch == 2


def test_the_walk_stops_at_the_first_row_no_child_matches_and_keeps_a_branch_through_it():
    predictions = [20, 0, 77, 0, 0, 0, 0]  # row 2 predicts 77: no child has it
    w = walk_tree(TOKENS, PARENTS, predictions)
    assert w.accepted_rows == (2,)
    assert w.branch_rows == (2, 4) and w.branch == 1  # continued by the first child


def test_a_root_prediction_no_child_has_accepts_nothing_and_keeps_the_first_branch():
    w = walk_tree(TOKENS, PARENTS, [5, 0, 0, 0, 0, 0, 0])
    assert w.accepted_rows == () and w.branch_rows == (1, 3) and w.branch == 0


def test_a_chain_is_the_one_branch_tree():
    assert is_chain((0, 1, 2)) and not is_chain(PARENTS)
    w = walk_tree((5, 6, 7), (0, 1, 2), [5, 6, 9, 0])
    assert w.accepted_rows == (1, 2) and w.branch_rows == (1, 2, 3)


@pytest.mark.parametrize("parents, why", [
    ((0, 0, 3, 2, 2, 5), "parent row 3"),  # a parent after its child
    ((0, 0, 1, 2, 2), "5 parents for 6 tokens"),
    ((0, -1, 1, 2, 2, 5), "parent row -1"),
])
def test_parents_that_are_not_a_tree_are_named(parents, why):
    assert why in tree_shape_error(TOKENS, parents)


def test_two_children_with_one_token_are_not_a_tree():
    assert "two children with token 10" in tree_shape_error((10, 10), (0, 0))


def test_an_invalid_tree_or_one_with_too_many_branches_is_discarded():
    ok = Proposal(b"t", TOKENS, parents=PARENTS)
    assert validate_proposal(ok, 8, 100, 0.0, 1.0, max_branches=3) is None
    assert validate_proposal(ok, 8, 100, 0.0, 1.0, max_branches=2) == INVALID_TREE
    bad = Proposal(b"t", TOKENS, parents=(0, 0, 3, 2, 2, 5))
    assert validate_proposal(bad, 8, 100, 0.0, 1.0, max_branches=8) == INVALID_TREE
    assert validate_proposal(ok, 5, 100, 0.0, 1.0, max_branches=8) == "invalid_token_count"  # nodes count


# -- on the real model ------------------------------------------------------------------------------

class TreeFollower(Follower):
    """Proposes trees from the target's own plain continuation ``ref``: a decoy branch first (a surely
    rejected first token, then ``ref[1:3]``), then the right branch (``ref[:k]``) with, under its first
    token, a second decoy child; every ``plan_wrong``-th window the right branch gets a surely rejected
    token at depth 3 (a mismatch inside the kept branch). Windows accept from the second branch
    whatever the model says."""

    name = "tree-follow"

    def __init__(self, scheduler, prompt, k: int = 4, plan_wrong: int = 3) -> None:
        super().__init__(scheduler, ((k, None),), prompt=prompt)
        self.k = k
        self.plan_wrong = plan_wrong

    def propose(self, request):
        self.queries += 1
        ref, second = self.continuation(request.tokens)
        cap = request.max_proposal_tokens
        if len(ref) < 3 or cap < 6:
            return None
        rt = self.runtime
        decoy = wrong_token(rt, ref[0], second[0])
        decoy2 = wrong_token(rt, ref[1], second[1])
        k = min(self.k, len(ref), cap - 4)
        right = list(ref[:k])
        if self.queries % self.plan_wrong == 0 and k >= 3:
            right[2] = wrong_token(rt, ref[2], second[2])
        tokens = [decoy, ref[1], ref[2]]  # rows 1-3: the decoy branch
        parents = [0, 1, 2]
        tokens.append(right[0])  # row 4
        parents.append(0)
        tokens.append(decoy2)  # row 5: a decoy child of row 4
        parents.append(4)
        prev = 4
        for t in right[1:]:
            tokens.append(t)
            parents.append(prev)
            prev = len(tokens)
        return Proposal(b"tree:%d" % self.queries, tuple(tokens), parents=tuple(parents))


class DecodeCounter:
    """Records, for each lock operation, its kind and the ``llama_decode`` calls it made."""

    def __init__(self, scheduler) -> None:
        self.runtime = scheduler.runtime._rt if isinstance(scheduler.runtime, NoEndOfTurn) else scheduler.runtime
        self.last = self.runtime.decode_calls
        self.ops: list[tuple[str, int]] = []

    def __call__(self, op) -> None:
        now = self.runtime.decode_calls
        self.ops.append((op.kind, now - self.last))
        self.last = now


@pytest.fixture(scope="module")
def target(runtime):
    """The target with end-of-generation banned (``NoEndOfTurn``): every run goes on to ``MAX`` tokens,
    so the windows a test needs exist whatever the model says."""
    return RuntimeScheduler(NoEndOfTurn(runtime))


@pytest.fixture(scope="module")
def tree_run(target, chat_tokens):
    """(prompt tokens, the finished tree run, decode counts per lock operation) per prompt."""
    from inspector.engine import Generation

    cache = {}

    def run(prompt):
        if prompt not in cache:
            tokens = chat_tokens(prompt)
            counter = DecodeCounter(target)
            target.add_listener(counter)
            try:
                g = Generation(target, TreeFollower(target, tokens), tokens, GenerationSettings(max_new_tokens=MAX))
                g.run()
                g.close()
            finally:
                target.remove_listener(counter)
            cache[prompt] = (tokens, g, counter.ops)
        return cache[prompt]

    return run


@pytest.mark.parametrize("prompt", [COPY, STORY], ids=["copy", "story"])
def test_greedy_output_with_tree_windows_equals_plain_decoding(prompt, tree_run, target):
    tokens, g, _ = tree_run(prompt)
    trees = [r for r in g.receipts if r.tree is not None]
    assert len(trees) >= 3, [r.disposition for r in g.receipts]
    plain, _ = plain_reference(target, tokens, len(g.generated))
    assert len(g.generated) == MAX
    assert_same_greedy_output(target, tokens, plain, g.generated)
    # Windows accepted from the second branch (the decoy is the first): the walk chose among branches.
    assert any(r.accepted_proposal_tokens >= 2 and r.tree.branch_rows[0] == 4 for r in trees)


def test_a_tree_window_is_one_llama_decode_and_its_receipt_describes_the_kept_branch(tree_run):
    _, g, ops = tree_run(COPY)
    verifies = [n for kind, n in ops if kind == "verify"]
    assert verifies and set(verifies) == {1}, ops
    for r in (r for r in g.receipts if r.tree is not None):
        tree = r.tree
        assert r.proposal_token_ids == tuple(tree.node_token_ids[i - 1] for i in tree.branch_rows)
        assert r.verification_row_predictions == tuple(tree.row_predictions[i] for i in (0, *tree.branch_rows))
        assert r.verification_rows == 1 + len(tree.branch_rows) < r.decoded_rows == 1 + len(tree.node_token_ids)
        assert r.position_after_verification == r.base_position + r.verification_rows
        check_window(r.to_json(), "w", None)


def test_a_tampered_tree_is_refused_by_the_consistency_check(tree_run):
    _, g, _ = tree_run(COPY)
    w = next(r for r in g.receipts if r.tree is not None).to_json()
    w["tree"]["branch_rows"] = [1, 2]
    with pytest.raises(InconsistentDocument, match="branch"):
        check_window(w, "windows/0", None)


def test_tree_receipts_are_written_validated_and_read_back(tree_run, runtime, tmp_path):
    tokens, g, _ = tree_run(COPY)
    doc = build_document(g, runtime, prompt_text=COPY, templated_text=None, raw=False)
    loaded = load_document(write_document(doc, tmp_path / "tree.json"))
    back = [receipt_from_json(w) for w in loaded["windows"]]
    assert [r.tree for r in back] == [r.tree for r in g.receipts]


def test_a_one_branch_tree_gives_the_chains_receipts(make_generation, chat_tokens, target):
    tokens = chat_tokens(COPY)

    class AsTree(Follower):
        def propose(self, request):
            p = super().propose(request)
            return None if p is None else Proposal(p.decision_id, p.token_ids, parents=tuple(range(len(p.token_ids))))

    chain = make_generation(Follower(target, ((4, None), (4, 1)), prompt=tokens), tokens, on=target,
                            max_new_tokens=24)
    chain.run()
    tree = make_generation(AsTree(target, ((4, None), (4, 1)), prompt=tokens), tokens, on=target, max_new_tokens=24)
    tree.run()
    def strip(r):
        d = r.to_json()
        for k in [k for k in d if k.endswith("_us") or k in ("session_id", "request_id", "probabilities")]:
            del d[k]
        return d
    assert [strip(r) for r in tree.receipts] == [strip(r) for r in chain.receipts]
    assert all(r.tree is None for r in tree.receipts)


@pytest.mark.parametrize("fault", ["cancel@W:2", "callback_error@W:1", "trim_failure"])
def test_faults_in_a_tree_window_repair_before_the_error_and_resume_gives_the_same_output(
        fault, make_generation, chat_tokens, target, tree_run):
    tokens, reference, _ = tree_run(COPY)
    w = next(r.window_index for r in reference.receipts
             if r.tree is not None and r.canonical_prediction_count >= 3 and r.trimmed_rows > 0)
    plan = FaultPlan([Fault.parse(fault.replace("W", str(w)) if "W" in fault else f"{fault}@{w}")])
    g = make_generation(TreeFollower(target, tokens), tokens, on=target, max_new_tokens=MAX, faults=plan)
    errors = run_resuming_after_each_error(g)
    assert plan.fired and len(errors) == 1
    assert_same_greedy_output(target, tokens, reference.generated, g.generated)


def test_a_cancelled_tree_decode_keeps_nothing_and_returns_the_borrowed_sequences(runtime, scheduler, chat_tokens):
    tokens = chat_tokens(COPY)
    stop = threading.Event()
    stop.set()

    def op(rt):
        sid = rt.open_session()
        try:
            rt.prefill(sid, tokens[:-1], 0)
            base = len(tokens) - 1
            with pytest.raises(DecodeAborted):
                rt.decode_tree(sid, (tokens[-1], 5, 6, 7, 8), (0, 0, 1, 2), base, stop)
            borrowed = [int(llama_cpp.llama_memory_seq_pos_max(rt.mem, s))
                        for s in range(rt.n_seq_max, rt.n_seq_max + rt.tree_branches - 1)]
            rt.trim(sid, base)
            return borrowed, rt.kv_length(sid), base
        finally:
            rt.drop_session(sid)

    borrowed, kv, base = scheduler.execute("test", -1, op).value
    assert borrowed == [-1] * len(borrowed) and kv == base


def test_cancel_while_verifying_a_tree_leaves_the_kv_canonical(make_generation, chat_tokens, target, tree_run):
    tokens, reference, _ = tree_run(STORY)
    source = TreeFollower(target, tokens)
    inner = source.propose
    holder = {}

    def propose_then_cancel(request):
        p = inner(request)
        if p is not None and not holder.get("done"):
            holder["done"] = True
            holder["g"].cancel()
        return p

    source.propose = propose_then_cancel
    g = make_generation(source, tokens, on=target, max_new_tokens=MAX)
    holder["g"] = g
    with pytest.raises(RequestCancelled):
        g.run()
    assert g.kv_length() == g.canonical_position
    g.resume()
    g.run()
    assert_same_greedy_output(target, tokens, reference.generated, g.generated)


def test_a_tree_with_more_branches_than_the_context_takes_is_discarded_not_run(make_generation, chat_tokens,
                                                                              runtime):
    tokens = chat_tokens(COPY)
    n = runtime.tree_branches + 1

    class Wide:
        name = "wide"

        def propose(self, request):
            return Proposal(b"wide", tuple(range(100, 100 + n)), parents=(0,) * n)

        def report(self, receipt):
            pass

        def discard(self, decision_id, reason):
            pass

    g = make_generation(Wide(), tokens, max_new_tokens=16, draft_max=16)
    g.run()
    assert g.discards and g.discards[0].reason == INVALID_TREE  # later ones: the cap shrinks near the end
    assert not g.receipts


# -- the suffix source's trees --------------------------------------------------------------------

def test_the_suffix_tree_takes_continuations_best_first_by_path_probability():
    from inspector.sources.suffix.tree import TokenStream, best_first_tree, match_ends

    # After "1 2": 3 three times (then 4 twice, 5 once), 7 once.
    st = TokenStream([1, 2, 3, 4, 9, 1, 2, 3, 5, 9, 1, 2, 3, 4, 9, 1, 2, 7])
    ends = match_ends(st.a, st.end, [1, 2], 2)
    tokens, parents, probs = best_first_tree(st.a, ends, 0.2, 6, 3)
    assert tokens == [3, 4, 9, 7, 5, 9] and parents == [0, 1, 2, 0, 1, 5]
    assert probs == pytest.approx([0.75, 0.5, 0.5, 0.25, 0.25, 0.25])
    assert best_first_tree(st.a, ends, 0.3, 6, 3)[0] == [3, 4, 9]  # below min_prob: left out


@pytest.mark.parametrize("prompt", [COPY, STORY], ids=["copy", "story"])
def test_suffix_trees_give_plain_decodings_output(prompt, make_generation, chat_tokens, target):
    from inspector.sources.suffix.source import SuffixConfig, SuffixSource

    tokens = chat_tokens(prompt)
    config = SuffixConfig(tree_nodes=8, length="score", max_cached_tokens=0, min_token_prob=0.0)
    g = make_generation(SuffixSource(config=config), tokens, on=target, max_new_tokens=MAX)
    g.run()
    plain, _ = plain_reference(target, tokens, MAX)
    assert_same_greedy_output(target, tokens, plain, g.generated)
    assert g.receipts


def test_the_suffix_source_proposes_a_tree_where_a_match_has_several_continuations():
    from inspector.engine.proposal import ProposalRequest
    from inspector.sources.suffix.source import SuffixConfig, SuffixSource

    # "1 2" went on with 3 twice and 4 once; the tokens before each "1 2" differ, so that is the longest match.
    stream = [10, 1, 2, 3, 11, 1, 2, 4, 12, 1, 2, 3, 13, 1, 2]
    request = ProposalRequest(stream, len(stream), 0, 8, float("inf"))
    tree = SuffixSource(config=SuffixConfig(tree_nodes=6, length="score", max_cached_tokens=0,
                                            min_token_prob=0.2)).propose(request)
    chain = SuffixSource(config=SuffixConfig(length="score", max_cached_tokens=0, min_token_prob=0.2)).propose(request)
    assert chain.parents is None and tree.is_tree
    assert chain.token_ids[0] == tree.token_ids[0] == 3 and 4 in tree.token_ids
    assert tree.parents[tree.token_ids.index(4)] == 0  # 4 is the other child of the current token


# -- in the window ----------------------------------------------------------------------------------

def test_the_branches_text_puts_the_kept_branch_first_with_its_accepted_tokens_marked():
    from inspector.engine.records import TreeReceipt
    from inspector.gui.windows.tree_text import ACCEPTED_COLOR, tree_branches_html, tree_disposition, tree_summary

    tree = TreeReceipt(TOKENS, PARENTS, (20, 0, 22, 0, 0, 77, 0), (2, 5, 6))
    assert tree_summary(tree, 2) == "7 rows in one batch · 3 branches · kept branch 3 (rows 2, 5, 6), 2 accepted"
    assert tree_disposition("full_accept", tree) == "full_accept · br 3/3"  # one branch, whole; not the tree
    lines = tree_branches_html(tree, 2, lambda t: f"t{t}").split("<br>")
    assert lines[0].startswith("✓ ") and lines[0].count(ACCEPTED_COLOR) == 2 and "t23" in lines[0]
    assert len(lines) == 3 and "t10" in lines[1] and "t21" in lines[2]


def _tree_run_shown(qtbot, runtime, tmp_path, tree_run):
    """A tree run of COPY (its ``Generation``) and a window showing its receipts document."""
    from test_gui_support import make_window, open_receipts

    _, g, _ = tree_run(COPY)
    path = write_document(build_document(g, runtime, prompt_text=COPY, templated_text=None, raw=False),
                          tmp_path / "tree.json")
    w = make_window(qtbot, runtime, tmp_path)
    assert open_receipts(qtbot, w, path) == ""
    return g, w


def test_the_receipt_pane_shows_a_tree_windows_branches(qtbot, runtime, tmp_path, tree_run):
    from inspector.gui.windows.detail import WindowDetail
    from test_gui_support import part

    g, w = _tree_run_shown(qtbot, runtime, tmp_path, tree_run)
    window_detail = part(w, WindowDetail)
    window = next(r.window_index for r in g.receipts if r.tree is not None)
    window_detail.select_window(window)
    text = window_detail.fields.toPlainText()
    assert "rows in one batch" in text and "✓" in text
    # The Windows table says which branch a tree window's disposition is about (the trial read "full_accept",
    # "8 tree", acc 2: the tree looked accepted whole).
    m = window_detail.model
    cells = {int(m.index(i, 0).data()): m.index(i, 1).data() for i in range(m.rowCount())}
    for r in g.receipts:
        if r.tree is not None:
            assert cells[r.window_index].startswith(f"{r.disposition} · br ") and "/" in cells[r.window_index]
        else:
            assert cells[r.window_index] == r.disposition


def test_compare_counts_tree_windows_and_the_rows_verified_per_token(target, chat_tokens, tmp_path):
    from inspector.bench.compare import run_compare
    from inspector.bench.compare_result import CompareConfig, format_compare, write_compare_csv

    tokens = chat_tokens(COPY)
    configs = [CompareConfig("plain", "none", 0), CompareConfig("ngram chain", "ngram", 8, {"n_min": 1}),
               CompareConfig("ngram tree", "ngram", 8, {"n_min": 1, "branches": 3})]
    result = run_compare(target, tokens, configs, GenerationSettings(max_new_tokens=MAX), keep_runs=True)
    for row, g in zip(result.rows, result.runs):
        rows = sum(1 + (len(r.tree.node_token_ids) if r.tree else r.proposal_token_count) for r in g.receipts)
        assert row.rows_per_token == pytest.approx((rows + g.plain_steps) / len(g.generated))
        assert row.tree_windows == sum(r.tree is not None for r in g.receipts)
    assert result.rows[1].tree_windows == 0 and result.rows[2].tree_windows > 0
    assert f"tree: ngram tree: {result.rows[2].tree_windows} of " in format_compare(result)
    csv_rows = list(csv.DictReader(write_compare_csv(result, tmp_path / "c.csv").open()))
    assert [int(r["tree_windows"]) for r in csv_rows] == [r.tree_windows for r in result.rows]


def test_run_turns_says_tree_or_chain_for_each_turn_and_for_the_conversation(tmp_path):
    from tests.test_cli import cli

    turns = tmp_path / "t.json"
    turns.write_text(json.dumps([COPY, "Copy it once more."]))
    r = cli("run", "--turns", turns, "--max-tokens", "40", "--quiet", "--source", "ngram", "--ngram-min", "1",
            "--source-option", "branches=3", "--receipts", tmp_path / "r.json")
    assert r.returncode == 0, r.stderr
    doc = load_document(tmp_path / "r.json")
    per_turn = [sum(1 for w in t["windows"] if w.get("tree")) for t in doc["turns"]]
    assert per_turn[0] > 0  # "at nine ... at five": the 1-gram "at" has two followers
    lines = [line for line in r.stdout.splitlines() if line.startswith("tree or chain:")]
    assert [int(line.split()[3]) for line in lines] == [n for n in per_turn if n]
    total = next(line for line in r.stdout.splitlines() if line.startswith("trees, every turn:"))
    assert int(total.split()[3]) == sum(per_turn)


def test_the_tuner_replays_tree_windows_as_the_real_run_verified_them(make_generation, chat_tokens, target,
                                                                          runtime):
    from inspector.bench.tune import Recording, replay
    from inspector.sources.ngram import NgramSource

    tokens = chat_tokens(COPY)
    g = make_generation(NgramSource(n_min=1, branches=3), tokens, on=target, max_new_tokens=MAX)
    g.run()
    # The run's own output as the recording: every prediction of its windows is in it (a near-tie may part
    # it from plain decoding's, which the other tests check within the tie's margin).
    rec = Recording(tuple(tokens), tuple(g.generated), MAX, runtime.n_batch, runtime.n_ctx)
    windows, plain_steps, _ = replay(NgramSource(n_min=1, branches=3), rec, 8)
    assert [(w.decode_step, w.proposal, w.accepted, w.committed, w.decoded_rows) for w in windows] == \
        [(r.decode_step, r.proposal_token_ids, r.accepted_proposal_tokens, r.canonical_prediction_count,
          r.decoded_rows) for r in g.receipts]
    assert plain_steps == g.plain_steps and any(r.tree is not None for r in g.receipts)


# -- the Tree tab: the tree drawn, and Step token walking it ----------------------------------------

def _tiny_tree(predictions, branch_rows):
    from inspector.engine.records import TreeReceipt

    return TreeReceipt(TOKENS, PARENTS, predictions, branch_rows)


def test_the_drawing_puts_the_kept_branch_on_top_and_colours_the_walk():
    from inspector.gui.look import outcomes as O
    from inspector.gui.windows.tree_drawing import NOT_REACHED, REJECTED, ROOT, tree_layout

    # Row 0 predicts 20 (row 2), row 2 predicts 22 (row 5), row 5 predicts 23 (row 6): all three accepted,
    # row 6's prediction (99) is the bonus. Rows 1 and 4 were rejected, row 3 (under row 1) never reached.
    tree = _tiny_tree((20, 0, 22, 0, 0, 23, 99), (2, 5, 6))
    boxes = [(b.row, b.depth, b.lane, b.parent, b.token, b.kind) for b in tree_layout(tree, 3, 7, 4)]
    assert boxes == [(0, 0, 0, None, 7, ROOT), (1, 1, 1, 0, 10, REJECTED), (2, 1, 0, 0, 20, O.ACCEPTED),
                     (3, 2, 1, 1, 11, NOT_REACHED), (4, 2, 2, 2, 21, REJECTED), (5, 2, 0, 2, 22, O.ACCEPTED),
                     (6, 3, 0, 5, 23, O.ACCEPTED), (-1, 4, 0, 6, 99, O.BONUS)]


def test_a_walk_that_stops_inside_the_tree_ends_in_the_correction_and_step_token_marks_each_node():
    from inspector.gui.look import outcomes as O
    from inspector.gui.windows.tree_drawing import NOT_REACHED, REJECTED, held_box, tree_layout, walk_accepted

    # Row 0 predicts 20 (row 2), row 2 predicts 77: neither child (21, 22) is it; the kept branch goes on
    # by first children (row 4). The correction 77 is drawn after row 2.
    tree = _tiny_tree((20, 0, 77, 0, 0, 0, 0), (2, 4))
    boxes = tree_layout(tree, 1, 7, 2)
    kinds = {b.row: b.kind for b in boxes}
    # The kept branch on lane 0 goes on past the mismatch (row 4): the correction takes lane 1 under it.
    assert {b.row: (b.depth, b.lane) for b in boxes} == {0: (0, 0), 1: (1, 2), 2: (1, 0), 3: (2, 2), 4: (2, 0),
                                                         5: (2, 3), 6: (3, 3), -1: (2, 1)}
    assert kinds == {0: "current token", 1: REJECTED, 2: O.ACCEPTED, 3: NOT_REACHED, 4: REJECTED, 5: REJECTED,
                     6: NOT_REACHED, -1: O.CORRECTION}
    assert walk_accepted(tree) == 1
    assert [held_box(tree, row, 1) for row in (0, 1)] == [2, -1]  # row 0 commits node 2, row 1 the correction
    assert walk_accepted(_tiny_tree((20, 0, 22, 0, 0, 23, 99), (2, 5, 6))) == 3


def test_the_tree_tab_draws_a_tree_windows_nodes_and_says_when_a_window_was_a_chain(qtbot, runtime, tmp_path,
                                                                                      tree_run):
    from inspector.gui.look import outcomes as O
    from inspector.gui.windows.tree_drawing import CHAIN_TEXT, LANE_H, NO_RECEIPT_TEXT

    from inspector.gui.windows.detail import WindowDetail
    from test_gui_support import part

    g, w = _tree_run_shown(qtbot, runtime, tmp_path, tree_run)
    window_detail = part(w, WindowDetail)
    detail = window_detail
    tree_receipt = next(r for r in g.receipts if r.tree is not None and r.accepted_proposal_tokens >= 2)
    detail.select_window(tree_receipt.window_index)
    detail.detail_tabs.setCurrentWidget(detail.tree_tab)
    drawing = detail.tree_tab.drawing
    assert len(drawing.boxes) == tree_receipt.tree.rows + 1  # every row, and the correction or bonus
    assert sum(b.kind == O.ACCEPTED for b in drawing.boxes) == tree_receipt.accepted_proposal_tokens
    assert drawing.sizeHint().width() > 100 and drawing.sizeHint().height() >= 2 * LANE_H  # two branches at least
    assert not drawing.grab().toImage().isNull()
    accepted_box = next(b for b in drawing.boxes if b.kind == O.ACCEPTED)
    assert f"row {accepted_box.row}, KV position {tree_receipt.base_position + accepted_box.depth}" in \
        drawing.tooltip_of(accepted_box)
    # The same window as a chain (every window of this run is a tree), then no receipt at all.
    detail.tree_tab.show_receipt(dataclasses.replace(tree_receipt, tree=None), None, str)
    assert detail.tree_tab.summary.text() == CHAIN_TEXT and drawing.boxes == []
    detail.tree_tab.show_receipt(None, None, str)
    assert detail.tree_tab.summary.text() == NO_RECEIPT_TEXT and drawing.boxes == []


def test_step_token_in_a_tree_window_sees_the_tree_and_marks_the_node_each_row_commits(target, chat_tokens):
    from inspector.engine import Generation, GenerationObserver
    from inspector.gui.engine_thread.stepping import TokenHold
    from inspector.gui.windows.tree_drawing import held_box, walk_accepted

    tokens = chat_tokens(COPY)
    infos: list[dict] = []
    g = None

    class Holds(GenerationObserver):
        def before_commit(self, window, row, token, position):
            hold.on_hold(window, row, token, position)

    hold = TokenHold(lambda ids: None, infos.append, lambda: g)
    g = Generation(target, TreeFollower(target, tokens), tokens, GenerationSettings(max_new_tokens=MAX),
                   observer=Holds())
    g.run()
    g.close()
    receipt = next(r for r in g.receipts if r.tree is not None and r.accepted_proposal_tokens >= 2
                   and r.canonical_prediction_count == r.accepted_proposal_tokens + 1)  # not cut by max tokens
    held = [i for i in infos if i["window"] == receipt.window_index]
    assert [i["row"] for i in held] == list(range(receipt.canonical_prediction_count))
    assert all(i["tree"] == receipt.tree for i in held)
    accepted = walk_accepted(held[0]["tree"])
    assert accepted == receipt.accepted_proposal_tokens
    # Each commit marks the node whose token it commits: the accepted path's, then the correction or bonus
    # (the target's prediction at the last accepted row), drawn as the box of row -1.
    tree = receipt.tree
    marked = [held_box(tree, i["row"], accepted) for i in held]
    last = tree.branch_rows[accepted - 1]
    assert [i["token"] for i in held] == [tree.node_token_ids[m - 1] if m > 0 else tree.row_predictions[last]
                                          for m in marked]
    assert marked[-1] == -1 and len(held) == accepted + 1


# -- temperature > 0 --------------------------------------------------------------------------------

def sampled_tokens(scheduler, prompt, make_source=None, runs: int = 1000, max_new: int = 4):
    """Counters of the generated tokens at positions 0..max_new - 1 over ``runs`` seeded generations at
    temperature 0.8 (sample_match), and the runs' receipts."""
    from collections import Counter

    from inspector.engine import Generation, SamplingSettings

    counts = [Counter() for _ in range(max_new)]
    pairs: list[tuple[int, ...]] = []
    receipts = []
    for seed in range(runs):
        sampling = SamplingSettings(temperature=0.8, seed=seed)
        g = Generation(scheduler, None if make_source is None else make_source(), prompt,
                       GenerationSettings(max_new_tokens=max_new, draft_max=4, sampling=sampling,
                                          verification="sample_match"))
        g.run()
        g.close()
        for i, t in enumerate(g.generated):
            counts[i][t] += 1
        pairs.append(tuple(g.generated))
        receipts += g.receipts
    return counts, pairs, receipts


class PlainTree:
    """Trees from plain sampling's own statistics: under the current token, its two most frequent
    followers in the plain runs (two one-token branches: the cap is 2 at the first query of a
    4-token run)."""

    name = "plain-tree"

    def __init__(self, followers) -> None:
        self.followers = followers

    def propose(self, request):
        cur = request.tokens[-1]
        top = [t for t, _ in self.followers.get(cur, {}).most_common(2)]
        if len(top) < 2:
            return None
        if request.max_proposal_tokens < 2:
            return None
        return Proposal(b"pt", tuple(top), parents=(0, 0))

    def report(self, receipt):
        pass

    def discard(self, decision_id, reason):
        pass


@pytest.mark.slow
def test_sample_match_on_tree_windows_keeps_the_plain_sampling_distribution(scheduler, runtime):
    from collections import Counter, defaultdict

    from test_sampling import P_THRESHOLD, chi2_p_value

    prompt = runtime.tokenize("The", True, False)
    plain, pairs, _ = sampled_tokens(scheduler, prompt)
    followers: dict = defaultdict(Counter)
    for run in pairs:
        for a, b in zip(run, run[1:]):
            followers[a][b] += 1
    spec, _, receipts = sampled_tokens(scheduler, prompt, lambda: PlainTree(followers))
    trees = [r for r in receipts if r.tree is not None]
    assert len(trees) > 100 and any(r.accepted_proposal_tokens and r.tree.branch_rows[0] != 1 for r in trees)
    for position, (a, b) in enumerate(zip(plain, spec)):
        p = chi2_p_value(a, b)
        print(f"token {position}: chi-square p = {p:.4f}; plain top {a.most_common(3)}, tree top {b.most_common(3)}")
        assert p > P_THRESHOLD, f"token {position} histogram differs from plain sampling (p={p:.2e})"


# -- the n-gram source's trees ----------------------------------------------------------------------

def test_the_ngram_source_branches_where_a_match_went_on_with_other_tokens():
    from inspector.engine.proposal import ProposalRequest
    from inspector.sources.ngram import NgramSource

    # "9 1 2" went on with 7 8 (earlier) and 3 6 (most recent).
    stream = [5, 1, 2, 3, 4, 9, 1, 2, 7, 8, 9, 1, 2, 3, 6, 9, 1, 2]
    request = ProposalRequest(stream, 2, 0, 8, float("inf"))
    chain = NgramSource(n_min=2).propose(request)
    tree = NgramSource(n_min=2, branches=2).propose(request)
    assert chain.token_ids == (3, 6, 9, 1, 2) and chain.parents is None
    assert tree.token_ids == (3, 6, 9, 1, 7, 8, 9, 1) and tree.parents == (0, 1, 2, 3, 0, 5, 6, 7)


def test_ngram_trees_give_plain_decodings_output(make_generation, chat_tokens, target):
    """The copy prompt says "at nine ... at five": copying it, the 1-gram "at" has two followers, so
    the n-gram source branches whatever else the model writes."""
    from inspector.sources.ngram import NgramSource

    tokens = chat_tokens(COPY)
    g = make_generation(NgramSource(n_min=1, branches=3), tokens, on=target, max_new_tokens=MAX)
    g.run()
    plain, _ = plain_reference(target, tokens, MAX)
    assert_same_greedy_output(target, tokens, plain, g.generated)
    assert any(r.tree is not None for r in g.receipts)


def test_with_penalties_a_tree_runs_as_its_first_branch(make_generation, chat_tokens, target):
    from inspector.engine import SamplingSettings

    tokens = chat_tokens(COPY)
    source = TreeFollower(target, tokens)
    proposed = []
    inner = source.propose

    def propose(request):
        p = inner(request)
        proposed.append(p)
        return p

    source.propose = propose
    g = make_generation(source, tokens, on=target, max_new_tokens=12,
                        sampling=SamplingSettings(temperature=0.0, repeat_penalty=1.3))
    g.run()
    assert g.receipts and all(r.tree is None for r in g.receipts)
    first = next(p for p in proposed if p is not None)
    assert g.receipts[0].proposal_token_ids == first.token_ids[:3]  # the decoy branch: rows 1-3


def test_a_tree_run_says_what_its_first_branches_alone_would_have_committed(tree_run):
    from inspector.llama.cost_model import CostModel
    from inspector.session.tree_verdict import first_branch_outcome, tree_versus_chain

    _, g, _ = tree_run(COPY)
    trees = [r for r in g.receipts if r.tree is not None]
    # TreeFollower's first branch starts with a surely rejected token: alone it commits the correction only.
    assert {first_branch_outcome(r.tree) for r in trees} == {(1, 4)}
    versus = tree_versus_chain(g.receipts, CostModel((10.0, 12.0, 14.0, 16.0, 18.0, 20.0, 22.0, 24.0, 26.0)))
    assert versus.chain_tokens == len(trees) and versus.tree_tokens == sum(r.canonical_prediction_count for r in trees)
    assert versus.chain_ms == 16.0 * len(trees)
    assert "trees were" in versus.text()


# -- ngram-cache's trees ---------------------------------------------------------------------------

def _context_cache(stream):
    from inspector.sources.llama_ngram_cache import update

    cache = {}
    update(cache, stream, len(stream))
    return cache


def test_ngram_cache_with_one_branch_drafts_llama_cpps_chain():
    from inspector.sources.llama_ngram_cache import draft, tree_draft

    stream = [5, 1, 2, 3, 4, 9, 1, 2, 7, 8, 9, 1, 2, 3, 6, 9, 1, 2]
    cache = _context_cache(stream)
    assert tree_draft(stream, 8, 1, cache, {}, {}) == (draft(stream, 8, cache, {}, {}), list(range(len(draft(
        stream, 8, cache, {}, {})))))


def test_ngram_cache_branches_where_the_followers_of_the_deciding_ngram_are_split():
    from inspector.sources.llama_ngram_cache import draft, tree_draft

    # "9 1 2" went on with 7 (once) and 3 (once): the 3-gram decides with a 50% follower (llama.cpp takes
    # the first in its hash order); with branches=2 both are siblings under the root, and each goes on by
    # the chain rule with half of the 6 nodes left.
    stream = [5, 1, 2, 3, 4, 9, 1, 2, 7, 8, 9, 1, 2, 3, 6, 9, 1, 2]
    cache = _context_cache(stream)
    chain = draft(stream, 8, cache, {}, {})
    tokens, parents = tree_draft(stream, 8, 2, cache, {}, {})
    other = ({3, 7} - {chain[0]}).pop()
    assert tokens[:2] == [chain[0], other] and parents[:2] == [0, 0]
    assert tokens[2:5] == chain[1:4] and parents[2:5] == [1, 3, 4]
    assert tokens[5:] == draft(stream + [other], 3, cache, {}, {}) and parents[5:] == [2, 6, 7]


def test_ngram_cache_trees_form_only_in_windows_llama_cpp_verifies():
    from inspector.sources.llama_ngram_cache import draft, tree_draft

    # After "4 5" (the 1-gram "5" was followed by 6 and by 7, once each; 1-grams need 66%): llama.cpp
    # drafts nothing, and the tree form neither (the two pass the share limit only together).
    stream = [1, 5, 6, 2, 5, 7, 3, 5]
    cache = _context_cache(stream)
    assert draft(stream, 8, cache, {}, {}) == []
    assert tree_draft(stream, 8, 3, cache, {}, {}) == ([], [])


def test_ngram_cache_trees_give_plain_decodings_output(make_generation, chat_tokens, target):
    """"ball. I like the" went on with blue and with green: copying it, the 4-gram decides with a tie."""
    from inspector.sources.llama_ngram_cache import NgramCacheSource

    tokens = chat_tokens("Copy this twice: I like the red ball. I like the blue ball. I like the green ball.")
    g = make_generation(NgramCacheSource(branches=3), tokens, on=target, max_new_tokens=MAX)
    g.run()
    plain, _ = plain_reference(target, tokens, MAX)
    assert_same_greedy_output(target, tokens, plain, g.generated)
    assert any(r.tree is not None for r in g.receipts)


# -- the draft model's trees ------------------------------------------------------------------------

def test_split_keeps_the_most_probable_drafted_and_side_tokens_as_a_tree():
    from inspector.sources.draft import split_tree

    # Chain 1 2 3 4 with path probabilities .9 .8 .5 .4; side 11 beside 1 (.3), 13 beside 3 (.8 x .4 = .32).
    assert split_tree([1, 2, 3, 4], [0.9, 0.8, 0.5, 0.4], [(0, 11, 0.3), (2, 13, 0.4)], 5) == \
        ((1, 2, 3, 4, 13), (0, 1, 2, 3, 2))
    assert split_tree([1, 2, 3, 4], [0.9, 0.8, 0.5, 0.4], [(0, 11, 0.3), (2, 13, 0.6)], 4) == \
        ((1, 2, 3, 13), (0, 1, 2, 2))  # the side token (.8 x .6) outranks the chain's last (.4)
    assert split_tree([1, 2, 3, 4], [0.9, 0.8, 0.5, 0.4], [(0, 11, 0.3), (2, 13, 0.4)], 4) is None
    assert split_tree([1, 2], [0.9, 0.8], [(0, 11, 0.05)], 2) is None


def test_draft_trees_give_plain_decodings_output(make_generation, chat_tokens, target, runtime, model_path,
                                                 tmp_path_factory):
    from inspector.llama.quantize import make_draft
    from inspector.llama.runtime import LlamaRuntime
    from inspector.sources.draft import DraftModelSource

    path = make_draft(model_path, "Q4_0", tmp_path_factory.mktemp("drafts"))
    draft = LlamaRuntime(path, n_ctx=runtime.n_ctx, n_batch=64, n_seq_max=1)
    try:
        tokens = chat_tokens(STORY)
        source = DraftModelSource(draft, runtime, draft_max=6, p_split=0.05)
        g = make_generation(source, tokens, on=target, max_new_tokens=MAX, draft_max=6)
        g.run()
        source.close()
    finally:
        draft.close()
    plain, _ = plain_reference(target, tokens, MAX)
    assert_same_greedy_output(target, tokens, plain, g.generated)
    assert any(r.tree is not None for r in g.receipts)


def test_a_source_making_trees_has_no_llama_server_flags():
    from inspector.sources.server_flags import NoServerEquivalent, server_arguments

    with pytest.raises(NoServerEquivalent, match="p_split=0.2 makes draft propose token trees"):
        server_arguments("draft", {"draft_model": "d.gguf", "p_split": 0.2})


# -- bench --trees ----------------------------------------------------------------------------------

def test_bench_trees_measures_tree_and_chain_costs_and_runs_every_branching_source_both_ways(runtime):
    from inspector.bench.tree_bench import TREE_SOURCES, format_tree_bench, tree_bench

    result = tree_bench(runtime, ["copy-with-corrections"], max_tokens=10, draft_max=4, repeats=1,
                        progress=lambda m: None)
    assert set(result["costs"]) == {"1", "2", "4"} and all(len(c) == 4 for c in result["costs"].values())
    row = result["tasks"]["copy-with-corrections"]
    assert row["plain_tokens_per_s"] > 0
    for name in TREE_SOURCES:
        assert set(row[name]) == {"chain", "tree"}
        assert row[name]["tree"]["rows_per_token"] > 0 and row[name]["chain"]["speedup"] > 0
    text = format_tree_bench(result)
    assert "trees of 2 branches cost" in text
    assert text.count("faster (") + text.count("no tree: ") == len(TREE_SOURCES)  # one verdict per source
    assert text.count("copy-with-corrections: best chain ") == 1


def test_the_tree_tab_says_no_window_is_selected_when_a_session_begins(qtbot, runtime, tmp_path, tree_run):
    """Issue 54 item 7: a new session (a run's start, Ctrl+N, a file opened) selects no window; the Tree tab
    says so instead of calling a window discarded or failed."""
    from inspector.gui.windows.tree_drawing import NO_RECEIPT_TEXT, NO_WINDOW_TEXT

    from inspector.gui.windows.detail import WindowDetail
    from test_gui_support import part

    g, w = _tree_run_shown(qtbot, runtime, tmp_path, tree_run)
    window_detail = part(w, WindowDetail)
    detail = window_detail
    assert detail.selected is None
    assert detail.tree_tab.summary.text() == NO_WINDOW_TEXT != NO_RECEIPT_TEXT
