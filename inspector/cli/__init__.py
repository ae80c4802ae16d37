"""The ``spec-inspector`` command line: ``main`` (``inspector.cli.main``) and one module per command
(``run`` lives in ``main``; ``bench``, ``compare``: ``bench``; ``view``; ``flags``; ``tune``; ``rpc-server``;
``devices``), sharing ``common`` (exit statuses, one-line errors, the target runtime) and the flag groups
(``context``, ``sampling``, ``sources``, ``ranges``, ``paths``)."""

from inspector.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
