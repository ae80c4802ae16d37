"""Draft-model proposals: a smaller GGUF drafts tokens in its own llama.cpp context.

llama-server's ``draft-simple`` (llama.cpp 0c1e570 ``common/speculative.cpp``,
``common_speculative_impl_draft_simple``, and ``tools/server/server-context.cpp``), in our own
code: the draft's KV cache sees the target's batches, so its arithmetic is the server's.
The prompt reaches the draft's cache when the request begins (``begin``, inside the prefill's time,
as the server's draft processes the prompt batches). Drafting decodes the current token, then each drafted token, one row at a time, taking the
draft's top token (``p_min``: stop when its probability among the top 10 candidates, llama.cpp's
``top_k 10`` draft sampler, falls below it; ``draft_min``: drop a shorter draft); then the draft's
KV is cut back to the target's (the server discards the drafting rows). On ``report`` the
verification rows (current + proposal) are decoded into the draft in one batch, as the server's
``common_speculative_process`` does with the target's verify batch, and the rows the target
rejected are removed. A plain step's token reaches the draft at its next query (one row, as the
server's one-row batch). ``discard`` leaves the draft at the target's stream.
"""

from __future__ import annotations

import logging

import numpy as np

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest
from inspector.engine.sampling import distribution
from inspector.engine.settings import SamplingSettings
from inspector.llama.devices import Offload
from inspector.sources.compat import check_compatible, vocab_facts
from inspector.sources.descriptors import Option, SourceDescriptor


BELOW_P_MIN = "below_p_min"
BELOW_DRAFT_MIN = "below_draft_min"
REASONS = {
    BELOW_P_MIN: "the draft's first token had a top-10 probability below p_min (llama.cpp --spec-draft-p-min)",
    BELOW_DRAFT_MIN: "the draft stopped (p_min) before draft_min tokens (llama.cpp --spec-draft-n-min)",
}
"""Why the draft model proposes nothing (its declaration's ``reasons``)."""
log = logging.getLogger(__name__)


class DraftModelSource:
    """Greedy drafting with a draft model (llama.cpp ``common_speculative`` style).

    ``draft``: a ``LlamaRuntime`` of the draft GGUF (its own context; this
    source owns session 0 of it). ``target``: the target's runtime; when
    given, ``check_compatible`` runs here and raises ``IncompatibleDraft``.
    ``draft_max``: most tokens per proposal (tokens). ``draft_min``: proposals
    shorter than this are dropped (None is returned). ``p_min``: drafting stops
    when the draft's top token's probability among its top 10 falls below it (0 = never).
    ``sampling``: with temperature > 0 the draft samples each token from its
    distribution q under these settings (seeded) and attaches q to the
    proposal, so the ``rejection`` rule can verify it; else it drafts greedily.
    ``p_split`` (greedy drafting only; 0 = off): where the draft's second candidate has at least this
    probability, it becomes a one-token side branch of the tree (``inspector.engine.tree``) beside the
    drafted token, at no extra draft decode (llama.cpp's ``examples/speculative`` splits at
    ``p_split`` and drafts on each branch; here the side branch stays one token). Of the drafted
    tokens and the side tokens, the ``draft_max`` with the highest path probability are proposed
    (the draft's top probabilities multiplied along the path: a tree closed under parents).
    """

    name = "draft"

    def __init__(self, draft, target=None, *, draft_max: int = 8, draft_min: int = 0, p_min: float = 0.0,
                 sampling: SamplingSettings | None = None, p_split: float = 0.0) -> None:
        if target is not None:
            check_compatible(vocab_facts(target), vocab_facts(draft))
        if draft_max < 1 or draft_min < 0 or not 0.0 <= p_min <= 1.0 or not 0.0 <= p_split <= 1.0:
            raise ValueError(f"bad draft settings: draft_max={draft_max} (>= 1), draft_min={draft_min} (>= 0), "
                             f"p_min={p_min} (0..1), p_split={p_split} (0..1)")
        self.p_split = p_split
        self.draft = draft
        self.draft_max = draft_max
        self.draft_min = draft_min
        self.p_min = p_min
        self.sampling = sampling if sampling is not None and not sampling.greedy else None
        self._rng = np.random.default_rng(None if sampling is None else sampling.seed + 1)
        self.sid = draft.open_session(None)
        self.kv_tokens: list[int] = []
        """Tokens the draft's KV cache holds, in order (a prefix of the target's stream, then drafts)."""
        self._pending: dict[bytes, tuple[int, tuple[int, ...]]] = {}
        """decision id -> (draft KV length before drafting, the verification rows: current + proposal)"""
        self._count = 0
        self.last_top_probabilities: list[float] = []

    def settings(self) -> dict:
        d = {"draft_model": self.draft.model_path, "draft_max": self.draft_max,
             "draft_min": self.draft_min, "p_min": self.p_min}
        if self.p_split:  # trees; chains keep the settings they always had
            d["p_split"] = self.p_split
        return d

    def close(self) -> None:
        self.draft.drop_session(self.sid)

    def _trim_to(self, n: int) -> None:
        if n < len(self.kv_tokens):
            if not self.draft.trim(self.sid, n):
                self.draft.drop_session(self.sid)
                self.sid = self.draft.open_session(None)
                self.kv_tokens = []
                return
            del self.kv_tokens[n:]

    def _sync(self, prefix) -> None:
        """Make the draft KV hold exactly ``prefix`` (keep the common part, decode the rest)."""
        kv = self.kv_tokens
        common = 0
        limit = min(len(kv), len(prefix))
        while common < limit and kv[common] == prefix[common]:
            common += 1
        self._trim_to(common)
        missing = list(prefix[common:])
        if missing:
            self.draft.prefill(self.sid, missing, common)
            kv.extend(missing)

    def begin(self, prompt) -> None:
        """A new request: prefill the prompt into the draft now, inside the prefill's time, as
        llama-server's draft processes the target's prompt batches (``process``) before its first
        draft; the first query then decodes only the current token."""
        self._sync(list(prompt))

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        tokens = request.tokens
        self._sync(tokens[:-1])
        before = len(self.kv_tokens)
        k = min(request.max_proposal_tokens, self.draft_max)
        out: list[int] = []
        probs: list[float] = []
        dists: list[np.ndarray] = []
        qs: list[float] = []
        sides: list[tuple[int, int, float]] = []  # (position in out, token, its probability)
        splitting = self.p_split > 0.0 and self.sampling is None
        current = tokens[-1]
        rt = self.draft
        for _ in range(k):
            rt.decode_rows(self.sid, (current,), len(self.kv_tokens))
            self.kv_tokens.append(current)
            logits = rt.row_logits(0)
            top = int(logits.argmax())
            weights = np.exp(logits - logits[top])
            p_top = float(1.0 / weights.sum())
            if splitting:
                weights[top] = 0.0
                second = int(weights.argmax())
                p_second = float(weights[second]) * p_top
                if p_second >= self.p_split:
                    sides.append((len(out), second, p_second))
            if self.p_min > 0.0 and top10_probability(logits, top) < self.p_min:
                break
            if self.sampling is not None:
                q = distribution(logits, self.sampling)
                top = int(self._rng.choice(q.shape[0], p=q))
                dists.append(q)
                qs.append(float(q[top]))
            else:
                qs.append(p_top)  # greedy: the draft's softmax of its argmax
            out.append(top)
            probs.append(p_top)
            current = top
        self.last_top_probabilities = probs
        self._trim_to(before)  # the drafting rows leave the draft's cache (llama-server: seq_rm to the target's)
        if not out:
            return NoProposal(BELOW_P_MIN, f"p_min {self.p_min:g}")
        if len(out) < self.draft_min:
            return NoProposal(BELOW_DRAFT_MIN, f"{len(out)} of draft_min {self.draft_min}")
        self._count += 1
        decision = b"draft:%d" % self._count
        self._pending[decision] = (before, (tokens[-1], *out))
        if sides:
            tree = split_tree(out, probs, sides, k)
            if tree is not None:
                return Proposal(decision, tree[0], parents=tree[1])
        return Proposal(decision, tuple(out), tuple(dists) if dists else None, tuple(qs[: len(out)]))

    def report(self, receipt) -> None:
        """Decode the window's verification rows into the draft in one batch (as the target did) and keep
        the accepted prefix: current, then the accepted proposal tokens (the target's own next token
        reaches the draft with the next window's rows)."""
        pending = self._pending.pop(bytes.fromhex(receipt.decision_id), None)
        if pending is None:
            return
        before, _drafted = pending
        rows = (_drafted[0], *receipt.proposal_token_ids)  # a tree window: the branch it kept
        if len(self.kv_tokens) != before:
            return  # the draft is not where the window started: the next query brings it back (_sync)
        try:
            self.draft.prefill(self.sid, list(rows), before)
        except Exception:  # the draft's cache is unknown now: start it again (the next query refills it)
            self.draft.drop_session(self.sid)
            self.sid = self.draft.open_session(None)
            self.kv_tokens = []
            raise
        self.kv_tokens.extend(rows)
        keep = before + 1 + min(receipt.accepted_proposal_tokens, receipt.canonical_prediction_count - 1)
        self._trim_to(keep)

    def discard(self, decision_id: bytes, reason: str) -> None:
        """Forget the proposal: the draft's cache already holds only the target's stream."""
        self._pending.pop(bytes(decision_id), None)


def split_tree(drafted, path_probs, sides, budget: int):
    """(tokens, parents) of the drafted chain with one-token side branches, or None when none is kept:
    ``drafted`` the chain, ``path_probs[i]`` its path probability after token i (``drafted[i]`` with
    the ones before it), ``sides`` (position i, token, probability): a sibling of ``drafted[i]``, its path
    probability ``path_probs[i - 1]`` x its own. Keeps the ``budget`` nodes of highest path probability
    (the chain's first token always; ties: the chain first), in chain order, each side token right
    after its sibling's parent's chain tokens."""
    nodes = [(p, 0, i, t) for i, (t, p) in enumerate(zip(drafted, path_probs))]
    nodes += [((path_probs[i - 1] if i else 1.0) * q, 1, i, t) for i, t, q in sides]
    kept = sorted(nodes, key=lambda n: (-n[0], n[1], n[2]))[:budget]
    chain = sorted(n[2] for n in kept if n[1] == 0)
    chain = chain[: next((j for j, i in enumerate(chain) if i != j), len(chain))]  # a prefix of the chain
    side = sorted((n[2], n[3]) for n in kept if n[1] == 1 and n[2] <= len(chain))
    if not side or not chain:
        return None
    tokens = [drafted[i] for i in chain]
    parents = list(range(len(chain)))
    for i, t in side:
        tokens.append(t)
        parents.append(i)  # the sibling of drafted[i]: a child of row i (row 0: the current token)
    return tuple(tokens), tuple(parents)


TOP_K = 10
"""Candidates llama.cpp's draft sampler keeps (``top_k 10``); ``p_min`` compares the top token's
probability among them (``common_speculative_impl_draft_simple``)."""


def top10_probability(logits: np.ndarray, top: int) -> float:
    """The probability of token ``top`` (the argmax) after a top-``TOP_K`` cut of ``logits`` (shape
    (n_vocab,)), as llama.cpp's draft sampler gives it to the ``p_min`` test."""
    best = np.partition(logits, -TOP_K)[-TOP_K:] if logits.shape[0] > TOP_K else logits
    return float(1.0 / np.exp(best - logits[top]).sum())


DRAFT = SourceDescriptor("draft", (
    Option("draft_model", "path", "", "the draft model file (GGUF); it must share the target's vocabulary",
           label="draft model", flag="--draft-model", metavar="PATH", required=True,
           missing="Choose a draft GGUF (Open…) or press “Make draft from target”.",
           placeholder="draft GGUF: Open… or Make draft", file_filter="GGUF models (*.gguf);;All files (*)",
           server_flag="--model-draft", aliases=("-md", "--model-draft", "--spec-draft-model")),
    Option("draft_max", "int", 8, "most tokens drafted per window (the generation's draft max)", minimum=1,
           from_setting="draft_max", server_flag="--spec-draft-n-max"),
    Option("draft_min", "int", 0, "drop drafts shorter than this (tokens; 0 = keep all)", minimum=0,
           maximum=64, control_max=64, label="draft min", flag="--draft-min", server_flag="--spec-draft-n-min",
           aliases=("--draft-n-min", "--spec-draft-n-min")),
    Option("p_min", "float", 0.0, "stop drafting when the draft's top probability is below this (0 = never)",
           minimum=0.0, maximum=1.0, step=0.05, label="p-min", flag="--p-min", server_flag="--spec-draft-p-min",
           aliases=("--draft-p-min", "--spec-draft-p-min")),
    Option("p_split", "float", 0.0, "a tree: where the draft's second candidate has at least this probability it "
           "becomes a one-token side branch, verified in the same batch (llama.cpp examples/speculative's "
           "--draft-p-split; 0 = chains; greedy drafting only)", minimum=0.0, maximum=1.0, step=0.05,
           label="p-split"),
    Option("n_gpu_layers", "int", -1, "layers of the draft model on a local GPU (llama.cpp -ngld; -1: llama.cpp's "
           "default, all of them when there is a GPU; the draft never goes over RPC)", minimum=-1, maximum=2147483647,
           control=False,
           flag="--n-gpu-layers-draft", server_flag="--gpu-layers-draft",
           aliases=("-ngld", "--gpu-layers-draft", "--spec-draft-ngl")),
), help="a draft model (a smaller or re-quantized GGUF) drafts tokens in its own llama.cpp context",
    capabilities=frozenset({"settings", "close", "loads_model", "draft_probabilities"}), llama_server="draft-simple",
    reasons=REASONS)
"""The draft model source's declaration."""


def make_draft(ctx, **options) -> DraftModelSource:
    """The ``draft`` source: loads ``draft_model`` in its own llama.cpp context with the target's context
    size, batch and threads (``n_gpu_layers`` -1: llama.cpp's default offload) and checks it against the
    target (``IncompatibleDraft``; the loaded draft is closed again). Options are checked with ``DRAFT``
    before the draft model loads."""
    from inspector.llama.runtime import LlamaRuntime  # llama.cpp loads only when a draft model is made

    o = DRAFT.with_defaults(options)
    target = ctx.runtime
    ngl = o["n_gpu_layers"]
    draft = LlamaRuntime(o["draft_model"], n_ctx=target.n_ctx, n_batch=target.n_batch, n_seq_max=1,
                         n_threads=target.n_threads, offload=Offload(n_gpu_layers=None if ngl == -1 else ngl))
    if draft.offload_note:
        log.warning("draft model: %s", draft.offload_note.replace("-ngl", "--n-gpu-layers-draft"))
    try:
        sampling = getattr(ctx.settings, "sampling", None)
        return DraftModelSource(draft, target, draft_max=o["draft_max"], draft_min=o["draft_min"],
                                p_min=o["p_min"], sampling=sampling, p_split=o["p_split"])
    except Exception:
        draft.close()
        raise


# The factory carries its declaration, as a plugin's does (``inspector.sources.registry.BUILTIN_FACTORIES``).
make_draft.descriptor = DRAFT
