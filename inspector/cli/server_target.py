"""The llama-server a command runs when ``--llama-server`` is given without a path: the one built from our
llama.cpp (``compare``, ``bench``, ``audit``)."""

from __future__ import annotations

import sys

from inspector.bench.server_build import SERVER_BUILD_MINUTES, ServerBuildError, build_llama_server, find_llama_server
from inspector.cli.common import fail


def our_llama_server() -> str | None:
    """The llama-server built from our llama.cpp (``find_llama_server``), built now when there is none
    (its progress on stderr; minutes); None after printing why the build failed."""
    found = find_llama_server()
    if found is None:
        print(f"building llama-server from our llama.cpp once ({SERVER_BUILD_MINUTES} minutes on 2 cores) ...",
              file=sys.stderr, flush=True)
        try:
            found = build_llama_server(lambda line: print(f"    {line}", file=sys.stderr, flush=True))
        except ServerBuildError as exc:
            fail(str(exc))
            return None
    return str(found)
