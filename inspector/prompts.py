"""The bundled example prompts (``assets/prompts/*.txt``): one list for the CLI (``run --example``,
``compare``'s default), ``bench``'s tasks and the window's example picker."""

from __future__ import annotations

from pathlib import Path

from inspector import asset_path

EXAMPLES = ("copy-with-corrections", "copy-exact", "code-rewrite", "open-ended")
"""Names of the bundled examples, in the order the window and ``bench`` show them. ``copy-exact``
is text the bundled model copies nearly verbatim (48 of 48 proposal tokens accepted here with
draft max 16): the best case for prompt lookup."""
COPY_EXACT = "copy-exact"
DEFAULT_EXAMPLE = "copy-with-corrections"
"""The example ``compare`` runs without a prompt, and the window's first."""


TURNS_EXAMPLES = ("agent-edits", "file-edits")
"""Bundled conversations (``assets/prompts/turns/*.txt``, turns separated by ``---`` lines;
``inspector.session.conversation``). ``agent-edits`` asks for a function, then three times to
apply a change to "the function you wrote": every answer repeats most of the one before, as
agent loops do. ``file-edits`` gives a short settings file, then asks four times for one change and
"the whole file again": a file edited in several steps, every answer a copy of the last with one
line changed."""


def turns_path(name_or_path: str):
    """The file of bundled conversation ``name_or_path`` (one of ``TURNS_EXAMPLES``), else the path as
    given (a user's turns file)."""
    if name_or_path in TURNS_EXAMPLES:
        return asset_path(f"prompts/turns/{name_or_path}.txt")
    return Path(name_or_path)


def example_path(name: str):
    """Path of example ``name``'s file. Raises ``KeyError`` for a name not in ``EXAMPLES``."""
    if name not in EXAMPLES:
        raise KeyError(f"unknown example {name!r}: expected one of {', '.join(EXAMPLES)}")
    return asset_path(f"prompts/{name}.txt")


def example_prompt(name: str) -> str:
    """The text of example ``name`` without its file's final newline (as ``run --prompt-file`` reads it)."""
    text = example_path(name).read_text("utf-8")
    return text[:-1] if text.endswith("\n") else text


def example_prompts() -> dict[str, str]:
    """Every bundled example: name -> text (``example_prompt``), in ``EXAMPLES`` order."""
    return {name: example_prompt(name) for name in EXAMPLES}
