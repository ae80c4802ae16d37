"""Proposal sources: anything that suggests continuation tokens (SPEC "proposal source").

Every source follows ``inspector.engine.proposal.ProposalSource``; the
registry (``available_sources``) lists built-in and entry-point sources and makes
them (``make_source``); each declares its options once (``descriptors``).
"""

from inspector.sources.ngram import NgramSource
from inspector.sources.descriptors import Option, SourceDescriptor
from inspector.sources.registry import (ENTRY_POINT_GROUP, SourceContext, UnknownSource, available_sources,
                                        make_source)
from inspector.sources.replay import ReplaySource
from inspector.sources.scripted import ScriptedSource

__all__ = ["NgramSource", "ScriptedSource", "ReplaySource", "SourceContext", "available_sources", "ENTRY_POINT_GROUP",
           "Option", "SourceDescriptor", "UnknownSource", "make_source"]
