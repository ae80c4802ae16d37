"""What a ``SessionRecord`` lists (no Qt): ``TokenInfo`` per committed token, ``WindowEntry`` per
verified or failed window, and ``END``, the outcome shown for the token that ended generation."""

from __future__ import annotations

from dataclasses import dataclass

from inspector.engine.classify import ACCEPTED, row_outcomes
from inspector.engine.records import Discard, WindowReceipt

END = "end"
"""Display outcome of the token that ended generation (the engine's ``finish`` event)."""


@dataclass(slots=True)
class TokenInfo:
    """One committed (output) token.

    ``index``: 0-based index among generated tokens. ``window``: 1-based window
    index, None for a plain step. ``row``: its verification row. ``position``:
    its position in the stream (= base_position + row + 1, tokens).
    ``proposed``: the proposal token of that row (None for the bonus token
    and plain steps). ``outcome``: the engine's (``accepted``, ``correction``,
    ``bonus``, ``plain``), or ``end`` for the token that ended generation.
    ``text``: the token's own text, its label (``inspector.engine.text.token_label``: a byte
    that is not part of a whole character as ``<0xNN>``); ``shown``: the text the token stream
    shows for it (``inspector.engine.text.ShownText``): a character split over tokens whole with
    the token that completes it, "" for the tokens before (held back), the held bytes' labels
    once the run ended inside a character.
    """

    index: int
    token: int
    text: str
    window: int | None
    row: int
    position: int
    proposed: int | None
    outcome: str
    shown: str = ""


@dataclass(frozen=True, slots=True)
class WindowEntry:
    """A window as the window list shows it: a receipt, or a failed window (its discard,
    whose ``partial`` holds what it verified and committed)."""

    window_index: int
    receipt: WindowReceipt | None
    discard: Discard | None

    @property
    def failed(self) -> bool:
        """True for a window that failed (no receipt; its discard says why)."""
        return self.receipt is None

    @property
    def proposal(self) -> tuple:
        """The window's proposal token ids."""
        return self.receipt.proposal_token_ids if self.receipt is not None else self.discard.proposal_token_ids

    @property
    def predictions(self) -> tuple:
        """The target's prediction on each verification row (rows a failed window verified)."""
        if self.receipt is not None:
            return self.receipt.verification_row_predictions
        return self.discard.partial.verification_row_predictions

    @property
    def committed(self) -> tuple:
        """The tokens the window committed (a failed window: before its error)."""
        if self.receipt is not None:
            return self.receipt.committed_tokens
        return self.discard.partial.committed_tokens

    @property
    def base_position(self) -> int:
        """KV position of row 0's input token (row ``r`` sits at ``base_position + r``)."""
        return self.receipt.base_position if self.receipt is not None else self.discard.partial.base_position

    @property
    def decode_step(self) -> int:
        """The engine's decode step the window ran in."""
        return self.receipt.decode_step if self.receipt is not None else self.discard.decode_step

    def row_outcomes(self) -> list[str]:
        """Per verification row, what it became (``inspector.engine.classify.row_outcomes``)."""
        return row_outcomes(self.proposal, self.predictions, len(self.committed))

    @property
    def accepted(self) -> int:
        """Proposal tokens accepted (a failed window: among the rows it committed)."""
        if self.receipt is not None:
            return self.receipt.accepted_proposal_tokens
        return sum(1 for o in self.row_outcomes() if o == ACCEPTED)
