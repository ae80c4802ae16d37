"""Suffix decoding: frequency-scored continuations of suffix matches, with memory of earlier requests,
proposed when they are expected to pay on the measured verify cost.

After SuffixDecoding (Oliinyk et al., "SuffixDecoding: Extreme Speculative Decoding for Emerging
AI Applications", arXiv 2411.04975) as Snowflake's arctic-inference implements it for vLLM's
``method: suffix``. Sources followed (read, not copied): arctic-inference
``csrc/suffix_decoding/suffix_tree.cc`` (``SuffixTree::speculate``, ``_speculate_path``: the
scoring rule) and ``arctic_inference/suffix_decoding/cache.py`` (``SuffixDecodingCache``: a
tree per request over its prompt and output, one global tree over earlier outputs, FIFO
eviction, the global draft used only when its score is strictly higher); vLLM's
``SuffixDecodingProposer`` and the ``suffix_decoding_max_tree_depth`` (24),
``suffix_decoding_max_cached_requests``, ``suffix_decoding_max_spec_factor`` (1.0) and
``suffix_decoding_min_token_prob`` (0.1) options of its ``SpeculativeConfig``. The cost rule is
this project's (``inspector.sources.length_policy``, as the adaptive n-gram source uses it).

**The tree** (``tree``). A bounded suffix trie of depth ``max_tree_depth`` = D: a node is a string of
at most D tokens, its count the number of places it occurs (an occurrence at the very end of a
sequence counts too: it has no continuation), its children the strings one token longer. The
trie is kept implicitly: tokens in one int32 array (sequences separated by -1), a node is the
array of positions where its string ends, found by a vectorized scan; the count is that
array's size, a child is the subset followed by one token. That is the counts of
arctic-inference's tree at 4 bytes per remembered token, and eviction is slicing.

**The candidates** (``tree.candidates``). The pattern is the last D tokens of the stream. For every
match length m = 1 .. len(pattern) - 1 whose node exists: from the node follow the child with
the largest count (ties: the most recent occurrence), the path's probability p the product of
count(child) / count(node); a token is taken while p >= ``min_token_prob``, at most
``floor(max_spec_factor * m + max_spec_offset)`` tokens, the cap and D - m (the depth limits
match plus proposal). Both the request's tree (prompt + output so far) and the memory are asked.

**Which candidate, how long, and whether at all** (``length``).

- ``score`` (SuffixDecoding's rule, ``tree.speculate``): score = the sum of the candidate's path
  probabilities, the best score wins (the longer match on a tie; the memory's draft only when its
  score is strictly higher), proposed whole whenever one exists. On a CPU this proposes at
  nearly every step (a 1-token match of a token seen once has probability 1) and pays a
  verification each time (issue 29: 2.3-3.3 tokens per window, 120 windows in 4 turns).
- ``adaptive`` (the default): the candidates' path probabilities are computed from the earlier
  occurrences only (the request's stream ends with the pattern itself, which arctic-inference
  counts: a string seen once before would get probability 1/2). Token i of a candidate after a
  match of m tokens follows a match of m + i - 1 tokens if the ones before it are accepted, and
  is accepted with probability q(m + i - 1), the acceptance learned from this source's receipts
  per match-length bucket (``CostAwareLength``: its buckets and priors, counts faded per query;
  each token counted in its own bucket; shared by the session's requests through the memory).
  With reach_i = path probability_i x q(m) ... q(m + i - 1), a proposal of n tokens commits
  1 + reach_1 + ... + reach_n tokens on average (SuffixDecoding's score plus one when q = 1) and
  costs c(n + 1) (the measured c(k), ``SourceContext.row_costs``, noise removed as for the n-gram
  source; the linear model fitted from the receipts without one). A candidate is proposed whole
  (SuffixDecoding's length) when that beats a plain step, else its best paying cut
  (``best_cut``); of all candidates of both trees the best rate wins (of the match lengths that
  share one node, the longest and the one allowing the most tokens are tried). When nothing
  pays the source says ``adaptive_plain``: it stays quiet where nothing repeats and proposes
  whole earlier lines where they repeat.

**Memory across requests** (``memory.SuffixMemory`` in ``SourceContext.memory`` under
``("suffix", memory file)``: the stored token sequences do not depend on D or the
thresholds, which apply when asking; the cap ``max_cached_tokens`` is applied at each request's
start). A request's output (the stream after ``prompt_token_count``, as seen at the last
``propose`` and extended by the last receipts' ``committed_tokens``) joins the memory when the
source is closed (the run service closes it after every run) or, if it never was, at the first
``propose`` of the next request. Outputs only, not prompts, as SuffixDecoding's global tree.
When the remembered tokens exceed the cap the oldest requests are dropped first (a single
output longer than the cap keeps its last tokens). ``memory_file``: a JSON file loaded when the
session first uses it (missing: start empty) and written back (atomically) at every close;
a broken file is refused with a ``ValueError`` naming it. The learned acceptance is kept with the
memory for the session (not in the file); a request with ``max_cached_tokens`` 0 learns alone.

**Not as arctic-inference:** linear drafts only (no ``use_tree_spec`` token trees: the engine
verifies one path); the running request's output is not in the global tree until it ends
(it is in the request's own tree); the cap counts tokens, not requests; ties go to the latest
occurrence (arctic-inference: hash-map order); a proposal scans the remembered tokens
(vectorized, O(tokens)) instead of walking a compressed tree; the ``adaptive`` cost rule.
"""

from inspector.sources.suffix.memory import SuffixMemory, load_memory, memory_for, vocabulary_fingerprint
from inspector.sources.suffix.source import (ADAPTIVE_PLAIN, FAILED, LENGTHS, NO_MATCH, REASONS, SuffixConfig,
                                             SuffixSource)
from inspector.sources.suffix.tree import MAX_DEPTH, PAD, candidates, speculate

__all__ = ["ADAPTIVE_PLAIN", "FAILED", "LENGTHS", "MAX_DEPTH", "NO_MATCH", "PAD", "REASONS", "SuffixConfig",
           "SuffixMemory", "SuffixSource", "candidates", "load_memory", "memory_for", "speculate",
           "vocabulary_fingerprint"]
