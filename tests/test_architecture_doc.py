"""docs/architecture.md says what the code is: the package layout names modules that exist,
functions and classes defined where it says, every module of the package, and the layer table is
the import test's LAYERS."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from test_import_layers import LAYERS, ROOT

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
TEXT = DOC.read_text()

_ENTRY = re.compile(r"^(?P<indent> *)(?P<names>(?:[\w.]+\.py |[\w]+/ )+) *(?P<desc>.*)$")


def _layout() -> list[tuple[Path, bool, str]]:
    """(path, is a folder, description) of every entry of the layout block, continuation lines
    joined to their entry's description."""
    block = TEXT[TEXT.index("```text\nsrc/neuronscope/") :].split("```", 2)[1].splitlines()[2:]
    entries: list[tuple[Path, bool, str]] = []
    folders: list[tuple[int, Path]] = [(-1, ROOT)]
    for line in block:
        m = _ENTRY.match(line + " ")
        if not m:
            if entries and line.strip():  # a description's continuation
                path, is_dir, desc = entries[-1]
                entries[-1] = (path, is_dir, f"{desc} {line.strip()}")
            continue
        indent = len(m["indent"])
        while folders[-1][0] >= indent:
            folders.pop()
        for name in m["names"].split():
            path = folders[-1][1] / name.rstrip("/")
            entries.append((path, name.endswith("/"), m["desc"].strip()))
            if name.endswith("/"):
                folders.append((indent, path))
    return entries


LAYOUT = _layout()


def test_the_layout_block_was_read():
    # the parser itself: the entries it must see (a folder, nested modules, a two-module line)
    paths = {p.relative_to(ROOT).as_posix() for p, _, _ in LAYOUT}
    assert {"capture", "capture/devices/cpu.py", "capture/devices/cuda.py", "analysis/units.py", "sinks/otel/spans.py"} <= paths
    assert len(LAYOUT) > 80


@pytest.mark.parametrize("path", [p for p, _, _ in LAYOUT], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_module_it_names_exists(path: Path):
    assert path.exists(), f"docs/architecture.md names {path.relative_to(ROOT)}, which does not exist"


def test_every_module_of_the_package_is_named():
    named = {p for p, _, _ in LAYOUT}
    listed_folders = {p for p, is_dir, _ in LAYOUT if is_dir and any(q.parent == p for q in named)}
    whole_folders = {p for p, is_dir, _ in LAYOUT if is_dir and p not in listed_folders}  # cli/, rules/, testing/
    missing = [
        f.relative_to(ROOT).as_posix()
        for f in sorted(ROOT.rglob("*.py"))
        if f not in named
        and not any(w in f.parents for w in whole_folders)
        and not (f.name == "__init__.py" and f.parent in named)  # a package stands for its __init__
    ]
    assert not missing, f"modules docs/architecture.md does not name: {missing}"


def _defined(path: Path) -> set[str]:
    """Names a module defines at its top level (functions, classes, assignments, imports), and
    ``Class.member`` for its classes' members."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                names |= {f"{node.name}.{m.name}" for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _named_code(desc: str) -> set[str]:
    """What a module's line names of its code: ``name()`` / ``Class.method()`` (not ``ns.x()``,
    the public API's spelling), and the classes that lead the line (``SamplingPolicy: ...``,
    ``Diagnosis, Finding: ...``)."""
    calls = {m for m in re.findall(r"(?<![\w.])([A-Za-z_]\w*(?:\.\w+)?)\(\)", desc) if not m.startswith("ns.")}
    lead = re.match(r"^((?:[A-Z]\w*)(?:, [A-Z]\w*)*)(?::| \()", desc)
    classes = set(lead[1].split(", ")) if lead else set()
    return calls | classes


MODULE_LINES = [(p, d) for p, is_dir, d in LAYOUT if not is_dir and p.suffix == ".py" and _named_code(d)]


@pytest.mark.parametrize("path,desc", MODULE_LINES, ids=[p.relative_to(ROOT).as_posix() for p, _ in MODULE_LINES])
def test_every_function_and_class_it_names_is_in_that_module(path: Path, desc: str):
    if not path.exists():
        pytest.fail(f"{path} does not exist")
    missing = sorted(_named_code(desc) - _defined(path))
    assert not missing, f"{path.relative_to(ROOT)}: docs/architecture.md names {missing}, not defined there"


def test_the_checker_sees_names():
    # the name finder on lines like the doc's: calls, dotted calls, leading classes, not ns.x()
    assert _named_code("Trace: columns; Trace.concat() and select()") == {"Trace", "Trace.concat", "select"}
    assert _named_code("Diagnosis, Finding: the result; ns.diagnose() reads it") == {"Diagnosis", "Finding"}


def test_the_layer_table_is_the_import_tests():
    section = TEXT[TEXT.index("## Import layers") :]
    table = {}
    for layer, modules in re.findall(r"^\| (\d+) \| (.+) \|$", section, flags=re.M):
        for name in re.findall(r"`([\w]+)`", modules):
            table[name] = int(layer)
    assert table == LAYERS


def test_every_source_path_it_mentions_exists():
    repo = ROOT.parents[1]
    mentioned = set(re.findall(r"`((?:[\w.]+/)*[\w]+\.py)`", TEXT))
    missing = [
        m
        for m in sorted(mentioned)
        if not any((base / m).exists() for base in (repo, ROOT, *(d for d in ROOT.iterdir() if d.is_dir())))
    ]
    assert not missing, f"docs/architecture.md mentions files that do not exist: {missing}"
