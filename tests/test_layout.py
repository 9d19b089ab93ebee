"""The package is layered by concern and every import points down.

Floors, lowest first; a module may import its own package and any package on a
lower floor, never one above (function-level imports count too).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "iobench"
FLOORS = [
    {"errors", "version", "words", "agent"},
    {"store"},
    {"system"},
    {"matrix"},
    {"planner"},
    {"results"},
    {"answers"},
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


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (``iobench.runner.sweep``)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(path: Path, name: str, modules: dict[str, Path]) -> list[tuple[str, str | None]]:
    """What a module imports from the package: (module, name imported from it or None), function-level too."""
    found: list[tuple[str, str | None]] = []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.startswith("iobench")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            if not base.startswith("iobench"):
                continue
            for alias in node.names:
                # `from iobench.results import fioout` imports a module, not a name.
                target = f"{base}.{alias.name}"
                found.append((target, None) if target in modules else (base, alias.name))
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    modules = _modules()
    offenders = [
        f"{name} imports {other}.{imported}"
        for name, path in modules.items()
        for other, imported in _imports(path, name, modules)
        if imported is not None and imported.startswith("_") and not imported.endswith("__") and other != name
    ]
    assert offenders == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_counting_imports_inside_functions() -> None:
    """A module may not reach itself through imports, wherever they stand (a function's body too)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if name == "iobench":
            continue  # the public API's lazy table sits on top of everything
        targets = {other for other, _ in _imports(path, name, modules)}
        # Importing a module imports its package first: count the edge to the module itself.
        graph[name] = {t for t in targets if t in modules and t != name and t != "iobench"}
    assert _cycles(graph) == []


def test_module_file_names_are_unique() -> None:
    """One name, one module: ``hosts.py`` in two packages reads as one thing in tracebacks and talk."""
    seen: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    assert {name: places for name, places in seen.items() if len(places) > 1} == {}


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


ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def _architecture_names() -> tuple[set[str], set[str]]:
    """The module files (``sweep.py``) and folders (``fioout/``) the package part of the doc names.

    The doc names every module by its file name in backticks, a sub-package's modules
    (``results/fioout/``) each by its own; file names are unique in the package, so a name
    is a module. The part from "Outside the package" on is about other folders.
    """
    text = ARCHITECTURE.read_text().split("## Outside the package")[0]
    spans = re.findall(r"`([^`]+)`", text)
    files = {m for span in spans for m in re.findall(r"(?<![\w./])([A-Za-z_]\w*\.py)\b", span)}
    folders = {m for span in spans for m in re.findall(r"^((?:\w+/)+)$", span)}
    return files, folders


def test_architecture_doc_names_every_module() -> None:
    """Every module file is named in docs/architecture.md (a package's ``__init__``/``__main__`` may be left out)."""
    named, _ = _architecture_names()
    unnamed = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name not in named and path.name not in ("__init__.py", "__main__.py")
    )
    assert unnamed == []


def test_architecture_doc_names_no_module_that_is_gone() -> None:
    named, folders = _architecture_names()
    files = {path.name for path in PACKAGE.rglob("*.py")}
    dirs = {PACKAGE.name} | {p.name for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"}
    gone = sorted(named - files) + sorted(f for f in folders if f.rstrip("/").split("/")[-1] not in dirs)
    assert gone == []
