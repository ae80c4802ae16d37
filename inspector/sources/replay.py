"""Replay: propose exactly the proposals recorded in a receipts document, in order."""

from __future__ import annotations

import logging
import os

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest
from inspector.receipts.document import is_conversation, load_document, model_sha256
from inspector.sources.descriptors import Option, SourceDescriptor

NOT_RECORDED = "not_recorded"
REASONS = {NOT_RECORDED: "the receipts file has no window at this decode step"}
"""Why the replay source proposes nothing (its declaration's ``reasons``)."""
log = logging.getLogger(__name__)


class ReplaySource:
    """Proposes, at each recorded decode step, the proposal recorded there.

    ``document``: a loaded receipts document (``inspector.receipts.load_document``); ``path``: its file.
    Proposals come from its windows and discards (invalid ones too, so they are
    discarded again), ordered by ``decode_step``. At a decode step with no
    recorded proposal, None (a plain step). On the same model and settings the
    replay reproduces the proposals, dispositions and committed tokens.
    """

    name = "replay"

    def __init__(self, document: dict, path: str = "") -> None:
        self.path = str(path)
        """The receipts file replayed ("" when the document was given directly): in ``settings()``."""
        recorded = [(w["decode_step"], w["decision_id"], w["proposal_token_ids"]) for w in document["windows"]]
        recorded += [(d["decode_step"], d["decision_id"], d["proposal_token_ids"]) for d in document["discards"]]
        self.by_step: dict[int, Proposal] = {}
        for step, decision, ids in sorted(recorded, key=lambda r: r[0]):
            try:
                decision_id = bytes.fromhex(decision)
            except ValueError:
                decision_id = decision.encode()[:64] or b"replay"
            self.by_step.setdefault(step, Proposal(decision_id, tuple(ids)))
        self.source_name = document["settings"]["source"]["name"]
        self.replayed = 0

    def settings(self) -> dict:
        out = {"replays": self.source_name, "proposals": len(self.by_step)}
        if self.path:
            out["replay"] = self.path  # the option's own name: a saved session shows the file it replayed
        return out

    def propose(self, request: ProposalRequest) -> Proposal | NoProposal:
        p = self.by_step.get(request.decode_step)
        if p is None:
            return NoProposal(NOT_RECORDED, f"step {request.decode_step}")
        self.replayed += 1
        return p

    def report(self, receipt) -> None:
        pass

    def discard(self, decision_id: bytes, reason: str) -> None:
        pass


REPLAY = SourceDescriptor("replay", (
    Option("replay", "path", "", "an exported receipts document: its proposals are made again at the same "
                                 "decode steps", label="receipts file", flag="--replay", metavar="FILE", key="replay_file",
           required=True, missing="The replay source needs a receipts file (Open…).",
           placeholder="receipts file (.json) to replay", file_filter="Receipts (*.json);;All files (*)"),
), help="propose exactly what a receipts file recorded, at the same decode steps", capabilities=frozenset({"settings"}),
    reasons=REASONS)
"""The replay source's declaration."""


def make_replay(ctx, **options) -> ReplaySource:
    """The ``replay`` source of the receipts file ``replay``: one request's receipts (a conversation is
    refused), recorded on a model with this runtime's vocabulary (``check_replay_model``). Raises
    ``ValueError`` (options checked with ``REPLAY``, a conversation, another vocabulary) or
    ``ReceiptsFileError``."""
    o = REPLAY.with_defaults(options)
    doc = load_document(o["replay"])
    if is_conversation(doc):  # one request's windows are replayed, not a chat's
        raise ValueError(f"{o['replay']} is a conversation of {len(doc['turns'])} turns: replay takes one request's "
                         "receipts (spec-inspector view FILE --turn N shows a turn; export one run to replay it)")
    check_replay_model(doc, ctx.runtime, o["replay"])
    return ReplaySource(doc, path=o["replay"])


def check_replay_model(doc: dict, runtime, path) -> None:
    """Compare the model ``doc`` was recorded on with ``runtime``'s: raise ``ValueError`` naming both
    when their vocabulary sizes differ (the recorded token ids mean other tokens there), log one
    warning naming both when only the file differs (by SHA-256, else by path; proposals replay, but
    acceptance is of another model). A runtime without a model file (a test's fake) is not compared."""
    recorded = doc.get("model") or {}
    here = runtime.describe() if hasattr(runtime, "describe") else {}
    here_path = str(getattr(runtime, "model_path", "") or here.get("path") or "")
    if not here_path:
        return
    was = f"{os.path.basename(str(recorded.get('path', '?')))} ({recorded.get('name', '?')})"
    now = f"{os.path.basename(here_path)} ({here.get('name', '?')})"
    n_rec, n_here = recorded.get("n_vocab"), getattr(runtime, "n_vocab", here.get("n_vocab"))
    if n_rec is not None and n_here is not None and n_rec != n_here:
        raise ValueError(f"--replay {path} was recorded on {was}, vocabulary {n_rec} tokens; this run's model is "
                         f"{now}, vocabulary {n_here}: its token ids mean other tokens here (replay on the model "
                         f"it was recorded on)")
    try:
        same = (recorded["sha256"] == model_sha256(here_path)) if recorded.get("sha256") else \
            os.path.realpath(str(recorded.get("path", ""))) == os.path.realpath(here_path)
    except OSError:
        same = False
    if not same:
        log.warning("warning: --replay %s was recorded on %s; this run's model is %s: the same proposals are "
                    "verified by another model, so acceptance and output can differ", path, was, now)


# The factory carries its declaration, as a plugin's does (``inspector.sources.registry.BUILTIN_FACTORIES``).
make_replay.descriptor = REPLAY
