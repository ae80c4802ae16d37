"""Settings of a generation request and of the target's sampler, and the rules for their values.

The value rules live here, once: ``SamplingSettings`` and ``GenerationSettings``
check every field in ``__post_init__`` with ``check_setting``, and the command
line (argparse types) and the window (spin box limits from ``SETTING_RULES``)
use the same rules. The sampling settings are declared in ``inspector.engine.llama_settings``
(``SAMPLING``: name, llama.cpp's flags, default, rule, help); ``SamplingSettings`` is made from
those declarations. A refused value raises ``ValueError`` naming the field,
the observed value and the valid range.
"""

from __future__ import annotations

import math
import operator
import secrets
from dataclasses import asdict, dataclass, field

from inspector.engine.llama_settings import (RANDOM_SEED, SAMPLING, SEED_MAX, SettingRule,
                                            settings_class)

DEFAULT_MAX_NEW_TOKENS = 128
"""Generated tokens at most when nothing else is asked for: the engine's
``GenerationSettings.max_new_tokens``, ``spec-inspector run --max-tokens`` and
the window's spin box."""
MAX_TOP_PROBABILITIES = 1 << 20
"""Most tokens a row's figures may keep (``GenerationSettings.top_probabilities``; a row keeps at most its
vocabulary): a bound on a served request's ``n_probs``, which llama-server leaves unbounded."""
DEFAULT_DRAFT_MAX = 8
"""Proposal tokens at most per window when nothing else is asked for (``GenerationSettings.draft_max``), and
draft max ``auto``'s value without a measured cost model (``inspector.llama.cost_model.auto_draft_max``)."""

AUTO_DRAFT_MAX = None
"""Draft max ``auto`` as every front end hands it on (``--draft-max auto``, the window's draft max box at its
"auto" end, the window's and ``serve``'s request template): the run service takes the stored cost model's choice
when the source is made (``requested_draft_max``)."""


def requested_draft_max(draft_max: int | None) -> tuple[int, bool]:
    """``(GenerationSettings.draft_max, RunRequest.draft_max_auto)`` for a front end's draft max (proposal tokens,
    or ``AUTO_DRAFT_MAX``): auto runs with ``DEFAULT_DRAFT_MAX`` until the run service resolves it
    (``inspector.session.run.SessionRun.make_source``). The one place "auto" becomes the request's fields."""
    return (DEFAULT_DRAFT_MAX, True) if draft_max is AUTO_DRAFT_MAX else (draft_max, False)

MIN_SPECULATIVE_N_BATCH = 2
"""Smallest ``n_batch`` that leaves room for a proposal: a verification batch
is ``[current token] + proposal``, so the proposal cap is ``n_batch - 1``
(SPEC step 1, ``inspector.engine.proposal.max_proposal_tokens``)."""


SETTING_RULES: dict[str, SettingRule] = {
    **{name: declared.rule for name, declared in SAMPLING.items()},
    "max_new_tokens": SettingRule("int", 1, valid="a whole number >= 1"),
    "draft_max": SettingRule("int", 0, valid="a whole number >= 0", meaning="0 proposes nothing: plain steps"),
    "proposal_deadline_ms": SettingRule("float", 0.0, minimum_open=True, valid="a finite number > 0",
                                        meaning="milliseconds a source may take to answer"),
}
"""Name -> rule for every numeric field of ``SamplingSettings`` (their declarations' rules,
``inspector.engine.llama_settings.SAMPLING``) and ``GenerationSettings``."""


def check_setting(name: str, value):
    """Return ``value`` if it is valid for the setting ``name`` (a key of
    ``SETTING_RULES``), else raise ``ValueError`` naming the field, the
    observed value and the valid range, e.g.
    ``top_p must be a number from 0 to 1, observed 2.0 (0 and 1 leave the top-p stage out)``.

    Whole-number settings refuse floats and bools; number settings refuse
    NaN and infinities. Raises ``KeyError`` for an unknown ``name``.
    """
    rule = SETTING_RULES[name]
    meaning = f" ({rule.meaning})" if rule.meaning else ""
    bad = ValueError(f"{name} must be {rule.valid}, observed {value!r}{meaning}")
    if isinstance(value, bool):
        raise bad
    if rule.kind == "int":
        try:
            number = operator.index(value)
        except TypeError:
            raise bad from None
    else:
        if not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
            raise bad
        try:
            number = float(value)
        except (OverflowError, ValueError, TypeError):
            raise bad from None
        if not math.isfinite(number):
            raise bad
    if rule.minimum is not None and (number < rule.minimum or (rule.minimum_open and number == rule.minimum)):
        raise bad
    if rule.maximum is not None and number > rule.maximum:
        raise bad
    return value


def check_stop(stop) -> tuple[str, ...]:
    """Return ``stop`` as a tuple if every stop string is a non-empty ``str``,
    else raise ``ValueError`` naming the observed value (an empty stop string
    would match everywhere; ``inspector.engine.text`` ignores it)."""
    if isinstance(stop, str):
        raise ValueError(f"stop must be a sequence of strings, observed the string {stop!r}")
    items = tuple(stop)
    for i, s in enumerate(items):
        if not isinstance(s, str) or not s:
            raise ValueError(f"stop string {i + 1} must be a non-empty string, observed {s!r}")
    return items


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond the float range
        return False


def interpret_setting(name: str, value) -> tuple[object, str | None]:
    """``(value to store, note)`` for a value as llama.cpp's tools take it.

    llama.cpp gives some out-of-range values a meaning; they are accepted here,
    stored in the form the settings (and the receipts schema) hold, and
    explained by ``note`` (one line, None when there is nothing to say):

    - ``temperature`` < 0: greedy decoding, stored as 0 (llama.cpp
      src/llama-sampling.cpp, temperature sampler: temp <= 0 keeps only the
      top logit);
    - ``top_k`` <= 0: no top-k limit, stored as is (llama.cpp
      ``llama_sampler_top_k_impl``: k <= 0 returns without filtering);
    - ``seed`` -1 (``RANDOM_SEED``) or 4294967295 (``LLAMA_DEFAULT_SEED``): a
      random seed (llama.cpp ``get_rng_seed``); one is drawn from ``secrets``
      and stored, so the receipts name the seed that replays the run.

    Every other value goes through ``check_setting``: raises ``ValueError``
    naming the field, the observed value and the valid range.
    """
    numeric = not isinstance(value, bool) and isinstance(value, (int, float))
    if name == "temperature" and numeric and value < 0 and _finite(value):
        return 0.0, f"temperature {value:g} < 0 means greedy decoding (as in llama.cpp): recorded as 0"
    if name == "top_k" and numeric and isinstance(value, int) and value <= 0:
        return value, f"top_k {value} <= 0 means no top-k limit (as in llama.cpp)"
    if name == "seed" and numeric and isinstance(value, int) and value in (RANDOM_SEED, 0xFFFFFFFF):
        drawn = secrets.randbelow(SEED_MAX + 1)
        return drawn, (f"seed {value} asks for a random seed (as in llama.cpp): this run uses seed {drawn}, "
                       f"recorded in the receipts")
    try:
        return check_setting(name, value), None
    except ValueError:
        if name in _LLAMA_CPP_RANGES:  # state the range as llama.cpp's tools take it
            raise ValueError(f"{name} must be {_LLAMA_CPP_RANGES[name]}, observed {value!r}") from None
        raise


_LLAMA_CPP_RANGES = {
    "temperature": "a finite number (<= 0 is greedy decoding, as in llama.cpp)",
    "top_k": "a whole number (<= 0 is no top-k limit, as in llama.cpp)",
    "seed": f"a whole number from 0 to {SEED_MAX}, or -1 for a random seed (llama.cpp's uint32 seed)",
}


def sampling_settings(**values) -> tuple["SamplingSettings", tuple[str, ...]]:
    """``SamplingSettings`` from values as llama.cpp's tools take them (keywords: the names of
    ``inspector.engine.llama_settings.SAMPLING``; absent or None: the declared default), and one note
    per value llama.cpp gives a meaning (``interpret_setting``: negative temperature, top_k <= 0, seed
    -1). Raises ``ValueError`` for a value no rule accepts (the field, the observed value, the valid
    range), ``TypeError`` for a name that is not a sampling setting."""
    unknown = set(values) - set(SAMPLING)
    if unknown:
        raise TypeError(f"not a sampling setting: {', '.join(sorted(unknown))}")
    stored, notes = {}, []
    for name, value in values.items():
        if value is None:
            continue
        stored[name], note = interpret_setting(name, value)
        if note:
            notes.append(note)
    return SamplingSettings(**stored), tuple(notes)


def check_n_batch_for_source(n_batch: int, speculative: bool = True) -> int:
    """Return ``n_batch`` (rows per decode) if it leaves room for a proposal,
    else raise ``ValueError``. Speculative decoding needs ``n_batch`` >=
    ``MIN_SPECULATIVE_N_BATCH`` (2): the verification batch is the current
    token plus the proposal, so the proposal cap is ``n_batch - 1`` (SPEC
    step 1). ``speculative=False`` (plain decoding, source none) only needs
    ``n_batch`` >= 1."""
    least = MIN_SPECULATIVE_N_BATCH if speculative else 1
    if isinstance(n_batch, bool) or not isinstance(n_batch, int) or n_batch < least:
        if speculative and isinstance(n_batch, int) and n_batch == 1:
            raise ValueError(
                "n_batch 1 leaves no room for a proposal row: a verification batch is the current token plus "
                f"the proposal, so proposals are capped at n_batch - 1 = 0 (SPEC step 1); use n_batch >= "
                f"{MIN_SPECULATIVE_N_BATCH}, or plain decoding (source none), which works with n_batch 1")
        raise ValueError(f"n_batch must be >= {least}, observed {n_batch!r}")
    return n_batch


PENALTY_FIELDS = ("repeat_penalty", "repeat_last_n", "presence_penalty", "frequency_penalty")
"""The penalty fields of ``SamplingSettings``, in llama.cpp's order of its flags (the settings of llama.cpp's
``penalties`` sampler)."""
PENALTY_DEFAULTS = {name: SAMPLING[name].default for name in PENALTY_FIELDS}
"""llama-server's defaults (``common_params_sampling`` in llama.cpp 0c1e570 ``common/common.h``): no penalty."""


class SamplingRules:
    """The methods of ``SamplingSettings`` (its fields come from the declarations)."""

    __slots__ = ()

    def __post_init__(self) -> None:
        """Check each field with its rule (``check_setting``); raises ``ValueError``."""
        for name in SAMPLING:
            check_setting(name, getattr(self, name))

    @property
    def greedy(self) -> bool:
        """Temperature <= 0: the argmax (llama.cpp's greedy sampler)."""
        return self.temperature <= 0.0

    @property
    def penalized(self) -> bool:
        """Whether the penalties change anything: llama.cpp's rule (``llama_sampler_penalties::is_disabled``,
        src/llama-sampler.cpp at 0c1e570): off when ``repeat_last_n`` is 0 or every penalty is neutral."""
        return self.repeat_last_n > 0 and (
            self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0)

    def to_json(self) -> dict:
        """The fields by name: the receipts' ``settings.sampling``."""
        return asdict(self)


SamplingSettings = settings_class("SamplingSettings", SAMPLING.values(), SamplingRules, __name__, """
    How the target picks a token from a row's logits: a frozen dataclass (slotted) with one field per
    declaration of ``inspector.engine.llama_settings.SAMPLING``, in its order, with its default.

    ``temperature`` 0 means greedy (argmax, llama.cpp
    ``llama_sampler_init_greedy``). Otherwise the chain is top-k, top-p, min-p,
    temperature, then ``dist(seed)``; ``top_k`` <= 0 (as in llama.cpp) and
    ``top_p``/``min_p`` of 0 or 1 leave that stage out. ``seed``: 0..``SEED_MAX``.
    The penalties (``repeat_penalty``, ``repeat_last_n``, ``presence_penalty``,
    ``frequency_penalty``; llama.cpp's ``--repeat-penalty`` etc., with llama-server's
    defaults 1, 64, 0, 0) come first in the chain, greedy included, and look at the
    last ``repeat_last_n`` tokens of the sequence, prompt included
    (``inspector.engine.penalties``).
    Each field is checked by ``check_setting`` (``SETTING_RULES``): a bad value
    raises ``ValueError`` naming the field, the observed value and the valid
    range. ``sampling_settings`` builds one from llama.cpp-style values
    (negative temperature, seed -1) with a note for each.
    """)


@dataclass(frozen=True, slots=True)
class GenerationSettings:
    """Limits of one request (tokens, milliseconds).

    ``max_new_tokens``: generated tokens at most (>= 1; default
    ``DEFAULT_MAX_NEW_TOKENS``).
    ``draft_max``: proposal tokens at most per window (>= 0; the config cap of SPEC step 1).
    ``stop``: stop strings (each non-empty), matched on committed text only.
    ``proposal_deadline_ms``: advisory deadline given to the source (> 0,
    finite); a later answer is discarded as ``deadline_exceeded``.
    ``verification``: ``"sample_match"`` (default) or ``"rejection"`` (uses the
    proposal's draft probabilities when it has them and temperature > 0;
    see ``inspector.engine.sampling``). Greedy sampling always verifies greedily.
    ``probabilities``: keep the target's per-row probability figures (issue 15,
    ``inspector.engine.probabilities``) in receipts and plain-step events; False writes
    none (the smallest files, ``--no-probabilities``).
    ``top_probabilities``: how many most likely tokens the figures keep per row (2..``MAX_TOP_PROBABILITIES``;
    5 by default, the window's; a served request's ``n_probs`` asks for more).
    A bad value raises ``ValueError`` naming the field, the observed value
    and the valid range (``check_setting``, ``check_stop``).
    """

    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    draft_max: int = DEFAULT_DRAFT_MAX
    stop: tuple[str, ...] = ()
    proposal_deadline_ms: float = 2000.0
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    verification: str = "sample_match"
    probabilities: bool = True
    top_probabilities: int = 5

    def __post_init__(self) -> None:
        if isinstance(self.top_probabilities, bool) or not isinstance(self.top_probabilities, int) or \
                not 2 <= self.top_probabilities <= MAX_TOP_PROBABILITIES:
            raise ValueError(f"top_probabilities must be a whole number 2..{MAX_TOP_PROBABILITIES}, observed "
                             f"{self.top_probabilities!r}")
        if self.verification not in ("sample_match", "rejection"):
            raise ValueError(f"verification must be sample_match or rejection, observed {self.verification!r}")
        for name in ("max_new_tokens", "draft_max", "proposal_deadline_ms"):
            check_setting(name, getattr(self, name))
        object.__setattr__(self, "stop", check_stop(self.stop))
        if not isinstance(self.sampling, SamplingSettings):
            raise ValueError(f"sampling must be a SamplingSettings, observed {type(self.sampling).__name__}")

    def to_json(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d
