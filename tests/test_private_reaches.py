"""No module reaches into another object's private fields (issue 38): ``obj._name`` is read or
written only where ``_name`` belongs -- on ``self`` / ``cls``, or in the module that defines it
(a class's own module may touch its instances' private fields: ``Segment._refs`` in session.py).
A module-private function or variable of another module (``session._mark``, ``_config._settings``)
is a reach too: the owner gives it a public name or a small public method.

Read statically over the source: which names a module defines is what it assigns on ``self`` /
``cls``, in a class body or at any level (functions, classes, variables); third-party privates
(``sys._getframe``, ``torch._C``) are not neuronscope's and are not counted."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_import_layers import ROOT


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_private(tree: ast.AST) -> set[str]:
    """The private names a module defines: functions, classes, variables, fields set on self/cls."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for e in ast.walk(target):
                    if isinstance(e, ast.Name):
                        names.add(e.id)
                    elif isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id in ("self", "cls"):
                        names.add(e.attr)
    return {n for n in names if _private(n)}


def _imported(tree: ast.AST) -> dict[str, bool]:
    """Each name a module binds by import: True for a neuronscope module or name, False for a third party's."""
    bound: dict[str, bool] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[(alias.asname or alias.name).split(".")[0]] = alias.name.startswith("neuronscope")
        elif isinstance(node, ast.ImportFrom):
            ours = node.level > 0 or (node.module or "").startswith("neuronscope")
            for alias in node.names:
                bound[alias.asname or alias.name] = ours
    return bound


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


TREES = {p: ast.parse(p.read_text()) for p in sorted(ROOT.rglob("*.py"))}
OWN = {p: _defined_private(t) for p, t in TREES.items()}
#: every private name some neuronscope module defines: a private name outside it is a third party's
OURS = set().union(*OWN.values())


#: the package's modules and folders by name: ``from . import _config`` imports a module, not a private name
MODULE_NAMES = {p.stem for p in ROOT.rglob("*.py")} | {p.name for p in ROOT.rglob("*") if p.is_dir()}


def reaches(path: Path) -> Iterator[str]:
    tree, own, bound = TREES[path], OWN[path], _imported(TREES[path])
    where = path.relative_to(ROOT).as_posix()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("neuronscope")):
            for alias in node.names:  # from .sampling import _count_value: another module's private name
                if _private(alias.name) and alias.name not in MODULE_NAMES:
                    yield f"{where}:{node.lineno}: from {'.' * node.level}{node.module or ''} import {alias.name}"
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Name) and bound.get(owner.id) is True:
            yield f"{where}:{node.lineno}: {ast.unparse(node)}"  # session._mark: another module's private name
            continue
        root = _root(owner)
        if isinstance(root, ast.Name) and bound.get(root.id) is False:
            continue  # sys._getframe, torch._C...: not ours
        if node.attr in own or node.attr not in OURS:
            continue  # the object's own module; or a name no module of ours defines (a third party's)
        yield f"{where}:{node.lineno}: {ast.unparse(node)}"


@pytest.mark.parametrize("path", list(TREES), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_module_reaches_into_another_objects_private_fields(path: Path):
    found = list(reaches(path))
    assert not found, "private fields reached from outside their module:\n" + "\n".join(found)


def test_the_checker_sees_a_reach_and_lets_self_and_the_own_module_pass(tmp_path: Path):
    # the checker itself, on source whose reaches are known
    source = (
        "import sys\n"
        "from . import session\n"
        "class Box:\n"
        "    def __init__(self):\n"
        "        self._refs = 0\n"
        "def bump(box):\n"
        "    box._refs += 1\n"  # Box's own module: allowed
        "    session._mark('x')\n"  # another module's private function: a reach
        "    sys._getframe()\n"  # a third party's: not counted
        "    from .sampling import _count_value\n"  # another module's private name, imported: a reach
        "def read(seg):\n"
        "    return seg._lock\n"  # a private field this module does not define: a reach
    )
    path = ROOT / "_probe_for_the_test.py"
    TREES[path] = tree = ast.parse(source)
    OWN[path] = _defined_private(tree)
    try:
        found = list(reaches(path))
    finally:
        del TREES[path], OWN[path]
    assert sorted(f.split(": ", 1)[1] for f in found) == ["from .sampling import _count_value", "seg._lock", "session._mark"]
