"""The proposal-window engine of SPEC.md: pure Python, no Qt, no llama.cpp import."""

from inspector.engine.classify import classify_window, window_disposition
from inspector.engine.faults import Fault, FaultPlan
from inspector.engine.generation import Generation
from inspector.engine.observer import GenerationObserver
from inspector.engine.prefill import SessionPlace
from inspector.engine.proposal import Proposal, ProposalRequest, ProposalSource
from inspector.engine.records import Discard, EngineEvent, WindowReceipt
from inspector.engine.scheduler import RuntimeScheduler
from inspector.engine.settings import GenerationSettings, SamplingSettings

__all__ = [
    "classify_window", "window_disposition", "Fault", "FaultPlan", "Generation",
    "GenerationObserver", "Proposal", "ProposalRequest", "ProposalSource", "Discard",
    "EngineEvent", "WindowReceipt", "RuntimeScheduler", "GenerationSettings", "SamplingSettings", "SessionPlace",
]
