"""Synthetic acceptance (issue 39 item 3): proposals right with a given conditional rate per position.

The ``synthetic`` source proposes the tokens plain (one-token) decoding of the same prompt produces,
taken from a plain run it records first on the target itself, and makes each proposed position right
with a given conditional rate: the probability that position i is right given that positions < i
were right (llama.cpp's and vLLM's synthetic acceptance semantics). A wrong position gets a token that
is not the plain one, so the target really rejects it, and the proposal ends there: a real draft
would go on from its own wrong token, and nothing after it can be accepted anyway. Verification is
real, so the tokens/s measured are those a draft with that acceptance would give on this machine and
model, minus the draft's own cost, modelled by ``draft_cost_ms`` per proposed token (an EAGLE or MTP
head, a small draft model), spent for real.

``mean_accepted`` gives one mean acceptance length instead of per-position rates, in the unit of the
run's statistics (``inspector.engine.stats``: ``mean_accepted_length`` = 1 + accepted tokens per
window, tokens committed per window, as vLLM's "mean acceptance length"): with a constant conditional
rate a and draft max K, a window commits on average ``tau(a) = 1 + a + a^2 + ... + a^K`` tokens
(``expected_length``); ``constant_rate`` solves ``tau(a) = mean_accepted`` for a (bisection;
``tau`` grows with a from 1 at a = 0 to K + 1 at a = 1).
"""

from __future__ import annotations

import random
import re
import time
from typing import Sequence

from inspector.engine.baseline import plain_generation
from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest
from inspector.engine.scheduler import RuntimeScheduler
from inspector.engine.settings import DEFAULT_DRAFT_MAX, GenerationSettings
from inspector.sources.descriptors import Option, SourceDescriptor

LEFT_PLAIN = "left_plain"
PLAIN_DONE = "plain_done"
NO_PLAIN_RUN = "no_plain_run"
REASONS = {
    LEFT_PLAIN: "the output parted from the recorded plain run (batch-shape numerics): nothing more is proposed",
    PLAIN_DONE: "the output reached the end of the recorded plain run",
    NO_PLAIN_RUN: "the plain run of the prompt could not be recorded (logged)",
}
"""Why the synthetic source proposes nothing (its declaration's ``reasons``)."""

SPIN_MS = 1.0
"""The last part of each draft cost (ms) spent spinning on ``time.perf_counter`` instead of sleeping:
``time.sleep`` overshoots by 0.05-0.1 ms on Linux, so a cost of 0.3 ms slept would be 30 % more."""

DEFAULT_RATES = "0.7"
"""The ``rates`` option's default (one conditional rate for every position)."""
MEMORY_KEY = "synthetic"
MEMORY_RUNS = 8
"""Plain runs kept in the session's memory (``SourceContext.memory``), by prompt and settings: a second
run of the same prompt (another rate, a bench repeat) reuses the recording instead of decoding again."""


def parse_rates(text: str) -> tuple[float, ...]:
    """``"0.8,0.6,0.5"`` -> (0.8, 0.6, 0.5): conditional rates per draft position (1, 2, ...), each 0..1;
    positions past the list take the last rate. ``/``, ``;`` or spaces separate them too (``0.8/0.6``
    where commas separate options: the Compare window's options cell, ``compare --config``).
    Raises ``ValueError`` naming the bad item."""
    items = [t for t in re.split(r"[,;/\s]+", str(text)) if t]
    if not items:
        raise ValueError("rates must list at least one number 0..1, e.g. 0.8,0.6,0.5")
    out = []
    for t in items:
        try:
            r = float(t)
        except ValueError:
            raise ValueError(f"rate {t!r} is not a number 0..1") from None
        if not 0.0 <= r <= 1.0:
            raise ValueError(f"rate {t!r} is outside 0..1")
        out.append(r)
    return tuple(out)


def check_rates(source: str, name: str, value) -> str:
    """The ``rates`` option's check (a ``Converter``): the rates written back as ``"0.8,0.6"``."""
    try:
        return ",".join(f"{r:g}" for r in parse_rates(value))
    except ValueError as exc:
        raise ValueError(f"source {source} option {name} must be rates 0..1 per draft position separated by "
                         f"commas (e.g. 0.8,0.6,0.5): {exc}, observed {value!r}") from None


def expected_length(rates: Sequence[float], draft_max: int) -> float:
    """Mean tokens committed per window (tokens: 1 + expected accepted) when position i (1..``draft_max``)
    is right with conditional rate ``rates[i-1]`` (the last rate past the list): 1 + sum over i of the
    product of the first i rates. No end of text and no cap but ``draft_max`` (tokens) assumed."""
    total, p = 1.0, 1.0
    for i in range(draft_max):
        p *= rates[min(i, len(rates) - 1)]
        total += p
    return total


def constant_rate(mean_accepted: float, draft_max: int) -> float:
    """The constant conditional rate a with ``expected_length((a,), draft_max) == mean_accepted``
    (tokens per window, 1..``draft_max`` + 1; a value outside is clipped to 0 or 1), by bisection to 1e-9."""
    if mean_accepted <= 1.0:
        return 0.0
    if mean_accepted >= draft_max + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-9:
        mid = (lo + hi) / 2
        if expected_length((mid,), draft_max) < mean_accepted:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def spend_ms(ms: float) -> None:
    """Spend ``ms`` milliseconds for real: sleep until ``SPIN_MS`` before the end (the core stays free for
    the window's other threads), then spin on ``time.perf_counter`` (precise to microseconds)."""
    if ms <= 0:
        return
    end = time.perf_counter() + ms / 1000.0
    rest = ms / 1000.0 - SPIN_MS / 1000.0
    if rest > 0:
        time.sleep(rest)
    while time.perf_counter() < end:
        pass


def wrong_token(plain: int, n_vocab: int) -> int:
    """A token id the target rejects where it predicts ``plain``: ``plain + 1`` modulo ``n_vocab``."""
    return (plain + 1) % n_vocab


class SyntheticSource:
    """Proposes the plain continuation with the given conditional rates per position.

    ``plain``: the plain run's generated tokens (token ids, the first generated one first), or None
    when ``record(prompt)`` makes them (``begin``). ``rates``: conditional rates per draft position
    (0..1; positions past the list take the last). ``n_vocab``: the target's vocabulary (tokens).
    ``seed``: the draws' RNG seed (the same seed and rates give the same proposals).
    ``draft_cost_ms``: time spent per proposed token (ms, wrong ones included) before answering.
    ``record``: ``record(prompt_tokens) -> generated tokens``, the plain run (None: ``plain`` is given).

    At decode step with g tokens generated, when they equal the plain run's first g, the proposal is
    plain[g], plain[g+1], ... (at most the request's cap): position i is kept right with rate i, and
    the first one drawn wrong is replaced by ``wrong_token`` and ends the proposal.
    """

    name = "synthetic"

    def __init__(self, rates: Sequence[float], n_vocab: int, *, plain: Sequence[int] | None = None, seed: int = 0,
                 draft_cost_ms: float = 0.0, record=None, rates_text: str = "", mean_accepted: float = 0.0) -> None:
        if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
            raise ValueError(f"rates must be numbers 0..1, observed {list(rates)!r}")
        self.rates = tuple(float(r) for r in rates)
        self.n_vocab = int(n_vocab)
        self.plain = None if plain is None else tuple(plain)
        self.seed = int(seed)
        self.rng = random.Random(self.seed)
        self.draft_cost_ms = float(draft_cost_ms)
        self.record = record
        self.rates_text = rates_text or ",".join(f"{r:g}" for r in self.rates)
        self.mean_accepted = float(mean_accepted)
        self.queries = 0
        self.proposed_tokens = 0
        self.spent_ms = 0.0
        """Draft cost spent so far (ms), measured."""

    def settings(self) -> dict:
        out = {"rates": self.rates_text, "seed": self.seed, "draft_cost_ms": self.draft_cost_ms,
               "plain_tokens": None if self.plain is None else len(self.plain)}
        if self.mean_accepted:
            out["mean_accepted"] = self.mean_accepted
        return out

    def begin(self, prompt_tokens: Sequence[int]) -> None:
        """Record the plain run of ``prompt_tokens`` (when no plain continuation was given); its time counts
        as the prefill's, never as a window's."""
        if self.plain is None and self.record is not None:
            self.plain = tuple(self.record(tuple(prompt_tokens)))

    def rate(self, position: int) -> float:
        """The conditional rate of draft position ``position`` (0-based)."""
        return self.rates[min(position, len(self.rates) - 1)]

    def draw(self, plain_next: Sequence[int]) -> tuple[int, ...]:
        """The proposal for the plain continuation ``plain_next`` (already cut to the cap): right tokens
        while each position's draw passes its rate, then one wrong token, and nothing after it."""
        out = []
        for i, token in enumerate(plain_next):
            if self.rng.random() < self.rate(i):
                out.append(token)
            else:
                out.append(wrong_token(token, self.n_vocab))
                break
        return tuple(out)

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        if self.plain is None:
            self.begin(tuple(request.tokens[:request.prompt_token_count]))  # an engine without ``begin``
        if self.plain is None:
            return NoProposal(NO_PLAIN_RUN)
        g0 = request.prompt_token_count
        g = len(request.tokens) - g0
        if tuple(request.tokens[g0:]) != self.plain[:g]:
            return NoProposal(LEFT_PLAIN, f"at generated token {g}")
        plain_next = self.plain[g:g + request.max_proposal_tokens]
        if not plain_next:
            return NoProposal(PLAIN_DONE)
        tokens = self.draw(plain_next)
        self.queries += 1
        self.proposed_tokens += len(tokens)
        t = time.perf_counter()
        spend_ms(self.draft_cost_ms * len(tokens))
        self.spent_ms += (time.perf_counter() - t) * 1000.0
        return Proposal(b"synthetic:%d" % self.queries, tokens)

    def report(self, receipt) -> None:
        pass

    def discard(self, decision_id: bytes, reason: str) -> None:
        pass


def check_choice_of_rate(given: dict, merged: dict) -> None:
    """``rates`` and ``mean_accepted`` are two ways to say one thing: a ``mean_accepted`` (> 0) beside
    rates other than the default is refused (the factory sees every option, defaults filled in)."""
    if merged.get("mean_accepted", 0) and merged.get("rates", DEFAULT_RATES) != DEFAULT_RATES:
        raise ValueError("source synthetic: give rates or mean_accepted, not both")
    if merged.get("draft_cost_ms", 0) and merged.get("draft_cost_c1", 0):
        raise ValueError("source synthetic: give draft_cost_ms or draft_cost_c1, not both")


SYNTHETIC = SourceDescriptor("synthetic", (
    Option("rates", "text", DEFAULT_RATES, "conditional acceptance rate per draft position, 0..1 each, separated by commas "
           "or / (position i right given positions < i were; the last repeats): e.g. 0.8,0.6,0.5",
           convert=check_rates, placeholder="e.g. 0.8,0.6,0.5"),
    Option("mean_accepted", "float", 0.0, "instead of rates: a mean acceptance length (tokens committed per window, "
           "1 .. draft max + 1) made a constant conditional rate; 0 = use rates", minimum=0.0, maximum=65.0,
           step=0.25, label="mean accepted"),
    Option("seed", "int", 0, "seed of the draws (the same seed and rates give the same proposals)", minimum=0,
           maximum=2**31 - 1),
    Option("draft_cost_ms", "float", 0.0, "time the draft spends per proposed token (ms), spent for real: an EAGLE "
           "or MTP head, a small draft model", minimum=0.0, maximum=1000.0, step=0.1, label="draft cost (ms/token)"),
    Option("draft_cost_c1", "float", 0.0, "instead of draft_cost_ms: the draft's cost per proposed token as a fraction "
           "of c(1), the stored cost model's plain step (bench or the Cost model tab measures it)", minimum=0.0,
           maximum=100.0, step=0.05, label="draft cost (x c(1))"),
    Option("draft_max", "int", DEFAULT_DRAFT_MAX, "most tokens per window (the generation's draft max)", minimum=1,
           from_setting="draft_max"),
), help="the plain run's own tokens, each position right with a given rate (synthetic acceptance, measured for real)",
    capabilities=frozenset({"settings", "runs_target"}), check=check_choice_of_rate, reasons=REASONS)
"""The synthetic source's declaration."""


def plain_recorder(ctx):
    """``record(prompt_tokens) -> generated tokens``: plain decoding of the prompt on ``ctx.runtime`` with
    the request's settings (``ctx.settings``; defaults when None) in a session of its own, locked by
    ``ctx.scheduler`` (a scheduler of its own when None), remembered in ``ctx.memory`` by prompt and
    settings (at most ``MEMORY_RUNS`` runs)."""
    settings = ctx.settings if isinstance(ctx.settings, GenerationSettings) else GenerationSettings()
    key = (settings.max_new_tokens, settings.stop, repr(settings.sampling))
    scheduler = ctx.scheduler if ctx.scheduler is not None else RuntimeScheduler(ctx.runtime)

    def record(prompt: tuple[int, ...]) -> tuple[int, ...]:
        runs = ctx.memory.setdefault(MEMORY_KEY, {})
        if (prompt, key) not in runs:
            g = plain_generation(scheduler, list(prompt), settings)
            while len(runs) >= MEMORY_RUNS:
                runs.pop(next(iter(runs)))
            runs[(prompt, key)] = tuple(g.generated)
        return runs[(prompt, key)]

    return record


def make_synthetic(ctx, **options) -> SyntheticSource:
    """The ``synthetic`` source on ``ctx.runtime``: each window proposes the plain run of the request's
    prompt with ``rates`` (or ``mean_accepted`` made a constant rate for ``draft_max``), drawn with
    ``seed``, spending ``draft_cost_ms`` per proposed token (or ``draft_cost_c1`` x the stored c(1),
    ``ctx.row_costs[0]``; ``ValueError`` without one). The plain run (``plain_recorder``) is
    recorded here when ``ctx.prompt_tokens`` is known (before the request's session opens: the
    command line's runtime has one KV sequence), else at ``begin``, which then needs a second free KV
    sequence. Options are checked with ``SYNTHETIC`` (``ValueError``)."""
    o = SYNTHETIC.with_defaults(options)
    if o["mean_accepted"]:
        rates = (constant_rate(o["mean_accepted"], o["draft_max"]),)
    else:
        rates = parse_rates(o["rates"])
    cost_ms = o["draft_cost_ms"]
    if o["draft_cost_c1"]:
        if not ctx.row_costs:
            raise ValueError("source synthetic option draft_cost_c1 needs a stored cost model (c(1)): measure one "
                             "with spec-inspector bench or the Cost model tab, or give draft_cost_ms")
        cost_ms = o["draft_cost_c1"] * ctx.row_costs[0]
    record = plain_recorder(ctx)
    plain = record(tuple(ctx.prompt_tokens)) if ctx.prompt_tokens else None
    return SyntheticSource(rates, ctx.runtime.n_vocab, plain=plain, seed=o["seed"], draft_cost_ms=cost_ms,
                           record=record, rates_text=",".join(f"{r:.4g}" for r in rates),
                           mean_accepted=o["mean_accepted"])


# The factory carries its declaration, as a plugin's does (``inspector.sources.registry.BUILTIN_FACTORIES``).
make_synthetic.descriptor = SYNTHETIC
