"""The llama-server a command runs when ``--llama-server`` is given without a path: the one built from our
llama.cpp (``compare``, ``bench``, ``audit``)."""

from __future__ import annotations

import sys

from inspector.bench.server_build import SERVER_BUILD_MINUTES, ServerBuildError, build_llama_server, find_llama_server
from inspector.bench.server_compare import check_llama_server, is_url
from inspector.cli.common import EXIT_USAGE, fail


def binary_to_start(given: str | None, command: str, why: str) -> tuple[str | None, int]:
    """The llama-server binary a command starts itself: ``given`` (``--llama-server PATH``, checked) or, when
    empty, ours (``our_llama_server``). Returns ``(path, 0)``, or ``(None, status)`` after saying what is
    wrong in one line: a URL (``command`` starts its own server, ``why``), a path that is not a
    llama-server (status 2), a failed build (1)."""
    target = given or ""
    if is_url(target):
        return None, fail(f"{command} starts its own llama-server for every {why}: give a llama-server binary, "
                          "or nothing for the one built from our llama.cpp", EXIT_USAGE)
    try:
        if target:
            check_llama_server(target)
    except ValueError as exc:
        return None, fail(str(exc), EXIT_USAGE)
    target = target or our_llama_server()
    return (target, 0) if target is not None else (None, 1)


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
