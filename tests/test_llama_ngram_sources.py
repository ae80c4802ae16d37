"""llama.cpp's model-free proposers as sources (ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod,
ngram-cache): their rules on tiny token lists, what they remember across requests through
``SourceContext.memory``, the registry declarations, and one run on the bundled model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import ProposalRequest
from inspector.sources import llama_ngram_cache as nc
from inspector.sources.hash_order import Part
from inspector.sources.llama_ngram_map import NgramMapSource, NgramSimpleSource
from inspector.sources.llama_ngram_mod import NgramModSource
from inspector.sources.registry import SourceContext, check_source_options, describe_source, make_source, source_names

NAMES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


def req(tokens, cap=8, prompt=None):
    """A request whose prompt is all of ``tokens`` unless ``prompt`` says how many."""
    return ProposalRequest(list(tokens), len(tokens) if prompt is None else prompt, 0, cap, float("inf"))


def ids(source, tokens, cap=8, prompt=None):
    p = source.propose(req(tokens, cap, prompt))
    return None if isinstance(p, NoProposal) else list(p.token_ids)


def accept(source, proposal_tokens, accepted):
    """Report a verified proposal of ``source`` (its last one) with ``accepted`` tokens accepted."""
    p = source.propose(req(proposal_tokens))
    assert not isinstance(p, NoProposal), p
    source.report(SimpleNamespace(decision_id=p.decision_id.hex(), accepted_proposal_tokens=accepted))
    return list(p.token_ids)


# --- registry -------------------------------------------------------------------------------------


def test_the_five_sources_are_registered_with_llama_cpp_flags_and_defaults():
    assert set(NAMES) <= set(source_names())
    flags = {name: {o.flag: o.default for o in describe_source(name).options if o.flag} for name in NAMES}
    ours = {name: [o.name for o in describe_source(name).options if not o.flag] for name in NAMES}
    assert ours == {**{name: [] for name in NAMES}, "ngram-cache": ["branches"]}  # token trees: no llama.cpp flag
    assert flags["ngram-simple"] == {"--spec-ngram-simple-size-n": 12, "--spec-ngram-simple-size-m": 48}
    assert flags["ngram-map-k4v"] == {"--spec-ngram-map-k4v-size-n": 12, "--spec-ngram-map-k4v-size-m": 48,
                                      "--spec-ngram-map-k4v-min-hits": 1}
    assert flags["ngram-mod"] == {"--spec-ngram-mod-n-match": 24, "--spec-ngram-mod-n-min": 48,
                                  "--spec-ngram-mod-n-max": 64}
    assert flags["ngram-cache"] == {"--lookup-cache-static": "", "--lookup-cache-dynamic": ""}
    with pytest.raises(ValueError, match="size_n must be a whole number 1 <= size_n <= 1024, observed '0'"):
        check_source_options("ngram-map-k", {"size_n": "0"})
    with pytest.raises(ValueError, match=r"n_min <= n_max, observed n_min=70, n_max=64 \(the default\)"):
        check_source_options("ngram-mod", {"n_min": "70"})


# --- ngram-simple -------------------------------------------------------------------------------


def test_ngram_simple_proposes_the_m_tokens_after_the_most_recent_earlier_match():
    s = NgramSimpleSource(size_n=2, size_m=3)
    assert ids(s, [7, 1, 2, 3, 4, 5, 8, 8, 1, 2]) == [3, 4, 5]
    assert ids(s, [7, 1, 2, 3, 4, 5, 1, 2, 6, 6, 6, 1, 2]) == [6, 6, 6]  # the later match wins
    assert ids(s, [7, 1, 2, 3, 4, 5, 8, 8, 1, 2], cap=2) == [3, 4]  # the engine's cap (draft max)


def test_ngram_simple_proposes_nothing_for_short_streams_position_zero_or_short_continuations():
    s = NgramSimpleSource(size_n=2, size_m=3)
    assert ids(s, [1, 2, 3, 4, 5, 1, 2]) is None  # 6 tokens before the current one: not > n + m + 1
    assert ids(s, [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]) is None  # the only match starts at position 0
    s3 = NgramSimpleSource(size_n=3, size_m=5)  # fewer than n tokens follow the match: nothing
    assert ids(s3, [5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3, 1, 2, 3]) is None
    assert ids(s3, [5, 6, 7, 8, 9, 10, 11, 1, 2, 3, 20, 1, 2, 3]) == [20, 1, 2]


def test_ngram_simple_remembers_nothing_across_requests():
    memory: dict = {}
    ctx = SourceContext(runtime=None, memory=memory)
    s = make_source("ngram-simple", ctx, {"size_n": 2, "size_m": 3})
    assert ids(s, [7, 1, 2, 3, 4, 5, 8, 8, 1, 2]) == [3, 4, 5]
    assert memory == {}


# --- ngram-map-k ----------------------------------------------------------------------------------

K_STREAM = [5, 1, 2, 3, 4, 6, 7, 8, 9, 1, 2]


def test_ngram_map_k_proposes_what_followed_the_key_and_then_only_as_many_as_were_accepted():
    s = NgramMapSource(size_n=2, size_m=2, key_only=True)
    assert accept(s, K_STREAM, 1) == [3, 4]
    assert ids(s, K_STREAM) == [3]  # min(size_m, accepted last time)
    assert ids(NgramMapSource(size_n=2, size_m=2), K_STREAM[:5]) is None  # fewer than 2n + m tokens


def test_ngram_map_k_key_refused_outright_proposes_nothing_again_and_ignores_min_hits():
    s = NgramMapSource(size_n=2, size_m=2, min_hits=5, key_only=True)  # key-only mode: min_hits unused
    assert accept(s, K_STREAM, 0) == [3, 4]
    assert ids(s, K_STREAM) is None


def test_ngram_map_k_remembers_accepted_lengths_across_requests_of_the_same_stream():
    memory: dict = {}
    first = make_source("ngram-map-k", SourceContext(None, memory=memory), {"size_n": 2, "size_m": 2})
    assert accept(first, K_STREAM, 1) == [3, 4]
    later = K_STREAM + [3, 9, 1, 2]  # the next turn: the conversation so far, then more
    second = make_source("ngram-map-k", SourceContext(None, memory=memory), {"size_n": 2, "size_m": 2})
    assert ids(second, later) == [3]  # the remembered key: its first occurrence, 1 token (accepted last time)
    fresh = make_source("ngram-map-k", SourceContext(None, memory={}), {"size_n": 2, "size_m": 2})
    assert ids(fresh, later) == [3, 9]  # a fresh map: the latest occurrence, size_m tokens
    other = make_source("ngram-map-k", SourceContext(None, memory=memory), {"size_n": 2, "size_m": 2})
    # another stream keeps the map (llama-server's slot): 11 tokens < the 14 of the last draft shrink it to 7;
    # the key [1, 2] stays at position 1, where this stream has [8, 1], and its [1, 2] at 2 lies at or below
    # the index's last position (6): not searched again
    assert ids(other, [8, 8, 1, 2, 3, 4, 6, 7, 8, 9, 1, 2]) is None


def _request(source, prompt, queries, accepted=()):
    """One request to ``source``: ``begin(prompt)``, then a query at each stream of ``queries`` (the prompt,
    the generated tokens so far and the current one, as ``tokens``); the i-th proposal made is reported
    with ``accepted[i]`` tokens accepted while there are any. The proposals (None for none), in order."""
    source.begin(tuple(prompt))
    out, left = [], list(accepted)
    for tokens in queries:
        p = source.propose(ProposalRequest(tuple(tokens), len(prompt), 0, 16, 1e18))
        out.append(None if isinstance(p, NoProposal) else list(p.token_ids))
        if out[-1] is not None and left:
            source.report(SimpleNamespace(decision_id=p.decision_id.hex(), accepted_proposal_tokens=left.pop(0)))
    return out


P1 = [5, 1, 2, 3, 4, 6, 7, 8, 9, 1]


def _map_k_after_one_request():
    """The map-k (n 2, m 2) of a slot after one request, worked by hand from common_ngram_map_draft: at
    P1 + [2] the old-prompt scan (positions 5..1) finds [1, 2] at 1 and proposes [3, 4] (1 accepted);
    positions 5..1 are indexed, the index's last position is 5. At 14 tokens the key [6, 7] is in the hash
    slot at 5: proposes [8, 9] (2 accepted); nothing is indexed (positions 6..9 lie between the prompt's
    scan and the generated part's), the index's last position is 9. The last draft saw 14 tokens."""
    memory: dict = {}
    source = NgramMapSource(size_n=2, size_m=2, key_only=True, memory=memory)
    assert _request(source, P1, [P1 + [2], P1 + [2, 3, 9, 6, 7]], accepted=(1, 2)) == [[3, 4], [8, 9]]
    return memory, source.state


def test_ngram_map_k_begins_a_new_prompt_on_the_kept_map_as_llama_servers_common_ngram_map_begin():
    """llama.cpp 0c1e570 common_ngram_map_begin: only the prompt's length counts. Expected values worked by
    hand from the C++ (hash slots: (a * 2654435761 + b) mod 2^18, all distinct here)."""
    fresh = lambda: NgramMapSource(size_n=2, size_m=2, key_only=True, memory={})  # noqa: E731

    # A 9-token prompt after a draft at 14 tokens: shrink. The point: 9 - n - m = 5 (the previous prompt,
    # 10, is longer than 9). The key at 1 stays (accepted 1), the key at 5 goes; hash slots of positions
    # 1..4 stay, 5's goes; the index resumes after 4.
    memory, st = _map_k_after_one_request()
    p2 = [7, 1, 2, 8, 9, 0, 0, 0, 1]  # [1, 2] at 1 again, by chance
    source = NgramMapSource(size_n=2, size_m=2, key_only=True, memory=memory)
    source.begin(tuple(p2))
    assert source.state is st
    assert [(k.key_idx, k.values[0][2]) for k in st.keys] == [(1, 1)]
    assert sorted(st.slots.values()) == [1, 2, 3, 4] and st.index_last == 4
    assert (st.size_last_begin, st.idx_last_check) == (9, 9)
    # the kept key, found through its hash slot (position 1) in this prompt's tokens, proposes as many as
    # it had accepted; a fresh map finds the same occurrence and proposes m
    assert _request(source, p2, [p2 + [2]]) == [[8]]
    assert _request(fresh(), p2, [p2 + [2]]) == [[8, 9]]

    # The same shrink, [1, 2] at 2 instead: the hash slot's position 1 holds [7, 1] now; the prompt's scan
    # would start at 9 - 5 = 4, already indexed, the generated part's needs positions after 9: no proposal.
    memory, st = _map_k_after_one_request()
    p3 = [7, 7, 1, 2, 8, 5, 5, 5, 1]
    source = NgramMapSource(size_n=2, size_m=2, key_only=True, memory=memory)
    s1 = p3 + [2, 1, 2, 6, 6, 6, 6, 6, 1, 2]
    s2 = s1 + [6, 6, 6, 6, 6]
    # at 18 tokens the generated part's scan (13..10) finds [1, 2] at 10: a new key, m tokens. Indexed: 13
    # ([6, 6]) and 11 ([2, 6]); 12 is [6, 6] again and 10's [1, 2] finds its slot held by stale position 1.
    # At 23 tokens [6, 6] is in the slot at 13; indexed: 16 ([6, 1]) (18, 17, 15, 14 find theirs held).
    # At 25 tokens [1, 2] is in the stream at 2, 8, 10 and 17, but its slot holds 1 and only 20, 19 are
    # scanned: nothing. Positions 5..9 were never indexed.
    assert _request(source, p3, [p3 + [2], s1, s2, s2 + [1, 2]]) == [None, [6, 6], [6, 6], None]
    assert sorted(st.slots.values()) == [1, 2, 3, 4, 11, 13, 16] and st.index_last == 20
    assert [k.key_idx for k in st.keys] == [1, 10, 13]
    assert _request(fresh(), p3, [p3 + [2]]) == [[8, 5]]  # a fresh map scans 4..1: [1, 2] at 2

    # A longer prompt (15 >= 14): nothing is dropped, and positions up to the index's last (9) are not
    # indexed or scanned again: only 10 is scanned for [1, 2] (at 2 here): no proposal; fresh: [8, 5].
    memory, st = _map_k_after_one_request()
    p4 = [7, 7, 1, 2, 8, 5, 5, 5, 5, 5, 5, 5, 5, 5, 1]
    source = NgramMapSource(size_n=2, size_m=2, key_only=True, memory=memory)
    assert _request(source, p4, [p4 + [2]]) == [None]
    assert [(k.key_idx, k.values[0][2]) for k in st.keys] == [(1, 1), (5, 2)]
    assert sorted(st.slots.values()) == [1, 2, 3, 4, 5, 10] and st.index_last == 10
    assert _request(fresh(), p4, [p4 + [2]]) == [[8, 5]]


def test_ngram_map_hash_slots_collide_as_llama_cpps_lcg_hash_makes_them():
    """n 2: [a, b] hashes to (a * 2654435761 + b) mod 2^18, and 2654435761 mod 2^18 = 227761, so [1, 0]
    and [0, 227761] share slot 227761. The prompt's scan indexes 5..1 descending: [1, 0] at 4 takes the
    slot before [0, 227761] at 1. At 11 tokens the key [0, 227761] finds the slot's 4 holding [1, 0], and
    nothing is left to scan (the prompt's part was, the generated part is empty): no proposal (an exact
    index would find 1 and propose [5])."""
    from inspector.sources.llama_ngram_map import ngram_hash

    x = 227761
    assert ngram_hash([1, 2], 0, 2) == 227763 and ngram_hash([1, 0], 0, 2) == ngram_hash([0, x], 0, 2) == x
    prompt = [9, 0, x, 5, 1, 0, 7, 7, 7]
    source = NgramMapSource(size_n=2, size_m=1, key_only=True, memory={})
    assert _request(source, prompt, [prompt + [7], prompt + [7, 0, x]]) == [None, None]
    assert source.state.slots[x] == 4 and 1 not in source.state.slots.values()


# --- ngram-map-k4v --------------------------------------------------------------------------------


def _map_turn(source, prompt, continuation, begin):
    """One request to ``source``: ``begin(prompt)`` first when ``begin`` (the engine's hook), then a query
    at each position of ``continuation`` (the first token came from the prefill). The proposals, in order."""
    if begin:
        source.begin(tuple(prompt))
    tokens, out = list(prompt) + [continuation[0]], []
    for t in continuation[1:]:
        p = source.propose(ProposalRequest(tuple(tokens), len(prompt), 0, 16, 1e18))
        out.append(None if isinstance(p, NoProposal) else p.token_ids)
        tokens.append(t)
    return out


@pytest.mark.parametrize("key_only", [True, False])
@pytest.mark.parametrize("second_prompt", ["next turn", "an earlier prefix"])
def test_ngram_map_proposes_the_same_with_the_begin_hook_as_at_its_first_query_across_requests(key_only, second_prompt):
    """The engine's ``begin`` (llama-server's, when the prompt is done) and the first query's lazy begin
    are one begin: a second request going back to a prefix of the first one's stream must not be begun twice."""
    import random

    rnd = random.Random(7)
    stream = [rnd.randrange(6) for _ in range(400)]
    second = stream[:199] + [rnd.randrange(6) for _ in range(20)] if second_prompt == "next turn" else stream[:60]
    tail = [rnd.randrange(6) for _ in range(150)]
    runs = []
    for begin in (False, True):
        memory = {}
        make = lambda: NgramMapSource(size_n=2, size_m=3, min_hits=1, key_only=key_only, memory=memory)  # noqa: E731
        runs.append((_map_turn(make(), stream[:120], stream[120:200], begin), _map_turn(make(), second, tail, begin)))
    assert runs[0] == runs[1]
    assert any(p is not None for p in runs[0][1])  # the second request proposes: the check has something to compare


def test_ngram_map_k4v_proposes_only_when_one_value_occurs_twice_as_often_as_the_others():
    tied = [0, 1, 2, 3, 4, 1, 2, 5, 6, 7, 1, 2]  # after [1, 2]: [3, 4] once, [5, 6] once
    assert ids(NgramMapSource(2, 2, key_only=False), tied) is None
    assert ids(NgramMapSource(2, 2, key_only=False), [0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 6, 7, 1, 2]) == [5, 6]  # 2:1
    clear = [0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 6, 7, 1, 2]  # [3, 4] three times, [5, 6] once
    # As in llama.cpp, the tokens proposed are those after the matched (latest) occurrence.
    assert ids(NgramMapSource(2, 2, key_only=False), clear) == [5, 6]


def test_ngram_map_k4v_begin_drops_values_at_the_shrink_point_and_keys_left_without_values():
    """llama.cpp 0c1e570 common_ngram_map_begin in k4v mode, worked by hand (n 2, m 2)."""
    # 12-token prompt, a draft at 12: the scan (7..1) finds [1, 2] at 5; its values: [3, 4] at 3 (from the
    # occurrence at 1) and [6, 7] at 7, once each: no dominant value. Index: 7..2 (1's [1, 2] finds its slot
    # held by 5), last 7.
    memory: dict = {}
    p1 = [5, 1, 2, 3, 4, 1, 2, 6, 7, 0, 0, 1]
    first = NgramMapSource(size_n=2, size_m=2, key_only=False, memory=memory)
    assert _request(first, p1, [p1 + [2]]) == [None]
    st = first.state
    assert [[v[0], v[1]] for v in st.keys[0].values] == [[3, 1], [7, 1], [0, 0], [0, 0]]
    # an 11-token prompt: shrink point 11 - 4 = 7. The key (5) stays, its value at 7 goes; slots of 7 go.
    p2 = [9, 9, 9, 3, 4, 1, 2, 3, 4, 0, 1]
    second = NgramMapSource(size_n=2, size_m=2, key_only=False, memory=memory)
    second.begin(tuple(p2))
    assert [(k.key_idx, [v[:2] for v in k.values]) for k in st.keys] == [(5, [[3, 1], [0, 0], [0, 0], [0, 0]])]
    assert sorted(st.slots.values()) == [2, 3, 4, 5, 6] and st.index_last == 6
    # [1, 2] in the slot at 5 (this prompt has it there); the statistics resume at 5: the value after it,
    # [3, 4] at 7, equals the kept value's tokens at 3 in this prompt: counted twice, proposed
    assert _request(second, p2, [p2 + [2]]) == [[3, 4]]
    assert [v[:2] for v in st.keys[0].values] == [[3, 2], [0, 0], [0, 0], [0, 0]]

    # min_hits 2: the first hit makes a key without values; a shrinking begin deletes it even though it lies
    # before the shrink point (5), so the next hit is a first one again; a longer prompt keeps it.
    def after_first(memory):
        s = NgramMapSource(size_n=2, size_m=2, min_hits=2, key_only=False, memory=memory)
        assert _request(s, P1, [P1 + [2]]) == [None]  # [1, 2] at 1, hit once
        return s.state

    memory = {}
    st = after_first(memory)
    p3 = [0, 1, 2, 3, 4, 0, 0, 0, 1]
    again = NgramMapSource(size_n=2, size_m=2, min_hits=2, key_only=False, memory=memory)
    again.begin(tuple(p3))
    assert st.keys == []
    assert _request(again, p3, [p3 + [2]]) == [None]
    memory = {}
    st = after_first(memory)
    p4 = [0, 1, 2, 3, 4, 0, 0, 0, 0, 0, 1]
    kept = NgramMapSource(size_n=2, size_m=2, min_hits=2, key_only=False, memory=memory)
    assert _request(kept, p4, [p4 + [2]]) == [[3, 4]]  # its second hit: the value at 3, once


def test_ngram_map_k4v_needs_min_hits_of_the_key():
    clear = [0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 6, 7, 1, 2]
    s = NgramMapSource(2, 2, min_hits=2, key_only=False)
    assert ids(s, clear) is None  # first hit of the key
    assert ids(s, clear) == [5, 6]  # second hit


# --- ngram-mod ------------------------------------------------------------------------------------


def test_ngram_mod_walks_the_pool_from_the_last_n_tokens_up_to_n_max():
    s = NgramModSource(n_match=2, n_min=1, n_max=4, pool_size=1024)
    assert ids(s, [1, 2, 3, 4, 5, 1, 2]) == [3, 4, 5, 1]
    assert ids(NgramModSource(2, 1, 4, pool_size=1024), [1, 2, 3, 4, 5, 1, 2], cap=2) == [3, 4]


def test_ngram_mod_proposes_nothing_when_the_walk_stops_before_n_min():
    assert ids(NgramModSource(n_match=2, n_min=5, n_max=8, pool_size=1024), [1, 2, 3, 4, 5, 1, 2]) is None
    assert ids(NgramModSource(n_match=2, n_min=4, n_max=8, pool_size=1024), [1, 2, 3, 4, 5, 1, 2]) == [3, 4, 5, 1]


def test_ngram_mod_defaults_need_a_long_repeat():
    a, b = list(range(100, 130)), [1, 2, 3, 4, 5]
    stream = a + b + a[:24]  # the walk retraces 34 tokens: fewer than the default n_min 48
    probe = NgramModSource(pool_size=1 << 16)
    probe.n_min = 1
    assert len(ids(probe, stream, cap=64)) == 34
    s = make_source("ngram-mod", SourceContext(None, memory={}), {})
    assert (s.n_match, s.n_min, s.n_max) == (24, 48, 64)
    assert ids(s, stream) is None
    long = list(range(100, 160))
    assert ids(make_source("ngram-mod", SourceContext(None, memory={}), {}), long + long[:24]) == long[24:32]


def test_ngram_mod_pool_is_shared_by_the_requests_of_a_session():
    memory: dict = {}
    opts = {"n_match": 2, "n_min": 1, "n_max": 3}
    first = make_source("ngram-mod", SourceContext(None, memory=memory), opts)
    assert ids(first, [1, 2, 3, 4, 5, 9]) is None  # learns the prompt's n-grams
    second = make_source("ngram-mod", SourceContext(None, memory=memory), opts)
    assert second.pool is first.pool
    assert ids(second, [8, 1, 2]) == [3, 4, 5]  # from the first request's pool
    assert ids(make_source("ngram-mod", SourceContext(None, memory={}), opts), [8, 1, 2]) is None
    other = make_source("ngram-mod", SourceContext(None, memory=memory), {**opts, "n_match": 3})
    assert other.pool is not first.pool  # the n-gram size shapes the pool: its own key


def test_ngram_mod_empties_the_pool_after_three_poorly_accepted_proposals_and_when_over_full():
    s = NgramModSource(n_match=2, n_min=1, n_max=4, pool_size=1024)
    stream = [1, 2, 3, 4, 5, 1, 2]
    for _ in range(3):
        accept(s, stream, 1)  # 1 of 4 accepted: below half
    assert s.pool.resets == 1 and s.pool.used == 0
    assert ids(s, stream) is None
    small = NgramModSource(n_match=1, n_min=1, n_max=4, pool_size=8)
    small.propose(req(list(range(20)) * 2))  # 39 adds into 8 slots: used > a quarter at begin
    assert small.pool.resets == 1


# --- ngram-cache ----------------------------------------------------------------------------------


def test_ngram_cache_drafts_from_the_context_cache_token_by_token():
    s = nc.NgramCacheSource()
    assert ids(s, [1, 2, 3, 1, 2, 3, 1, 2], cap=4) == [3, 1, 2, 3]
    assert ids(nc.NgramCacheSource(), [1, 2, 3, 1, 2, 3, 1, 2], cap=64) == [3, 1, 2, 3, 1, 2, 3, 1]  # N_DRAFT 8
    assert ids(nc.NgramCacheSource(), [5, 6, 7, 8]) is None  # nothing followed the tip
    assert ids(nc.NgramCacheSource(), [4, 7, 4]) is None  # a 1-gram needs a sample of 2


def test_ngram_cache_counts_across_requests_as_llama_servers_slot_does():
    """llama.cpp 0c1e570 common/speculative.cpp, common_speculative_impl_ngram_cache::draft_one: one
    context cache and cache_size per slot for every request; a query counts prompt[cache_size:] + id_last
    alone (common_ngram_cache_update over tokens_new only) when cache_size < its length, then cache_size =
    its length. Expected values worked out by hand from that code, not by ours."""
    memory: dict = {}
    a = make_source("ngram-cache", SourceContext(None, memory=memory), {})
    assert ids(a, [1, 2, 3, 1, 2]) is None  # cache_size 0: all 5 counted; (2) and (1, 2) -> 3 once each: no draft
    assert ids(a, [1, 2, 3, 1, 2, 3, 9]) is None  # [3, 9] alone: (3) -> 9; (2) -> 3 spans two queries: not counted
    b = make_source("ngram-cache", SourceContext(None, memory=memory), {})  # the next request, same slot
    assert ids(b, [4, 1]) == [2]  # 2 tokens, not past cache_size 7: nothing counted; (1) -> 2 twice from request a
    assert ids(make_source("ngram-cache", SourceContext(None, memory={}), {}), [4, 1]) is None  # another slot
    assert ids(b, [4, 1, 2, 2, 2, 2, 2, 2]) is None  # only [2] past position 7: no n-gram in it; (2) -> 3 once
    assert ids(b, [4, 1, 2, 2, 2, 2, 2, 2, 7, 7]) is None  # [7, 7] alone: (7) -> 7 once
    def pad(ngram):  # llama.cpp's common_ngram: 4 tokens, -1 after the n-gram
        return tuple(ngram) + (-1,) * (4 - len(ngram))
    assert b.slot.cache_size == 10
    assert b.context == {
        pad([1]): {2: 2}, pad([2]): {3: 1}, pad([3]): {1: 1, 9: 1}, pad([7]): {7: 1},
        pad([1, 2]): {3: 1}, pad([2, 3]): {1: 1}, pad([3, 1]): {2: 1},
        pad([1, 2, 3]): {1: 1}, pad([2, 3, 1]): {2: 1}, pad([1, 2, 3, 1]): {2: 1}}
    assert b.dynamic == {}  # nothing merged into the dynamic cache


def test_ngram_cache_writes_its_dynamic_file_with_the_slots_counts_and_drafts_never_change_the_dynamic_cache(
        tmp_path):
    memory: dict = {}
    dyn = str(tmp_path / "dynamic.bin")
    first = make_source("ngram-cache", SourceContext(None, memory=memory), {"lookup_cache_dynamic": dyn})
    assert ids(first, [1, 2, 3] * 4) == [1, 2, 3, 1, 2, 3, 1, 2]
    first.close()  # what registry.close_source does at the end of a run
    assert nc.load(dyn, "x")[(1, 2, -1, -1)] == {3: 4}  # the file: what was read (nothing) + the slot's counts
    second = make_source("ngram-cache", SourceContext(None, memory=memory), {"lookup_cache_dynamic": dyn})
    assert second.dynamic == {}  # as read when the session began: the drafts' dynamic cache is never merged into
    assert ids(second, [9, 1, 2], cap=1) == [3]  # (1, 2) -> 3 four times in the slot's context cache
    second.close()
    assert nc.load(dyn, "x")[(1, 2, -1, -1)] == {3: 4}  # the slot's counts once, not once per request
    assert ids(nc.NgramCacheSource(), [9, 1, 2]) is None  # without them: nothing
    from_file = make_source("ngram-cache", SourceContext(None, memory={}), {"lookup_cache_dynamic": dyn})
    assert from_file.dynamic[(1, 2, -1, -1)] == {3: 4}
    assert ids(from_file, [9, 1, 2], cap=1) == [3]  # from the dynamic cache (STRICT: 4 of 4)


def test_ngram_cache_static_file_is_read_and_bad_files_are_refused_by_name(tmp_path):
    static = str(tmp_path / "static.bin")
    nc.save({(1, 2, -1, -1): {3: 5, 4: 1}}, static)
    s = make_source("ngram-cache", SourceContext(None, memory={}), {"lookup_cache_static": static})
    assert ids(s, [7, 1, 2]) == [3]
    with pytest.raises(ValueError, match=r"static lookup cache .*missing\.bin: no such file"):
        make_source("ngram-cache", SourceContext(None, memory={}), {"lookup_cache_static": str(tmp_path / "missing.bin")})
    broken = tmp_path / "broken.bin"
    broken.write_bytes(b"\x01\x02\x03")
    with pytest.raises(ValueError, match=r"dynamic lookup cache .*broken\.bin: not a llama.cpp n-gram cache"):
        make_source("ngram-cache", SourceContext(None, memory={}), {"lookup_cache_dynamic": str(broken)})


# --- the bundled model ----------------------------------------------------------------------------


def test_each_source_keeps_plain_greedy_output_on_the_bundled_model(make_generation, scheduler, runtime, chat_tokens):
    from tests.scenarios import assert_same_greedy_output

    tokens = chat_tokens("Repeat exactly: the red cat sat on the mat, the red cat sat on the mat.")
    plain = make_generation(None, tokens, max_new_tokens=24)
    plain.run()
    small = {"ngram-simple": {"size_n": 2, "size_m": 8}, "ngram-map-k": {"size_n": 2, "size_m": 8},
             "ngram-map-k4v": {"size_n": 2, "size_m": 8}, "ngram-mod": {"n_match": 3, "n_min": 1, "n_max": 8},
             "ngram-cache": {}}
    for name in NAMES:
        source = make_source(name, SourceContext(runtime, memory={}), small[name])
        g = make_generation(source, tokens, max_new_tokens=24)
        try:
            g.run()
        finally:
            g.close()
        print(name, len(g.receipts), "receipts", [len(r.proposal_token_ids) for r in g.receipts])
        assert g.receipts, f"{name} made no proposal on a copy prompt"
        assert_same_greedy_output(scheduler, tokens, plain.generated, g.generated)


def test_ngram_cache_followers_iterate_in_libstdcxx_unordered_map_order_so_ties_break_as_in_llama_server():
    """Hand-worked from libstdc++'s rules: 13 buckets after the first insert, a new key goes first in its
    bucket (key % 13) or at the front; the 14th key rehashes to 29 buckets, re-placing in the old order."""
    p = Part()
    for t in (5, 18, 7, 31):  # 5, 18, 31 share bucket 5; 7 is alone in bucket 7
        p.add(t)
    assert list(p) == [7, 31, 18, 5] and p.buckets == 13
    p.add(7, 2)
    assert list(p) == [7, 31, 18, 5] and p[7] == 3  # a known key keeps its place
    q = Part()
    for t in range(14):
        q.add(t)
    assert q.buckets == 29
    # 0..12 each alone in 13 buckets, each to the front: [12, 11, ..., 0]. The 14th key needs 29 buckets:
    # the rehash re-places 12, 11, ..., 0 each at the front ([0, 1, ..., 12]), then 13 goes to the front
    # (what g++ 12's unordered_map printed for the same inserts).
    assert list(q) == [13, *range(13)]


def test_the_mod_pool_counts_a_slot_as_used_when_it_is_first_filled_not_when_it_is_overwritten():
    from inspector.sources.llama_ngram_mod import ModPool

    pool = ModPool(2, 1 << 16)
    tokens = [1, 2, 3, 1, 2, 3, 1, 2, 3]
    for i in range(len(tokens) - 2):
        pool.add(tokens, i)
    assert pool.used == 3  # three distinct 2-grams (1 2, 2 3, 3 1), each slot filled once


# --- Mutation testing (issue 42): the map proposers' boundaries, reasons and bookkeeping, by hand ------

from inspector.sources import llama_ngram_map as nm


def why(source, tokens, cap=8, prompt=None):
    p = source.propose(req(tokens, cap, prompt))
    assert isinstance(p, NoProposal), p
    return p.reason


def test_ngram_simple_needs_more_than_n_plus_m_plus_1_tokens_before_the_current_one():
    s = NgramSimpleSource(size_n=2, size_m=3)
    # 6 tokens before the current one (n + m + 1): nothing, though [1, 2] at 1 is followed by 3 tokens
    assert why(s, [9, 1, 2, 3, 4, 1, 2]) == "history_short"
    # 7 tokens: [1, 2] at 2, followed by 3, 4, 1 (min(m, 7 - 4) = 3 >= n)
    assert ids(s, [9, 9, 1, 2, 3, 4, 1, 2]) == [3, 4, 1]
    assert why(s, [9, 9, 9, 8, 3, 4, 1, 2]) == "no_match"


def test_ngram_simple_searches_from_n_plus_1_before_the_end_back_to_position_1():
    s = NgramSimpleSource(size_n=2, size_m=3)
    # [7, 7] also at 7 (followed by nothing): the search starts at cur - n - 1 = 6 and finds it at 1
    assert ids(s, [5, 7, 7, 1, 2, 3, 4, 7, 7, 7]) == [1, 2, 3]
    # n 1, m 1: the search starts at cur - 2 = 3, where 9 is followed by one token
    assert ids(NgramSimpleSource(size_n=1, size_m=1), [5, 6, 8, 9, 3, 9]) == [3]


def test_ngram_simple_and_map_defaults_names_and_decision_ids_are_pinned():
    assert NgramSimpleSource().settings() == {"size_n": 12, "size_m": 48}
    assert NgramMapSource().settings() == {"size_n": 12, "size_m": 48, "min_hits": 1}
    assert (NgramMapSource().name, NgramMapSource().key_only) == ("ngram-map-k", True)
    assert NgramMapSource(key_only=False).name == "ngram-map-k4v"
    s = NgramSimpleSource(size_n=2, size_m=3)
    stream = [7, 1, 2, 3, 4, 5, 8, 8, 1, 2]
    assert s.propose(req(stream)).decision_id == b"ngram-simple:n2:1"
    assert s.propose(req(stream)).decision_id == b"ngram-simple:n2:2"
    m = NgramMapSource(size_n=2, size_m=2, memory={})
    assert m.propose(req(K_STREAM)).decision_id == b"ngram-map-k:n2:1"


def test_make_ngram_map_k_passes_min_hits_on_and_keeps_its_map_under_its_options():
    memory: dict = {}
    s = make_source("ngram-map-k", SourceContext(None, memory=memory), {"size_n": 2, "size_m": 2, "min_hits": 3})
    assert s.settings() == {"size_n": 2, "size_m": 2, "min_hits": 3} and s.name == "ngram-map-k"
    assert ids(s, K_STREAM) == [3, 4]
    assert list(memory) == [("ngram-map-k", 2, 2, 3)]


def test_the_warm_state_names_the_keys_and_tokens_kept_from_the_last_request():
    memory: dict = {}
    first = NgramMapSource(size_n=2, size_m=2, memory=memory)
    assert first.remembered_at_start == (0, 0) and first.warm_state() == ""
    assert ids(first, K_STREAM) == [3, 4]  # one key, [1, 2]; the stream had 11 tokens
    second = NgramMapSource(size_n=2, size_m=2, memory=memory)
    assert second.remembered_at_start == (11, 1)
    assert second.warm_state() == "a map of 1 keys over 11 tokens of an earlier request"
    other = NgramMapSource(size_n=3, size_m=2, memory=memory)  # other options: another map
    assert other.remembered_at_start == (0, 0)


def test_ngram_map_needs_2n_plus_m_tokens_before_the_current_one():
    # n 2, m 2: 6 tokens before the current one suffice; [1, 2] at 1 is followed by 3, 4
    assert ids(NgramMapSource(size_n=2, size_m=2, memory={}), [9, 1, 2, 3, 4, 1, 2]) == [3, 4]
    assert why(NgramMapSource(size_n=2, size_m=2, memory={}), [9, 1, 2, 3, 1, 2]) == "history_short"


def test_ngram_map_says_why_it_proposes_nothing():
    assert why(NgramMapSource(size_n=2, size_m=2, memory={}), [9, 8, 7, 6, 5, 4, 1, 2]) == "no_match"
    refused = NgramMapSource(size_n=2, size_m=2, memory={})
    accept(refused, K_STREAM, 0)
    assert why(refused, K_STREAM) == "learned_zero"
    clear = [0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 6, 7, 1, 2]
    assert why(NgramMapSource(2, 2, min_hits=2, key_only=False, memory={}), clear) == "below_min_hits"
    tied = [0, 1, 2, 3, 4, 1, 2, 5, 6, 7, 1, 2]
    assert why(NgramMapSource(2, 2, key_only=False, memory={}), tied) == "no_dominant_value"


def test_ngram_map_k4v_three_to_two_is_not_dominant():
    # after [1, 2]: [3, 4] three times, [5, 6] twice (the matched occurrence at 17 included): 3 < 2 * 2
    stream = [0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 6, 1, 2, 5, 6, 7, 1, 2]
    assert why(NgramMapSource(2, 2, key_only=False, memory={}), stream) == "no_dominant_value"


def test_ngram_map_k4v_counts_an_occurrence_at_position_0():
    # [1, 2] at 0 -> [3, 4], at 4 -> [5, 6], at 8 (the match) -> [3, 4]: 2 to 1, dominant
    stream = [1, 2, 3, 4, 1, 2, 5, 6, 1, 2, 3, 4, 0, 1, 2]
    assert ids(NgramMapSource(2, 2, key_only=False, memory={}), stream) == [3, 4]


def test_ngram_map_k4v_learns_the_accepted_length_of_the_proposed_value():
    # after [1, 2]: [3, 4] five times, then [5, 6] at the match (21): 5 to 1, the tokens after the match proposed
    stream = [0] + [1, 2, 3, 4] * 5 + [1, 2, 5, 6, 7, 1, 2]
    s = NgramMapSource(2, 2, key_only=False, memory={})
    assert accept(s, stream, 1) == [5, 6]  # the dominant value ([3, 4]) learns 1
    # asked again: the statistics resume at the match, counting it again (5 to 2): at most 1 token
    assert ids(s, stream) == [5]


def test_ngram_map_ignores_a_receipt_of_another_decision():
    s = NgramMapSource(size_n=2, size_m=2, memory={})
    assert ids(s, K_STREAM) == [3, 4]
    s.report(SimpleNamespace(decision_id=b"other".hex(), accepted_proposal_tokens=0))
    assert ids(s, K_STREAM) == [3, 4]  # not learned: still m tokens


def test_a_late_receipt_after_an_empty_draft_changes_nothing():
    s = NgramMapSource(size_n=2, size_m=2, memory={})
    p = s.propose(req(K_STREAM))
    assert why(s, K_STREAM[:5]) == "history_short"
    s.report(SimpleNamespace(decision_id=p.decision_id.hex(), accepted_proposal_tokens=0))
    assert ids(s, K_STREAM) == [3, 4]


def test_the_begin_prompt_is_the_tokens_before_the_first_drafting_point():
    r = ProposalRequest((1, 2, 3, 4), 4, 0, 8, float("inf"))
    assert nm._begin_tokens(r) == [1, 2, 3]  # all the prompt: the current token is not in it
    assert nm._begin_tokens(ProposalRequest((1, 2, 3, 4), 2, 0, 8, float("inf"))) == [1, 2]


# --- ngram-mod, mutation testing (issue 42) ---------------------------------------------------------

from inspector.sources import llama_ngram_mod as nmod


def test_ngram_mod_hashes_n_grams_with_llama_cpps_64_bit_lcg():
    pool = nmod.ModPool(2, 1024)
    # h = ((0 * M + 1) * M + 2) mod 2^64, then mod the size; M = 6364136223846793005
    assert pool.slot([1, 2], 0) == (6364136223846793005 + 2) % 1024
    assert pool.slot([7, 1, 2], 1) == pool.slot([1, 2], 0)
    pool.reset()
    pool.reset()
    assert pool.resets == 2


def test_ngram_mod_defaults_settings_memory_and_warm_state_are_pinned():
    assert NgramModSource(memory={}, pool_size=8).settings() == {"n_match": 24, "n_min": 48, "n_max": 64}
    memory: dict = {}
    s = make_source("ngram-mod", SourceContext(None, memory=memory), {"n_match": 2, "n_min": 5, "n_max": 10})
    assert s.settings() == {"n_match": 2, "n_min": 5, "n_max": 10}
    assert list(memory) == [("ngram-mod", 2, nmod.POOL_SIZE)]
    assert s.warm_state() == ""
    first = NgramModSource(2, 1, 4, memory=memory, pool_size=1024)
    first.begin([1, 2, 3, 4, 5])  # n-grams at 0, 1, 2: three slots filled
    assert NgramModSource(2, 1, 4, memory=memory, pool_size=1024).warm_state() == \
        "pool holds 3 of 1,024 entries from earlier requests"
    assert check_source_options("ngram-mod", {"n_min": "64"}) == {"n_min": 64}  # n_min = n_max is allowed


def test_ngram_mod_says_why_and_names_its_decisions():
    s = NgramModSource(2, 1, 4, memory={}, pool_size=1024)
    assert s.propose(req([1, 2])) == NoProposal("history_short")  # 1 token before the current one: fewer than n
    assert s.propose(req([1, 2, 3], prompt=3)) == NoProposal("below_n_min", "walked 0 of n_min 1")
    s = NgramModSource(2, 1, 4, memory={}, pool_size=1024)
    assert s.propose(req([1, 2, 3, 4, 5, 1, 2])).decision_id == b"ngram-mod:1:n2:w4"
    assert s.propose(req([1, 2, 3, 4, 5, 1, 2])).decision_id == b"ngram-mod:2:n2:w4"


def test_ngram_mod_adds_generated_n_grams_once_more_than_32_positions_wait():
    s = NgramModSource(2, 1, 2, memory={}, pool_size=1 << 16)
    prompt = list(range(100, 110))  # begin adds the n-grams at 0..7; the next to add is 8
    # generated: (50, 51) -> 52 at 10, (51, 52) -> 200 at 11; the stream then ends in 50, 51 again
    t41 = prompt + [50, 51, 52] + list(range(200, 226)) + [50, 51]  # 41 tokens: 40 before the current one
    assert s.propose(req(t41, prompt=10)) == NoProposal("below_n_min", "walked 0 of n_min 1")  # 8 + 32 = 40: wait
    t42 = prompt + [50, 51, 52] + list(range(200, 227)) + [50, 51]  # 41 before: 8..38 added, next is 39
    assert list(s.propose(req(t42, prompt=10)).token_ids) == [52, 200]
    t72 = t42 + [60, 61, 62] + list(range(300, 325)) + [60, 61]  # 71 before the current one: 39 + 32, wait
    assert isinstance(s.propose(req(t72, prompt=10)), NoProposal)
    t73 = t42 + [60, 61, 62] + list(range(300, 326)) + [60, 61]  # 72: 39..69 added, (60, 61) -> 62 at 42 among them
    assert list(s.propose(req(t73, prompt=10)).token_ids) == [62, 300]


def _mod_receipt(p, accepted):
    return SimpleNamespace(decision_id=p.decision_id.hex(), accepted_proposal_tokens=accepted)


def test_ngram_mod_empties_its_pool_after_three_low_acceptances_in_a_row():
    s = NgramModSource(2, 1, 2, memory={}, pool_size=1024)
    stream = [1, 2, 3, 4, 5, 1, 2]
    s.report(_mod_receipt(s.propose(req(stream)), 0))  # a low one (0 of 2)
    s.report(SimpleNamespace(decision_id="00", accepted_proposal_tokens=0))  # no proposal pending: ignored
    for accepted in (1, 1):  # exactly half (1 of 2) is not low: the streak is broken
        s.report(_mod_receipt(s.propose(req(stream)), accepted))
    assert s.pool.resets == 0
    for accepted in (0, 0, 2, 0, 0):  # the streak starts again after a good one
        s.report(_mod_receipt(s.propose(req(stream)), accepted))
    assert s.pool.resets == 0
    s.report(_mod_receipt(s.propose(req(stream)), 0))  # the third low in a row
    assert s.pool.resets == 1
    # (the pool is empty now; the chunked adds refill it as the stream grows)
    memory: dict = {}
    s2 = NgramModSource(2, 1, 2, memory=memory, pool_size=1024)
    for _ in range(3):
        s2.report(_mod_receipt(s2.propose(req(stream)), 0))
    assert s2.pool.resets == 1
    NgramModSource(2, 1, 2, memory=memory, pool_size=1024).begin(stream[:-1])  # another request refills the pool
    for _ in range(2):  # two more lows after the reset: the count started again at 0
        p = s2.propose(req(stream))
        s2.report(_mod_receipt(p, 0))
    assert s2.pool.resets == 1


# --- ngram-map against llama.cpp 0c1e570 common/ngram-map.cpp, more boundaries (issue 42) ------------


def test_ngram_map_a_hash_slot_at_the_last_key_position_is_not_a_match():
    """llama.cpp: ``idx_key < cur_len - n - m - 1``. n 2, m 1, a one-token prompt: the first query scans the
    generated part (4, 3, 2) and finds [1, 2] at 4 = cur - n - m - 1; asked again at the same length, the
    hash slot holds 4, which is not below 4, and nothing is left to scan."""
    s = NgramMapSource(size_n=2, size_m=1, memory={})
    s.begin((9,))
    stream = [9, 8, 7, 6, 1, 2, 5, 1, 2]
    assert ids(s, stream, prompt=1) == [5]
    assert why(s, stream, prompt=1) == "no_match"


def test_ngram_map_with_a_short_prompt_scans_only_the_generated_part_and_indexes_it():
    """A 2-token prompt (not above n + m + 1): no prompt scan. n 2, m 1. At 8 tokens before the current
    one the generated part's scan indexes 4 ([2, 6]) and 3 ([1, 2]); at 10 the key [1, 2] is in the slot at
    3 (3 < 6): it proposes what followed it, 6."""
    s = NgramMapSource(size_n=2, size_m=1, memory={})
    t1 = [1, 2, 5, 1, 2, 6, 7, 8, 9]
    assert why(s, t1, prompt=2) == "no_match"
    assert ids(s, t1 + [1, 2], prompt=2) == [6]


def test_ngram_map_k4v_statistics_resume_at_the_last_match_inclusive():
    # [3, 4] twice, [5, 6] once (the match at 10): 2 to 1, proposed; asked again, only the match is counted
    # again (llama.cpp: i from stat_idx to match_pos inclusive): 2 to 2, not dominant
    stream = [0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 6, 7, 1, 2]
    s = NgramMapSource(2, 2, key_only=False, memory={})
    assert ids(s, stream) == [5, 6]
    assert why(s, stream) == "no_dominant_value"


def test_ngram_map_k4v_statistics_stop_at_the_match():
    # [7, 7] matches at 3 (the scan's first position, cur - n - m - 1) and at 4, after it: only up to 3 is
    # counted, one value ([7, 9]), proposed
    assert ids(NgramMapSource(2, 2, key_only=False, memory={}), [0, 1, 2, 7, 7, 7, 9, 7, 7]) == [7, 9]


def test_a_begun_request_that_never_drafted_is_the_warm_state_of_the_next():
    memory: dict = {}
    NgramMapSource(size_n=2, size_m=2, memory=memory).begin((1, 2, 3, 4, 5))
    assert NgramMapSource(size_n=2, size_m=2, memory=memory).warm_state() == \
        "a map of 0 keys over 5 tokens of an earlier request"


def test_ngram_map_begin_shrinks_to_the_previous_prompt_length_when_that_is_not_longer():
    # after one request: prompt 10, last draft at 14 tokens, index up to 9. A 10-token prompt: the shrink
    # point is the previous prompt's length, 10: both keys (1, 5) and the slots (1..5) stay, index up to 9
    memory, st = _map_k_after_one_request()
    NgramMapSource(size_n=2, size_m=2, key_only=True, memory=memory).begin(tuple(range(10)))
    assert [k.key_idx for k in st.keys] == [1, 5] and sorted(st.slots.values()) == [1, 2, 3, 4, 5]
    assert st.index_last == 9


def test_ngram_map_begin_with_the_last_drafts_length_drops_nothing():
    memory, st = _map_k_after_one_request()
    st.draft(P1 + [2, 3, 9, 6, 7, 1, 1, 1, 1, 1], 1)  # one more draft, at 20: the generated part 15..11 indexed
    assert max(st.slots.values()) > 10
    before = ([k.key_idx for k in st.keys], dict(st.slots), st.index_last)
    NgramMapSource(size_n=2, size_m=2, key_only=True, memory=memory).begin(tuple(range(20)))  # = the last draft's 20
    assert ([k.key_idx for k in st.keys], dict(st.slots), st.index_last) == before


def test_after_a_shrink_to_nothing_the_next_prompt_is_scanned_down_to_position_1():
    memory: dict = {}
    make = lambda: NgramMapSource(size_n=2, size_m=2, key_only=True, memory=memory)  # noqa: E731
    make().begin(tuple(range(10)))
    make().begin((1, 2, 3))  # 3 tokens (not above n + m): shrink point 0, the index starts again at 0
    p = [7, 1, 2, 3, 4, 9, 9, 9, 1]
    s = make()
    s.begin(tuple(p))  # 9 tokens: not shorter, nothing dropped; the prompt's scan runs 4..1
    assert ids(s, p + [2], prompt=9) == [3, 4]


def _k4v_keys_without_and_with_values(memory):
    """k4v, n 2, m 2, min_hits 2, prompt P1 + [0]... worked by hand: at 11 tokens [6, 7] matches at 5 (a
    key, first hit: no values); at 13 [1, 2] is in the slot at 1 (a key, first hit); at 17 its second hit
    counts the value [3, 4] at 3 and proposes it. Keys in order: 5 (no values), 1 (value at 3)."""
    p = [5, 1, 2, 3, 4, 6, 7, 8, 9, 0]
    s = NgramMapSource(size_n=2, size_m=2, min_hits=2, key_only=False, memory=memory)
    got = _request(s, p, [p + [6, 7], p + [6, 7, 1, 2], p + [6, 7, 1, 2, 3, 4, 1, 2]])
    assert got == [None, None, [3, 4]]
    assert [k.key_idx for k in s.state.keys] == [5, 1]
    return s.state


def test_ngram_map_begin_drops_each_key_it_should_whatever_their_order():
    memory: dict = {}
    st = _k4v_keys_without_and_with_values(memory)
    # a 12-token prompt: shrink point 10; the key at 5 has no values: dropped; the key at 1 (value 3) stays
    NgramMapSource(size_n=2, size_m=2, min_hits=2, key_only=False, memory=memory).begin(tuple(range(12)))
    assert [k.key_idx for k in st.keys] == [1]
    memory = {}
    st = _k4v_keys_without_and_with_values(memory)
    # an 8-token prompt: shrink point 8 - 4 = 4; the key at 5 lies after it: dropped; the key at 1 stays
    NgramMapSource(size_n=2, size_m=2, min_hits=2, key_only=False, memory=memory).begin(tuple(range(8)))
    assert [k.key_idx for k in st.keys] == [1]


def test_ngram_mod_empties_the_pool_at_begin_only_above_a_quarter_full():
    s = NgramModSource(1, 1, 1, memory={}, pool_size=8)
    s.begin([1, 2, 3])  # n-grams at 0, 1: 2 of 8 slots, exactly a quarter: kept
    assert (s.pool.used, s.pool.resets) == (2, 0)
    s = NgramModSource(1, 1, 1, memory={}, pool_size=8)
    s.begin([1, 2, 3, 4])  # 3 of 8: emptied
    assert (s.pool.used, s.pool.resets) == (0, 1)


def test_ngram_mod_after_begin_emptied_the_pool_the_prompt_is_not_added_again():
    # n 1, 8 slots (slot = token mod 8): the prompt fills 4 of 8, begin empties the pool; the chunk at 37
    # tokens before the current one adds positions 4..35 only (5 -> 0, 0 -> 0): nothing follows 1
    s = NgramModSource(1, 1, 2, memory={}, pool_size=8)
    stream = [1, 2, 3, 4, 5] + [0] * 32 + [1]
    assert s.propose(req(stream, prompt=5)) == NoProposal("below_n_min", "walked 0 of n_min 1")


def test_ngram_mod_after_a_low_streak_the_next_chunk_adds_from_position_0():
    s = NgramModSource(1, 1, 1, memory={}, pool_size=1024)
    s.report(SimpleNamespace(decision_id="00", accepted_proposal_tokens=0))  # nothing proposed yet: ignored
    prompt = [1, 2, 3]
    for _ in range(3):
        p = s.propose(req(prompt + [1], prompt=3))
        assert list(p.token_ids) == [2]
        s.report(_mod_receipt(p, 0))
    assert s.pool.resets == 1
    # 33 tokens before the current one (more than 0 + 32): positions 0..31 added, 1 -> 2 among them
    assert list(s.propose(req(prompt + [7] * 30 + [1], prompt=3)).token_ids) == [2]


# --- ngram-cache, mutation testing (issue 42): llama.cpp's thresholds and the files, by hand ---------

import os
import struct


def _part(*pairs):
    p = Part()
    for token, count in pairs:
        p.add(token, count)
    return p


def _k(*tokens):
    return tuple(tokens) + (-1,) * (4 - len(tokens))


def test_ngram_cache_context_threshold_is_a_share_of_at_least_the_percent():
    # a 1-gram needs a sample of 2 and 66 %: 65 of 99 is 65.66 %, short of it (not 101 * 65 >= 66 * 99)
    assert nc.draft([0, 1], 1, {_k(1): _part((5, 65), (6, 34))}, {}, {}) == []
    assert nc.draft([0, 1], 1, {_k(1): _part((5, 66), (6, 34))}, {}, {}) == [5]  # 66 of 100: exactly 66 %
    # a 2-gram needs 50 %: one of two is exactly half
    assert len(nc.draft([1, 2], 1, {_k(1, 2): _part((5, 1), (6, 1))}, {}, {})) == 1


def test_ngram_cache_the_longest_n_gram_is_tried_first_and_a_short_stream_has_no_longer_ones():
    ctx = {_k(1, 2, 3, 4): _part((9, 1)), _k(4): _part((5, 2))}
    assert nc.draft([1, 2, 3, 4], 1, ctx, {}, {}) == [9]  # the 4-gram (sample 1, 50 %) before the 1-gram
    # two tokens: the 1- and 2-grams only; the 2-gram's sample of 1 is below its minimum 2
    assert nc.draft([1, 2], 1, {_k(1, 2): _part((5, 1))}, {}, {}) == []


def test_ngram_cache_static_counts_weigh_the_context_followers_100_to_1():
    # equal context counts; the static 2-gram (1, 2) knows 6 three times, 5 once: 2 * 300 beats 2 * 100
    ctx = {_k(1, 2): _part((5, 2), (6, 2))}
    assert nc.draft([1, 2], 1, ctx, {}, {_k(1, 2): _part((5, 1), (6, 3))}) == [6]
    assert nc.draft([1, 2], 1, ctx, {}, {_k(1, 2): _part((5, 3), (6, 1))}) == [5]


def test_ngram_cache_static_cache_alone_needs_a_sample_of_2_and_half():
    def static(*pairs):
        return nc.draft([1, 2], 1, {}, {}, {_k(1, 2): _part(*pairs)})

    assert static((5, 2)) == [5]  # sample 2, 100 %
    assert static((5, 1)) == []  # sample 1
    assert static((5, 3), (6, 2), (7, 1)) == [5]  # 3 of 6: exactly half
    assert static((5, 2), (6, 1), (7, 1), (8, 1)) == []  # 2 of 5: short of half
    assert static((5, 50), (6, 26), (7, 25)) == []  # 50 of 101: short of half (not 101 * 50 >= 50 * 101)


def test_ngram_cache_dynamic_cache_uses_the_strict_limits():
    dyn = {_k(1, 2): _part((5, 2), (6, 1))}  # a 2-gram: sample 3, 66 % (2 of 3 = 66.7 %)
    assert nc.draft([1, 2], 1, {}, dyn, {}) == [5]
    assert nc.draft([1, 2], 1, {}, {_k(1, 2): _part((5, 2))}, {}) == []  # sample 2 < 3


def test_ngram_cache_memory_keys_warm_state_decision_ids_and_reasons_are_pinned(tmp_path):
    memory: dict = {}
    a = make_source("ngram-cache", SourceContext(None, memory=memory), {})
    assert sorted(memory) == [("ngram-cache", "dynamic", ""), ("ngram-cache", "slot", "", "")]
    assert a.warm_state() == "" and a.settings() == {"lookup_cache_static": "", "lookup_cache_dynamic": "",
                                                     "n_draft": 8}
    assert a.propose(req([7])) == NoProposal("history_short")
    assert a.propose(req([7, 8])) == NoProposal("no_match")  # [8] counted alone: nothing
    stream = [7, 8, 7, 8, 7, 8, 7]
    # [7, 8, 7, 8, 7] counted alone: (7) -> 8 twice, (8) -> 7 twice, (7, 8) -> 7 twice, (8, 7) -> 8,
    # (7, 8, 7) -> 8, (8, 7, 8) -> 7, (7, 8, 7, 8) -> 7: 7 n-grams; the tip's 3-gram (7, 8, 7) proposes 8
    assert a.propose(req(stream)).decision_id == b"ngram-cache:1"
    assert a.propose(req(stream)).decision_id == b"ngram-cache:2"
    b = make_source("ngram-cache", SourceContext(None, memory=memory), {})
    assert b.warm_state() == "context cache 7 n-grams from 1 earlier request (this one counts its tokens from " \
                             "position 7 on)"
    b.propose(req([7]))
    b.propose(req([7]))
    c = make_source("ngram-cache", SourceContext(None, memory=memory), {})
    assert c.warm_at_start[4] == 2  # one more request, however many queries it made
    static = str(tmp_path / "s.bin")
    nc.save({_k(1, 2): _part((3, 2))}, static)
    memory = {}
    make_source("ngram-cache", SourceContext(None, memory=memory), {"lookup_cache_static": static})
    assert ("ngram-cache", "static", os.path.abspath(static)) in memory
    assert ("ngram-cache", "slot", os.path.abspath(static), "") in memory
    d = make_source("ngram-cache", SourceContext(None, memory=memory), {"lookup_cache_static": static})
    assert d.warm_state() == "static cache 1 n-grams"


def test_ngram_cache_close_writes_the_file_once_with_what_was_read_plus_the_slots_counts(tmp_path):
    dyn = str(tmp_path / "d.bin")
    nc.save({_k(1, 2): _part((3, 2)), _k(9): _part((9, 1))}, dyn)
    memory: dict = {}
    s = make_source("ngram-cache", SourceContext(None, memory=memory), {"lookup_cache_dynamic": dyn})
    assert ("ngram-cache", "dynamic", os.path.abspath(dyn)) in memory
    assert s.warm_state() == "dynamic cache 2 n-grams from its file"
    s.propose(req([1, 2, 3]))  # counted: (1) -> 2, (2) -> 3, (1, 2) -> 3
    s.close()
    saved = nc.load(dyn, "x")
    assert saved[_k(1, 2)] == {3: 3} and saved[_k(9)] == {9: 1} and saved[_k(1)] == {2: 1}
    os.unlink(dyn)
    s.close()  # closed already: not written again
    assert not os.path.exists(dyn)


def _record(ngram, pairs, count=None):
    data = struct.pack("<4i", *ngram) + struct.pack("<i", len(pairs) if count is None else count)
    return data + b"".join(struct.pack("<2i", t, c) for t, c in pairs)


@pytest.mark.parametrize("data, message", [
    (b"\0" * 16, "truncated record at byte 0"),
    (_record(_k(1), [], count=1), "bad follower count 1 at byte 16"),  # 20 bytes: a whole header, no pair
    (_record(_k(1), [(5, 1)]) + b"\0" * 19, "truncated record at byte 28"),
    (_record(_k(1), [], count=0) + _record(_k(2), [(5, 1)]), "bad follower count 0 at byte 16"),
    (_record(_k(1), [(5, 1)], count=5), "bad follower count 5 at byte 16"),
    (_record(_k(1), [(-1, 1)]), "token -1 count 1 at byte 20"),
    (_record(_k(1), [(5, 0)]), "token 5 count 0 at byte 20"),
])
def test_a_broken_cache_file_is_named_with_the_byte_where_it_breaks(tmp_path, data, message):
    path = tmp_path / "c.bin"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=r"^static lookup cache " + str(path) + r": not a llama\.cpp n-gram cache \("
                       + message + r"\)$"):
        nc.load(str(path), "static lookup cache")


def test_a_cache_file_may_hold_token_0_and_other_read_errors_are_named(tmp_path):
    path = tmp_path / "c.bin"
    path.write_bytes(_record(_k(0), [(0, 2)]))
    assert nc.load(str(path), "x") == {_k(0): {0: 2}}
    with pytest.raises(ValueError, match=r"^static lookup cache " + str(tmp_path) + r" is a folder; expected a "
                                         r"regular file$"):
        nc.load(str(tmp_path), "static lookup cache")
    with pytest.raises(ValueError, match=r"^static lookup cache " + str(path) + r"/x: cannot read it \(Not a "
                                         r"directory\)$"):
        nc.load(str(path) + "/x", "static lookup cache")


def test_the_cache_path_options_and_the_dynamic_folder_are_checked(tmp_path):
    assert check_source_options("ngram-cache", {"lookup_cache_static": None}) == {"lookup_cache_static": ""}
    with pytest.raises(ValueError, match=r"^source ngram-cache option lookup_cache_static must be a file, observed a "
                                         r"directory '" + str(tmp_path) + "'$"):
        check_source_options("ngram-cache", {"lookup_cache_static": str(tmp_path)})
    missing = tmp_path / "no" / "d.bin"
    with pytest.raises(ValueError, match=r"^--lookup-cache-dynamic " + str(missing) + r": the folder "
                       + str(missing.parent) + r" does not exist; expected a path in an existing folder \(the cache "
                                               r"is saved there when the run ends\)$"):
        nc.check_writable_folder(str(missing))


# --- hash_order: libstdc++'s bucket counts (issue 42) ----------------------------------------------


def test_bucket_counts_follow_libstdcxx_fast_table_then_its_primes():
    from inspector.sources.hash_order import next_bucket_count

    assert next_bucket_count(0) == (1, 0)
    assert next_bucket_count(1) == (2, 2)
    assert next_bucket_count(12) == (13, 13) and next_bucket_count(13) == (13, 13)  # __fast_bkt below 14
    assert next_bucket_count(14) == (17, 17) and next_bucket_count(17) == (17, 17)  # the first prime >= n
    assert next_bucket_count(18) == (19, 19)
    assert next_bucket_count(976369) == (976369, 976369)  # the table's last prime
    assert next_bucket_count(1_000_000) == (1_000_001, 1_000_001)  # beyond the table: an odd count


def test_an_empty_part_copies():
    empty = Part().copy()
    assert empty == {} and list(empty) == []
    empty.add(5)
    assert dict(empty) == {5: 1}


def test_ngram_cache_merge_adds_the_counts():
    target = {_k(1, 2): _part((3, 2))}
    nc.merge(target, {_k(1, 2): _part((3, 5), (4, 1)), _k(7): _part((8, 1))})
    assert target == {_k(1, 2): {3: 7, 4: 1}, _k(7): {8: 1}}


def test_ngram_cache_ties_go_to_the_first_follower_in_libstdcxx_order():
    # 13 buckets: 5 then 6 inserted, 6's bucket empty: 6 goes to the front; iterated 6, 5. Equal counts: 6
    assert nc.draft([1, 2], 1, {_k(1, 2): _part((5, 2), (6, 2))}, {}, {}) == [6]
    # 6 (100 times, not in the static cache: weight 1) then 5 (once, static count 1: weight 100): iterated 5, 6;
    # 100 = 100: 5 stays, with 1 of 101 it fails the share; the static cache's sample of 1 is too small
    assert nc.draft([1, 2], 1, {_k(1, 2): _part((6, 100), (5, 1))}, {}, {_k(1, 2): _part((5, 1))}) == []
    # 5 (100 times, weight 1) then 6 (once, weight 100): iterated 6, 5; 6 stays, fails: nothing
    assert nc.draft([1, 2], 1, {_k(1, 2): _part((5, 100), (6, 1))}, {}, {_k(1, 2): _part((6, 1))}) == []
    # 6 (once, weight 100) then 5 (100 times, weight 1): iterated 5, 6; 5 first, 6 ties it: 5, 100 of 101
    assert nc.draft([1, 2], 1, {_k(1, 2): _part((6, 1), (5, 100))}, {}, {_k(1, 2): _part((6, 1))}) == [5]


def test_ngram_cache_without_files_keeps_no_path_and_names_earlier_requests(tmp_path):
    memory: dict = {}
    nc.NgramCacheSource(memory=memory)
    assert sorted(memory) == [("ngram-cache", "dynamic", ""), ("ngram-cache", "slot", "", "")]
    static = str(tmp_path / "s.bin")
    nc.save({_k(1, 2): _part((3, 2))}, static)
    memory = {}
    for _ in range(2):
        make_source("ngram-cache", SourceContext(None, memory=memory), {"lookup_cache_static": static}).propose(
            req([4, 5, 6]))
    s = make_source("ngram-cache", SourceContext(None, memory=memory), {"lookup_cache_static": static})
    # [4, 5, 6] counted once: (4) -> 5, (5) -> 6, (4, 5) -> 6
    assert s.warm_state() == "context cache 3 n-grams from 2 earlier requests (this one counts its tokens from " \
                             "position 3 on); static cache 1 n-grams"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="/proc (Linux): a folder no one can make a file in")
def test_a_dynamic_cache_folder_where_no_file_can_be_made_is_refused():
    with pytest.raises(ValueError, match=r"^--lookup-cache-dynamic /proc/x\.bin: the folder /proc is not writable "
                                         r"\([A-Z][a-z ]+\); expected a folder the cache can be saved in$"):
        nc.check_writable_folder("/proc/x.bin")


def test_make_ngram_map_k4v_passes_its_options_on_and_keeps_its_map_under_them():
    memory: dict = {}
    s = make_source("ngram-map-k4v", SourceContext(None, memory=memory), {"size_n": 2, "size_m": 2, "min_hits": 2})
    assert (s.name, s.key_only, s.settings()) == ("ngram-map-k4v", False, {"size_n": 2, "size_m": 2, "min_hits": 2})
    clear = [0, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 5, 6, 7, 1, 2]
    assert why(s, clear) == "below_min_hits"
    assert list(memory) == [("ngram-map-k4v", 2, 2, 2)]


def test_a_discarded_map_or_mod_proposal_learns_nothing_from_a_late_receipt():
    s = NgramMapSource(size_n=2, size_m=2, memory={})
    p = s.propose(req(K_STREAM))
    s.discard(p.decision_id, "test")
    s.report(SimpleNamespace(decision_id=p.decision_id.hex(), accepted_proposal_tokens=0))
    assert ids(s, K_STREAM) == [3, 4]  # not learned: still m tokens
    m = NgramModSource(2, 1, 2, memory={}, pool_size=1024)
    for _ in range(3):
        p = m.propose(req([1, 2, 3, 4, 5, 1, 2]))
        m.discard(p.decision_id, "test")
        m.report(_mod_receipt(p, 0))
    assert m.pool.resets == 0
