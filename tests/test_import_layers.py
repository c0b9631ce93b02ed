"""Every stage imports only downward (docs/architecture.md): the trace model knows nothing of
the analysis, the analysis nothing of reports, sinks or capture, and so on — counting imports
inside functions and under TYPE_CHECKING too, since those are the circles that rot. No circle of
any length between modules, and the units every renderer writes in come from one leaf module."""

from __future__ import annotations

import ast
from pathlib import Path

import neuronscope

ROOT = Path(neuronscope.__file__).resolve().parent

#: lower number = lower layer; a module may import its own layer or lower ones only
LAYERS = {
    "errors": 0, "_env": 0, "_config": 0, "_stats": 0, "_version": 0, "_ranks": 0, "_paths": 0, "_system": 0,
    "trace": 1,
    "analysis": 2,
    "_run": 3, "_trigger": 3, "result": 3,
    "sinks": 4,
    "report": 5,
    "capture": 6, "_worker": 6, "testing": 6,
    "api": 7,
    "cli": 8, "__main__": 8,
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module(p): p for p in ROOT.rglob("*.py")}


def _imports(name: str, path: Path) -> set[str]:
    """Every neuronscope module this one imports, wherever the import statement is."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1] if node.level > 1 else list(package)
            elif node.module and node.module.split(".")[0] == "neuronscope":
                base = []
            else:
                continue
            module = [p for p in (node.module or "").split(".") if p and p != "neuronscope"] if not node.level else (node.module or "").split(".")
            target = ".".join(base + [m for m in module if m])
            for alias in node.names:
                full = f"{target}.{alias.name}" if target else alias.name
                found.add(full if full in MODULES else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("neuronscope."):
                    found.add(alias.name.removeprefix("neuronscope."))
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(module: str) -> int | None:
    return LAYERS.get(module.split(".")[0]) if module else None


def test_every_stage_imports_only_downward():
    upward = [
        f"{a} -> {b}"
        for a, deps in GRAPH.items()
        for b in deps
        if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a)  # type: ignore[operator]
    ]
    assert not upward, "imports from a lower stage to a higher one:\n" + "\n".join(sorted(upward))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative):
    each is a set of modules that reach each other through their imports, a circle of any length."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _own_submodule(package: str, module: str) -> bool:
    """A package's ``__init__`` may import its own modules (Python runs the package first anyway)."""
    return module.startswith(package + ".") if package else True


def test_cycle_finder_finds_circles_of_any_length():
    # the finder itself, on graphs whose circles are known: a 2-circle, a 4-circle, a chain
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"f"}, "f": {"c", "g"}, "g": set(), "h": {"g"}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e", "f"]]
    assert _cycles({"x": {"y"}, "y": {"z"}, "z": set()}) == []


def test_no_import_cycles():
    """No circle of any length between modules, counting imports inside functions and under
    TYPE_CHECKING: an import moved into a function still closes the circle, it only hides it
    from Python's loader until the day a caller imports in the other order."""
    graph = {a: {b for b in deps if not _own_submodule(a, b)} for a, deps in GRAPH.items()}
    circles = _cycles(graph)
    detail = [" <-> ".join(c) + ": " + "; ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a] & set(c))) for c in circles]
    assert not circles, "import circles:\n" + "\n".join(detail)


def test_units_are_a_leaf_and_the_device_labels_have_one_table():
    # analysis/units.py formats for every layer: were it to import anything of neuronscope, a
    # renderer's import could close a circle through it again (roofline -> roofs -> text -> roofline)
    assert GRAPH["analysis.units"] == set()
    # one table says what "device time" means per device: a second copy drifts (one lacked rocm)
    copies = sorted(name for name, path in MODULES.items() if "(device time = GPU kernel time)" in path.read_text())
    assert copies == ["analysis.units"], copies
