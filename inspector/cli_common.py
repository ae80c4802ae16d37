"""What every ``spec-inspector`` command shares: exit statuses, the one-line error, the user-error type.

Commands import these from here (never from ``inspector.cli``, which imports the commands)."""

from __future__ import annotations

import sys

EXIT_USAGE = 2
"""A bad argument or value (argparse's status)."""
EXIT_ERROR = 1
"""The command could not do its work (a file, a model, a server)."""
EXIT_GENERATION_ERROR = 3
"""The generation itself raised (an injected fault without ``--resume``)."""


class UserError(Exception):
    """A mistake in what the user asked, said in one line (``fail``) with ``EXIT_USAGE``."""


def fail(message: str, status: int = EXIT_ERROR) -> int:
    """Print ``spec-inspector: error: MESSAGE`` on stderr and return ``status``."""
    print(f"spec-inspector: error: {message}", file=sys.stderr)
    return status
