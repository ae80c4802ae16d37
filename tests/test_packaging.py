"""A wheel built from the project holds every package and every asset (issue 10:
``pip install .`` once left out ``inspector.bench``). ``.ci/wheel-check`` also
installs that wheel outside the clone and runs every command from it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_holds_every_package_and_every_asset(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
                   check=True, capture_output=True, text=True, timeout=600)
    wheel = next(tmp_path.glob("spec_inspector-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = sorted(p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "inspector").rglob("__init__.py"))
    assert "inspector/bench" in packages
    missing = [p for p in packages if f"{p}/__init__.py" not in names]
    assert not missing, f"packages left out of the wheel: {missing}"
    modules = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "inspector").rglob("*.py")
                     if "assets" not in p.parts)
    assert not [m for m in modules if m not in names], "modules left out of the wheel"
    assets = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "assets").rglob("*") if p.is_file())
    assert assets, "no assets found in the clone"
    left_out = [a for a in assets if f"inspector/{a}" not in names]
    assert not left_out, f"assets left out of the wheel (installed as inspector/assets/...): {left_out}"
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "inspector" / "docs").rglob("*")
                  if p.is_file() and p.suffix in {".md", ".yml", ".py"})
    assert "inspector/docs/mkdocs.yml" in docs and "inspector/docs/pages/index.md" in docs
    assert not [d for d in docs if d not in names], "documentation left out of the wheel"
    for module in ("inspector/engine/figure_kernel", "inspector/llama/decode_worker"):  # pyproject's C extensions
        built = [n for n in names if n.startswith(f"{module}.") and n.endswith((".so", ".pyd"))]
        assert built, f"the C extension {module}.c is not in the wheel"


def _declared_runtime_distributions() -> set[str]:
    """The distribution names in pyproject's [project] dependencies (normalised)."""
    import re
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0].strip().lower().replace("_", "-")
            for spec in project["dependencies"]}


def test_every_module_the_package_imports_is_a_runtime_dependency():
    # CI's wheel check once failed on `import httpx` in bench/serve_bench.py: httpx was
    # only in the test extra, so an installed wheel could not start.
    import ast
    from importlib.metadata import packages_distributions
    declared = _declared_runtime_distributions()
    owners = packages_distributions()
    undeclared = {}
    for path in (ROOT / "inspector").rglob("*.py"):
        if "assets" in path.parts or path.parent == ROOT / "inspector" / "docs":
            continue  # inspector/docs/hooks.py runs inside MkDocs (the test extra), never in the program
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "inspector":
                    continue
                dists = {d.lower().replace("_", "-") for d in owners.get(top, [top])}
                if not dists & declared:
                    undeclared.setdefault(top, path.relative_to(ROOT).as_posix())
    assert not undeclared, f"imported by inspector/ but not in [project] dependencies: {undeclared}"
