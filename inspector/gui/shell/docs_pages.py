"""The pages of Help > Read me (issue 55): the README, then every page of the documentation site the package
ships (``inspector/docs``: ``mkdocs.yml`` and ``pages/*.md``), in the order of the site's nav.

Links between them are relative file links, as GitHub and MkDocs follow them: the README links
``inspector/docs/pages/serve.md``, a page ``rpc.md`` or ``run.md#same-as-llama-server``; ``link_target``
turns any of them into the page (by file name) and anchor the viewer shows. The receipts page gets its
field reference generated from the schema, as the site's build does (``schema_reference.fill_page``).
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

import inspector
from inspector.receipts.document import schema
from inspector.receipts.schema_reference import fill_page

DOCS = Path(inspector.__file__).resolve().parent / "docs"
"""The documentation folder of the installed package."""
README = "README.md"
"""The name the pages and the page list give the README."""
RECEIPTS_PAGE = "receipts.md"
"""The page whose field reference is generated from the receipts schema."""
NAV_ENTRY = re.compile(r"^\s+-\s+(.+):\s+(\S+\.md)\s*$", re.MULTILINE)
"""A nav entry of ``mkdocs.yml``: ``  - Title: page.md``."""


def site_pages() -> list[tuple[str, str]]:
    """(title, file name) of every page of the site, in ``mkdocs.yml``'s nav order ([] when the package has
    no docs folder)."""
    config = DOCS / "mkdocs.yml"
    return NAV_ENTRY.findall(config.read_text("utf-8")) if config.is_file() else []


def page_markdown(name: str) -> str:
    """The markdown of site page ``name`` (``serve.md``) as Read me shows it: the receipts page with its
    generated reference; a line saying so when the page is missing."""
    path = DOCS / "pages" / name
    if not path.is_file():
        return f"# {name}\n\nThis page is not in this installation."
    text = path.read_text("utf-8")
    return fill_page(text, schema()) if name == RECEIPTS_PAGE else text


def link_target(link: str) -> tuple[str, str] | None:
    """(page, anchor) a relative link of the README or of a page points at: page is a site page's file name,
    ``README`` or "" (the page the link is on); None for a URL or a file that is no page."""
    path, _, anchor = link.partition("#")
    if "://" in path or path.startswith("mailto:"):
        return None
    if not path:
        return "", anchor
    name = PurePosixPath(path).name
    if name == README or name in {file for _title, file in site_pages()}:
        return name, anchor
    return None
