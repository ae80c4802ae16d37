"""Proposal sources: anything that suggests continuation tokens (SPEC "proposal source").

Every source follows ``inspector.engine.proposal.ProposalSource``.
"""

from inspector.sources.ngram import NgramSource
from inspector.sources.scripted import ScriptedSource

__all__ = ["NgramSource", "ScriptedSource"]
