"""The layers import one way (README, Architecture): engine <- llama, receipts <- sources <-
session <- bench <- gui <- cli; no import cycle between modules and no private name imported
from another module; no file in ``inspector/`` is over 500 lines.
Read from the source files (imports inside functions count too), no model."""

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
    "inspector.cli": 6,
    "inspector.__main__": 6,
}
MAX_LINES = 500


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


def test_no_file_in_the_package_is_over_500_lines():
    lines = {p.relative_to(ROOT).as_posix(): len(p.read_text("utf-8").splitlines()) for _name, p in modules()}
    long = {f: n for f, n in lines.items() if n > MAX_LINES}
    assert not long, f"split these files (observed lines, expected <= {MAX_LINES}): {long}"


def _graph():
    """Module -> the ``inspector`` modules it imports (``from package import submodule`` is an edge to
    the submodule), and every ``(importer, module, name)`` of a private name imported."""
    mods = dict(modules())

    def resolve(target: str) -> str:
        while target and target not in mods:
            target = target.rsplit(".", 1)[0] if "." in target else ""
        return target

    graph: dict[str, set[str]] = {m: set() for m in mods}
    private = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                    node.module.startswith("inspector"):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    target = sub if sub in mods else resolve(node.module)
                    if target and target != name:
                        graph[name].add(target)
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        private.append((name, node.module, a.name))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    target = resolve(a.name) if a.name.startswith("inspector") else ""
                    if target and target != name:
                        graph[name].add(target)
    return graph, private


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_modules_even_through_imports_inside_functions():
    graph, _private = _graph()
    assert _cycles(graph) == []


def test_the_cycle_check_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_a_private_name_of_another():
    _graph_, private = _graph()
    assert private == [], "\n".join(f"{m} imports {name} from {src}" for m, src, name in private)



GUI_ENTRY = {"__init__.py", "app.py"}
"""The only modules directly in ``inspector/gui/``: every other one belongs to the package of what the
user sees (README, Architecture)."""


def test_the_gui_has_no_loose_modules_beyond_its_packages_and_the_app_entry():
    loose = sorted(p.name for p in (ROOT / "gui").glob("*.py") if p.name not in GUI_ENTRY)
    assert loose == [], f"move these into a package under inspector/gui/ (observed loose modules: {loose})"
    packages = [d for d in (ROOT / "gui").iterdir() if d.is_dir() and d.name != "__pycache__"]
    unmarked = sorted(d.name for d in packages if not (d / "__init__.py").exists())
    assert unmarked == [], f"these folders under inspector/gui/ need an __init__.py with a docstring: {unmarked}"
    undocumented = sorted(d.name for d in packages if (d / "__init__.py").exists()
                          and ast.get_docstring(ast.parse((d / "__init__.py").read_text("utf-8"))) is None)
    assert undocumented == [], f"say in one docstring what each package holds: {undocumented}"
