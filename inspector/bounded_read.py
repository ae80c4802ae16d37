"""Reading a user's file with a size limit that holds whatever the file reports (issue 25).

A size from ``stat`` means nothing for ``/dev/zero``, a pipe or a ``/proc`` file (0 bytes, yet
endless or blocking), so the limit is applied to the bytes actually read, and anything but a
regular file (a FIFO, a device, a socket) is refused by its type before a byte is read. The file
is opened without blocking, so a FIFO with no writer is refused instead of hanging.
"""

from __future__ import annotations

import os
import stat

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class BoundedReadError(OSError):
    """A file refused by ``read_bounded``: not a regular file, or over the limit. One line, naming it."""


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is in words ("a FIFO (named pipe)", "a character device", ...; "a regular file")."""
    for test, words in _KINDS:
        if test(mode):
            return words
    return "a regular file" if stat.S_ISREG(mode) else "a special file"


def read_bounded(path, limit: int, what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` bytes (read, not reported: a file
    that grows or lies about its size is cut off at ``limit + 1``).

    Raises ``FileNotFoundError``/``PermissionError``/``OSError`` as ``open`` does, and
    ``BoundedReadError`` (an ``OSError``) for a folder, FIFO, device or socket, or for more than
    ``limit`` bytes; the message names ``what``, the path and the limit."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except IsADirectoryError:
        raise BoundedReadError(f"{what} {path} is a folder; expected a regular file") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BoundedReadError(f"{what} {path} is {file_kind(mode)}; expected a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise BoundedReadError(f"{what} {path} is more than {limit} bytes, the limit")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_bounded_text(path, limit: int, what: str = "file") -> str:
    """``read_bounded`` decoded as UTF-8 (a leading BOM kept as read). Raises as ``read_bounded``, and
    ``UnicodeDecodeError`` for bytes that are not UTF-8. Newlines read as ``Path.read_text`` reads them
    (``\r\n`` and ``\r`` become ``\n``)."""
    text = read_bounded(path, limit, what).decode("utf-8")
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as Path.read_text
