"""A small reader of the HTML the notebook views render: their tables, cell by cell (stdlib only)."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Table:
    cls: str
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)  #: the body's cells, as text
    row_attrs: list[dict[str, str]] = field(default_factory=list)
    cell_attrs: list[list[dict[str, str]]] = field(default_factory=list)


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[Table] = []
        self.tags: list[tuple[str, dict[str, str]]] = []  #: every start tag, in order
        self.text: list[str] = []  #: every piece of text outside <style>
        self._cell: list[str] | None = None
        self._in_head = self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        if tag == "style":
            self._in_style = True
        elif tag == "table":
            self.tables.append(Table(a.get("class", "")))
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr" and self.tables and not self._in_head:
            self.tables[-1].rows.append([])
            self.tables[-1].row_attrs.append(a)
            self.tables[-1].cell_attrs.append([])
        elif tag in ("td", "th"):
            self._cell = []
            if tag == "td" and self.tables and not self._in_head:
                self.tables[-1].cell_attrs[-1].append(a)

    def handle_endtag(self, tag):
        if tag == "style":
            self._in_style = False
        elif tag == "thead":
            self._in_head = False
        elif tag in ("td", "th") and self._cell is not None:
            text = "".join(self._cell).strip()
            if self._in_head:
                self.tables[-1].header.append(text)
            else:
                self.tables[-1].rows[-1].append(text)
            self._cell = None

    def handle_data(self, data):
        if self._in_style:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def read(html: str) -> _Reader:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    return reader


def table(html: str, cls: str) -> Table:
    found = [t for t in read(html).tables if cls in t.cls.split()]
    assert len(found) == 1, f"expected one table.{cls}, found {len(found)}"
    return found[0]


def text(html: str) -> str:
    """The visible text, unescaped (what a reader sees)."""
    return "".join(read(html).text)
