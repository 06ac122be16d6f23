"""One direction of imports (../STYLE.md; issue 41): no two modules of the product import
each other, directly or around a circle, at module level or inside a function. A package's
__init__ re-exporting its modules is not counted (it imports them, they never import it
back for anything but a module)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# where each installed package's source lives (pyproject maps scheduler/ and loadgen/ in)
SOURCES = {"adaserve": ROOT / "adaserve", "adaserve.scheduler": ROOT / "scheduler",
           "adaserve.loadgen": ROOT / "loadgen"}


def _modules() -> dict[str, Path]:
    mods = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            name = ".".join((package, *parts))
            mods[name.removesuffix(".__init__")] = path
    return mods


def _graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module
                    and node.module.startswith("adaserve")):
                continue
            subs = [f"{node.module}.{a.name}" for a in node.names
                    if f"{node.module}.{a.name}" in mods]
            for target in subs or ([node.module] if node.module in mods else []):
                if mods[target].name != "__init__.py":
                    edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for root in list(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_module_imports_one_that_imports_it_back():
    assert cycles(_graph(_modules())) == []


def test_the_check_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
