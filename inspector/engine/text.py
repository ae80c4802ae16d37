"""Committed text: UTF-8-safe joining of token bytes and stop strings; the one rule every view
shows token bytes by.

Token pieces from llama.cpp are bytes and may split a multibyte character, so
pieces are joined with an incremental UTF-8 decoder, never decoded alone.
Stop strings are searched on committed text only, across token boundaries;
text that could be the start of a stop string is held back until it is
known not to be one, so streamed text always equals the final text.

How a view shows tokens (the token stream, tooltips, the Windows rows table, the Receipt pane,
exports, ``run --events`` and ``view``): a token's own text is its **label**
(``token_label``: its text where its bytes are valid UTF-8, each byte that is not part of a whole
character as ``<0xNN>``, e.g. ``<0xE6>`` for the first byte of 東); the stream's text joins the
tokens' bytes (``ShownText``): a character split over tokens is held back until its UTF-8
sequence is complete (llama.cpp 0c1e570 ``tools/server``: ``validate_utf8``,
``utf8_complete_length`` here) and shown whole with the token that completes it.
"""

from __future__ import annotations

import codecs
import re
from typing import Callable, Iterable, Sequence

_BYTE_LABEL = re.compile(r"<0x([89A-F][0-9A-F])>")  # only bytes >= 0x80 can be outside a whole character


def utf8_complete_length(data: bytes) -> int:
    """Length of ``data`` without a multi-byte character cut off at its end: llama-server's
    ``validate_utf8`` (llama.cpp 0c1e570 ``tools/server/server-common.cpp``), which decides what a
    stream holds back: a lead byte among the last 3 whose sequence needs more bytes than follow it."""
    n = len(data)
    for i in range(1, min(4, n) + 1):
        c = data[n - i]
        if (c & 0xE0) == 0xC0:
            if i < 2:
                return n - i
        elif (c & 0xF0) == 0xE0:
            if i < 3:
                return n - i
        elif (c & 0xF8) == 0xF0:
            if i < 4:
                return n - i
    return n


def token_label(piece: bytes) -> str:
    """How a token is named on its own: its text where its bytes are valid UTF-8, and each byte that
    is not part of a whole character as ``<0xNN>`` (a piece of a character split over tokens:
    ``b"\xe6"`` -> ``<0xE6>``, ``b" \xe6"`` -> `` <0xE6>``), never U+FFFD. ``label_bytes`` reads it
    back."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        pass
    out = []
    while piece:
        try:
            out.append(piece.decode("utf-8"))
            break
        except UnicodeDecodeError as e:
            out.append(piece[: e.start].decode("utf-8"))
            out.extend(f"<0x{b:02X}>" for b in piece[e.start : e.end])
            piece = piece[e.end :]
    return "".join(out)


def label_bytes(label: str) -> bytes:
    """The bytes a ``token_label`` stands for (a record holds token texts, a file stores them)."""
    if "<0x" not in label:
        return label.encode("utf-8")
    out, at = [], 0
    for m in _BYTE_LABEL.finditer(label):
        out.append(label[at : m.start()].encode("utf-8"))
        out.append(bytes((int(m.group(1), 16),)))
        at = m.end()
    out.append(label[at:].encode("utf-8"))
    return b"".join(out)


class ShownText:
    """The stream's text of a run's tokens, token by token: each token's bytes are joined to the
    bytes held back before it, and what ends in a whole character is shown (``token_label`` of
    it: an invalid byte as ``<0xNN>``); a character cut off at the end (``utf8_complete_length``)
    is held back until a later token completes it, and then shown whole with that token, as
    llama-server streams it. ``held``: the held bytes as (token index, its bytes held) pairs."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held: tuple = ()

    def push(self, index: int, piece: bytes) -> str:
        """Add token ``index``'s bytes; return the text it shows ("" while a character is incomplete)."""
        if not self.held:
            n = utf8_complete_length(piece)
            if n == len(piece):
                return token_label(piece)
            self.held = ((index, piece[n:]),)
            return token_label(piece[:n])
        parts = (*self.held, (index, piece))
        data = b"".join(p for _, p in parts)
        n = drop = utf8_complete_length(data)
        held = []
        for i, p in parts:
            if drop >= len(p):
                drop -= len(p)
                continue
            held.append((i, p[drop:]))
            drop = 0
        self.held = tuple(held)
        return token_label(data[:n])

    def flush(self) -> list[tuple[int, str]]:
        """The run is over: the held bytes as (token index, its held bytes' label) pairs, in order;
        nothing is held after."""
        held, self.held = self.held, ()
        return [(i, token_label(p)) for i, p in held]


def shown_text(pieces: Iterable[bytes]) -> str:
    """The stream's text of token pieces in order (``ShownText``), a character cut off at the end
    left out."""
    s = ShownText()
    return "".join(s.push(i, p) for i, p in enumerate(pieces))


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
