"""Errors the engine raises. Messages give observed and expected values."""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error raised by the engine and the runtime adapter."""


class NoChatTemplate(EngineError):
    """The model has no chat template: its prompt can only be sent raw (``--raw``)."""


class RequestCancelled(EngineError):
    """The request was cancelled (SPEC step 6); raised only after repair ran."""

    def __init__(self, message: str = "request cancelled") -> None:
        super().__init__(message)


class RepairFailed(EngineError):
    """Trim failed: the session was dropped (retired) (SPEC step 7)."""


class PositionMismatch(EngineError):
    """The KV length is not what the engine expects (SPEC steps 4 and 7)."""

    def __init__(self, what: str, observed: int, expected: int) -> None:
        super().__init__(f"{what} position mismatch: observed {observed}, expected {expected}")
        self.observed = observed
        self.expected = expected


class NothingCommitted(EngineError):
    """A window committed no target token (SPEC step 7)."""


class DecodeFailed(EngineError):
    """``llama_decode`` returned a non-zero status (1: no KV slot, < 0: error)."""

    def __init__(self, status: int, rows: int, position: int) -> None:
        super().__init__(
            f"llama_decode failed with status {status} for {rows} rows at position {position}"
            + (" (no free KV slot)" if status == 1 else "")
        )
        self.status = status


class DecodeAborted(DecodeFailed):
    """``llama_decode`` returned 2: the abort callback cancelled it in flight."""


class PromptTooLong(EngineError):
    """The prompt does not fit the context (checked before any decode)."""

    def __init__(self, prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(
            f"prompt is {prompt_tokens} tokens but the context holds {n_ctx}: "
            f"expected at most {n_ctx - 1} (one position must stay free to generate); "
            f"shorten the prompt or raise --n-ctx"
        )
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx


class SessionRetired(EngineError):
    """The session was dropped after a failed repair; ``resume`` opens a new one."""


class InjectedCallbackError(EngineError):
    """Raised by the fault plan in place of a failing token callback."""


class SpeculationUnsupported(EngineError):
    """The model's KV cache cannot remove a partial suffix exactly, so proposal
    windows (which trim rejected rows) cannot run; plain decoding still can.
    The message names the model and why (issue 6 "Unusual caches")."""


class RuntimeLost(EngineError):
    """The process running the model ended (an RPC server went away and llama.cpp aborted it;
    ``inspector.llama.remote``). ``endpoints``: the RPC servers; ``exit_code``; ``last_line``:
    llama.cpp's last stderr line; ``silent_s``: set when the process was ended because a call had no
    answer for that many seconds (a server frozen, or unreachable without its connection closing:
    llama.cpp's client waits forever). Every later runtime call raises it too."""

    def __init__(self, endpoints, exit_code, last_line: str, silent_s: float | None = None) -> None:
        self.endpoints = tuple(endpoints)
        self.exit_code = exit_code
        self.last_line = last_line
        self.silent_s = silent_s
        super().__init__(self.at(""))

    def at(self, place: str) -> str:
        """The message with where the run was (``Generation.failure_place``; "" = not said): "RPC
        server H:P went away at window 4 (...)", "... went away in a plain step after window 10 (...)",
        "RPC server H:P stopped answering at window 4 (no answer within 60 s; ...)"."""
        servers = f"RPC server {', '.join(self.endpoints)}" if self.endpoints else ""
        if self.silent_s is not None:
            where = f"{servers} stopped answering" if servers else "the model's process stopped answering"
            where += f" {place}" if place else ""
            return f"{where} (no answer within {self.silent_s:g} s; the model's process was ended)"
        where = f"{servers} went away" if servers else "the model's process ended"
        where += f" {place}" if place else ""
        why = f" (llama.cpp: {self.last_line})" if self.last_line else ""
        code = f"; its process exited with {self.exit_code}" if self.exit_code is not None else ""
        return f"{where}{why}{code}"
