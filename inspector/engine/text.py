"""Committed text: UTF-8-safe joining of token bytes and stop strings.

Token pieces from llama.cpp are bytes and may split a multibyte character, so
pieces are joined with an incremental UTF-8 decoder, never decoded alone.
Stop strings are searched on committed text only, across token boundaries;
text that could be the start of a stop string is held back until it is
known not to be one, so streamed text always equals the final text.
"""

from __future__ import annotations

import codecs
from typing import Callable, Sequence


class CommittedText:
    """The output text of one request, built token by token.

    ``piece``: token id -> bytes (llama.cpp ``llama_token_to_piece``, special
    tokens not rendered). ``stop``: stop strings; the first one found ends
    the text (the stop string and anything after it are cut).
    """

    def __init__(self, piece: Callable[[int], bytes], stop: Sequence[str] = ()) -> None:
        self._piece = piece
        self._stop = tuple(s for s in stop if s)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._chunks: list[str] = []
        self._held = ""
        self.stopped_by: str | None = None
        """The stop string that ended the text, or None."""
        self._finished = False
        self.incomplete_bytes = 0
        """Bytes of a character the text ended inside (1-3; 0: it ended on a whole character), set by
        ``finish``: kept out of ``text`` (the token ids hold them)."""

    @property
    def text(self) -> str:
        """Text emitted so far (without held-back text)."""
        return "".join(self._chunks)

    def push(self, token: int) -> str:
        """Add a committed token; return the new text it made visible ("" if none).

        After a stop string was found nothing more is added.
        """
        if self.stopped_by is not None:
            return ""
        delta = self._decoder.decode(self._piece(token))
        if not delta:
            return ""
        if not self._stop:
            self._chunks.append(delta)
            return delta
        pending = self._held + delta
        cut = -1
        for s in self._stop:
            i = pending.find(s)
            if i >= 0 and (cut < 0 or i < cut):
                cut, self.stopped_by = i, s
        if cut >= 0:
            out, self._held = pending[:cut], ""
        else:
            hold = 0
            for s in self._stop:
                for n in range(min(len(s) - 1, len(pending)), hold, -1):
                    if pending.endswith(s[:n]):
                        hold = n
                        break
            out = pending[: len(pending) - hold]
            self._held = pending[len(pending) - hold :]
        if out:
            self._chunks.append(out)
        return out

    def finish(self) -> str:
        """Flush held-back text. A trailing partial UTF-8 sequence (the run stopped inside a
        character, e.g. at max tokens) is not turned into U+FFFD: its bytes stay out of the text and
        ``incomplete_bytes`` counts them, as llama-server holds incomplete UTF-8 back
        (llama.cpp 0c1e570 ``tools/server``: ``validate_utf8`` on the generated text)."""
        if self.stopped_by is not None or self._finished:
            return ""
        self._finished = True
        pending, _flag = self._decoder.getstate()
        self.incomplete_bytes = len(pending)
        self._decoder.reset()
        rest = self._held
        self._held = ""
        if rest:
            self._chunks.append(rest)
        return rest
