"""docs/architecture.md is drawn from the code: every module and folder it names exists."""

from __future__ import annotations

import re
from pathlib import Path

import neuronscope

ROOT = Path(neuronscope.__file__).resolve().parent
DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _layout_paths() -> list[str]:
    """The paths of the package-layout tree (the first text block), indentation turned into folders."""
    block = DOC.read_text().split("```text", 1)[1].split("```", 1)[0]
    stack: list[tuple[int, str]] = []
    found: list[str] = []
    for line in block.splitlines()[1:]:  # the first line is src/neuronscope/ itself
        m = re.match(r"^( +)(\S+)", line)
        if not m or not re.fullmatch(r"[\w./]+", m.group(2)) or not (m.group(2).endswith((".py", "/"))):
            continue
        indent, name = len(m.group(1)), m.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        folder = "".join(p for _, p in stack)
        found.append(folder + name)
        # "cpu.py cuda.py": a second file on the same line
        found += [folder + extra for extra in re.findall(r"^ (\w+\.py)\b", line[m.end():])]
        if name.endswith("/"):
            stack.append((indent, name))
    return found


def test_every_module_in_the_layout_exists():
    paths = _layout_paths()
    assert len(paths) > 40  # the tree was read
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert missing == []


def test_every_module_path_named_in_the_text_exists():
    text = DOC.read_text()
    named = set(re.findall(r"`((?:capture|analysis|trace|sinks|report|cli|testing)/[\w/]+\.py)`", text))
    named |= {f"{m}.py" for m in re.findall(r"`(_?\w+)\.py`", text) if (ROOT / f"{m}.py").exists() or "/" not in m}
    missing = [p for p in named if not (ROOT / p).exists() and not any(ROOT.rglob(Path(p).name))]
    assert missing == []


def test_every_top_level_module_is_in_the_layout():
    listed = set(_layout_paths())
    top = {p.name for p in ROOT.glob("*.py")} | {p.name + "/" for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    top -= {"__main__.py", "_version.py", "py.typed"}
    assert sorted(top - listed) == []
