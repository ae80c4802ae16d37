"""The documentation site (issue 55, 5): the README's sections live as MkDocs pages in the package
(``inspector/docs``), the README stays short, and the receipts reference is generated from the schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import inspector

PACKAGE = Path(inspector.__file__).resolve().parent
ROOT = PACKAGE.parent
CONFIG = PACKAGE / "docs" / "mkdocs.yml"
PAGES = PACKAGE / "docs" / "pages"


def schema_top_level_properties() -> set[str]:
    """Every property of a receipts document's top level: the request document (the schema's ``else``) and
    the conversation document (its ``then``), read from the schema file itself."""
    schema = json.loads((ROOT / "assets" / "receipts.schema.json").read_text("utf-8"))
    names = set()
    for branch in ("then", "else"):
        target = schema[branch]["$ref"].rsplit("/", 1)[-1]
        names |= set(schema["$defs"][target]["properties"])
    return names


def test_the_packaged_site_builds_strict_and_its_receipts_page_names_every_top_level_field(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}  # the hook imports this inspector
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(CONFIG), "-d", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr
    for page in PAGES.glob("*.md"):
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), f"{page.name} was not built"
    receipts = (site / "receipts" / "index.html").read_text("utf-8")
    fields = schema_top_level_properties()
    assert {"schema", "windows", "summary", "turns"} <= fields
    missing = sorted(name for name in fields if f"<code>{name}</code>" not in receipts)
    assert not missing, f"fields of the schema the receipts page does not name: {missing}"
    assert "<code>model.sha256</code>" in receipts  # nested fields too, by their dotted names
    assert (site / "assets" / "screenshot.png").is_file()  # the pages' images come from the package's assets


def test_the_readme_is_short_and_links_every_page_of_the_site():
    readme = (ROOT / "README.md").read_text("utf-8")
    assert len(readme.splitlines()) < 250
    for page in PAGES.glob("*.md"):
        if page.stem != "index":
            assert f"](inspector/docs/pages/{page.name})" in readme, f"README does not link {page.name}"
    assert "## Quick start" in readme and "## When things go wrong" in readme


def test_every_page_is_in_the_sites_nav_and_the_package_data():
    config = CONFIG.read_text("utf-8")
    project = (ROOT / "pyproject.toml").read_text("utf-8")
    assert '"inspector.docs.pages" = ["*.md"]' in project and '"inspector.docs" = ["mkdocs.yml"]' in project
    for page in PAGES.glob("*.md"):
        assert f": {page.name}" in config, f"{page.name} is not in mkdocs.yml's nav"
