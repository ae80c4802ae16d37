"""The ``spec-inspector`` command line: ``main`` (``inspector.cli.main``: the parser and the dispatch) and
one module per command (``run``; ``turns``: ``run --turns``; ``bench``: ``bench`` and ``compare``;
``gui_speed``: ``bench --gui``; ``view``: ``view`` and ``trace``; ``flags``; ``tune``; ``rpc_server``;
``devices``), sharing ``common`` (exit statuses, one-line errors, the target runtime) and the flag groups
(``context``, ``sampling``, ``sources``, ``ranges``, ``paths``)."""

from inspector.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
