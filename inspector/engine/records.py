"""Immutable records the engine produces: window receipts, discards, events.

These cross thread boundaries (worker -> GUI) unchanged, so they are frozen.
Field names are the JSON keys of the receipts document (SPEC "Receipt fields").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from inspector.engine.probabilities import WindowProbabilities


@dataclass(frozen=True, slots=True)
class TreeReceipt:
    """The whole tree of a tree window (``inspector.engine.tree``); the window receipt's own fields
    describe the branch it kept, as a chain window's describe its chain.

    ``node_token_ids``: every proposed token, in row order (token i on verification row i + 1).
    ``node_parents``: each token's parent row (0: the current token). ``row_predictions``: the target's
    prediction at every row (row 0 first), all from the one batch. ``branch_rows``: the kept branch's
    rows, root's child to leaf; its first ``accepted_proposal_tokens`` rows were accepted.
    """

    node_token_ids: tuple[int, ...]
    node_parents: tuple[int, ...]
    row_predictions: tuple[int, ...]
    branch_rows: tuple[int, ...]

    @property
    def rows(self) -> int:
        """Rows decoded in the window's one batch: the current token and every node."""
        return 1 + len(self.node_token_ids)

    def to_json(self) -> dict:
        return {"node_token_ids": list(self.node_token_ids), "node_parents": list(self.node_parents),
                "row_predictions": list(self.row_predictions), "branch_rows": list(self.branch_rows)}

    @classmethod
    def from_json(cls, d: dict) -> "TreeReceipt":
        return cls(tuple(d["node_token_ids"]), tuple(d["node_parents"]), tuple(d["row_predictions"]),
                   tuple(d["branch_rows"]))


@dataclass(frozen=True, slots=True)
class WindowReceipt:
    """The record of one verified proposal window (SPEC "Receipt fields").

    Positions are KV-cache lengths of this session (tokens); times are
    microseconds. ``window_index`` is 1-based over verified windows of the
    request. ``verification_row_predictions`` holds one prediction per row;
    entries at index >= ``canonical_prediction_count`` are branch-conditioned
    and must never be shown as output.
    """

    request_id: int
    session_id: int
    window_index: int
    decode_step: int
    decision_id: str
    source: str
    disposition: str
    proposal_token_ids: tuple[int, ...]
    proposal_token_count: int
    verification_rows: int
    accepted_proposal_tokens: int
    generated_token_count: int
    canonical_prediction_count: int
    committed_tokens: tuple[int, ...]
    verification_row_predictions: tuple[int, ...]
    correction_or_boundary_token: int | None
    base_position: int
    position_after_verification: int
    canonical_position: int
    trimmed_rows: int
    proposal_elapsed_us: int
    verification_elapsed_us: int
    repair_elapsed_us: int
    total_elapsed_us: int
    runtime_lock_wait_us: int
    runtime_lock_hold_us: int
    runtime_lock_acquires: int
    repair: str
    """``"trim"`` or ``"retire"``: which repair ran (SPEC step 7)."""
    verification_rule: str = "greedy"
    """How row predictions were picked: greedy, sample_match or rejection (``inspector.engine.sampling``)."""
    probabilities: WindowProbabilities | None = None
    """The target's probability figures per verification row (``inspector.engine.probabilities``), or
    None when they were turned off or the file predates them (schema version 1)."""
    tree: TreeReceipt | None = None
    """A tree window's whole tree (the fields above describe the branch it kept); None for a chain."""
    grammar_rejected_row: int | None = None
    """Under a grammar: the index in ``proposal_token_ids`` of the proposal token the grammar forbade, where
    verification stopped (a draft token the grammar forbids is never accepted; schema 3), else None."""

    @property
    def decoded_rows(self) -> int:
        """Rows in the window's verification batch: the tree's rows for a tree window (the kept
        branch's and every other), ``verification_rows`` for a chain."""
        return self.tree.rows if self.tree is not None else self.verification_rows

    def to_json(self) -> dict:
        """Plain-JSON dict of every field (tuples become lists; no ``probabilities`` or ``tree`` key when
        None)."""
        probs, tree = self.probabilities, self.tree
        d = asdict(replace(self, probabilities=None, tree=None))
        for k in ("proposal_token_ids", "committed_tokens", "verification_row_predictions"):
            d[k] = list(d[k])
        del d["probabilities"]
        del d["tree"]
        if d["grammar_rejected_row"] is None:
            del d["grammar_rejected_row"]
        if probs is not None:
            d["probabilities"] = probs.to_json()
        if tree is not None:
            d["tree"] = tree.to_json()
        return d

    def row_probabilities(self, row: int):
        """Row ``row``'s figures as a ``RowProbabilities`` (proposed and predicted tokens named), or None
        when the receipt has none or the row is out of range."""
        p = self.probabilities
        if p is None or not 0 <= row < p.rows:
            return None
        return p.row(row, self.proposal_token_ids, self.verification_row_predictions)


@dataclass(frozen=True, slots=True)
class PartialWindow:
    """What is known of a window that ended in an error (SPEC step 9).

    Kept with the ``execution_failed`` discard so the views can show the
    repaired state: ``committed_tokens`` were committed before the error;
    ``canonical_position`` = ``base_position`` + len(committed_tokens).
    ``position_after_verification`` is None when verification did not finish.
    ``session_retired`` is True when repair failed and the session was dropped.
    """

    window_index: int
    base_position: int
    position_after_verification: int | None
    canonical_position: int
    committed_tokens: tuple[int, ...]
    verification_row_predictions: tuple[int, ...]
    session_retired: bool

    def to_json(self) -> dict:
        d = asdict(self)
        d["committed_tokens"] = list(self.committed_tokens)
        d["verification_row_predictions"] = list(self.verification_row_predictions)
        return d


@dataclass(frozen=True, slots=True)
class Discard:
    """A proposal that produced no receipt, with its reason (SPEC step 2, 3, 9).

    ``reason`` is one of ``inspector.engine.proposal.DISCARD_REASONS``;
    ``error`` is the error message for ``execution_failed``; ``partial`` what
    the failed window did before the error.
    """

    decode_step: int
    decision_id: str
    source: str
    reason: str
    proposal_token_ids: tuple[int, ...]
    base_position: int
    error: str | None = None
    partial: PartialWindow | None = None
    error_type: str = ""
    """The error's class name for ``execution_failed`` (``RequestCancelled``: a Stop or an injected
    cancellation, not a failure), "" when there is none or it was not recorded."""

    @property
    def cancelled(self) -> bool:
        """The window ended because the request was cancelled (Stop, or an injected cancellation)."""
        return self.error_type == "RequestCancelled"

    def to_json(self) -> dict:
        return {
            "decode_step": self.decode_step,
            "decision_id": self.decision_id,
            "source": self.source,
            "reason": self.reason,
            "proposal_token_ids": list(self.proposal_token_ids),
            "base_position": self.base_position,
            "error": self.error,
            "partial": self.partial.to_json() if self.partial else None,
            **({"error_type": self.error_type} if self.error_type else {}),
        }


# Event kinds, in the order a window can produce them.
PREFILL = "prefill"
VERIFY = "verify"
COMMIT = "commit"
REPAIR = "repair"
ERROR = "error"
DISCARD = "discard"
STEP = "step"
FINISH = "finish"
EVENT_KINDS = (PREFILL, VERIFY, COMMIT, REPAIR, ERROR, DISCARD, STEP, FINISH)


@dataclass(frozen=True, slots=True)
class EngineEvent:
    """One entry of the ordered event list (SPEC invariant: verify -> commits -> repair -> error).

    ``seq``: 0-based order within the request. ``t_us``: microseconds since
    the request started. ``window``: 1-based window index or None (prefill,
    plain step, discard). ``token``/``row``/``position``: the committed token,
    its verification row and KV position (commit, step); for verify and repair
    ``position`` is the KV length after the operation. ``detail``: reason or
    error text.
    """

    seq: int
    t_us: int
    kind: str
    session_id: int
    window: int | None = None
    token: int | None = None
    row: int | None = None
    position: int | None = None
    detail: str = ""
    probabilities: WindowProbabilities | None = None
    """A plain step's figures for its one row (``step`` events; None elsewhere or when turned off)."""

    def to_json(self) -> dict:
        """Plain-JSON dict (no ``probabilities`` key when None)."""
        d = {"seq": self.seq, "t_us": self.t_us, "kind": self.kind, "session_id": self.session_id,
             "window": self.window, "token": self.token, "row": self.row, "position": self.position,
             "detail": self.detail}
        if self.probabilities is not None:
            d["probabilities"] = self.probabilities.to_json()
        return d


def event_from_json(d: dict) -> EngineEvent:
    """An ``EngineEvent`` from its JSON form. Raises ``TypeError``/``KeyError``/``ValueError`` when damaged."""
    d = dict(d)
    probs = d.pop("probabilities", None)
    return EngineEvent(**d, probabilities=None if probs is None else WindowProbabilities.from_json(probs))


@dataclass(frozen=True, slots=True)
class LockOperation:
    """One runtime operation run under the scheduler's lock.

    ``kind``: prefill, verify, trim, retire, step, stats, drift.
    ``started_us``: microseconds since the scheduler was created, when the
    lock was requested. ``wait_us``: time waiting for the lock; ``hold_us``:
    time holding it (microseconds).
    """

    kind: str
    session_id: int
    started_us: int
    wait_us: int
    hold_us: int

    def to_json(self) -> dict:
        # written out: ``asdict`` deep-copies each field, ~35 us an operation, one per decode step in every
        # served request's document
        return {"kind": self.kind, "session_id": self.session_id, "started_us": self.started_us,
                "wait_us": self.wait_us, "hold_us": self.hold_us}


@dataclass(slots=True)
class Summary:
    """Acceptance figures with named definitions (SPEC last invariant).

    ``acceptance_rate`` = accepted / proposed over verified windows;
    ``mean_accepted_length`` = 1 + accepted / windows (tokens per window);
    ``acceptance_by_position[i]`` = share of windows whose proposal had a token
    at index i that accepted it. Rates are None when undefined (no windows).
    ``accepted_length_histogram[n]`` = windows that accepted exactly n
    proposal tokens (n = 0..longest proposal).
    ``decode_tokens_per_s`` = generated tokens / decode time (prefill excluded);
    ``end_to_end_tokens_per_s`` = generated tokens / (prefill + decode time).
    """

    windows: int = 0
    plain_steps: int = 0
    discards: int = 0
    proposed_tokens: int = 0
    accepted_tokens: int = 0
    generated_tokens: int = 0
    dispositions: dict = field(default_factory=dict)
    acceptance_rate: float | None = None
    mean_accepted_length: float | None = None
    acceptance_by_position: list = field(default_factory=list)
    accepted_length_histogram: list = field(default_factory=list)
    decode_elapsed_us: int = 0
    decode_tokens_per_s: float | None = None
    prefill_elapsed_us: int = 0
    end_to_end_tokens_per_s: float | None = None
    finish_reason: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def _tuples(d: dict, keys) -> dict:
    out = dict(d)
    for k in keys:
        if k in out and isinstance(out[k], list):
            out[k] = tuple(out[k])
    return out


def decoded_rows_of(window: dict) -> int:
    """``WindowReceipt.decoded_rows`` of a receipts-document window: its tree's rows, else its
    ``verification_rows``."""
    tree = window.get("tree")
    return 1 + len(tree["node_token_ids"]) if tree else window["verification_rows"]


def receipt_from_json(d: dict) -> WindowReceipt:
    """A ``WindowReceipt`` from its JSON form (a receipts-document window; extra
    keys such as token texts are ignored). Raises ``TypeError``/``KeyError``
    when a field is missing."""
    names = {f.name for f in fields(WindowReceipt)}
    d = _tuples(d, ("proposal_token_ids", "committed_tokens", "verification_row_predictions"))
    d.setdefault("decode_step", 0)
    d.setdefault("source", "")
    d.setdefault("repair", "retire" if d.get("trimmed_rows", 0) == 0 else "trim")
    probs = d.get("probabilities")
    d["probabilities"] = None if probs is None else WindowProbabilities.from_json(probs)
    tree = d.get("tree")
    d["tree"] = None if tree is None else TreeReceipt.from_json(tree)
    return WindowReceipt(**{k: v for k, v in d.items() if k in names})


def discard_from_json(d: dict) -> Discard:
    """A ``Discard`` (with its ``PartialWindow``) from its JSON form."""
    partial = d.get("partial")
    if partial:
        partial = PartialWindow(**_tuples(partial, ("committed_tokens", "verification_row_predictions")))
    return Discard(
        d["decode_step"], d["decision_id"], d.get("source", ""), d["reason"],
        tuple(d.get("proposal_token_ids", ())), d["base_position"], d.get("error"), partial,
        str(d.get("error_type") or ""),
    )


def failure_place(events, window_count: int) -> str:
    """Where the last ``ERROR`` event of ``events`` (``EngineEvent``s, in order) happened, for messages:
    "at window 4", "in a plain step after window 10" (``window_count`` windows ran), "in a plain step
    before the first window", or "" when none failed."""
    last = next((e for e in reversed(events) if e.kind == ERROR), None)
    if last is None:
        return ""
    if last.window is not None:
        return f"at window {last.window}"
    return f"in a plain step after window {window_count}" if window_count else \
        "in a plain step before the first window"


def decision_id_text(decision_id: bytes | bytearray | str) -> str:
    """A decision id as people read it.

    ``decision_id``: the source's bytes (``Proposal.decision_id``), or the
    lowercase hex that receipts and discards store (``WindowReceipt.decision_id``).
    Rule: when the bytes decode as UTF-8 and every character is printable
    (``str.isprintable``: letters, digits, punctuation, spaces, printable
    non-ASCII; no control characters, newlines or tabs), the text, e.g.
    ``6e6772616d3a313a6e323a4c32`` -> ``ngram:1:n2:L2``; otherwise the hex
    (as stored, so it can be found in the receipts file). A ``str`` that is not
    hex (a discarded, invalid id kept as text) is returned unchanged. Note that
    a printable id and the hex of another id can look alike (``b"cafe"`` and
    ``b"\\xca\\xfe"`` both show as ``cafe``). Never raises for ``bytes``/``str``.
    """
    if isinstance(decision_id, (bytes, bytearray, memoryview)):
        raw = bytes(decision_id)
        hex_text = raw.hex()
    else:
        hex_text = str(decision_id)
        try:
            raw = bytes.fromhex(hex_text)
        except ValueError:
            return hex_text
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return hex_text
    return text if text and text.isprintable() else hex_text
