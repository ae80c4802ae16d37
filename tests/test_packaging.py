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
