"""llama-server's prompt cache (``--cache-ram``), its rules on tiny token lists (``inspector.serve.prompt_cache``)
and on the real model against a real llama-server: the same requests, one at a time, get the same ``prompt_n``
and ``cache_n`` from both servers, and a prompt restored from the cache gives the answer it gave the first time.
"""

from __future__ import annotations

import httpx
import pytest

from inspector.engine import GenerationSettings
from inspector.llama.server_parity import server_context
from inspector.prompts import EXAMPLES, example_prompt
from inspector.serve.params import ServeDefaults
from inspector.serve.prompt_cache import MIB, PromptCache, cache_update_wanted, common_prefix
from inspector.serve.server import InspectorServer, ServeOptions

N_PREDICT = 16


def test_common_prefix_counts_equal_leading_tokens():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([5, 6], [5, 6, 7]) == 2


def test_an_empty_slot_or_a_slot_taken_by_least_recent_use_saves_and_looks_for_a_better_prompt():
    assert cache_update_wanted([], [1, 2, 3], 0.1)
    # shares 1 of 20 prompt tokens (0.05 <= 0.1): it came by least recent use
    assert cache_update_wanted([1, 9, 9], [1] + [2] * 19, 0.1)


def test_a_slot_chosen_by_similarity_keeps_its_state_unless_it_would_lose_more_than_half():
    held = [1, 2, 3, 4, 5, 6, 7, 8]
    assert not cache_update_wanted(held, [1, 2, 3, 4, 9], 0.1)  # keeps 4 of 8: f_keep 0.5
    assert cache_update_wanted(held, [1, 2, 3, 9], 0.1)  # keeps 3 of 8: f_keep 0.375


def test_a_prompt_already_held_whole_is_not_saved_again():
    cache = PromptCache(limit_mib=1)
    assert cache.store([1, 2, 3, 4], b"abcd")
    assert not cache.store([1, 2, 3], b"abc")
    assert not cache.store([1, 2, 3, 4], b"abcd")
    assert [e.tokens for e in cache.entries] == [(1, 2, 3, 4)]


def test_saving_a_longer_prompt_drops_the_entries_it_contains():
    cache = PromptCache(limit_mib=1)
    cache.store([1, 2], b"ab")
    cache.store([7, 8], b"cd")
    cache.store([1, 2, 3], b"abc")
    assert [e.tokens for e in cache.entries] == [(7, 8), (1, 2, 3)]


def test_the_oldest_entries_go_when_the_size_limit_is_reached():
    cache = PromptCache(limit_mib=1)
    half = b"x" * (MIB // 2)
    cache.store([1], half)
    cache.store([2], half)
    cache.store([3], half)
    assert [e.tokens for e in cache.entries] == [(2,), (3,)]
    assert not cache.store([4], b"x" * (MIB + 1)), "a state larger than the whole limit is skipped"
    assert [e.tokens for e in cache.entries] == [(2,), (3,)]


def test_no_limit_keeps_every_entry():
    cache = PromptCache(limit_mib=-1)
    for t in range(5):
        cache.store([t], b"x" * MIB)
    assert len(cache.entries) == 5


def test_the_best_entry_must_keep_a_quarter_of_itself_and_beat_the_slot_on_both_fractions():
    cache = PromptCache(limit_mib=1)
    cache.store([1, 2, 40, 4, 5, 6, 7, 8, 9, 10], b"long")  # the request keeps 2 of 10: skipped (< 0.25)
    cache.store([1, 2, 3, 20], b"mid")  # keeps 3 of 4
    prompt = [1, 2, 3, 30, 31]
    best = cache.best([], prompt)
    assert best is not None and best.tokens == (1, 2, 3, 20)
    # a slot that already keeps 3 of 3 and covers as much: nothing better
    assert cache.best([1, 2, 3], prompt) is None
    cache.take(best)
    assert [e.tokens for e in cache.entries] == [(1, 2, 40, 4, 5, 6, 7, 8, 9, 10)]
    assert cache.describe()["restored"] == 1


def _replies(url: str, order: list[str]) -> list[dict]:
    with httpx.Client(base_url=url, timeout=600, trust_env=False) as client:
        out = []
        for name in order:
            r = client.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": example_prompt(name)}], "max_tokens": N_PREDICT,
                "temperature": 0})
            assert r.status_code == 200, r.text[:300]
            reply = r.json()
            out.append({"name": name, "content": reply["choices"][0]["message"]["content"],
                        "prompt_n": reply["timings"]["prompt_n"], "cache_n": reply["timings"]["cache_n"]})
        return out


@pytest.mark.slow
@pytest.mark.parametrize("n_parallel", [1, 2])
def test_revisited_prompts_come_back_from_the_cache_as_llama_servers_do(n_parallel, runtime, scheduler,
                                                                        start_llama_server):
    a, b, c = EXAMPLES[:3]
    order = [a, b, a, c, b, a]
    server = InspectorServer(scheduler, str(runtime.model_path), ServeOptions(
        port=0, source="none", template=GenerationSettings(draft_max=0), defaults=ServeDefaults(), receipts=None,
        n_parallel=n_parallel, kv_unified=True))
    server.start()
    assert server.wait_started()
    try:
        ours = _replies(server.address, order)
        described = server.slots.prompt_cache.describe()
    finally:
        server.stop()
    theirs_server = start_llama_server(args=["-np", str(n_parallel), "-kvu", "-b", str(runtime.n_batch),
                                             *server_context(runtime).server_args()], threads=1, n_ctx=runtime.n_ctx)
    theirs = _replies(theirs_server.url, order)
    theirs_server.stop()
    facts = lambda rows: [(r["name"], r["prompt_n"], r["cache_n"]) for r in rows]  # noqa: E731
    assert facts(ours) == facts(theirs)
    # what makes the comparison show something: the third request (a again) came back whole from the cache
    assert ours[2]["prompt_n"] == 1 and described["restored"] >= 1, (facts(ours), described)
    # and a restored prompt answers as it answered the first time
    assert ours[2]["content"] == ours[0]["content"] and ours[5]["content"] == ours[0]["content"]
    assert [r["content"] for r in ours] == [r["content"] for r in theirs]
