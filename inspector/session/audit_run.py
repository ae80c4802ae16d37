"""Audit one whole run (issue 39, item 1): what ``spec-inspector audit`` and the window's Audit panel share.

A run's audit inputs (``AuditInputs``: prompt and generated token ids, settings, draft max, its verify
windows) come from a receipts document (``inputs_from_document``) or from the session the window shows
(``inputs_from_record``: live or opened). ``audit_run_against`` compares the run with a reference
stream (plain decoding of the same prompt on this machine, ``plain_reference``, or llama-server's
text) and, where they part, audits that position (``inspector.session.audit.audit_divergence``) with
the KV prefix built as plain decoding built it and, when no width explains it and the run's windows
are known, again with the KV prefix the run's own windows built (``RUN_PREFIX``). No Qt here.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from inspector.engine.baseline import first_difference, plain_generation
from inspector.engine.scheduler import RuntimeScheduler
from inspector.engine.settings import GenerationSettings, SamplingSettings
from inspector.receipts.document import is_conversation, load_document
from inspector.session.audit import MAX_AUDIT_WIDTH, AuditResult, VerifiedWindow, audit_divergence, windows_of

PLAIN_DECODING = "plain decoding"
"""The reference of an audit against plain one-token decoding of the same prompt (in words)."""
LLAMA_SERVER = "llama-server"
"""The reference of an audit against llama-server's text of the same prompt (in words)."""


class AuditRefused(Exception):
    """The run cannot be audited: the message says why, in one line."""


@dataclass(frozen=True)
class AuditInputs:
    """What an audit needs of a run. ``prompt`` / ``generated``: token ids. ``settings``: its
    generation settings (``max_new_tokens`` = the generated count; greedy sampling with its
    penalties). ``draft_max``: its draft max (tokens). ``windows``: its verify windows (KV order;
    empty when unknown). ``model``: the receipts' ``model`` block (path, ``n_vocab``, ``size_bytes``,
    ``n_ctx``, ``llama_cpp``). ``plain``: plain decoding of the prompt on this machine when already
    known (a live run's comparison with plain decoding), else None."""

    prompt: tuple[int, ...]
    generated: tuple[int, ...]
    settings: GenerationSettings
    draft_max: int
    windows: tuple[VerifiedWindow, ...] = ()
    model: dict = dataclasses.field(default_factory=dict)
    plain: tuple[int, ...] | None = None

    @property
    def max_width(self) -> int:
        """The widest verify batch to try (rows): the run's draft max + 1, or its widest window's rows when
        wider, at most ``MAX_AUDIT_WIDTH``."""
        widest = max((len(w.proposal) + 1 for w in self.windows), default=1)
        return max(1, min(max(self.draft_max + 1, widest), MAX_AUDIT_WIDTH))


def sampling_of(settings: dict) -> SamplingSettings:
    """The ``SamplingSettings`` of a receipts ``settings`` block (unknown keys ignored). Raises
    ``AuditRefused`` for values llama.cpp refuses and for a sampled run (greedy runs only)."""
    names = {f.name for f in dataclasses.fields(SamplingSettings)}
    try:
        sampling = SamplingSettings(**{k: v for k, v in (settings.get("sampling") or {}).items() if k in names})
    except (TypeError, ValueError) as exc:
        raise AuditRefused(f"the receipts' sampling settings are not usable: {exc}") from None
    if not sampling.greedy:
        raise AuditRefused(f"audit compares greedy runs only; this run sampled at temperature "
                           f"{sampling.temperature:g}, so its output is not meant to equal plain decoding's")
    return sampling


def make_inputs(prompt: Sequence[int], generated: Sequence[int], settings: dict, windows=(), model=None,
                plain: Sequence[int] | None = None) -> AuditInputs:
    """``AuditInputs`` from token ids and a receipts ``settings`` block. Raises ``AuditRefused`` for a
    sampled run, an empty output or an empty prompt."""
    sampling = sampling_of(settings)
    if not generated:
        raise AuditRefused("the run generated no tokens: nothing to audit")
    if not prompt:
        raise AuditRefused("the run has no prompt token ids: nothing to audit")
    draft_max = settings.get("draft_max")
    g = GenerationSettings(max_new_tokens=len(generated), stop=tuple(settings.get("stop") or ()), sampling=sampling,
                           probabilities=False)
    return AuditInputs(tuple(int(t) for t in prompt), tuple(int(t) for t in generated), g,
                       int(draft_max) if isinstance(draft_max, int) else 0, tuple(windows), dict(model or {}),
                       None if plain is None else tuple(int(t) for t in plain))


def inputs_from_document(doc: dict) -> AuditInputs:
    """The audit inputs of one run's receipts document (its main session's windows). Raises
    ``AuditRefused`` for a conversation, a sampled run or an empty output, ``KeyError`` for a window
    without its positions."""
    if is_conversation(doc):
        raise AuditRefused("this is a conversation; audit one run's receipts (one request)")
    windows = windows_of(doc.get("windows") or (), (doc.get("sessions") or {}).get("main"))
    return make_inputs(doc["prompt"]["token_ids"], doc["output"]["token_ids"], doc.get("settings") or {}, windows,
                       doc.get("model") or {})


def inputs_from_record(record) -> AuditInputs:
    """The audit inputs of a ``SessionRecord``: a live run (its header's prompt and model, its main
    session's receipts, its comparison with plain decoding when one ran) or one opened from a
    receipts document (read again when the record kept only its path). Raises ``AuditRefused`` for no
    run, a run still going, an autosave (it keeps no prompt token ids) and what ``make_inputs``
    refuses; ``OSError`` / ``ReceiptsFileError`` when the document cannot be read again."""
    if record.header is not None:
        if record.end is None:
            raise AuditRefused("the run is still going: audit it when it has ended")
        windows = tuple(sorted((VerifiedWindow(r.base_position, tuple(r.proposal_token_ids), r.canonical_position)
                                for r in record.receipts if r.session_id == record.main_session_id),
                               key=lambda w: w.base))
        result = record.baseline_result
        plain = None if result is None else result.plain_tokens
        return make_inputs(record.header.prompt_token_ids, record.generated_token_ids, record.settings or {},
                           windows, record.header.model, plain)
    if record.origin == "document":
        doc = record.document if record.document is not None else load_document(record.document_path)
        return inputs_from_document(doc)
    if record.origin == "autosave":
        raise AuditRefused("an autosave keeps no prompt token ids: open the run's receipts document to audit it")
    raise AuditRefused("no run yet: run a prompt (greedy) first, or open a receipts file")


def check_model(runtime, model: dict, prompt: Sequence[int]) -> None:
    """Refuse a model that is not the run's (``AuditRefused``): another vocabulary size, or another file
    size than the receipts' ``model`` block says, or prompt ids outside the vocabulary."""
    if model.get("n_vocab") not in (None, runtime.n_vocab):
        raise AuditRefused(f"model mismatch: {runtime.model_path} has {runtime.n_vocab} tokens, the run's model "
                           f"{model.get('n_vocab')}")
    if model.get("size_bytes") not in (None, runtime.info.size_bytes) and not model.get("converted_from"):
        raise AuditRefused(f"model mismatch: {runtime.model_path} is {runtime.info.size_bytes} bytes, the run's "
                           f"model ({model.get('path')}) {model.get('size_bytes')}: give the run's model with --model")
    bad = [t for t in prompt if not 0 <= t < runtime.n_vocab]
    if bad:
        raise AuditRefused(f"model mismatch: prompt token {bad[0]} is outside this model's vocabulary")


@dataclass(frozen=True)
class RunAudit:
    """A run compared with a reference stream, and the audit where they part.

    ``reference``: what the reference is, in words (``PLAIN_DECODING``, ``LLAMA_SERVER``).
    ``reference_tokens`` / ``generated``: the two streams (token ids). ``tried``: the audits made,
    in order: the KV prefix as plain decoding built it, then (when that explained nothing and the
    run's windows were known) as the run's windows built it; empty when the streams are identical.
    ``context``: the text of the last committed tokens before the position (for people)."""

    reference: str
    reference_tokens: tuple[int, ...]
    generated: tuple[int, ...]
    prompt_length: int
    tried: tuple[AuditResult, ...] = ()
    context: str = ""

    @property
    def identical(self) -> bool:
        """Whether the run's tokens equal the reference's."""
        return not self.tried

    @property
    def result(self) -> AuditResult | None:
        """The audit the verdict comes from (the last tried), None when identical."""
        return self.tried[-1] if self.tried else None


def plain_reference(scheduler: RuntimeScheduler, inputs: AuditInputs,
                    cancel: threading.Event | None = None) -> tuple[int, ...]:
    """Plain one-token decoding of the run's prompt with its settings, at most as many tokens as it
    generated (token ids; ``inputs.plain`` when already known). ``cancel``: when set, raises
    ``RequestCancelled``. Raises what plain decoding raises (``EngineError``)."""
    if inputs.plain is not None:
        return inputs.plain
    g = plain_generation(scheduler, list(inputs.prompt), replace(inputs.settings, draft_max=0), cancel)
    return tuple(g.generated)


def audit_run_against(scheduler: RuntimeScheduler, inputs: AuditInputs, reference_tokens: Sequence[int],
                      reference: str = PLAIN_DECODING, max_width: int | None = None,
                      token_text: Callable[[int], str] = str,
                      progress: Callable[[str, int, int], None] | None = None,
                      cancel: threading.Event | None = None) -> RunAudit:
    """Compare the run's tokens with ``reference_tokens`` (the same prompt's, from ``reference``) and
    audit where they part, at verify widths ``1..max_width`` rows (default ``inputs.max_width``), under
    the scheduler's lock: with the KV prefix as plain decoding built it, then, when that explains
    nothing and ``inputs.windows`` are known, as the run's windows built it.
    ``progress(what, done, total)``: after each verify batch (batches). ``cancel``: when set, raises
    ``RequestCancelled`` between batches. Raises ``ValueError`` when the streams part at generated
    token 0 (no verify window predicts it), ``EngineError`` from llama.cpp."""
    width = max_width or inputs.max_width
    generated, ref = list(inputs.generated), list(reference_tokens)
    p = first_difference(ref, generated)
    if p is None:
        return RunAudit(reference, tuple(ref), tuple(generated), len(inputs.prompt))

    def audit(windows, what: str) -> AuditResult:
        step = None if progress is None else (lambda done, total: progress(what, done, total))
        return scheduler.execute("audit", -1, lambda rt: audit_divergence(
            rt, inputs.prompt, generated, ref, width, inputs.settings.sampling, token_text, windows, step, cancel,
            reference)).value

    tried = [audit((), "verify widths, the KV as plain decoding built it")]
    if not tried[0].explained and inputs.windows:
        tried.append(audit(inputs.windows, "verify widths, the KV as the run's windows built it"))
    context = scheduler.execute("audit", -1, lambda rt: rt.detokenize(
        (list(inputs.prompt) + generated[:p])[-32:])[-60:]).value
    return RunAudit(reference, tuple(ref), tuple(generated), len(inputs.prompt), tuple(tried), context)
