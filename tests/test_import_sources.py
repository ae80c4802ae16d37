"""Every name is imported from the module that defines it (issue 38: imports through re-exports hide
where a thing lives, and a module that merely passes a name on cannot be moved or split without
breaking its importers). ``from inspector.X import name`` is right when X defines ``name`` (a def, a
class or an assignment at its top level), when ``name`` is a submodule of the package X, or when X is a
package that lists ``name`` in its ``__all__`` (its declared public face, e.g. ``inspector.sources.Option``
for plugins). Read from the source files of ``inspector/`` and ``tests/`` with ``ast``; no import runs."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import inspector

ROOT = Path(inspector.__file__).parent
TESTS = Path(__file__).parent


def module_file(module: str) -> Path | None:
    """The file of ``inspector`` module ``module`` (a package: its ``__init__.py``; a C extension: its ``.c``
    source), or None."""
    path = ROOT.parent.joinpath(*module.split("."))
    if (path / "__init__.py").exists():
        return path / "__init__.py"
    for suffix in (".py", ".c"):  # .c: a C extension's source (pyproject's ext-modules), the module it defines
        if path.with_suffix(suffix).exists():
            return path.with_suffix(suffix)
    return None


@lru_cache(maxsize=None)
def defined_names(path: Path) -> tuple[frozenset[str], frozenset[str]]:
    """(the names ``path`` defines at its top level, including inside top-level ``if``/``try``/``for``/
    ``with`` blocks; the names its ``__all__`` lists)."""
    tree = ast.parse(path.read_text("utf-8"))
    names: set[str] = set()
    public: set[str] = set()
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and \
                    isinstance(node.value, (ast.List, ast.Tuple)):
                public.update(e.value for e in node.value.elts if isinstance(e, ast.Constant))
        elif isinstance(node, (ast.If, ast.Try, ast.For, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                stack.extend(getattr(node, field, []))
        elif isinstance(node, ast.ExceptHandler):
            stack.extend(node.body)
    return frozenset(names), frozenset(public)


def through_reexports(paths) -> list[str]:
    """Every ``file:line module.name`` among ``paths`` that imports a name its module does not define."""
    wrong = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.split(".")[0] == "inspector"):
                continue
            source = module_file(node.module)
            if source is None or source.suffix != ".py":  # not ours, or a C extension: its names are not read
                continue
            names, public = defined_names(source)
            package = source.name == "__init__.py"
            for alias in node.names:
                if alias.name in names or module_file(f"{node.module}.{alias.name}") is not None:
                    continue
                if package and alias.name in public:
                    continue
                where = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT.parent) else path.name
                wrong.append(f"{where}:{node.lineno} {node.module}.{alias.name}")
    return wrong


def python_files():
    return [p for p in sorted([*ROOT.rglob("*.py"), *TESTS.rglob("*.py")]) if "assets" not in p.parts]


def test_every_name_is_imported_from_the_module_that_defines_it():
    wrong = through_reexports(python_files())
    assert wrong == [], "import these from the module that defines them:\n" + "\n".join(wrong)


def test_the_check_sees_an_import_through_a_module_that_only_passes_a_name_on(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from inspector.sources.registry import ProposalSource\n"  # registry imports it
                     "from inspector.sources.registry import PLAIN, describe_source\n"  # defined there
                     "from inspector.sources import Option, registry\n"  # __all__, a submodule
                     "from inspector.engine import window\n", "utf-8")
    assert through_reexports([probe]) == ["probe.py:1 inspector.sources.registry.ProposalSource"]
