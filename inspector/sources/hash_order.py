"""The iteration order of a C++ ``std::unordered_map<int, int>`` (GNU libstdc++), for ties.

llama.cpp's ngram-cache picks a follower token by walking an ``unordered_map`` and keeping the
first one with the largest count (``common/ngram-cache.cpp``, ``try_draft``): when two followers
are equally frequent, the map's iteration order decides which is drafted. To draft what
llama-server drafts, ``Part`` keeps its tokens in the order GNU libstdc++ (GCC's C++ library,
used by llama-server on Linux) iterates them. Our own code for the rules of libstdc++'s
``_Hashtable`` (``bits/hashtable.h``: ``_M_insert_bucket_begin``, ``_M_rehash_aux`` for unique
keys) and ``_Prime_rehash_policy`` (``bits/hashtable_policy.h`` ``_M_need_rehash``;
``src/c++11/hashtable_c++0x.cc`` ``_M_next_bkt``, ``__prime_list``), max load factor 1:

- a key's bucket is ``key % bucket_count`` (``std::hash<int>`` is the identity);
- a new key goes first among its bucket's keys, or at the very front when its bucket is empty;
- before an insert that would exceed the next resize, every key is placed again by the same rule,
  in the old order, into a bucket count from the prime policy (the first insert makes 13).

A build against another C++ library (LLVM's libc++ on macOS) iterates otherwise: there, ties can
be broken differently (the receipts and outputs stay valid; the windows can differ).
"""

from __future__ import annotations

from bisect import bisect_left

FAST_BUCKETS = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)
"""libstdc++'s ``__fast_bkt``: the bucket count for a request below 14."""
PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 103,
          109, 113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241, 257, 277, 293, 313, 337, 359, 383,
          409, 439, 467, 503, 541, 577, 619, 661, 709, 761, 823, 887, 953, 1031, 1109, 1193, 1289, 1381, 1493,
          1613, 1741, 1879, 2029, 2179, 2357, 2549, 2753, 2971, 3209, 3469, 3739, 4027, 4349, 4703, 5087, 5503,
          5953, 6427, 6949, 7517, 8123, 8783, 9497, 10273, 11113, 12011, 12983, 14033, 15173, 16411, 17749,
          19183, 20753, 22447, 24281, 26267, 28411, 30727, 33223, 35933, 38873, 42043, 45481, 49201, 53201,
          57557, 62233, 67307, 72817, 78779, 85229, 92203, 99733, 107897, 116731, 126271, 136607, 147793,
          159871, 172933, 187091, 202409, 218971, 236897, 256279, 277261, 299951, 324503, 351061, 379787,
          410857, 444487, 480881, 520241, 562841, 608903, 658753, 712697, 771049, 834181, 902483, 976369)
"""The start of libstdc++'s ``__prime_list`` (read from ``libstdc++.so.6``), far past any follower count."""


def next_bucket_count(n: int) -> tuple[int, int]:
    """(bucket count, next resize) for a request of ``n`` buckets (``_M_next_bkt``, load factor 1)."""
    if n < len(FAST_BUCKETS):
        if n == 0:
            return 1, 0
        return FAST_BUCKETS[n], FAST_BUCKETS[n]
    i = bisect_left(PRIMES, n, 6)
    if i >= len(PRIMES):  # beyond our table: libstdc++ goes on with sparser primes; an odd count will do
        p = n | 1
        return p, p
    return PRIMES[i], PRIMES[i]


class Part(dict):
    """A token -> count map whose iteration order is libstdc++'s ``unordered_map<int, int>``'s.

    ``add(token, count)`` is ``emplace`` or ``+= count``; ``copy()`` is the C++ copy (same order,
    bucket count and resize point). Plain ``dict`` reads work as usual; write through ``add``."""

    __slots__ = ("buckets", "next_resize")

    def __init__(self) -> None:
        super().__init__()
        self.buckets = 1
        self.next_resize = 0

    def copy(self) -> "Part":
        other = Part()
        dict.update(other, self)
        other.buckets, other.next_resize = self.buckets, self.next_resize
        return other

    def add(self, token: int, count: int = 1) -> None:
        """Count ``token`` ``count`` more times, inserting it where libstdc++ would."""
        if token in self:
            self[token] += count
            return
        keys = list(self)
        n = len(keys)
        if n + 1 > self.next_resize:  # _M_need_rehash
            min_buckets = max(n + 1, 0 if self.next_resize else 11)
            if min_buckets >= self.buckets:
                self.buckets, self.next_resize = next_bucket_count(max(min_buckets + 1, self.buckets * 2))
                placed: list[int] = []
                for k in keys:  # _M_rehash_aux: every node again, in the old order
                    _place(placed, k, self.buckets)
                keys = placed
            else:
                self.next_resize = self.buckets
        _place(keys, token, self.buckets)
        counts = dict(self)
        counts[token] = count
        self.clear()
        dict.update(self, ((k, counts[k]) for k in keys))


def _place(keys: list[int], token: int, buckets: int) -> None:
    """Insert ``token`` into ``keys`` (iteration order) as ``_M_insert_bucket_begin`` does."""
    b = token % buckets
    for i, k in enumerate(keys):
        if k % buckets == b:
            keys.insert(i, token)
            return
    keys.insert(0, token)
