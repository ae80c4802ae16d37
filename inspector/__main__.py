"""``python -m inspector`` is the same as the ``spec-inspector`` command."""

import sys

from inspector.cli import main

sys.exit(main())
