"""The layers import one way (README, Architecture): engine <- llama, receipts <- sources <-
session <- bench <- gui <- cli; no file in ``inspector/`` is over 600 lines. Read from the
source files (imports inside functions count too), no model."""

from __future__ import annotations

import ast
from pathlib import Path

import inspector

ROOT = Path(inspector.__file__).parent
LAYERS = {
    "inspector": 0, "inspector.engine": 0, "inspector.bounded_read": 0,
    "inspector.llama": 1, "inspector.receipts": 1,
    "inspector.sources": 2,
    "inspector.session": 3, "inspector.run_output": 3,
    "inspector.bench": 4,
    "inspector.gui": 5,
    "inspector.gui_speed": 6, "inspector.cli": 6, "inspector.cli_bench": 6, "inspector.cli_sources": 6,
    "inspector.cli_devices": 6, "inspector.cli_view": 6, "inspector.cli_flags": 6, "inspector.cli_turns": 6,
    "inspector.cli_interrupt": 6, "inspector.cli_rpc_server": 6, "inspector.cli_context": 6, "inspector.cli_sampling": 6, "inspector.cli_paths": 6, "inspector.cli_ranges": 6,
    "inspector.cli_tune": 6, "inspector.cli_common": 6,
    "inspector.__main__": 6,
}
MAX_LINES = 600


def layer_of(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in LAYERS:
            return LAYERS[name]
    raise AssertionError(f"module {module} belongs to no layer: add it to LAYERS")


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        if "assets" in path.relative_to(ROOT).parts:
            continue
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        yield name, path


def imported(path: Path):
    tree = ast.parse(path.read_text("utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)


def test_no_module_imports_a_layer_above_its_own():
    wrong = []
    for name, path in modules():
        mine = layer_of(name)
        for target in imported(path):
            if target.startswith("inspector") and target != "inspector" and layer_of(target) > mine:
                wrong.append(f"{name} (layer {mine}) imports {target} (layer {layer_of(target)})")
    assert not wrong, "\n".join(wrong)


def test_no_file_in_the_package_is_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for _name, p in modules()
            if (n := len(p.read_text("utf-8").splitlines())) > MAX_LINES}
    assert not long, f"split these files (observed lines, expected <= {MAX_LINES}): {long}"
