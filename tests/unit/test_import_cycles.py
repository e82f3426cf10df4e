"""No module of the three packages imports, through others, itself: a cycle makes import order
matter and hides which module owns a piece of knowledge. Type-only imports count too (a
``TYPE_CHECKING`` import that closes a cycle is the same coupling, deferred). ``from pkg import
sub`` is an edge to ``pkg.sub`` alone: a package's ``__init__`` gathering its submodules is not a
cycle."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "runtime/src", ROOT / "local/src", ROOT / "testing/src"]


def modules() -> dict[str, Path]:
    """Every module of the three packages by its dotted name."""
    found: dict[str, Path] = {}
    for source in SOURCES:
        for path in source.rglob("*.py"):
            parts = path.relative_to(source).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The modules of ``known`` that ``name`` imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    yield target
                elif base in known:
                    yield base


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, successors = work[-1]
            step = next((s for s in successors if s not in index or s in stack), None)
            if step is not None and step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                work.append((step, iter(sorted(edges[step]))))
                continue
            if step is not None:
                low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = stack[stack.index(node) :]
                del stack[stack.index(node) :]
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_through_others() -> None:
    known = modules()
    edges = {name: set(imported(name, path, known)) - {name} for name, path in known.items()}
    assert cycles(edges) == []


def test_the_check_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(edges) == [["a", "b", "c"]]
