"""Rich rendering: widths, colour policy, sorting, ASCII fallback."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

import neuronscope as ns
from neuronscope.analysis.diff import diff_summaries
from neuronscope.report.terminal import diff_renderable, make_console, regions_renderable, sort_rows, summary_renderable


@pytest.fixture(scope="module")
def small(report_profiles):
    return ns.load_run(report_profiles.small).summary


class _Stream(io.StringIO):
    def __init__(self, encoding: str) -> None:
        super().__init__()
        self._enc = encoding

    @property
    def encoding(self) -> str:  # what the terminal reports
        return self._enc


def _render(renderable_fn, width: int, encoding: str = "utf-8") -> str:
    buf = _Stream(encoding)
    console = Console(file=buf, width=width, color_system=None, legacy_windows=False)
    console.print(renderable_fn(console))
    return buf.getvalue()


@pytest.mark.parametrize("width", [40, 60, 79, 100, 160])
def test_tables_fit_any_width(small, width):
    for fn in (
        lambda c: summary_renderable(small, c, top=None),
        lambda c: regions_renderable(small, c),
        lambda c: diff_renderable(diff_summaries(small, small), c, top=None, by_region=True),
    ):
        text = _render(fn, width)
        assert max(len(line) for line in text.splitlines()) <= width
        assert "aten::pow" in text or "aten::p…" in text


def test_long_names_are_shortened_not_wrapped():
    long_name = "my_extension::" + "very_long_kernel_name_" * 6
    summary = ns.Summary(rows=(ns.OpStats(long_name, 3, 10.0, 10.0, 100.0, 12.0, 12.0),))
    text = _render(lambda c: summary_renderable(summary, c), 60)
    row = next(line for line in text.splitlines() if line.startswith("my_extension"))
    assert "…" in row and row.rstrip().endswith("us") and len(row) <= 60


def test_ascii_terminal_gets_ascii(small):
    text = _render(lambda c: summary_renderable(small, c), 140, encoding="ascii")
    assert text.isascii()


def test_make_console_colour_policy(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    assert make_console(file=io.StringIO()).color_system is None  # not a terminal
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert make_console(file=io.StringIO()).color_system is not None
    monkeypatch.setenv("NO_COLOR", "1")  # wins over FORCE_COLOR
    assert make_console(file=io.StringIO()).color_system is None


def test_sort_rows(small):
    assert [r.name for r in sort_rows(small.rows, "self_device")] == [r.name for r in small.rows]
    names = [r.name for r in sort_rows(small.rows, "name")]
    assert names == sorted(names)
    with pytest.raises(ValueError, match="sort"):
        sort_rows(small.rows, "bogus")
