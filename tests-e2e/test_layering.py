"""The packages import each other only along the arrows of docs/architecture.md.

Read from the code with `ast`, every module of `packages/*/src` and `apps/*/src`:

1. An import of another workspace package (`import x`, `from x import y`, at module level,
   in a function body or under `if TYPE_CHECKING:`; `importlib.import_module("x")` too)
   must be listed in the allowed-imports table of docs/architecture.md. A lower package
   learns of a higher one only through the `ferroload.plugins` entry points.
2. The modules of one package import each other without a cycle, counting the imports
   of module and class bodies (not those of function bodies). Imports under
   `if TYPE_CHECKING:` count too: a cycle that only type checkers follow still ties the
   modules into one knot (the store's `_file`, `_store` and `_writers` were one, through
   type-only imports). Relative imports are resolved inside the package.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TABLE_MARK = "<!-- layering: the allowed imports (read by tests-e2e/test_layering.py) -->"


@dataclass(frozen=True)
class Import:
    """One imported module name, where it is written, and whether it runs on import."""

    module: str  # absolute dotted name
    names: tuple[str, ...]  # for `from module import a, b`: ("a", "b"); else ()
    path: Path
    line: int
    in_function: bool  # in a function body: runs when the function is called
    type_only: bool  # under `if TYPE_CHECKING:`: never runs

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def allowed_graph(text: str) -> dict[str, set[str]]:
    """The table after `TABLE_MARK`: package -> the packages it may import."""
    lines = text.splitlines()
    assert TABLE_MARK in lines, f"{ARCHITECTURE} lost its allowed-imports table ({TABLE_MARK})"
    rows = lines[lines.index(TABLE_MARK) + 1 :]
    assert rows[0].startswith("| package |") and rows[1].startswith("|---"), rows[:2]
    graph: dict[str, set[str]] = {}
    for row in rows[2:]:
        if not row.startswith("|"):
            break
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        assert len(cells) == 2, f"table row {row!r} has {len(cells)} cells"
        package = cells[0].strip("`")
        assert package not in graph, f"{package} is in the table twice"
        graph[package] = set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cells[1]))
    return graph


def packages() -> dict[str, Path]:
    """Every import package of the workspace -> its source folder."""
    found: dict[str, Path] = {}
    for init in sorted(ROOT.glob("*/*/src/*/__init__.py")):
        if init.parts[-5] in ("packages", "apps"):
            found[init.parent.name] = init.parent
    return found


def module_name(package: str, folder: Path, path: Path) -> str:
    parts = [package, *path.relative_to(folder).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        assert node.module is not None
        return node.module
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports(path: Path, module: str) -> Iterator[Import]:
    """Every import of the file, absolute, with where it sits."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, in_function: bool, type_only: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, (), path, node.lineno, in_function, type_only)
        elif isinstance(node, ast.ImportFrom):
            names = tuple(a.name for a in node.names)
            target = _absolute(node, module, is_package)
            yield Import(target, names, path, node.lineno, in_function, type_only)
        elif (
            isinstance(node, ast.Call)
            and (
                (
                    isinstance(node.func, ast.Name)
                    and node.func.id in ("import_module", "__import__")
                )
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield Import(node.args[0].value, (), path, node.lineno, in_function, type_only)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from visit(child, in_function, True)
            for child in node.orelse:
                yield from visit(child, in_function, type_only)
            return
        body = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            yield from visit(child, in_function or body, type_only)

    yield from visit(tree, False, False)


@dataclass(frozen=True)
class Module:
    name: str
    package: str
    path: Path


def modules() -> list[Module]:
    return [
        Module(module_name(package, folder, path), package, path)
        for package, folder in packages().items()
        for path in sorted(folder.rglob("*.py"))
    ]


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    workspace = set(packages())
    problems = []
    for mod in modules():
        allowed = graph.get(mod.package, set())
        for imp in imports(mod.path, mod.name):
            top = imp.module.split(".")[0]
            if top in workspace and top != mod.package and top not in allowed:
                kind = (
                    "in a function"
                    if imp.in_function
                    else "for types"
                    if imp.type_only
                    else "at import time"
                )
                problems.append(
                    f"{imp.where}: {mod.package} imports {imp.module} {kind}; it may import "
                    f"{', '.join(sorted(allowed)) or 'no workspace package'} "
                    "(docs/architecture.md, Layering)"
                )
    return problems


def module_cycles() -> list[str]:
    """Cycles among the module-level imports between the modules of each package."""
    mods = modules()
    known = {m.name for m in mods}
    edges: dict[str, dict[str, str]] = {m.name: {} for m in mods}  # a -> {b: where}
    for mod in mods:
        for imp in imports(mod.path, mod.name):
            if imp.in_function or imp.module.split(".")[0] != mod.package:
                continue
            targets = [f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in known]
            if len(targets) < len(imp.names) or not imp.names:
                targets.append(imp.module)  # names from the module itself
            for target in targets:
                if target in known:
                    edges[mod.name].setdefault(target, imp.where)
    problems = []
    for component in strongly_connected(edges):
        inside = sorted(component)
        if len(inside) == 1 and inside[0] not in edges[inside[0]]:
            continue
        links = [
            f"{edges[a][b]}: {a} imports {b}"
            for a in inside
            for b in sorted(edges[a])
            if b in component
        ]
        problems.append(f"import cycle among {', '.join(inside)}:\n    " + "\n    ".join(links))
    return problems


def strongly_connected(edges: dict[str, dict[str, str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    out.append(component)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return allowed_graph(ARCHITECTURE.read_text(encoding="utf-8"))


def test_the_table_covers_every_package_and_has_no_cycle(graph: dict[str, set[str]]) -> None:
    assert set(graph) == set(packages()), (
        f"docs/architecture.md's table lists {sorted(graph)}, the workspace has "
        f"{sorted(packages())}"
    )
    for package, allowed in graph.items():
        assert allowed <= set(graph), f"{package} may import unknown {allowed - set(graph)}"
        assert package not in allowed, f"{package} lists itself"
    # the table itself must be layered: no package may reach itself through it
    for package in graph:
        seen, todo = set(), list(graph[package])
        while todo:
            p = todo.pop()
            assert p != package, f"the table lets {package} import itself through {p}"
            if p not in seen:
                seen.add(p)
                todo.extend(graph[p])


def test_no_import_outside_the_allowed_graph(graph: dict[str, set[str]]) -> None:
    problems = layering_violations(graph)
    assert not problems, "imports against the layering:\n" + "\n".join(problems)


def test_no_import_cycle_inside_a_package() -> None:
    problems = module_cycles()
    assert not problems, "\n".join(problems)


def test_the_checks_see_what_they_must(tmp_path: Path) -> None:
    """The reader finds imports in function bodies, relative ones and guarded ones."""
    src = tmp_path / "pkg" / "_a.py"
    src.parent.mkdir()
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import _b\n"
        "from .._c import d\n"
        "if TYPE_CHECKING:\n"
        "    import ferroload_map\n"
        "def f():\n"
        "    from ferroload_catalog import Catalog\n"
        "    return importlib.import_module('ferroload_cli')\n"
        "class K:\n"
        "    import ferroload_loader\n"
    )
    found = [
        (i.module, i.names, i.line, i.in_function, i.type_only) for i in imports(src, "top.pkg._a")
    ]
    assert found == [
        ("typing", ("TYPE_CHECKING",), 1, False, False),
        ("top.pkg", ("_b",), 2, False, False),
        ("top._c", ("d",), 3, False, False),
        ("ferroload_map", (), 5, False, True),
        ("ferroload_catalog", ("Catalog",), 7, True, False),
        ("ferroload_cli", (), 8, True, False),
        ("ferroload_loader", (), 10, False, False),
    ]
    cyc = {"a": {"b": "x:1"}, "b": {"c": "x:2"}, "c": {"a": "x:3"}, "d": {"a": "x:4"}}
    assert sorted(map(sorted, strongly_connected(cyc))) == [["a", "b", "c"], ["d"]]


MODULES_MARK = "<!-- modules: one list per package (read by tests-e2e/test_layering.py) -->"
MODULES_END = "<!-- end of modules -->"


def listed_modules(text: str) -> dict[str, set[str]]:
    """docs/architecture.md's module lists: package -> the modules it names (`### `pkg``
    headings, then one `- `module`: what it holds` line each)."""
    assert MODULES_MARK in text and MODULES_END in text, "the module lists lost their marks"
    body = text.split(MODULES_MARK, 1)[1].split(MODULES_END, 1)[0]
    listed: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in body.splitlines():
        if heading := re.match(r"### `([a-z_]+)`", line):
            current = listed.setdefault(heading.group(1), set())
        elif item := re.match(r"- `([A-Za-z0-9_.]+)`: \S", line):
            assert current is not None, f"module line before any package: {line!r}"
            current.add(item.group(1))
    return listed


def test_the_picture_lists_every_module_and_each_opens_with_a_sentence() -> None:
    listed = listed_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    problems: list[str] = []
    for package, folder in packages().items():
        actual = set()
        for path in sorted(folder.rglob("*.py")):
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
            if not re.match(r"[^\n]+?[.:]", doc.replace("\n", " ")):
                problems.append(f"{path.relative_to(ROOT)} does not open with a sentence")
            name = ".".join(path.relative_to(folder).with_suffix("").parts)
            if not name.endswith("__init__") and name != "__main__":
                actual.add(name)
        mine = listed.get(package, set())
        problems += [f"{package}.{m} is not in docs/architecture.md" for m in actual - mine]
        problems += [f"docs/architecture.md lists {package}.{m}, gone" for m in mine - actual]
    assert not problems, "\n".join(sorted(problems))
