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
from collections import deque

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
    bucket count and resize point). Iterating (``for``, ``keys()``, ``items()``) follows that order;
    write through ``add``. The order is kept as libstdc++ keeps it, a chain of buckets with each
    bucket's keys: an insert is O(1), a rehash O(n) at doubling sizes."""

    __slots__ = ("buckets", "next_resize", "_chain", "_members")

    def __init__(self) -> None:
        super().__init__()
        self.buckets = 1
        self.next_resize = 0
        self._chain: deque[int] = deque()  # bucket ids, first iterated first
        self._members: dict[int, deque[int]] = {}  # bucket id -> its keys, first iterated first

    def __iter__(self):
        members = self._members
        for b in self._chain:
            yield from members[b]

    def keys(self):
        return list(self)

    def items(self):
        return [(k, dict.__getitem__(self, k)) for k in self]

    def copy(self) -> "Part":
        other = Part()
        dict.update(other, dict.items(self))
        other.buckets, other.next_resize = self.buckets, self.next_resize
        other._chain = deque(self._chain)
        other._members = {b: deque(keys) for b, keys in self._members.items()}
        return other

    def add(self, token: int, count: int = 1) -> None:
        """Count ``token`` ``count`` more times, inserting it where libstdc++ would."""
        if dict.__contains__(self, token):
            dict.__setitem__(self, token, dict.__getitem__(self, token) + count)
            return
        n = dict.__len__(self)
        if n + 1 > self.next_resize:  # _M_need_rehash
            min_buckets = max(n + 1, 0 if self.next_resize else 11)
            if min_buckets >= self.buckets:
                old = list(self)
                self.buckets, self.next_resize = next_bucket_count(max(min_buckets + 1, self.buckets * 2))
                self._chain, self._members = deque(), {}
                for k in old:  # _M_rehash_aux: every node again, in the old order
                    self._place(k)
            else:
                self.next_resize = self.buckets
        self._place(token)
        dict.__setitem__(self, token, count)

    def _place(self, token: int) -> None:
        """Put ``token`` first in its bucket, or its bucket first in the chain (``_M_insert_bucket_begin``)."""
        b = token % self.buckets
        keys = self._members.get(b)
        if keys is None:
            self._members[b] = deque((token,))
            self._chain.appendleft(b)
        else:
            keys.appendleft(token)
