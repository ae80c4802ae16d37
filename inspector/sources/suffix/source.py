"""The suffix source: asks the request's tree and the memory, and decides what pays (package docstring)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest
from inspector.sources.descriptors import Option, SourceDescriptor
from inspector.sources.length_policy import CostAwareLength, best_cut, row_costs_option
import inspector.sources.suffix.tree as tree
from inspector.sources.suffix.memory import MAX_MEMORY_FILE_BYTES, SuffixMemory, memory_for
from inspector.sources.suffix.tree import MAX_DEPTH, PAD, TokenStream, best_first_tree, match_ends

log = logging.getLogger(__name__)

NO_MATCH = "no_match"
ADAPTIVE_PLAIN = "adaptive_plain"
FAILED = "failed"
REASONS = {
    NO_MATCH: "no suffix of the last tokens continues, in the prompt, the output or the memory, with a token "
              "whose path probability stays above min_token_prob",
    ADAPTIVE_PLAIN: "candidates were found, but on the measured cost model none is expected to commit more tokens "
                    "per ms than a plain step (length adaptive)",
    FAILED: "the source failed (logged once) and proposes nothing",
}
"""Why the suffix source proposes nothing (its declaration's ``reasons``)."""

LENGTHS = {
    "adaptive": "the candidate and length expected to commit the most tokens per ms on the measured c(k) "
                "(path probability x the acceptance learned per match length); nothing when a plain step "
                "is cheaper",
    "score": "SuffixDecoding's rule as vLLM and arctic-inference apply it: the highest-scoring candidate, "
             "whole, whenever there is one",
}
"""The suffix source's ``length`` option: name -> what it does (the first is the default)."""

MAX_TREE_NODES = 64
"""Largest ``tree_nodes``."""

MAX_PENDING = 256
"""Decisions awaiting their receipt kept at most (receipts that never come back: errors)."""


@dataclass(frozen=True)
class SuffixConfig:
    """The suffix source's tuning: one field per option of its declaration (``SUFFIX``), named as vLLM's
    ``suffix_decoding_*`` and arctic-inference's options are (package docstring); ``make_suffix`` fills it
    from a run's options. Raises ``ValueError`` (one line naming the option) for a value out of its range;
    the two spec bounds and ``min_token_prob`` are kept as floats."""

    max_tree_depth: int = 24
    """Match plus proposal (tokens), 2 .. ``MAX_DEPTH``: the depth of the suffix trees."""
    max_spec_factor: float = 1.0
    """At most this many proposal tokens per matched token (>= 0)."""
    max_spec_offset: float = 0.0
    """Tokens added to ``max_spec_factor`` x match length."""
    min_token_prob: float = 0.1
    """0..1: a path stops where its probability (count / parent count, multiplied along it) falls below."""
    max_cached_tokens: int = 100_000
    """Tokens of earlier outputs remembered, >= 0 (0: this request neither uses nor changes the memory)."""
    memory_file: str = ""
    """Where the memory is saved at ``close`` ("": not saved)."""
    length: str = "adaptive"
    """One of ``LENGTHS``: ``adaptive`` (the cost rule) or ``score`` (SuffixDecoding's)."""
    tree_nodes: int = 0
    """0: propose a chain; N (up to ``MAX_TREE_NODES``): a tree of up to N tokens, verified in one batch."""
    row_costs: list | None = None
    """The adaptive length's cost table: ms per batch of k = 1.. rows; None: the linear model fitted from the
    receipts (``make_suffix`` resolves the option: the context's stored cost model by default)."""

    def __post_init__(self) -> None:
        depth = self.max_tree_depth
        if not (isinstance(depth, int) and not isinstance(depth, bool)) or not 2 <= depth <= MAX_DEPTH:
            raise ValueError(f"max_tree_depth must be a whole number 2 <= max_tree_depth <= {MAX_DEPTH}, "
                             f"observed {depth!r}")
        if not 0.0 <= self.min_token_prob <= 1.0:
            raise ValueError(f"min_token_prob must be 0 <= min_token_prob <= 1, observed {self.min_token_prob!r}")
        if self.max_spec_factor < 0:
            raise ValueError(f"max_spec_factor must be >= 0, observed {self.max_spec_factor!r}")
        cached = self.max_cached_tokens
        if isinstance(cached, bool) or not isinstance(cached, int) or cached < 0:
            raise ValueError(f"max_cached_tokens must be a whole number >= 0, observed {cached!r}")
        nodes = self.tree_nodes
        if isinstance(nodes, bool) or not isinstance(nodes, int) or not 0 <= nodes <= MAX_TREE_NODES:
            raise ValueError(f"tree_nodes must be a whole number 0 <= tree_nodes <= {MAX_TREE_NODES}, "
                             f"observed {nodes!r}")
        if self.length not in LENGTHS:
            raise ValueError(f"length must be one of {', '.join(LENGTHS)}, observed {self.length!r}")
        for name in ("max_spec_factor", "max_spec_offset", "min_token_prob"):
            object.__setattr__(self, name, float(getattr(self, name)))


class SuffixSource:
    """SuffixDecoding proposals (see the package docstring): the most frequent continuation of a
    suffix match in this request's prompt + output or in the outputs of earlier requests
    (``memory``, shared by the session's requests), tuned by ``config`` (``SuffixConfig``; None: its
    defaults). ``length`` ``"adaptive"`` applies the cost rule with ``row_costs``; ``"score"``
    SuffixDecoding's. ``tree_nodes`` N > 0 proposes a tree (``inspector.engine.tree``) of up to N tokens
    (and at least the chain's), the best continuations of the chosen match by path probability
    (SuffixDecoding's tree, ``tree.best_first_tree``), verified in one batch.
    Decision ids: ``suffix:<count>:m<match length>:<req|mem>`` (which tree the draft came from).
    The options are checked by ``SuffixConfig`` (``ValueError`` for one out of its range)."""

    name = "suffix"

    def __init__(self, memory: SuffixMemory | None = None, config: SuffixConfig | None = None) -> None:
        c = config if config is not None else SuffixConfig()
        self.config = c
        self.memory = memory if memory is not None else SuffixMemory()
        self.max_tree_depth = c.max_tree_depth
        self.max_spec_factor = c.max_spec_factor
        self.max_spec_offset = c.max_spec_offset
        self.min_token_prob = c.min_token_prob
        self.max_cached_tokens = c.max_cached_tokens
        self.memory_file = c.memory_file
        self.length = c.length
        self.tree_nodes = c.tree_nodes
        self.policy = self._policy(c.row_costs) if c.length == "adaptive" else None
        if c.max_cached_tokens:  # 0: this request neither uses nor changes the memory
            self.memory.trim(c.max_cached_tokens)
        self.remembered_at_start = (len(self.memory), self.memory.tokens)
        self._stream: TokenStream | None = None
        self._prompt_count = 0
        self._key = object()  # this source's running request in memory.open
        self._count = 0
        self._pending: dict[str, int] = {}  # decision id (hex) -> match length
        self._failed = False

    def _policy(self, row_costs) -> CostAwareLength:
        """The acceptance learned by the session's earlier requests (kept with the memory) when they used
        the same cost table, else a new one; a request that does not use the memory learns alone."""
        policy = CostAwareLength(row_costs=row_costs)
        if not self.max_cached_tokens:
            return policy
        shared = self.memory.policy
        if shared is not None and shared.row_costs == policy.row_costs:
            return shared
        self.memory.policy = policy
        return policy

    def warm_state(self) -> str:
        """What the memory held when this request began (``registry.warm_text``), "" when empty or unused."""
        requests, tokens = self.remembered_at_start
        if not tokens or not self.max_cached_tokens:
            return ""
        return f"{tokens:,} tokens remembered from {requests} earlier request{'s' if requests != 1 else ''}"

    def settings(self) -> dict:
        """The options, the cost table used (relative c(k), adaptive length) and what was remembered."""
        d = {"max_tree_depth": self.max_tree_depth, "max_spec_factor": self.max_spec_factor,
             "max_spec_offset": self.max_spec_offset, "min_token_prob": self.min_token_prob,
             "max_cached_tokens": self.max_cached_tokens, "memory_file": self.memory_file,
             "length": self.length,
             "remembered_requests": self.remembered_at_start[0],
             "remembered_tokens": self.remembered_at_start[1]}
        if self.tree_nodes:  # trees; chains keep the settings they always had
            d["tree_nodes"] = self.tree_nodes
        if self.policy is not None:
            if self.policy.row_costs is not None:
                d["row_costs"] = [round(c, 4) for c in self.policy.row_costs]
            else:
                d["row_cost_ratio"] = round(self.policy.row_cost_ratio, 4)
        return d

    def _sync(self, tokens, prompt_count: int) -> None:
        st = self._stream
        if st is not None and prompt_count == self._prompt_count and len(tokens) >= st.n and \
                (st.n == 0 or tokens[st.n - 1] == st.last()):
            st.extend(tokens[st.n :])
            return
        if st is not None and prompt_count == self._prompt_count:
            k = min(len(tokens), st.n)
            same = np.asarray(tokens[:k], dtype=np.int64) == st.a[PAD : PAD + k]
            common = k if same.all() else int(np.argmin(same))
            if common >= prompt_count:  # the same request, its stream differed after the prompt
                st.truncate(common)
                st.extend(tokens[common:])
                return
        # A new request: earlier ones (this source's, or never closed) join the memory.
        self.memory.finish_open()
        self._stream = TokenStream(tokens)
        self._prompt_count = prompt_count
        if self.max_cached_tokens > 0:
            self.memory.trim(self.max_cached_tokens)
            self.memory.open[self._key] = (self._stream, prompt_count, self.max_cached_tokens)

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        """Up to ``request.max_proposal_tokens`` tokens, else why not (``REASONS``; never raises: a
        failure is logged once)."""
        try:
            return self._propose(request)
        except Exception:
            if not self._failed:
                log.exception("suffix source failed; proposing nothing")
                self._failed = True
            return NoProposal(FAILED, "logged once")

    def _trees(self):
        """(name, array, end) of the request's tree, then the memory's when it is used."""
        st = self._stream
        yield b"req", st.a, st.end
        if self.max_cached_tokens > 0 and self.memory.tokens:
            yield b"mem", self.memory.flat, self.memory.flat.size

    def _propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        tokens = request.tokens
        self._sync(tokens, request.prompt_token_count)
        pattern = [int(t) for t in tokens[-self.max_tree_depth :]]
        if self.policy is None:
            ids, match, where = self._by_score((pattern, request.max_proposal_tokens, self.max_tree_depth,
                                                self.max_spec_factor, self.max_spec_offset, self.min_token_prob))
        else:
            ids, match, where = self._by_cost(pattern, request.max_proposal_tokens)
        if not ids:
            if match:
                return NoProposal(ADAPTIVE_PLAIN, f"longest match {match} tokens")
            return NoProposal(NO_MATCH)
        self._count += 1
        decision = b"suffix:%d:m%d:%s" % (self._count, match, where)
        if self.policy is not None:
            if len(self._pending) > MAX_PENDING:
                self._pending.clear()
            self._pending[decision.hex()] = match
        if self.tree_nodes:
            tokens, parents = self._tree(pattern, match, where, request.max_proposal_tokens, len(ids))
            if len(tokens) > len(ids) and any(p != i for i, p in enumerate(parents)):
                return Proposal(decision, tuple(tokens), parents=tuple(parents))
        return Proposal(decision, ids)

    def _tree(self, pattern, match: int, where: bytes, cap: int, chain: int) -> tuple[list[int], list[int]]:
        """The tree of the chosen match (``tree_nodes`` tokens at most, at least ``chain``; no deeper than
        the match allows): the node's continuations best first (``tree.best_first_tree``)."""
        for name, a, end in self._trees():
            if name == where:
                # The same counts as the choice: the cost rule leaves the request's own occurrence out.
                ends = match_ends(a, end, pattern, match, earlier_only=name == b"req" and self.policy is not None)
                budget = min(cap, max(self.tree_nodes, chain))
                tokens, parents, _ = best_first_tree(a, ends, self.min_token_prob, budget, self._limit(match, cap))
                return tokens, parents
        return [], []

    def _by_score(self, args) -> tuple[tuple[int, ...], int, bytes]:
        """SuffixDecoding's choice: the best-scoring draft of each tree; the memory's only when strictly
        higher. (tokens, match length, tree)."""
        best: tuple[tuple[int, ...], float, int] = ((), 0.0, 0)
        where = b"req"
        for name, a, end in self._trees():
            found = tree.speculate(a, end, *args)
            if name == b"req" or found[1] > best[1]:
                best, where = found, name
        return best[0], best[2], where

    def _limit(self, m: int, cap: int) -> int:
        """Proposal tokens allowed after a match of ``m`` tokens: factor x m + offset, the cap, depth - m."""
        return min(cap, int(m * self.max_spec_factor + self.max_spec_offset + 1e-6), self.max_tree_depth - m)

    def _by_cost(self, pattern, cap: int) -> tuple[tuple[int, ...], int, bytes]:
        """The cost rule: every candidate's path probabilities times the acceptance learned for its
        match length give the probability of reaching each token; ``best_cut`` on the measured c(k)
        gives its best length and expected tokens per plain step's cost; the best rate wins (the
        longer match on a tie, the memory only when strictly better). Of the match lengths sharing one
        node, the longest and the one allowing the most tokens are tried. No tokens and the longest
        match when nothing pays; (), 0 when there is no candidate."""
        policy = self.policy
        policy.query()
        q: dict[int, float] = {}
        best_rate, best = 0.0, ((), 0, b"req")
        longest = 0
        for name, a, end in self._trees():
            for m_lo, m_hi, ends in tree.nodes(a, end, pattern, earlier_only=name == b"req"):
                path = None
                widest = max(range(m_lo, m_hi + 1), key=lambda m: (self._limit(m, cap), m))
                for m in sorted({widest, m_hi}):
                    limit = self._limit(m, cap)
                    if limit <= 0:
                        continue
                    if path is None:
                        path = tree.GreedyPath(a, ends, self.min_token_prob)
                    path.grow(limit)
                    if not path.tokens:
                        break
                    longest = max(longest, m)
                    # Token i (1-based) follows a match of m + i - 1 tokens when the ones before it were accepted.
                    reach, r = [], 1.0
                    for i, prob in enumerate(path.probs[:limit]):
                        if m + i not in q:
                            q[m + i] = policy.acceptance(m + i)
                        r *= q[m + i]
                        reach.append(prob * r)
                    # The whole path (SuffixDecoding's length) when it pays, else its best paying cut.
                    n, rate = len(reach), (1 + sum(reach)) / policy.relative_cost(len(reach) + 1)
                    if rate <= policy.min_gain:
                        n, rate = best_cut(reach, policy.relative_cost, policy.min_gain)
                    if n and (rate > best_rate or (rate == best_rate and name == best[2])):
                        best_rate, best = rate, (tuple(path.tokens[:n]), m, name)
        if not best[0]:
            return (), longest, b"req"
        return best

    def report(self, receipt) -> None:
        """Extend the request's stream with the window's committed tokens (the last window's tokens
        reach the memory this way; ``propose`` is not asked after it); with the adaptive length, learn
        the acceptance of the proposal's match length (and the row cost without a measured table)."""
        st = self._stream
        committed = getattr(receipt, "committed_tokens", ())
        if st is not None and committed and receipt.base_position + 1 == st.n:
            st.extend([int(t) for t in committed])
        if self.policy is None:
            return
        match = self._pending.pop(receipt.decision_id, None)
        if match is None:
            return
        self.policy.observe_receipt(match, receipt, growing=True)

    def discard(self, decision_id: bytes, reason: str) -> None:
        """Nothing to roll back; forget the pending decision."""
        self._pending.pop(decision_id.hex() if isinstance(decision_id, (bytes, bytearray)) else decision_id, None)

    def close(self) -> None:
        """The request ended: its output joins the memory, which is saved to ``memory_file`` if given
        (a failure to save is logged: closing never raises)."""
        self.memory.finish(self._key)
        if self.memory_file:
            try:
                self.memory.save(self.memory_file)
            except OSError as exc:
                log.warning("could not save the suffix memory to %s: %s", self.memory_file, exc)


SUFFIX = SourceDescriptor("suffix", (
    Option("max_tree_depth", "int", 24, "longest match plus proposal (tokens): the depth of the suffix trees "
           "(vLLM suffix_decoding_max_tree_depth; arctic-inference's default is 64, which lets long matches "
           "propose more at a draft max of 16)", minimum=2, maximum=64),
    Option("max_spec_factor", "float", 1.0, "propose at most this many tokens per matched token "
           "(vLLM suffix_decoding_max_spec_factor)", minimum=0.0, maximum=64.0, step=0.25),
    Option("max_spec_offset", "float", 0.0, "tokens added to max spec factor x match length (arctic-inference "
           "max_spec_offset)", minimum=-64.0, maximum=64.0, step=1.0),
    Option("min_token_prob", "float", 0.1, "stop where the continuation's estimated probability (count / parent "
           "count, multiplied along the path) falls below this (vLLM suffix_decoding_min_token_prob)",
           minimum=0.0, maximum=1.0, step=0.05),
    Option("max_cached_tokens", "int", 100_000, "tokens of earlier requests' outputs remembered, the oldest "
           "requests dropped first (0: this run neither uses nor changes the memory)", minimum=0, maximum=10_000_000,
           control_max=10_000_000),
    Option("memory_file", "path", "", "load the memory of earlier outputs from this JSON file and save it back "
           f"after each run (empty: this session only; a regular file of at most {MAX_MEMORY_FILE_BYTES // 2**20} MiB)",
           placeholder="memory file (.json), optional", file_filter="Suffix memory (*.json);;All files (*)",
           writes=True),
    Option("length", "choice", "adaptive", "which candidate, how long, and whether to propose at all",
           choices=LENGTHS),
    Option("tree_nodes", "int", 0, "0: propose one chain; N: a tree of up to N tokens, the match's most probable "
           "continuations (SuffixDecoding's tree), verified in one batch (capped by draft max)",
           minimum=0, maximum=MAX_TREE_NODES),
    Option("row_costs", default=None, convert=row_costs_option, control=False,
           help="adaptive length: linear, or ms per batch of 1, 2, ... rows (\"a,b,c\"); default: the stored "
                "cost model"),
), help="suffix decoding: the most frequent continuation of a suffix match in the prompt, the output and earlier "
        "requests' outputs, proposed when it is expected to pay on the measured verify cost",
    capabilities=frozenset({"settings", "close"}), reasons=REASONS)
"""The suffix source's declaration."""


def make_suffix(ctx, **options) -> SuffixSource:
    """The ``suffix`` source. Options are checked with ``SUFFIX``; the memory lives in ``ctx.memory`` (a
    broken memory file raises ``ValueError`` naming it). ``row_costs`` as for ``ngram``: by default the
    context's (the stored cost model), ``"linear"``: none."""
    o = SUFFIX.with_defaults(options)
    if o["row_costs"] is None:
        o["row_costs"] = list(ctx.row_costs) if ctx.row_costs else None
    elif o["row_costs"] == "linear":
        o["row_costs"] = None
    return SuffixSource(memory_for(ctx.memory, o["memory_file"], ctx.runtime), SuffixConfig(**o))


# The factory carries its declaration, as a plugin's does (``inspector.sources.registry.BUILTIN_FACTORIES``).
make_suffix.descriptor = SUFFIX
