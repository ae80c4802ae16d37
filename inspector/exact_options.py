"""argparse that takes an option only by its exact name, as llama.cpp's own parser does.

llama.cpp users type its short flags out of habit (``-n 8``, ``-t 1``, ``-c 512``, ``-m x.gguf``). Python
3.11's argparse guesses a single-dash option from a prefix even with ``allow_abbrev=False`` (``-n`` taken
as ``-ngl``, ``-t`` as ``-ts``, ``-c`` "ambiguous: -ctk, -ctv"), so a flag we do not have would silently
set another setting. ``ExactOptionParser`` accepts an option only by a name it declares (``--name=value``
works; a value attached to a one-letter option, ``-t1``, does not: llama.cpp's ``-cnv`` is not ``-c nv``);
anything else is an unrecognized argument. llama.cpp's parser (``common/arg.cpp``, commit 0c1e570) matches names exactly
too. Every parser of the command line and of the window's options is one of these.
"""

from __future__ import annotations

import argparse
import sys


class NamesOnceFormatter(argparse.HelpFormatter):
    """``--help`` lists an option's names once, then its value: ``--max-tokens, -n, --predict N`` (argparse
    repeats the value after every name, which llama.cpp's several names per option make unreadable)."""

    def _format_action_invocation(self, action: argparse.Action) -> str:  # argparse's hook
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        return f"{', '.join(action.option_strings)} {self._format_args(action, self._get_default_metavar_for_optional(action))}"


class ExactOptionParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` without abbreviations of any kind (see the module docstring), whose ``--help``
    names each option's names once (``NamesOnceFormatter``)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        kwargs.setdefault("formatter_class", NamesOnceFormatter)
        super().__init__(*args, **kwargs)

    def _get_option_tuples(self, option_string: str):  # argparse's hook for prefix matches
        """None: an option is taken only by its exact name (``-t 1`` or ``--threads=1``; not ``-t1``, which
        llama.cpp does not take either, and which would read llama.cpp's ``-cnv`` as ``-c nv``)."""
        return []

    def _get_value(self, action: argparse.Action, arg_string: str):  # argparse's hook for each value
        """The value as argparse converts it; text that holds bytes the locale could not decode (Python keeps
        them as lone surrogates, which no UTF-8 text, receipts file or tokenizer takes) is refused naming
        the option, before any work (a path keeps its bytes: it is not text)."""
        value = super()._get_value(action, arg_string)
        if isinstance(value, str) and action.nargs not in (argparse.PARSER, argparse.REMAINDER):  # not a command
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise argparse.ArgumentError(action, undecodable(value, exc.start)) from None
        return value


def undecodable(text: str, at: int) -> str:
    """Why ``text`` is not text: the byte (or lone surrogate) at index ``at``, and what to do."""
    code = ord(text[at])
    shown = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"lone surrogate U+{code:04X}"
    encoding = sys.getfilesystemencoding()
    hint = "" if encoding.lower().replace("-", "") == "utf8" else \
        f" (this locale reads the command line as {encoding}: set LC_ALL=C.UTF-8, or PYTHONUTF8=1)"
    return f"holds a {shown} at character {at + 1}, which is not UTF-8 text{hint}"
