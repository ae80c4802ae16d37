"""N-gram prompt lookup: propose what followed the last n tokens earlier in the stream."""

from __future__ import annotations

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest
from inspector.sources.descriptors import Option, SourceDescriptor
from inspector.sources.length_policy import CostAwareLength, row_costs_option

MAX_BRANCHES = 8
"""Most branches of an n-gram tree (``branches``; the runtime's default ``tree_branches``)."""
MAX_MATCH = 64
"""Longest match length measured (tokens): longer matches are all 'long'."""
NO_MATCH = "no_match"
ADAPTIVE_PLAIN = "adaptive_plain"
REASONS = {
    NO_MATCH: "the last n tokens (n from n_max down to n_min) occurred nowhere earlier in the stream",
    ADAPTIVE_PLAIN: "a match was found, but the adaptive length chose 0 tokens: a plain step commits more per ms "
                    "on the measured cost model",
}
"""Why the n-gram source proposes nothing (``SourceDescriptor.reasons``)."""


class NgramSource:
    """Prompt-lookup proposals (as llama.cpp's ``common_ngram`` lookup and
    llama-cpp-python's ``LlamaPromptLookupDecoding``, with a hash index).

    For n from ``n_max`` down to ``n_min``: find the most recent earlier
    occurrence of the last n committed tokens and propose up to the cap of
    the tokens that followed it. ``n_min`` >= 1, ``n_max`` >= ``n_min``
    (tokens). Lookups cost O(n_max) per query: every n-gram of the stream is
    indexed once, by the position right after its most recent occurrence.

    ``length``: ``"fixed"`` proposes everything that followed the match, up
    to the cap (as llama.cpp's lookup does); ``"adaptive"`` proposes the
    length that buys the most tokens per unit of verification cost, or
    nothing when a plain step is cheaper (``length_policy.CostAwareLength``:
    acceptance learned per match length from the receipts, row cost ratio
    ``row_cost_ratio`` fitted from verification times unless given, or a
    measured cost model ``row_costs``: ms per batch of k = 1.. rows).
    ``branches``: 1 proposes a chain; B > 1 a tree (``inspector.engine.tree``) when the n-gram also
    occurred earlier followed by other tokens: besides the most recent occurrence's continuation, those
    of up to B - 1 earlier occurrences with a different next token (the most recent of each), each at
    most ``cap // (2 (B - 1))`` tokens, the most recent's getting the rest of the cap.
    The decision id names the n-gram size and the match length:
    ``ngram:<count>:n<n>:L<match length>``.
    """

    name = "ngram"

    def __init__(self, n_max: int = 4, n_min: int = 2, length: str = "fixed",
                 row_cost_ratio: float | None = None, row_costs=None, branches: int = 1) -> None:
        for key, value in (("n_max", n_max), ("n_min", n_min)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be a whole number >= 1 (tokens), observed {value!r}")
        if n_max < n_min:
            raise ValueError(f"n-gram sizes must satisfy 1 <= n_min <= n_max, observed n_min={n_min}, n_max={n_max}")
        if isinstance(branches, bool) or not isinstance(branches, int) or not 1 <= branches <= MAX_BRANCHES:
            raise ValueError(f"branches must be a whole number 1 <= branches <= {MAX_BRANCHES}, observed {branches!r}")
        if length not in ("fixed", "adaptive"):
            raise ValueError(f"length must be 'fixed' or 'adaptive', observed {length!r}")
        self.n_max = n_max
        self.n_min = n_min
        self.length = length
        self.policy = CostAwareLength(row_cost_ratio, row_costs=row_costs) if length == "adaptive" else None
        self._pending: dict[str, int] = {}  # decision id (hex) -> match length
        self._index: dict[int, dict[tuple, int]] = {n: {} for n in range(n_min, n_max + 1)}
        self.branches = branches
        # With branches: per n-gram, the position after its most recent occurrence per next token.
        self._by_next: dict[int, dict[tuple, dict[int, int]]] = {n: {} for n in range(n_min, n_max + 1)}
        self._indexed = 0  # positions < _indexed have their n-grams ending there indexed
        self._stream: list[int] = []
        self._count = 0

    def settings(self) -> dict:
        d = {"n_max": self.n_max, "n_min": self.n_min, "length": self.length}
        if self.branches > 1:  # trees; chains keep the settings they always had
            d["branches"] = self.branches
        if self.policy is not None:
            if self.policy.row_costs is not None:
                d["row_costs"] = [round(c, 4) for c in self.policy.row_costs]
            else:
                d["row_cost_ratio"] = round(self.policy.row_cost_ratio, 4)
        return d

    def _sync(self, tokens) -> None:
        n_tok = len(tokens)
        st = self._stream
        if n_tok < len(st) or (st and tokens[len(st) - 1] != st[-1]):
            # Not an extension of what we indexed (new request): start again.
            st.clear()
            for d in self._index.values():
                d.clear()
            for d in self._by_next.values():
                d.clear()
            self._indexed = 0
        st.extend(tokens[len(st):])
        # Index n-grams ending before the last token: an n-gram ending at
        # end e (exclusive) maps to e, the start of what followed it.
        stop = n_tok - 1
        branching = self.branches > 1
        for e in range(max(self._indexed, 1), stop + 1):
            for n, d in self._index.items():
                if e >= n:
                    key = tuple(st[e - n : e])
                    d[key] = e
                    if branching:  # st[e] followed it
                        nexts = self._by_next[n].setdefault(key, {})
                        nexts.pop(st[e], None)  # most recent last
                        nexts[st[e]] = e
                        if len(nexts) > MAX_BRANCHES:
                            del nexts[next(iter(nexts))]
        self._indexed = max(self._indexed, stop + 1)

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        """Propose up to ``request.max_proposal_tokens`` tokens, else say why not (``REASONS``)."""
        tokens = request.tokens
        self._sync(tokens)
        n_tok = len(tokens)
        cap = request.max_proposal_tokens
        st = self._stream
        for n in range(self.n_max, self.n_min - 1, -1):
            if n_tok <= n:
                continue
            follow = self._index[n].get(tuple(st[n_tok - n :]))
            if follow is None or follow >= n_tok:
                continue
            # Match length: how far back the context keeps matching the occurrence.
            match = n
            while match < MAX_MATCH and follow - 1 - match >= 0 and st[n_tok - 1 - match] == st[follow - 1 - match]:
                match += 1
            want = cap if self.policy is None else self.policy.length(match, min(cap, n_tok - follow))
            ids = st[follow : follow + want]
            if not ids:
                return NoProposal(ADAPTIVE_PLAIN, f"match of {match} tokens")
            self._count += 1
            decision = b"ngram:%d:n%d:L%d" % (self._count, n, match)
            if self.policy is not None:
                if len(self._pending) > 256:  # receipts that never came back (errors)
                    self._pending.clear()
                self._pending[decision.hex()] = match
            if self.branches > 1:
                tree = self._tree(ids, self._by_next[n].get(tuple(st[n_tok - n:]), {}), follow, n_tok, cap)
                if tree is not None:
                    return Proposal(decision, tree[0], parents=tree[1])
            return Proposal(decision, tuple(ids))
        return NoProposal(NO_MATCH, f"no {self.n_min}..{self.n_max}-gram" if self.n_min < self.n_max
                          else f"no {self.n_max}-gram")

    def _tree(self, ids, nexts: dict[int, int], follow: int, n_tok: int, cap: int):
        """(tokens, parents) of the tree: ``ids`` (the most recent occurrence's continuation) and the
        continuations after earlier occurrences with other next tokens (``nexts``: next token -> where it
        followed, most recent last), as ``branches`` says; None when there is no other."""
        st = self._stream
        others = [pos for t, pos in reversed(nexts.items()) if t != st[follow] and pos < n_tok][: self.branches - 1]
        if not others or cap < 2:
            return None
        alt = max(1, cap // (2 * len(others)))
        alts = [st[pos : min(pos + alt, n_tok)] for pos in others]
        main = list(ids[: max(1, cap - sum(len(a) for a in alts))])
        tokens = list(main)
        parents = list(range(len(main)))
        for branch in alts:
            for i, t in enumerate(branch):
                parents.append(0 if i == 0 else len(tokens))
                tokens.append(t)
        return tuple(tokens), tuple(parents)

    def report(self, receipt) -> None:
        """Adaptive length: learn acceptance for the proposal's match length and the
        verification cost per row from the receipt. Fixed length: nothing to learn."""
        if self.policy is None:
            return
        match = self._pending.pop(receipt.decision_id, None)
        if match is None:
            return
        self.policy.observe_receipt(match, receipt)

    def discard(self, decision_id: bytes, reason: str) -> None:
        """Nothing to roll back; forget the pending decision."""
        self._pending.pop(decision_id.hex() if isinstance(decision_id, (bytes, bytearray)) else decision_id, None)


def _row_cost_ratio(source: str, key: str, value) -> float | None:
    if value in (None, "", "auto"):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not (number >= 0 and number != float("inf")):
        raise ValueError(f"source {source} option {key} must be auto or a finite number >= 0 (cost of one more "
                         f"row as a fraction of a one-row decode), observed {value!r}")
    return number


def _ngram_sizes(given: dict, merged: dict) -> None:
    """The n-gram source's cross rule: ``n_min`` <= ``n_max`` (names a default used)."""
    n_min, n_max = merged["n_min"], merged["n_max"]
    if n_min > n_max:
        shown = [f"{k}={v}" + ("" if k in given else " (the default)") for k, v in (("n_min", n_min), ("n_max", n_max))]
        raise ValueError(f"source ngram options must satisfy 1 <= n_min <= n_max, observed {', '.join(shown)}")


NGRAM_LENGTHS = {
    "fixed": "propose everything that followed the match, up to draft max (llama.cpp's prompt lookup)",
    "adaptive": "propose the length that buys the most tokens per unit of verification cost "
                "(the stored cost model, acceptance learned per match length from the receipts); nothing when "
                "a plain step is cheaper, so on a CPU where verifying is expensive it may propose nothing at all",
}
"""The n-gram source's ``length`` option: name -> what it does (the first is the default)."""

NGRAM = SourceDescriptor("ngram", (
    Option("n_max", "int", 4, "longest n-gram to match (tokens; one table per size: bounded)", minimum=1, maximum=16,
           control_max=16, flag="--ngram-max", compare_column=True),
    Option("n_min", "int", 2, "shortest n-gram to match (tokens)", minimum=1, maximum=16, control_max=16,
           flag="--ngram-min", compare_column=True),
    Option("length", "choice", "fixed", "proposal length", choices=NGRAM_LENGTHS, flag="--ngram-length",
           compare_column=True),
    Option("branches", "int", 1, "1: propose one chain; B: a tree with the continuations of up to B - 1 earlier "
           "matches that went on with other tokens, verified in one batch", minimum=1, maximum=MAX_BRANCHES),
    Option("row_cost_ratio", default=None, convert=_row_cost_ratio, control=False,
           help="adaptive length: auto, or the cost of one more row as a fraction of a one-row decode"),
    Option("row_costs", default=None, convert=row_costs_option, control=False,
           help="adaptive length: linear, or ms per batch of 1, 2, ... rows (\"a,b,c\"); default: the stored "
                "cost model"),
), help="prompt lookup: the tokens that followed the last earlier match of the last n tokens",
    capabilities=frozenset({"settings"}), check=_ngram_sizes, reasons=REASONS)
"""The n-gram source's declaration: its options make the ``run`` flags, the window's page and the checks."""


def make_ngram(ctx, **options) -> NgramSource:
    """The ``ngram`` source. ``row_costs``: ms per batch of k = 1.. rows (a list, or "a,b,c"); by default
    the context's ``row_costs`` (the cost model stored for this model and thread count), if any;
    ``"linear"``: none (the linear model, fitted from the receipts). Options are checked with ``NGRAM``
    (``ValueError``)."""
    o = NGRAM.with_defaults(options)
    ratio, costs = o["row_cost_ratio"], o["row_costs"]
    if costs is None and o["length"] == "adaptive" and ratio is None:
        costs = list(ctx.row_costs) if ctx.row_costs else None
    elif costs == "linear":
        costs = None
    return NgramSource(o["n_max"], o["n_min"], length=o["length"], row_cost_ratio=ratio, row_costs=costs,
                       branches=o["branches"])


# The factory carries its declaration, as a plugin's does (``inspector.sources.registry.BUILTIN_FACTORIES``).
make_ngram.descriptor = NGRAM
