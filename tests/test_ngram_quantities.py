"""How much the n-gram source proposes, on token lists written by hand (issue 42: quantities pinned by
oracles that do not come from the code under test): after the prompt, after its own output, across
incremental queries, at each n-gram size and cap."""

from __future__ import annotations

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest
from inspector.sources.ngram import NgramSource


def ask(source, tokens, prompt_len, cap=8):
    return source.propose(ProposalRequest(tuple(tokens), prompt_len, 0, cap, float("inf")))


def test_after_the_prompt_it_proposes_what_followed_the_last_occurrence_up_to_the_cap():
    s = NgramSource(n_max=2, n_min=2)
    prompt = [1, 2, 3, 4, 5, 6, 1, 2]
    p = ask(s, prompt, len(prompt), cap=3)
    assert isinstance(p, Proposal) and tuple(p.token_ids) == (3, 4, 5)
    p = ask(NgramSource(n_max=2, n_min=2), prompt, len(prompt), cap=8)
    assert tuple(p.token_ids) == (3, 4, 5, 6, 1, 2)  # everything after the match, to the stream's end


def test_it_keeps_indexing_its_own_output_across_incremental_queries():
    s = NgramSource(n_max=2, n_min=2)
    prompt = [10, 11, 12]
    stream = list(prompt)
    assert isinstance(ask(s, stream, 3), NoProposal)
    for t in (20, 21, 22, 23):  # generated: a pair (20, 21) the prompt never had
        stream.append(t)
        ask(s, stream, 3)
    stream += [20, 21]  # the output repeats its own earlier pair: only the output can propose what follows
    p = ask(s, stream, 3)
    assert isinstance(p, Proposal) and tuple(p.token_ids) == (22, 23, 20, 21)
    stream += [22, 23, 20]  # the newest occurrence wins: (23, 20) last followed by 21
    p = ask(s, stream, 3, cap=2)
    assert tuple(p.token_ids) == (21, 22)


def test_the_largest_n_gram_that_matches_decides_and_a_smaller_one_is_the_fallback():
    s = NgramSource(n_max=3, n_min=1)
    # (7, 8, 9) occurred followed by 1; the 1-gram (9) occurred last followed by 2
    stream = [7, 8, 9, 1, 5, 9, 2, 6, 7, 8, 9]
    p = ask(s, stream, len(stream), cap=1)
    assert tuple(p.token_ids) == (1,) and b":n3:" in p.decision_id
    s = NgramSource(n_max=3, n_min=1)
    stream = [4, 9, 2, 6, 3, 9]  # no 3- or 2-gram repeats; the 1-gram (9) does
    p = ask(s, stream, len(stream), cap=2)
    assert tuple(p.token_ids) == (2, 6) and b":n1:" in p.decision_id


def test_a_new_request_that_does_not_extend_the_stream_starts_the_index_again():
    s = NgramSource(n_max=2, n_min=2)
    assert isinstance(ask(s, [1, 2, 3, 1, 2], 5), Proposal)
    p = ask(s, [5, 6, 1, 2], 4)  # another request: (1, 2) is no longer followed by 3 anywhere
    assert isinstance(p, NoProposal)
