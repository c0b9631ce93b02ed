"""Every stage imports only downward (docs/architecture.md): the trace model knows nothing of
the analysis, the analysis nothing of reports, sinks or capture, and so on — counting imports
inside functions and under TYPE_CHECKING too, since those are the circles that rot. Within a
stage, no two modules import each other."""

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


def test_no_two_modules_import_each_other():
    def is_package_of(a: str, b: str) -> bool:  # a package's __init__ may import its own modules
        return b.startswith(a + ".") or a.startswith(b + ".") or not a or not b

    pairs = sorted({tuple(sorted((a, b))) for a, deps in GRAPH.items() for b in deps if a in GRAPH.get(b, ()) and not is_package_of(a, b)})
    assert not pairs, f"import circles: {pairs}"
