"""Settings of a generation request and of the target's sampler."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True, slots=True)
class SamplingSettings:
    """How the target picks a token from a row's logits.

    ``temperature`` <= 0 means greedy (argmax, llama.cpp
    ``llama_sampler_init_greedy``). Otherwise the chain is top-k, top-p,
    min-p, temperature, then ``dist(seed)``; ``top_k`` <= 0 and
    ``top_p``/``min_p`` outside (0, 1) leave that stage out.
    """

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GenerationSettings:
    """Limits of one request (tokens, milliseconds).

    ``max_new_tokens``: generated tokens at most (>= 1).
    ``draft_max``: proposal tokens at most per window (the config cap of SPEC step 1).
    ``stop``: stop strings, matched on committed text only.
    ``proposal_deadline_ms``: advisory deadline given to the source; a later
    answer is discarded as ``deadline_exceeded``.
    ``verification``: ``"sample_match"`` (default) or ``"rejection"`` (uses the
    proposal's draft probabilities when it has them and temperature > 0;
    see ``inspector.engine.sampling``). Greedy sampling always verifies greedily.
    """

    max_new_tokens: int = 128
    draft_max: int = 8
    stop: tuple[str, ...] = ()
    proposal_deadline_ms: float = 2000.0
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    verification: str = "sample_match"

    def __post_init__(self) -> None:
        if self.verification not in ("sample_match", "rejection"):
            raise ValueError(f"verification must be sample_match or rejection, observed {self.verification!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, observed {self.max_new_tokens}")
        if self.draft_max < 0:
            raise ValueError(f"draft_max must be >= 0, observed {self.draft_max}")

    def to_json(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d
