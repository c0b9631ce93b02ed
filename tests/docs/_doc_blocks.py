"""Find the fenced ``python`` blocks of the documentation pages, and the ones not to run.

Convention (documented in docs/index.md): a block that needs hardware or a network service
is preceded by an HTML comment naming the reason, on the line right before its fence
(blank lines in between are allowed)::

    <!-- not-run: needs Trainium -->
    ```python
    ...
    ```

Every other ``python`` block of a page runs, in order, in one namespace, in a fresh
interpreter (see ``_run_blocks.py``).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

_MARKER = re.compile(r"^\s*<!--\s*not-run:\s*(?P<reason>.*?)\s*-->\s*$")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_PYTHON = ("python", "py", "python3")


class DocBlockError(ValueError):
    """A page breaks the convention (a marker without a block, an unclosed fence...)."""


@dataclass
class Block:
    page: str
    line: int  #: 1-based line of the opening fence
    code: str
    not_run: str | None = None  #: the reason, for blocks marked not-run

    @property
    def label(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass
class PageBlocks:
    page: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def runnable(self) -> list[Block]:
        return [b for b in self.blocks if b.not_run is None]

    @property
    def not_run(self) -> list[Block]:
        return [b for b in self.blocks if b.not_run is not None]


def doc_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if not any(part.startswith("_") for part in p.relative_to(DOCS).parts))


def parse_page(path: Path) -> PageBlocks:
    page = path.relative_to(DOCS).as_posix() if path.is_relative_to(DOCS) else path.name
    lines = path.read_text(encoding="utf-8").splitlines()
    out = PageBlocks(page)
    pending: tuple[int, str] | None = None  # (line, reason) of a not-run marker
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = _MARKER.match(line)
        fence = _FENCE.match(line)
        if marker:
            if pending is not None:
                raise DocBlockError(f"{page}:{pending[0] + 1}: not-run marker followed by another marker")
            reason = marker["reason"]
            if not reason:
                raise DocBlockError(f"{page}:{i + 1}: not-run marker without a reason")
            pending = (i, reason)
            i += 1
            continue
        if fence:
            indent, ticks = fence["indent"], fence["fence"]
            lang = (fence["info"].split() or [""])[0].lower().lstrip(".{")
            start = i
            body: list[str] = []
            i += 1
            while i < len(lines):
                closing = lines[i].strip()
                if closing.startswith(ticks[0] * len(ticks)) and set(closing) == {ticks[0]}:
                    break
                body.append(lines[i])
                i += 1
            else:
                raise DocBlockError(f"{page}:{start + 1}: code fence never closed")
            i += 1
            if lang in _PYTHON:
                code = textwrap.dedent("\n".join(line[len(indent) :] if line.startswith(indent) else line for line in body))
                out.blocks.append(Block(page, start + 1, code + "\n", pending[1] if pending else None))
            elif pending is not None:
                raise DocBlockError(f"{page}:{pending[0] + 1}: not-run marker before a {lang or 'plain'} block, not a python one")
            pending = None
            continue
        if line.strip() and pending is not None:
            raise DocBlockError(f"{page}:{pending[0] + 1}: not-run marker not followed by a python block")
        i += 1
    if pending is not None:
        raise DocBlockError(f"{page}:{pending[0] + 1}: not-run marker at the end of the page")
    return out


#: Filled by the tests, printed by conftest.pytest_terminal_summary.
RESULTS: dict[str, dict] = {}
