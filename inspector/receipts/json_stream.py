"""A JSON text read from a file piece by piece (issue 37, 16): a receipts file of 200 MB becomes
windows and events one at a time, never one object tree of several gigabytes.

``JsonStream`` walks the containers its caller names (``members`` of an object, ``elements`` of an
array) and parses everything else whole (``value``, with ``json``'s own decoder), holding only what
is not yet parsed plus one chunk. The file is read as ``inspector.bounded_read`` reads: a regular
file only (a FIFO or a device refused by its type), at most ``limit`` bytes by the bytes read.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import stat

from inspector.bounded_read import BoundedReadError, file_kind

CHUNK = 1 << 20
"""Bytes read at a time (more while one value does not fit)."""
_SPACE = re.compile(r"[ \t\n\r]*")
_AFTER_NUMBER = frozenset(" \t\n\r,]}")
"""What ends a number for sure (the end of a piece does not: it may go on in the next)."""


class JsonStream:
    """The JSON text of the regular file ``path``, parsed from its start as the caller walks it.
    Raises ``BoundedReadError`` (an ``OSError``) for a special file or more than ``limit`` bytes,
    ``OSError`` as ``open``, ``ValueError`` (``json.JSONDecodeError``, ``UnicodeDecodeError``) for
    text that is not JSON, ``RecursionError`` for nesting deeper than Python parses.
    ``constants``: the NaN and Infinity read so far (Python reads them; strict JSON has none)."""

    def __init__(self, path, limit: int, what: str = "file") -> None:
        flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
        try:
            fd = os.open(path, flags)
        except IsADirectoryError:
            raise BoundedReadError(f"{what} {path} is a folder; expected a regular file") from None
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise BoundedReadError(f"{what} {path} is {file_kind(mode)}; expected a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        self._fh = os.fdopen(fd, "rb")
        self._path, self._limit, self._what = path, limit, what
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._buf, self._pos, self._read, self._eof = "", 0, 0, False
        self._base = 0  # characters before the buffer
        self.constants: list[str] = []

        def constant(name: str) -> float:
            self.constants.append(name)
            return float(name)

        self._decoder = json.JSONDecoder(parse_constant=constant)

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "JsonStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _more(self) -> None:
        """Read the next piece (at least as much as is held, so a long value is parsed a few times at most)."""
        if self._eof:
            return
        size = max(CHUNK, len(self._buf) - self._pos)
        data = self._fh.read(min(size, self._limit + 1 - self._read))
        self._read += len(data)
        if self._read > self._limit:
            raise BoundedReadError(f"{self._what} {self._path} is more than {self._limit} bytes, the limit")
        self._eof = not data
        self._base += self._pos
        self._buf = self._buf[self._pos:] + self._utf8.decode(data, final=self._eof)
        self._pos = 0

    def peek(self) -> str:
        """The next character after white space ("" at the end of the text)."""
        while True:
            self._pos = _SPACE.match(self._buf, self._pos).end()
            if self._pos < len(self._buf) or self._eof:
                return self._buf[self._pos:self._pos + 1]
            self._more()

    def _error(self, expected: str) -> ValueError:
        found = self.peek()
        return ValueError(f"Expecting {expected}" + (f", found {found!r}" if found else ", found the end of the text")
                          + f" (character {self._base + self._pos + 1})")

    def take(self, char: str) -> None:
        """Step over ``char`` (after white space); ``ValueError`` when another character is there."""
        if self.peek() != char:
            raise self._error(repr(char))
        self._pos += 1

    def value(self):
        """The next JSON value, parsed whole."""
        while True:
            self.peek()
            try:
                obj, end = self._decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                if self._eof:
                    raise ValueError(f"{exc.msg} (character {self._base + exc.pos + 1})") from None
                self._more()
                continue
            if not self._eof and isinstance(obj, (int, float)) and self._buf[end:end + 1] not in _AFTER_NUMBER:
                self._more()  # "2" of "2.5" or "2e3" at the end of a piece: the number goes on
                continue
            self._pos = end
            return obj

    def members(self):
        """The keys of the object that comes next, one at a time: after each, the caller reads its value
        (``value``, or ``members``/``elements`` to walk it)."""
        self.take("{")
        if self.peek() == "}":
            self._pos += 1
            return
        while True:
            if self.peek() != '"':
                raise self._error("a property name in double quotes")
            key = self.value()
            self.take(":")
            yield key
            if self.peek() == ",":
                self._pos += 1
                continue
            self.take("}")
            return

    def elements(self):
        """The items of the array that comes next: yields each index, and the caller reads the item."""
        self.take("[")
        if self.peek() == "]":
            self._pos += 1
            return
        i = 0
        while True:
            yield i
            i += 1
            if self.peek() == ",":
                self._pos += 1
                continue
            self.take("]")
            return

    def position(self) -> int:
        """The next character's place in the text (1-based)."""
        return self._base + self._pos + 1

    def skip_rest(self) -> None:
        """Read to the end without parsing (what is left is not needed)."""
        while not self._eof:
            self._pos = len(self._buf)
            self._more()
        self._pos = len(self._buf)

    def at_end(self) -> bool:
        """Whether only white space is left."""
        return self.peek() == ""
