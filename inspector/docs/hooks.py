"""MkDocs hooks of spec-inspector's documentation (``mkdocs.yml`` beside this file; issue 55).

- The pages show the package's images by their path in a checkout (``../../../assets/NAME``, which GitHub
  renders): ``on_files`` adds the assets folder's images and the receipts schema to the site as
  ``assets/NAME`` (no copy of them in the docs folder) and ``on_page_markdown`` points the pages there.
- The receipts page gets its field reference generated from ``assets/receipts.schema.json`` at build time
  (``inspector.receipts.schema_reference``), in place of its ``MARKER`` line.

Build with the package importable (``pip install -e .``, or the clone on ``PYTHONPATH``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.structure.files import File

from inspector.receipts.schema_reference import fill_page

ASSETS = Path(__file__).resolve().parent.parent / "assets"
"""The package's assets folder (``inspector/assets``: the top-level ``assets/`` in a checkout)."""
SITE_ASSETS = ("*.png", "receipts.schema.json")
"""The files of ``ASSETS`` the pages show or link to."""
ASSET_LINK = re.compile(r"\]\((?:\.\./)+assets/")
"""A link or image into the assets folder by its path in a checkout."""
RECEIPTS_PAGE = "receipts.md"


def on_files(files, config):
    """Add the assets the pages use to the site, under ``assets/``."""
    for pattern in SITE_ASSETS:
        for path in sorted(ASSETS.glob(pattern)):
            files.append(File.generated(config, f"assets/{path.name}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown, page, config, files):
    """Point the assets links at the site's ``assets/``; give the receipts page its generated reference."""
    markdown = ASSET_LINK.sub("](assets/", markdown)
    if page.file.src_uri == RECEIPTS_PAGE:
        markdown = fill_page(markdown, json.loads((ASSETS / "receipts.schema.json").read_text("utf-8")))
    return markdown
