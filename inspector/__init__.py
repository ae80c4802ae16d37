"""spec-inspector: watch speculative decoding happen on llama.cpp.

Layout (no Qt below ``inspector.gui``):

- ``inspector.engine``: the proposal-window engine of ``SPEC.md`` (classifier,
  window executor, generation loop, scheduler, fault plan, receipts). Pure Python.
- ``inspector.sources``: proposal sources (n-gram prompt lookup, scripted).
- ``inspector.llama``: the llama.cpp runtime adapter (llama-cpp-python low-level API).
- ``inspector.receipts``: the receipts JSON document and its schema.
- ``inspector.cli``: the ``spec-inspector`` command line.
"""

__version__ = "0.1.0"


def asset_path(name: str):
    """Path of a file from the top-level ``assets/`` folder (a source checkout or
    an editable install), or from the installed ``inspector.assets`` package."""
    from pathlib import Path

    local = Path(__file__).resolve().parent.parent / "assets" / name
    if local.exists():
        return local
    from importlib import resources

    return Path(str(resources.files("inspector.assets").joinpath(name)))
