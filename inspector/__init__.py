"""spec-inspector: watch speculative decoding happen on llama.cpp.

Layout (no Qt below ``inspector.gui``):

- ``inspector.engine``: the proposal-window engine of ``SPEC.md`` (classifier,
  window executor, generation loop, scheduler, fault plan, receipts). Pure Python.
- ``inspector.sources``: proposal sources (n-gram prompt lookup, scripted).
- ``inspector.llama``: the llama.cpp runtime adapter (llama-cpp-python low-level API).
- ``inspector.receipts``: the receipts JSON document and its schema.
- ``inspector.cli``: the ``spec-inspector`` command line.
"""

from inspector.start_signals import quiet_start

quiet_start()  # first: Ctrl-C while the command line imports is one line and exit 130, not a traceback

from pathlib import Path  # noqa: E402

from inspector.thread_pools import limit_thread_pools  # noqa: E402

__version__ = "0.1.0"

limit_thread_pools()  # numpy's BLAS threads would spin beside llama.cpp's (inspector.thread_pools)


def asset_path(name: str):
    """Path of a file of the top-level ``assets/`` folder, ``name`` relative to it
    (e.g. ``"prompts/open-ended.txt"``).

    ``inspector/assets`` is a symlink to ``assets/`` in a checkout and a real folder
    (the package ``inspector.assets``) in an installed wheel, so one path serves both.
    """
    return Path(__file__).resolve().parent / "assets" / name
