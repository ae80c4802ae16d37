"""Replay: propose exactly the proposals recorded in a receipts document, in order."""

from __future__ import annotations

from inspector.engine.no_proposal import NoProposal
from inspector.engine.proposal import Proposal, ProposalRequest

NOT_RECORDED = "not_recorded"
REASONS = {NOT_RECORDED: "the receipts file has no window at this decode step"}
"""Why the replay source proposes nothing (its declaration's ``reasons``)."""


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
