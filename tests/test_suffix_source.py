"""The suffix-decoding source (inspector.sources.suffix): scoring, memory across requests, memory files.

Tiny token lists, then one short run on the real model whose output must be plain greedy's.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import fields

import numpy as np
import pytest

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import ProposalRequest
from inspector.sources.registry import SourceContext, make_source
from inspector.sources.suffix import PAD, SuffixConfig, SuffixMemory, SuffixSource, load_memory, speculate
from scenarios import plain_reference, assert_same_greedy_output


def ask(source, tokens, prompt_count=None, cap=8):
    """The source's proposal, or None when it answers ``NoProposal``."""
    tokens = list(tokens)
    p = source.propose(ProposalRequest(tokens, len(tokens) if prompt_count is None else prompt_count,
                                       0, cap, float("inf")))
    return None if isinstance(p, NoProposal) else p


def run_request(source, prompt, output):
    """One request: ``source`` is asked after every output token, then closed."""
    for i in range(len(output) + 1):
        ask(source, prompt + output[:i], len(prompt))
    source.close()


def suffix(memory: dict, **options):
    """A suffix source made as the registry makes it; SuffixDecoding's own rule (``length=score``) unless
    the options say otherwise, so the memory tests do not depend on the cost rule."""
    return make_source("suffix", SourceContext(None, memory=memory), {"length": "score", **options})


def scored(**options):
    """A suffix source with SuffixDecoding's rule: the best-scoring candidate, whenever there is one."""
    return SuffixSource(config=SuffixConfig(length="score", **options))


def test_it_proposes_the_most_frequent_continuation_of_the_longest_match():
    # "2 3" is followed by 7 twice and by 9 once, but the longest match "1 2 3" by 9.
    stream = [5, 2, 3, 7, 5, 2, 3, 7, 1, 2, 3, 9, 8, 1, 2, 3]
    p = ask(scored(), stream)
    assert p.token_ids == (9, 8, 1)  # at most max_spec_factor x match length (3) tokens
    assert p.decision_id == b"suffix:1:m3:req"
    # Only "3" matched (a 1-token match): the most frequent follower of 3, one token.
    assert ask(scored(), [3, 7, 3, 7, 3, 9, 4, 3]).token_ids == (7,)


def test_the_probability_threshold_and_the_spec_factor_bound_the_path():
    # A period: the longest match (9 tokens) proposes what followed it, up to the stream's end.
    assert ask(scored(), [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3]).token_ids == (4, 5, 6, 1, 2, 3)
    # "1 2" occurred 3 times before and once now: 4 follows it 2 of 4 times (p 0.5), then 8 or
    # 9 once each (p 0.25; the tie goes to the latest).
    stream = [7, 1, 2, 4, 8, 1, 2, 4, 9, 1, 2, 5, 6, 1, 2]
    p = ask(scored(), stream)
    assert p.token_ids == (4, 9) and p.decision_id.endswith(b":m2:req")
    assert ask(scored(min_token_prob=0.3), stream).token_ids == (4,)
    assert ask(scored(min_token_prob=0.6), stream) is None
    assert ask(scored(max_spec_factor=0.5), stream).token_ids == (4,)
    assert ask(scored(max_spec_factor=0.5, max_spec_offset=1.0), stream).token_ids == (4, 9)
    assert speculate(np.full(PAD + 1, -1, dtype=np.int32), PAD, [], 8, 24, 1.0, 0.0, 0.1) == ((), 0.0, 0)


def trie_speculate(seqs, pattern, cap, depth, factor, offset, min_prob):
    """The scoring rule on an explicit bounded suffix trie: every string of <= depth tokens of each
    sequence, with its count and its latest end (the tie-break)."""
    count, latest, children = Counter(), {}, {}
    for n, seq in enumerate(seqs):
        for i in range(len(seq)):
            for length in range(1, min(depth, len(seq) - i) + 1):
                s = tuple(seq[i : i + length])
                count[s] += 1
                latest[s] = (n, i + length)
                children.setdefault(s[:-1], set()).add(s[-1])
    best = ((), 0.0, 0)
    for m in range(1, len(pattern)):
        node = tuple(pattern[-m:])
        if not count[node]:
            break
        limit = min(cap, int(m * factor + offset + 1e-6), depth - m)
        tokens, probs, prob = [], [], 1.0
        while len(tokens) < limit and children.get(node):
            t = max(children[node], key=lambda t: (count[node + (t,)], latest[node + (t,)]))
            prob *= count[node + (t,)] / count[node]
            if prob < min_prob:
                break
            tokens.append(t)
            probs.append(prob)
            node += (t,)
        if probs and sum(probs) >= best[1]:
            best = (tuple(tokens), sum(probs), m)
    return best


def test_the_implicit_trie_scores_as_an_explicit_suffix_trie():
    rng = random.Random(16)
    for case in range(300):
        alphabet = rng.randint(2, 5)
        seqs = [[rng.randrange(alphabet) for _ in range(rng.randint(1, 30))] for _ in range(rng.randint(1, 4))]
        depth, cap = rng.randint(2, 9), rng.randint(1, 8)
        factor, offset, min_prob = rng.choice([0.5, 1.0, 2.0]), rng.choice([0.0, 1.0]), rng.choice([0.0, 0.1, 0.3])
        pattern = seqs[-1][-depth:]
        store = SuffixMemory(seqs)
        got = speculate(store.flat, store.flat.size, pattern, cap, depth, factor, offset, min_prob)
        want = trie_speculate(seqs, pattern, cap, depth, factor, offset, min_prob)
        assert got[0] == want[0] and got[2] == want[2] and got[1] == pytest.approx(want[1]), (case, seqs)
    # Nodes with many occurrences choose their child with numpy: the same rule.
    seqs = [[rng.randrange(3) for _ in range(400)]]
    store = SuffixMemory(seqs)
    for depth in (2, 3, 5, 8):
        got = speculate(store.flat, store.flat.size, seqs[0][-depth:], 8, depth, 4.0, 0.0, 0.0)
        want = trie_speculate(seqs, seqs[0][-depth:], 8, depth, 4.0, 0.0, 0.0)
        assert got[0] == want[0] and got[2] == want[2] and got[1] == pytest.approx(want[1]), depth


def test_it_never_proposes_more_than_the_cap():
    stream = list(range(40)) * 3 + list(range(20))
    for cap in (1, 3, 8):
        p = ask(scored(max_spec_factor=4.0), stream, cap=cap)
        assert p is not None and len(p.token_ids) == cap
    # The depth bounds match plus proposal: at most max_tree_depth - 1 tokens.
    assert len(ask(scored(max_tree_depth=6, max_spec_factor=9.0), stream, cap=32).token_ids) <= 5


@pytest.mark.parametrize("closed", [True, False])
def test_a_continuation_from_an_earlier_request_is_remembered(closed):
    memory: dict = {}
    first = suffix(memory)
    for i in range(9):
        ask(first, [100, 101] + list(range(1, 1 + i)), 2)
    if closed:
        first.close()
    second = suffix(memory)
    p = ask(second, [200, 201, 1, 2, 3], 2)  # without memory, "1 2 3" never occurred
    assert p is not None and p.token_ids == (4, 5, 6) and p.decision_id.endswith(b":m3:mem")
    (store,) = memory.values()
    assert store.sequences() == [list(range(1, 9))]  # outputs only, not the prompt
    assert second.settings()["remembered_requests"] == (1 if closed else 0)
    assert ask(suffix({}), [200, 201, 1, 2, 3], 2) is None


def test_the_oldest_requests_are_dropped_first_at_the_token_cap():
    memory: dict = {}
    outputs = [[10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33]]
    for out in outputs:
        run_request(suffix(memory, max_cached_tokens=10), [1], out)
    (store,) = memory.values()
    assert store.sequences() == outputs[1:] and store.tokens == 8
    late = suffix(memory, max_cached_tokens=10)
    assert ask(late, [2, 10, 11], 1) is None  # the first output is forgotten
    assert ask(late, [2, 20, 21], 1).token_ids == (22, 23)
    late.close()  # its output [20, 21] joins: 10 tokens
    assert store.sequences() == [*outputs[1:], [20, 21]]
    # A smaller cap at the next request's start drops more, oldest first.
    suffix(memory, max_cached_tokens=4)
    assert store.sequences() == [[20, 21]]
    # An output longer than the cap keeps its last tokens; a cap of 0 neither uses nor changes the memory.
    store.add(list(range(50, 60)), 4)
    assert store.sequences() == [[56, 57, 58, 59]]
    run_request(suffix(memory, max_cached_tokens=0), [1], [70, 71])
    assert store.sequences() == [[56, 57, 58, 59]]


@pytest.mark.parametrize("content, problem", [
    ("{not json", "not valid JSON"),
    ('{"sequences": [[1, 2]]}', "not a suffix memory"),
    ('{"format": "spec-inspector suffix memory", "version": 1, "sequences": [[1, -2]]}', "sequence 1"),
    ('{"format": "spec-inspector suffix memory", "version": 7, "sequences": []}', "version 7"),
])
def test_a_broken_memory_file_is_refused_naming_the_file(tmp_path, content, problem):
    path = tmp_path / "memory.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=problem) as err:
        suffix({}, memory_file=str(path))
    assert str(path) in str(err.value)


def test_the_memory_file_round_trips(tmp_path):
    path = str(tmp_path / "memory.json")
    run_request(suffix({}, memory_file=path), [100], [1, 2, 3, 4, 5, 6])
    run_request(suffix({}, memory_file=path), [100], [7, 8, 9])  # a new session: loads, adds, saves
    assert load_memory(path).sequences() == [[1, 2, 3, 4, 5, 6], [7, 8, 9]]
    assert json.loads(open(path, encoding="utf-8").read())["format"] == "spec-inspector suffix memory"
    p = ask(suffix({}, memory_file=path), [200, 2, 3, 4], 1)
    assert p.token_ids == (5, 6) and p.decision_id.endswith(b":mem")
    same = SuffixMemory([[1, 2], [3]], vocabulary={"n_vocab": 10, "sample_sha1": "ab"})
    same.save(path)
    assert load_memory(path).sequences() == [[1, 2], [3]]
    with pytest.raises(ValueError, match="another model's vocabulary"):
        load_memory(path, {"n_vocab": 11, "sample_sha1": "cd"})


def test_a_failure_inside_the_source_proposes_nothing(monkeypatch):
    source = scored()
    monkeypatch.setattr("inspector.sources.suffix.tree.candidates", lambda *a: 1 / 0)
    assert ask(source, [1, 2, 1, 2]) is None


def test_with_memory_the_output_is_plain_greedy(make_generation, scheduler, runtime, chat_tokens):
    tokens = chat_tokens("Copy this sentence twice: The library opens at nine and closes at five.")
    plain, _ = plain_reference(scheduler, tokens, 24)
    memory: dict = {}
    runs = []
    for _ in range(2):  # the second run finds the first one's output in the memory
        source = make_source("suffix", SourceContext(runtime, memory=memory), {})
        g = make_generation(source, tokens, max_new_tokens=24)
        g.run()
        source.close()
        runs.append(g)
        remembered = memory[("suffix", "")].sequences()[-1]  # the output, up to the last window's tokens
        print("remembered", len(remembered), "of", len(g.generated))
        assert g.generated[: len(remembered)] == remembered and len(remembered) >= len(g.generated) - 2
        assert_same_greedy_output(scheduler, tokens, plain, g.generated)
    second = runs[1]
    assert sum(r.accepted_proposal_tokens for r in second.receipts) > 0
    print("decision ids:", [bytes.fromhex(r.decision_id).decode() for r in second.receipts])


# The adaptive length (the default): the cost rule on top of SuffixDecoding's candidates.

FLAT = "10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26"
"""A cost table where every extra row costs a tenth of a one-row decode (ms per batch of 1..17 rows)."""
MEDIUM = "10,15,20,25,30,35,40,45,50"
"""Each extra row costs half a one-row decode: a proposal token pays when accepted more than half the time."""
STEEP = "10,20,30,40,50,60,70,80,90"
"""A cost table where k rows cost k single rows: no proposal can pay."""


def adaptive(memory: dict | None = None, **options):
    return make_source("suffix", SourceContext(None, memory={} if memory is None else memory), options)


def test_a_whole_repeated_line_is_proposed_whole_when_rows_are_cheap():
    line = list(range(100, 130))
    p = ask(adaptive(row_costs=FLAT), [7] + line + [8] + line[:12], cap=16)
    # The match is 12 tokens ("max_spec_factor 1": at most 12 tokens), each seen once before: all of them.
    assert p is not None and p.token_ids == tuple(line[12:24]) and p.decision_id == b"suffix:1:m12:req"


def test_it_stays_quiet_and_says_why_where_no_proposal_can_pay():
    line = list(range(100, 130))
    answer = adaptive(row_costs=STEEP).propose(ProposalRequest([7] + line + [8] + line[:12], 43, 0, 8, float("inf")))
    assert isinstance(answer, NoProposal) and answer.reason == "adaptive_plain" and "12 tokens" in answer.detail
    fresh = adaptive(row_costs=FLAT).propose(ProposalRequest([1, 2, 3, 4, 5, 6], 6, 0, 8, float("inf")))
    assert isinstance(fresh, NoProposal) and fresh.reason == "no_match"
    # A one-token match of a token seen once (SuffixDecoding proposes it) does not pay on these costs.
    assert ask(scored(), [3, 7, 5, 3]).token_ids == (7,)
    assert ask(adaptive(row_costs=STEEP), [3, 7, 5, 3]) is None


def test_the_query_itself_is_not_counted_as_an_occurrence_of_its_own_suffix():
    from inspector.sources.suffix import candidates

    stream = [5, 1, 2, 3, 9, 1, 2, 3]
    a = SuffixMemory([stream]).flat
    counted = {m: probs for m, _ids, probs in candidates(a, a.size - 1, stream, 4, 8, 1.0, 0.0, 0.0)}
    earlier = {m: probs for m, _ids, probs in candidates(a, a.size - 1, stream, 4, 8, 1.0, 0.0, 0.0, earlier_only=True)}
    # "1 2 3" occurred once before and ends the stream: SuffixDecoding counts 2 places (p 1/2), we count 1.
    assert counted[3] == (0.5,) * 3 and earlier[3] == (1.0,) * 3


def test_the_nodes_group_the_match_lengths_that_share_their_occurrences():
    from inspector.sources.suffix import candidates
    from inspector.sources.suffix.tree import GreedyPath, nodes

    rng = random.Random(29)
    for case in range(200):
        seq = [rng.randrange(rng.randint(2, 4)) for _ in range(rng.randint(2, 70))]
        a = SuffixMemory([seq]).flat
        pattern = seq[-rng.randint(2, 40):]
        ranges = list(nodes(a, a.size - 1, pattern, earlier_only=True))
        # Explicitly: the earlier places where the last m tokens occur, m = 1, 2, ...
        want = {}
        for m in range(1, len(pattern)):
            places = tuple(e for e in range(m - 1, len(seq) - 1) if seq[e - m + 1 : e + 1] == pattern[-m:])
            if not places:
                break
            want[m] = places
        got = {m: tuple(int(e) - PAD for e in ends) for lo, hi, ends in ranges for m in range(lo, hi + 1)}
        assert got == want, (case, seq, pattern)
        assert all(hi < lo2 for (_l, hi, _e), (lo2, _h, _e2) in zip(ranges, ranges[1:]))
        paths = {m: ids for m, ids, _p in candidates(a, a.size - 1, pattern, 4, 64, 9.0, 0.0, 0.0, earlier_only=True)}
        for lo, hi, ends in ranges:  # one greedy path per node: the candidates' of each of its match lengths
            path = GreedyPath(a, ends, 0.0)
            path.grow(4)
            assert all(paths.get(m, ()) == tuple(path.tokens) for m in range(lo, hi + 1)), (case, seq, pattern)


def test_acceptance_learned_in_one_request_is_used_by_the_next():
    memory: dict = {}
    first = adaptive(memory, row_costs=MEDIUM)

    class Receipt:
        proposal_token_count = 4
        accepted_proposal_tokens = 0
        disposition = "first_mismatch"
        verification_rows = 5
        verification_elapsed_us = 0
        committed_tokens = ()
        base_position = -2

    line = list(range(100, 110))
    stream = [7] + line + [8] + line[:4]
    for _ in range(12):  # every proposal after a 4-token match is rejected at its first token
        p = ask(first, stream, cap=4)
        if p is None:
            break
        r = Receipt()
        r.decision_id = p.decision_id.hex()
        first.report(r)
    assert ask(first, stream, cap=4) is None
    first.close()
    assert ask(adaptive(memory, row_costs=MEDIUM), stream, cap=4) is None  # the next request knows
    assert ask(adaptive({}, row_costs=MEDIUM), stream, cap=4) is not None  # a new session does not


# --- Mutation testing (issue 42): the trie's primitives, by hand ------------------------------------

from inspector.sources.suffix import tree as st


def _arr(*seqs):
    """PAD -1s, the sequences separated by -1, a -1 after the last; and the index after the last token."""
    out = [-1] * st.PAD
    for s in seqs:
        out += list(s) + [-1]
    return np.asarray(out, dtype=np.int32), len(out) - 1


def test_best_child_is_the_most_frequent_continuing_token_the_latest_on_a_tie():
    assert st.best_child(np.array([-1, -1])) == (-1, 0)  # no occurrence continues
    assert st.best_child(np.full(49, -1)) == (-1, 0)  # the same above SMALL (numpy)
    assert st.best_child(np.array([-1] * 48 + [7])) == (7, 1)  # one continues
    assert st.best_child(np.array([0] * 49 + [-1])) == (0, 49)  # token 0 is a token
    assert st.best_child(np.array([5, 6] * 25)) == (6, 25)  # a tie: the latest, 6
    assert st.best_child(np.array([5, 6, 5, 6])) == (6, 2)


def test_candidates_start_at_match_length_1_and_keep_a_path_at_exactly_min_prob():
    a, end = _arr([1, 2, 3, 1, 2, 4])
    # the node "2" occurs twice, followed by 3 and 4 once each: the latest, 4, with probability 1/2
    got = list(st.candidates(a, end, [9, 2], 8, 64, 1.0, 2.0, 0.5))
    assert got == [(1, (4,), (0.5,))]
    assert list(st.candidates(a, end, [9, 2], 8, 64, 1.0, 2.0, 0.51)) == []


def test_nodes_count_every_occurrence_unless_told_to_leave_the_last_out():
    a, end = _arr([1, 2, 1, 2])
    assert [(lo, hi, e.tolist()) for lo, hi, e in st.nodes(a, end, [1, 2])] == [(1, 1, [st.PAD + 1, st.PAD + 3])]
    assert [(lo, hi, e.tolist()) for lo, hi, e in st.nodes(a, end, [1, 2], earlier_only=True)] == \
        [(1, 1, [st.PAD + 1])]


def test_nodes_of_a_frequent_token_split_where_the_occurrences_stop_matching():
    # 3 occurs 20 times, always after 2; 10 times after 1, 2: suffixes of 1..2 tokens share the 20, 3 the 10
    a, end = _arr([1, 2, 3] * 10 + [9, 2, 3] * 10)
    got = [(lo, hi, e.size) for lo, hi, e in st.nodes(a, end, [5, 1, 2, 3])]
    assert got == [(1, 2, 20), (3, 3, 10)]


def test_a_token_stream_keeps_pad_tokens_and_a_separator_and_grows_by_doubling():
    ts = st.TokenStream([])
    assert ts.last() == -1 and ts.a.size == st.PAD + 256 + 1 and ts.a.dtype == np.int32
    ts.extend(list(range(256)))  # fills it up to the separator's place: no growth
    assert ts.a.size == st.PAD + 257 and ts.end == st.PAD + 256 and ts.a[ts.end] == -1
    ts.extend([7])  # one more: doubled
    assert ts.a.size == 2 * (st.PAD + 257) and ts.a.dtype == np.int32
    assert ts.tokens().tolist() == list(range(256)) + [7] and ts.last() == 7
    assert (ts.a[: st.PAD] == -1).all() and (ts.a[ts.end:] == -1).all()
    assert st.TokenStream(list(range(200))).a.size == st.PAD + 400 + 1
    ts = st.TokenStream([1, 2, 3, 4])
    ts.truncate(2)
    assert ts.tokens().tolist() == [1, 2] and ts.last() == 2 and (ts.a[st.PAD + 2:] == -1).all()
    assert ts.tokens(1).tolist() == [2]


# --- the suffix memory and its file (issue 42) -------------------------------------------------------

import hashlib
import os

from inspector.sources.suffix import memory as sm


def test_the_memory_array_is_pad_then_each_output_and_a_separator():
    m = SuffixMemory()
    assert m.flat.tolist() == [-1] * PAD and m.flat.dtype == np.int32
    m.add([1, 2], None)
    m.add([], None)  # nothing to remember
    assert m.flat.tolist() == [-1] * PAD + [1, 2, -1] and m.flat.dtype == np.int32 and len(m) == 1
    m.add([5, 6], 1)  # a cap of 1 token: the last token of the output, the older ones dropped
    assert m.sequences() == [[6]] and m.tokens == 1


def test_a_saved_memory_is_compact_json(tmp_path):
    path = tmp_path / "m.json"
    SuffixMemory([[1, 2]]).save(str(path))
    assert path.read_text("utf-8") == \
        '{"format":"spec-inspector suffix memory","version":1,"vocabulary":null,"sequences":[[1,2]]}'


def _memory_file(tmp_path, sequences, vocabulary=None):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"format": "spec-inspector suffix memory", "version": 1, "vocabulary": vocabulary,
                                "sequences": sequences}), "utf-8")
    return str(path)


VOCAB = {"n_vocab": 10, "sample_sha1": "0123456789abcdef"}


def test_loading_a_memory_checks_the_tokens_against_the_vocabulary(tmp_path):
    assert load_memory(str(tmp_path / "none.json"), VOCAB).vocabulary == VOCAB  # no file yet: empty, stamped
    m = load_memory(_memory_file(tmp_path, [[0, 9]], VOCAB))
    assert m.sequences() == [[0, 9]] and m.vocabulary == VOCAB  # token 0 and n_vocab - 1 are tokens
    path = _memory_file(tmp_path, [[3], [0, 10]], VOCAB)
    for given in (None, VOCAB):  # the file's own vocabulary, or the model's
        with pytest.raises(ValueError, match=r"^suffix memory file " + path + r": sequence 2 is not a list of token "
                                             r"ids in \[0, 10\)$"):
            load_memory(path, given)
    path = _memory_file(tmp_path, [[-1]])
    with pytest.raises(ValueError, match=r"^suffix memory file " + path + r": sequence 1 is not a list of token ids "
                                         r">= 0$"):
        load_memory(path)


def test_loading_a_memory_names_what_is_wrong(tmp_path):
    path = _memory_file(tmp_path, [[1]], {"n_vocab": "ten"})
    with pytest.raises(ValueError, match=r"^suffix memory file " + path + r': "vocabulary" must be null or an object '
                                         r'with "n_vocab"$'):
        load_memory(path)
    path = _memory_file(tmp_path, [[1]], {"n_vocab": 12, "sample_sha1": "fedcba9876543210"})
    with pytest.raises(ValueError, match=r"^suffix memory file " + path + r" was made for another model's vocabulary "
                                         r"\(file: 12 tokens, sample fedcba98; this model: 10 tokens, sample "
                                         r"01234567\)$"):
        load_memory(path, VOCAB)
    path = _memory_file(tmp_path, {"a": 1})
    with pytest.raises(ValueError, match=r'^suffix memory file ' + path + r': "sequences" must be a list of token id '
                                         r'lists$'):
        load_memory(path)
    with pytest.raises(ValueError, match=r"^suffix memory file " + str(tmp_path) + r" is a folder; expected a regular "
                                         r"file$"):
        load_memory(str(tmp_path))
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match=r"^suffix memory file " + str(bad) + r" cannot be read: 'utf-8' codec"):
        load_memory(str(bad))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000, "utf-8")
    with pytest.raises(ValueError, match=r"^suffix memory file " + str(deep) + r" is not a suffix memory: its JSON is "
                                         r"nested too deeply$"):
        load_memory(str(deep))


class _Runtime:
    n_vocab = 4

    def token_piece(self, i, special):
        return b"abcd"[i:i + 1]


def test_memory_for_keys_the_session_store_by_file_and_stamps_the_models_vocabulary(tmp_path):
    expected = {"n_vocab": 4, "sample_sha1": hashlib.sha1(b"a\0b\0c\0d\0").hexdigest()}  # every token, step 1
    store: dict = {}
    m = sm.memory_for(store, runtime=_Runtime())
    assert list(store) == [("suffix", "")] and m.vocabulary == expected
    assert sm.memory_for(store) is m
    path = _memory_file(tmp_path, [[1]], {"n_vocab": 4, "sample_sha1": "x"})
    with pytest.raises(ValueError, match="was made for another model's vocabulary"):
        sm.memory_for({}, path, runtime=_Runtime())
    store = {}
    ok = _memory_file(tmp_path, [[1]], expected)
    assert sm.memory_for(store, ok, runtime=_Runtime()).sequences() == [[1]]
    assert list(store) == [("suffix", os.path.abspath(ok))]


def test_a_token_stream_grows_at_once_to_what_a_long_extension_needs():
    ts = st.TokenStream([])  # PAD + 257 places
    ts.extend(list(range(1000)))  # needs PAD + 1000 + 1 (the separator): more than twice the size
    assert ts.a.size == st.PAD + 1000 + 1 and ts.a[ts.end] == -1 and ts.tokens().tolist() == list(range(1000))


# --- the suffix source's options, choices and bookkeeping (issue 42) ---------------------------------

import logging
from types import SimpleNamespace

from inspector.sources.suffix import source as ss


@pytest.mark.parametrize("kwargs", [
    {"max_tree_depth": 2}, {"max_tree_depth": 64}, {"min_token_prob": 0.0}, {"min_token_prob": 1.0},
    {"max_spec_factor": 0.0}, {"max_cached_tokens": 0}, {"length": "score"},
])
def test_suffix_options_at_their_bounds_are_accepted(kwargs):
    SuffixSource(config=SuffixConfig(**kwargs))


@pytest.mark.parametrize("kwargs, message", [
    ({"max_tree_depth": 1}, r"^max_tree_depth must be a whole number 2 <= max_tree_depth <= 64, observed 1$"),
    ({"max_tree_depth": 65}, r"observed 65$"),
    ({"max_tree_depth": 2.5}, r"observed 2\.5$"),
    ({"min_token_prob": 1.01}, r"^min_token_prob must be 0 <= min_token_prob <= 1, observed 1\.01$"),
    ({"min_token_prob": -0.1}, r"observed -0\.1$"),
    ({"max_spec_factor": -1}, r"^max_spec_factor must be >= 0, observed -1$"),
    ({"max_cached_tokens": True}, r"^max_cached_tokens must be a whole number >= 0, observed True$"),
    ({"max_cached_tokens": 2.5}, r"observed 2\.5$"),
    ({"max_cached_tokens": -1}, r"observed -1$"),
    ({"length": "long"}, r"^length must be one of adaptive, score, observed 'long'$"),
])
def test_bad_suffix_options_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SuffixSource(config=SuffixConfig(**kwargs))


def test_the_suffix_config_has_one_field_per_declared_option_in_its_order():
    assert tuple(f.name for f in fields(SuffixConfig)) == tuple(o.name for o in ss.SUFFIX.options)


def test_suffix_settings_and_warm_state_are_pinned():
    assert SuffixSource().settings() == {
        "max_tree_depth": 24, "max_spec_factor": 1.0, "max_spec_offset": 0.0, "min_token_prob": 0.1,
        "max_cached_tokens": 100_000, "memory_file": "", "length": "adaptive", "remembered_requests": 0,
        "remembered_tokens": 0, "row_cost_ratio": 0.5}
    assert SuffixSource(config=SuffixConfig(row_costs=[3.0, 4.0])).settings()["row_costs"] == [1.0, 1.3333]
    assert "row_costs" not in SuffixSource(config=SuffixConfig(length="score")).settings()
    assert SuffixSource(SuffixMemory([[1, 2, 3]])).warm_state() == "3 tokens remembered from 1 earlier request"
    two = SuffixSource(SuffixMemory([[1, 2, 3], [4, 5]]))
    assert two.warm_state() == "5 tokens remembered from 2 earlier requests"
    assert (two.settings()["remembered_requests"], two.settings()["remembered_tokens"]) == (2, 5)
    assert SuffixSource(SuffixMemory([[1, 2, 3]]), SuffixConfig(max_cached_tokens=0)).warm_state() == ""


def test_suffix_proposal_length_is_factor_times_match_plus_offset_within_cap_and_depth():
    s = SuffixSource(config=SuffixConfig(max_tree_depth=10, max_spec_factor=2.0, max_spec_offset=1.0))
    assert s._limit(3, 16) == 7  # 2 x 3 + 1; depth - 3 = 7
    assert s._limit(3, 5) == 5  # the cap
    assert s._limit(8, 16) == 2  # depth 10 - 8
    assert SuffixSource(config=SuffixConfig(max_spec_factor=0.5))._limit(3, 16) == 1  # 1.5, whole tokens
    assert SuffixSource()._limit(3, 16) == 3


def test_by_score_the_memory_wins_only_when_strictly_higher():
    # the request: (1, 2) then 5, 9 (score 0.5 + 0.5 with its own last occurrence counted); the memory: 5 (score 1)
    s = SuffixSource(SuffixMemory([[1, 2, 5]]), SuffixConfig(length="score"))
    p = ask(s, [1, 2, 5, 9, 1, 2])
    assert p.token_ids == (5, 9) and p.decision_id == b"suffix:1:m2:req"
    s = SuffixSource(SuffixMemory([[1, 2, 5, 6]]), SuffixConfig(length="score"))
    p = ask(s, [7, 1, 2])  # nothing in the request; the memory: 5, 6
    assert p.token_ids == (5, 6) and p.decision_id == b"suffix:1:m2:mem"
    assert ask(s, [7, 1, 2]).decision_id == b"suffix:2:m2:mem"
    unused = SuffixSource(SuffixMemory([[1, 2, 5, 6]]), SuffixConfig(length="score", max_cached_tokens=0))
    assert unused.propose(ProposalRequest([7, 1, 2], 3, 0, 8, float("inf"))) == NoProposal("no_match")


def test_a_failing_suffix_source_says_so_and_logs_once(caplog):
    s = SuffixSource()
    bad = ProposalRequest(["a", "b"], 2, 0, 8, float("inf"))
    with caplog.at_level(logging.ERROR, logger=ss.log.name):
        assert s.propose(bad) == NoProposal("failed", "logged once")
        assert s.propose(bad) == NoProposal("failed", "logged once")
    assert [r.getMessage() for r in caplog.records] == ["suffix source failed; proposing nothing"]


def test_the_committed_tokens_of_a_receipt_reach_the_memory_at_close():
    memory = SuffixMemory()
    s = SuffixSource(memory, SuffixConfig(length="score"))
    ask(s, [1, 2, 3], prompt_count=3)
    s.report(SimpleNamespace(committed_tokens=(9, 9), base_position=7, decision_id="00"))  # not at the stream's end
    s.report(SimpleNamespace(committed_tokens=(4, 5), base_position=2, decision_id="00"))  # after token 3
    s.close()
    assert memory.sequences() == [[4, 5]]


def test_a_memory_that_cannot_be_saved_is_logged_not_raised(tmp_path, caplog):
    path = str(tmp_path / "no" / "m.json")
    s = SuffixSource(config=SuffixConfig(memory_file=path))
    with caplog.at_level(logging.WARNING, logger=ss.log.name):
        s.close()
    assert [r.getMessage() for r in caplog.records] == [
        f"could not save the suffix memory to {path}: [Errno 2] No such file or directory: '{path}.tmp{os.getpid()}'"]


def test_make_suffix_takes_the_stored_cost_model_unless_told_linear():
    ctx = SourceContext(None, memory={}, row_costs=(3.0, 4.0))
    assert make_source("suffix", ctx, {}).settings()["row_costs"] == [1.0, 1.3333]
    assert make_source("suffix", ctx, {"row_costs": "linear"}).settings()["row_cost_ratio"] == 0.5
    s = make_source("suffix", SourceContext(None, memory={}), {"max_tree_depth": "10", "min_token_prob": "0.2"})
    assert (s.max_tree_depth, s.min_token_prob) == (10, 0.2)


def test_the_vocabulary_fingerprint_samples_every_n_over_256th_special_piece_decoded_with_replacement():
    class Runtime:
        n_vocab = 512  # step 512 // 256 = 2: tokens 0, 2, ..., 510

        def token_piece(self, i, special):
            return (b"\xff" if i == 0 else b"t%d" % i) if special else b"plain"

    h = hashlib.sha1()
    for i in range(0, 512, 2):
        h.update(("\ufffd" if i == 0 else f"t{i}").encode("utf-8") + b"\0")
    assert sm.vocabulary_fingerprint(Runtime()) == {"n_vocab": 512, "sample_sha1": h.hexdigest()}
    assert sm.vocabulary_fingerprint(object()) is None  # no vocabulary to read


FREE = [1.0, 1.0, 1.0, 1.0]  # a cost table where every batch costs one plain step: any reach pays


def test_adaptive_suffix_takes_the_match_length_allowing_the_most_tokens_within_the_depth():
    # depth 6: [1, 2, 3, 4, 5] matches 5 back; limits per match length min(m, 6 - m): 1 2 3 2 1. Match 3:
    # 6, 7, 8 (reach 0.5, 0.5 x 0.65, ...: rate 2.04 per step) beats match 5: 6 (rate 1.65)
    s = SuffixSource(config=SuffixConfig(max_tree_depth=6, row_costs=FREE))
    p = ask(s, [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5])
    assert p.token_ids == (6, 7, 8) and p.decision_id == b"suffix:1:m3:req"


def test_adaptive_suffix_proposes_a_single_token_and_says_no_match_below_min_prob():
    s = SuffixSource(config=SuffixConfig(row_costs=FREE))
    p = ask(s, [5, 6, 9, 5])  # match 1 (limit 1): 6, rate 1 + 0.35
    assert p.token_ids == (6,) and p.decision_id == b"suffix:1:m1:req"
    s = SuffixSource(config=SuffixConfig(row_costs=FREE, min_token_prob=0.6))
    assert s.propose(ProposalRequest([1, 2, 1, 3, 1], 5, 0, 8, float("inf"))) == NoProposal("no_match")  # 1/2 < 0.6


def test_adaptive_suffix_prefers_the_request_on_an_equal_rate():
    s = SuffixSource(SuffixMemory([[1, 2, 3, 4, 8, 1]]), SuffixConfig(row_costs=FREE))
    p = ask(s, [1, 2, 3, 4, 8, 1, 2, 3])  # both trees: match 3, then 4, 8, 1 with probability 1
    assert p.token_ids == (4, 8, 1) and p.decision_id == b"suffix:1:m3:req"


def test_by_score_the_memory_wins_with_a_higher_score_whatever_the_match_lengths():
    # the request: 5, 1 (score 1.0, match 2); the memory: 7, 8 (score 2.0, match 2)
    s = SuffixSource(SuffixMemory([[1, 2, 7, 8]]), SuffixConfig(length="score"))
    p = ask(s, [1, 2, 5, 1, 2])
    assert p.token_ids == (7, 8) and p.decision_id == b"suffix:1:m2:mem"


def test_adaptive_suffix_learns_each_accepted_token_in_the_bucket_of_its_match():
    s = SuffixSource(config=SuffixConfig(row_costs=FREE))
    s.report(SimpleNamespace(decision_id="00", base_position=0))  # unknown decision, no committed tokens
    p = ask(s, [1, 2, 3, 4, 1, 2, 3])
    assert p.token_ids == (4, 1, 2) and p.decision_id == b"suffix:1:m3:req"
    s.report(SimpleNamespace(decision_id=p.decision_id.hex(), proposal_token_count=3, accepted_proposal_tokens=2,
                             disposition="first_mismatch", verification_rows=4, verification_elapsed_us=0,
                             committed_tokens=(4, 1, 9), base_position=6))
    # accepted after matches 3 ([2, 4)) and 4 ([4, 8)); rejected after 5 ([4, 8))
    c = s.policy.counts
    assert (c[1].accepted, c[1].mismatched, c[2].accepted, c[2].mismatched) == (1.0, 0.0, 1.0, 1.0)


def test_a_source_keeping_one_token_still_remembers_its_output():
    memory = SuffixMemory()
    s = SuffixSource(memory, SuffixConfig(max_cached_tokens=1, length="score"))
    ask(s, [1, 2, 3], prompt_count=2)
    s.close()
    assert memory.sequences() == [[3]]


def test_make_suffix_stamps_the_memory_with_the_models_vocabulary():
    store: dict = {}
    make_source("suffix", SourceContext(_Runtime(), memory=store), {})
    assert store[("suffix", "")].vocabulary == {"n_vocab": 4, "sample_sha1": hashlib.sha1(b"a\0b\0c\0d\0").hexdigest()}


def test_adaptive_suffix_weighs_the_whole_path_against_the_cost_of_its_rows():
    # c(k) of 1 to 4 rows: 10, 12, 14, 16 ms (relative 1, 1.2, 1.4, 1.6). Match 3, path 4, 5, 6: reach 0.5,
    # 0.5 x 0.65, 0.5 x 0.65 x 0.65; the whole path commits 1 + 1.036 for 1.6 steps (1.27 > 1.02): all of it
    s = SuffixSource(config=SuffixConfig(row_costs=[10.0, 12.0, 14.0, 16.0]))
    p = ask(s, [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3])
    assert p.token_ids == (4, 5, 6) and p.decision_id == b"suffix:1:m3:req"


def test_a_discarded_suffix_decision_is_not_learned_from():
    s = SuffixSource(config=SuffixConfig(row_costs=FREE))
    for discard_as in (lambda p: p.decision_id, lambda p: p.decision_id.hex()):  # bytes, or the receipts' hex
        p = ask(s, [1, 2, 3, 4, 1, 2, 3])
        s.discard(discard_as(p), "test")
        s.report(SimpleNamespace(decision_id=p.decision_id.hex(), proposal_token_count=3, accepted_proposal_tokens=3,
                                 disposition="all_accepted", verification_rows=4, verification_elapsed_us=0,
                                 committed_tokens=(), base_position=0))
    s.discard(b"never", "test")  # unknown: quiet
    assert all(c.accepted == 0.0 for c in s.policy.counts)


def test_a_next_turn_is_a_new_request_and_a_rolled_back_stream_the_same_one():
    memory = SuffixMemory()
    s = SuffixSource(memory, SuffixConfig(length="score"))
    ask(s, [1, 2, 3, 4], prompt_count=2)  # output 3, 4
    ask(s, [1, 2, 3, 4, 5, 6], prompt_count=5)  # the next turn (prompt 5 tokens): the first output joins the memory
    s.close()
    assert memory.sequences() == [[3, 4], [6]]
    memory = SuffixMemory()
    s = SuffixSource(memory, SuffixConfig(length="score"))
    ask(s, [1, 2, 3, 4], prompt_count=2)
    ask(s, [1, 2, 3], prompt_count=2)  # the same request, its stream shorter (rolled back to 3)
    s.close()
    assert memory.sequences() == [[3]]
