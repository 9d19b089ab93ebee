"""The package is layered by concern and every import points down (issue 13, item 8).

Floors, lowest first; a module may import its own package and any package on a
lower floor, never one above (function-level imports count too).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "iobench"
FLOORS = [
    {"errors", "version"},
    {"store"},
    {"system"},
    {"matrix"},
    {"planner"},
    {"results"},
    {"runner"},
    {"plots"},
    {"report"},
    {"cli"},
]
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}


def _imported(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "iobench":
                names |= {f"iobench.{alias.name}" for alias in node.names}
    return {n for n in names if n.startswith("iobench.")}


def _upward_imports() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) == 1 and relative.stem in ("__init__", "__main__"):
            continue  # the public API and `python -m iobench` sit on top
        own = relative.parts[0].removesuffix(".py")
        for name in _imported(ast.parse(path.read_text())):
            other = name.split(".")[1]
            if other != own and FLOOR[other] > FLOOR[own]:
                found.append(
                    f"iobench/{relative} ({own}, floor {FLOOR[own]}) imports {name} (floor {FLOOR[other]})"
                )
    return found


def test_every_package_has_a_floor() -> None:
    packages = {p.stem for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert packages - {"__init__", "__main__"} == set(FLOOR)


def test_imports_point_down_only() -> None:
    assert _upward_imports() == []


def test_no_module_imports_the_package_api() -> None:
    """``import iobench`` is for users; inside the package, name the module (no import cycles through it)."""
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
        and any(
            (isinstance(node, ast.ImportFrom) and node.module == "iobench")
            or (isinstance(node, ast.Import) and any(a.name == "iobench" for a in node.names))
            for node in ast.walk(ast.parse(path.read_text()))
        )
    ]
    assert offenders == []


def test_no_module_forks_the_interpreter() -> None:
    """A process with threads (a notebook's kernel, the live display, the sampler) must never fork.

    Helpers are fresh processes (fio, ssh, parse_fio's workers): no ``os.fork``/``os.forkpty``,
    no ``os._exit`` (a forked child's way out) and no ``multiprocessing`` (whose default on
    Linux forks).
    """
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("fork", "forkpty", "_exit"):
                if isinstance(node.value, ast.Name) and node.value.id == "os":
                    found.append(f"iobench/{path.relative_to(PACKAGE)}:{node.lineno}: os.{node.attr}")
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names = (
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                )
                found += [
                    f"iobench/{path.relative_to(PACKAGE)}:{node.lineno}: imports {name}"
                    for name in names
                    if name.split(".")[0] == "multiprocessing"
                    or (name == "concurrent.futures" and _names(node) & {"ProcessPoolExecutor"})
                ]
    assert found == []


def _names(node: ast.Import | ast.ImportFrom) -> set[str]:
    return {alias.name for alias in node.names}
