"""The layers import one way (docs: architecture.md): engine <- llama, receipts <- sources <-
session <- serve <- bench <- gui <- cli, and inside gui/ its packages too (``GUI_LAYERS``); no import
cycle between modules and no private name imported from another module; no file in ``inspector/`` is
over 500 lines. Read from the source files (imports inside functions count too), no model."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

import inspector

ROOT = Path(inspector.__file__).parent
LAYERS = {
    "inspector": 0, "inspector.engine": 0, "inspector.bounded_read": 0, "inspector.exact_options": 0,
    "inspector.llama": 1, "inspector.receipts": 1,
    "inspector.sources": 2,
    "inspector.session": 3,
    "inspector.serve": 4,
    "inspector.bench": 5,
    "inspector.gui": 6,
    "inspector.cli": 7,
    "inspector.__main__": 7,
    "inspector.docs": 8,  # the MkDocs hook of the documentation: MkDocs runs it, nothing in the program imports it
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


def extension_modules() -> set[str]:
    """The C extension modules pyproject declares (``[[tool.setuptools.ext-modules]]``): leaves of the import
    graph (their C imports no module of ours)."""
    project = tomllib.loads((ROOT.parent / "pyproject.toml").read_text("utf-8"))
    return {e["name"] for e in project.get("tool", {}).get("setuptools", {}).get("ext-modules", [])}


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
    leaves = extension_modules()

    def resolve(target: str) -> str:
        while target and target not in mods and target not in leaves:
            target = target.rsplit(".", 1)[0] if "." in target else ""
        return target

    graph: dict[str, set[str]] = {m: set() for m in [*mods, *leaves]}
    private = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                    node.module.startswith("inspector"):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    target = sub if sub in mods or sub in leaves else resolve(node.module)
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
user sees (docs: architecture.md)."""


def test_the_gui_has_no_loose_modules_beyond_its_packages_and_the_app_entry():
    loose = sorted(p.name for p in (ROOT / "gui").glob("*.py") if p.name not in GUI_ENTRY)
    assert loose == [], f"move these into a package under inspector/gui/ (observed loose modules: {loose})"
    packages = [d for d in (ROOT / "gui").iterdir() if d.is_dir() and d.name != "__pycache__"]
    unmarked = sorted(d.name for d in packages if not (d / "__init__.py").exists())
    assert unmarked == [], f"these folders under inspector/gui/ need an __init__.py with a docstring: {unmarked}"
    undocumented = sorted(d.name for d in packages if (d / "__init__.py").exists()
                          and ast.get_docstring(ast.parse((d / "__init__.py").read_text("utf-8"))) is None)
    assert undocumented == [], f"say in one docstring what each package holds: {undocumented}"


# -- gui/'s packages in one order ------------------------------------------------------------------
GUI_LAYERS = {
    "look": 0, "ports": 0, "model": 0,
    "engine_thread": 1, "files": 1,
    "panel": 2, "tokens": 2, "plots": 2, "cost": 2, "compare": 2, "tune": 2, "audit": 2,
    "windows": 3, "serve": 3,
    "shell": 4,
    "app": 5,
}
"""Each package under ``inspector/gui/`` (and the ``app`` entry) -> its level. A package imports its own
modules and packages of a lower level only, never one of its own level or above (so no two packages
import each other): ``look`` (how things look) under the engine thread and the session files, those under
the views (``windows`` reads a token's figures from ``tokens``; ``serve`` takes the panel's label and
the files' background job), all under the ``shell`` that composes the window. What both a low and a high
package need goes down: Qt-free code below gui/ (the run states in ``session``, the context defaults in
``llama``, the autosave folder in ``receipts``), the banner's colours in ``look``."""


def _gui_part(module: str) -> str | None:
    """The package (or ``app``) under ``inspector.gui`` that ``module`` belongs to; None outside it."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["inspector", "gui"] else None


def gui_back_edges(graph: dict[str, set[str]]) -> list[str]:
    """Every import in ``graph`` (``_graph``) from a gui/ package to another of its level or above."""
    def level(part: str) -> int:
        assert part in GUI_LAYERS, f"inspector.gui.{part} has no level: add it to GUI_LAYERS"
        return GUI_LAYERS[part]

    wrong = []
    for importer in sorted(graph):
        mine = _gui_part(importer)
        for target in sorted(graph[importer]):
            theirs = _gui_part(target)
            if mine is None or theirs is None or theirs == mine:
                continue
            if level(theirs) >= level(mine):
                wrong.append(f"{importer} ({mine}, level {level(mine)}) imports {target} "
                             f"({theirs}, level {level(theirs)})")
    return wrong


def test_no_gui_package_imports_one_of_its_level_or_above():
    graph, _private = _graph()
    parts = {_gui_part(m) for m in graph} - {None}
    assert parts == set(GUI_LAYERS), f"give every package under inspector/gui/ a level in GUI_LAYERS " \
                                     f"(observed {sorted(parts)}, listed {sorted(GUI_LAYERS)})"
    wrong = gui_back_edges(graph)
    assert not wrong, "move what both need to the lower package (or below gui/):\n" + "\n".join(wrong)


def test_the_gui_order_check_sees_an_import_upward_or_sideways():
    graph, _private = _graph()
    assert gui_back_edges(graph) == []
    graph["inspector.gui.engine_thread.worker"].add("inspector.gui.shell.banner")  # up: the worker under the shell
    graph["inspector.gui.tokens.token_view"].add("inspector.gui.plots.timeline")  # sideways: two views
    assert gui_back_edges(graph) == [
        "inspector.gui.engine_thread.worker (engine_thread, level 1) imports inspector.gui.shell.banner "
        "(shell, level 4)",
        "inspector.gui.tokens.token_view (tokens, level 2) imports inspector.gui.plots.timeline (plots, level 2)",
    ]
    graph["inspector.gui.gauges.view"] = {"inspector.gui.look.wording"}  # a new package without a level
    with pytest.raises(AssertionError, match="inspector.gui.gauges has no level"):
        gui_back_edges(graph)


# -- no private member of another object ----------------------------------------------------------
ALLOWED_PRIVATE_REACH = {
    ("cli/rpc_server.py", "os._exit"):
        "leaves without the interpreter's and the C library's exit handlers while llama.cpp's server "
        "thread may be mid-request (the standard library's documented way)",
    ("llama/native.py", "llama_cpp.llama_cpp._lib"):
        "llama-cpp-python's ctypes library handle: the only way to the C functions it does not wrap",
    ("llama/devices.py", "lib._inspector_ready"):
        "our own mark on that ctypes library object: its extra prototypes are declared once",
}
"""``(file under inspector/, expression)`` reaching a private name of another object, each with why."""


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(cls: ast.ClassDef) -> set[str]:
    """The private names ``cls`` defines: its methods and class attributes, and every ``self._x`` it assigns."""
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_private(node.name):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and _is_private(node.id):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _is_private(node.attr) \
                and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            names.add(node.attr)
    return names


def private_reaches(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of every ``X._name`` in ``source`` where ``X`` is not ``self``, ``cls`` or
    ``super()``, unless the enclosing class defines ``_name`` itself (an object of the same class, as in a
    ``copy`` method) or ``X`` is a class of the same module (its own dispatch table)."""
    found = []
    tree = ast.parse(source)
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}

    def visit(node, own: set[str]) -> None:
        if isinstance(node, ast.ClassDef):
            own = _own_names(node)
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            v = node.value
            mine = (isinstance(v, ast.Name) and v.id in ("self", "cls", *classes)) or (
                isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super")
            if not mine and node.attr not in own:
                found.append((node.lineno, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            visit(child, own)

    visit(tree, set())
    return found


def test_no_module_reaches_a_private_member_of_another_object():
    wrong, stale = [], set(ALLOWED_PRIVATE_REACH)
    for _name, path in modules():
        rel = path.relative_to(ROOT).as_posix()
        for line, expr in private_reaches(path.read_text("utf-8")):
            if (rel, expr) in ALLOWED_PRIVATE_REACH:
                stale.discard((rel, expr))
                continue
            wrong.append(f"inspector/{rel}:{line}: {expr}")
    assert not wrong, "give the owner a public method instead:\n" + "\n".join(wrong)
    assert not (stale & set(ALLOWED_PRIVATE_REACH)), f"allowed but no longer in the code: {sorted(stale)}"


def test_the_private_reach_check_sees_another_objects_private_member():
    source = '''
import os
def f(o):
    return o._x, os._exit
class A:
    def __init__(self):
        self._chain = []
    def copy(self, other):
        other._chain = list(self._chain)
        return super()._setup(), other._undefined, self.panel._temperature
'''
    assert private_reaches(source) == [(4, "o._x"), (4, "os._exit"), (10, "other._undefined"),
                                       (10, "self.panel._temperature")]


# -- no helper holds the main window ------------------------------------------------------------------
WINDOW_NAMES = {"w", "win", "window", "main_window"}
"""Names a helper kept the ``MainWindow`` under (``self.w = window``) before it got handles instead."""


def window_reaches(source: str) -> list[tuple[int, str]]:
    """``(line, expression)`` of every ``self.w.x`` / ``self.win.x`` / ``self.window.x`` (a helper reaching
    through the window it holds) and every ``window.x = ...`` / ``win.x = ...`` (an attribute set on the
    window from outside it) in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            v = node.value
            if isinstance(v, ast.Attribute) and v.attr in WINDOW_NAMES and isinstance(v.value, ast.Name) \
                    and v.value.id == "self":
                found.append((node.lineno, ast.unparse(node)))
            elif isinstance(node.ctx, ast.Store) and isinstance(v, ast.Name) and v.id in WINDOW_NAMES:
                found.append((node.lineno, ast.unparse(node)))
    return sorted(set(found))


def test_no_helper_reaches_through_the_window_or_sets_attributes_on_it():
    wrong = []
    for _name, path in modules():
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith("gui/") or rel == "gui/shell/main_window.py":
            continue
        wrong += [f"inspector/{rel}:{line}: {expr}" for line, expr in window_reaches(path.read_text("utf-8"))]
    assert not wrong, ("give the helper the objects it uses (inspector.gui.ports.handles, the widgets), "
                       "not the window:\n" + "\n".join(wrong))


def test_the_window_reach_check_sees_a_reach_and_an_attribute_set_from_outside():
    source = '''
class Helper:
    def __init__(self, window, panel):
        self.w = window
        window.panel = panel
        self.panel = panel
    def go(self):
        self.w.cost_view.set_busy(True)
        return self.panel.source, self.win.state
'''
    assert window_reaches(source) == [(5, "window.panel"), (8, "self.w.cost_view"), (9, "self.win.state")]
