"""``python -m inspector`` is the same as the ``spec-inspector`` command."""

import sys

from inspector.cli.main import main

if __name__ == "__main__":  # not when a spawned child process (the RPC runtime) imports it
    sys.exit(main())
