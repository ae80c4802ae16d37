"""The bundled example prompts (``assets/prompts/*.txt``): ``EXAMPLES`` for ``bench``'s tasks and
``compare``'s default, ``ALL_EXAMPLES`` (those and the long ones) for ``run --example`` and the window's
example picker."""

from __future__ import annotations

from pathlib import Path

from inspector import asset_path
from inspector.engine.llama_settings import DEFAULT_N_CTX

EXAMPLES = ("copy-with-corrections", "copy-exact", "code-rewrite", "open-ended")
"""Names of the bundled examples, in the order the window and ``bench`` show them. ``copy-exact``
is text the bundled model copies nearly verbatim (48 of 48 proposal tokens accepted here with
draft max 16): the best case for prompt lookup."""
COPY_EXACT = "copy-exact"
DEFAULT_EXAMPLE = "copy-with-corrections"
"""The example ``compare`` runs without a prompt, and the window's first."""
LONG_FILE_EDIT = "long-file-edit"
LONG_EXAMPLES = (LONG_FILE_EDIT,)
"""Bundled examples that need more than the default context (issue 39, long contexts): the window's
picker and ``run --example`` offer them, ``bench``'s task lists (``EXAMPLES``) do not. ``long-file-edit``
asks for one function of a 23,000-character Python module of ours (``warehouse.py``, written for
this example) to be rewritten: 6,726 prompt tokens on the bundled model, through its chat template."""
ALL_EXAMPLES = EXAMPLES + LONG_EXAMPLES
"""Every bundled example, in the window's picker order."""
LONG_EXAMPLE_N_CTX = 8192
"""The context (positions) a long example runs in: the bundled model's training context, room for
about 1,400 generated tokens after ``long-file-edit``'s prompt."""


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
    if name not in ALL_EXAMPLES:
        raise KeyError(f"unknown example {name!r}: expected one of {', '.join(ALL_EXAMPLES)}")
    return asset_path(f"prompts/{name}.txt")


def example_prompt(name: str) -> str:
    """The text of example ``name`` without its file's final newline (as ``run --prompt-file`` reads it)."""
    text = example_path(name).read_text("utf-8")
    return text[:-1] if text.endswith("\n") else text


def example_prompts() -> dict[str, str]:
    """Every bundled example: name -> text (``example_prompt``), in ``ALL_EXAMPLES`` order (the long ones
    last)."""
    return {name: example_prompt(name) for name in ALL_EXAMPLES}


def example_n_ctx(name: str) -> int:
    """The context (positions) example ``name`` runs in when none is asked for: ``LONG_EXAMPLE_N_CTX``
    for a long example, else ``DEFAULT_N_CTX``; ``DEFAULT_N_CTX`` for a name that is no example ("": a
    custom prompt)."""
    return LONG_EXAMPLE_N_CTX if name in LONG_EXAMPLES else DEFAULT_N_CTX
