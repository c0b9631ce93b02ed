"""Terminal rendering with rich: op tables, region tables, diff tables, a loading spinner.

Colour is used only on a terminal and never when ``NO_COLOR`` is set (then no escape codes
at all). Tables fit the console width: on narrow terminals the less important columns go
first, and op names are shortened with an ellipsis rather than wrapped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from .text import format_us

if TYPE_CHECKING:
    from ..analysis.diff import Delta, SummaryDiff
    from ..analysis.summary import OpStats, Summary
    from .sources import Source

__all__ = [
    "SORT_KEYS",
    "diff_renderable",
    "header_renderable",
    "loading",
    "make_console",
    "regions_renderable",
    "sort_rows",
    "summary_renderable",
]

DEVICE_LABEL = {
    "cpu": "cpu (no accelerator: device time = CPU op time)",
    "cuda": "cuda (device time = GPU kernel time)",
    "neuron": "neuron (device time = NeuronCore time)",
}

#: ``--sort`` choices -> (row key, descending). Ties break by name.
SORT_KEYS: dict[str, tuple[Callable[["OpStats"], float | str], bool]] = {
    "self_device": (lambda r: r.self_device_time_us, True),
    "device": (lambda r: r.device_time_us, True),
    "cpu": (lambda r: r.cpu_time_us, True),
    "self_cpu": (lambda r: r.self_cpu_time_us, True),
    "calls": (lambda r: r.calls, True),
    "name": (lambda r: r.name, False),
}

_NAME_MIN = 14  # an op name column narrower than this is unreadable
_LOAD_SPINNER_BYTES = 0  # spinner for every load on a TTY; it is transient and costs nothing


def make_console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A rich Console for stdout (or stderr): colour only on a TTY, none with NO_COLOR set.

    Width comes from the terminal, or ``COLUMNS``, or 80 when output is piped.
    """
    no_color = os.environ.get("NO_COLOR", "") != ""
    return Console(
        file=file,
        stderr=stderr,
        no_color=no_color,
        color_system=None if no_color else "auto",  # NO_COLOR: not even bold/dim escapes
        highlight=False,  # no guessing colours for numbers in plain strings
        soft_wrap=False,
    )


def sort_rows(rows: Sequence["OpStats"], sort: str) -> list["OpStats"]:
    """Rows ordered by a ``--sort`` key (largest first; ``name`` alphabetically)."""
    try:
        key, descending = SORT_KEYS[sort]
    except KeyError:
        raise ValueError(f"sort={sort!r}: use one of {', '.join(SORT_KEYS)}") from None
    by_name = sorted(rows, key=lambda r: r.name)
    return sorted(by_name, key=key, reverse=descending)  # stable: ties stay by name


# -- column layout ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Col:
    header: str
    width: int  #: typical content width, for deciding what fits
    priority: int  #: lower = kept longer on narrow consoles
    justify: str = "right"


def _fit(columns: list[_Col], width: int) -> list[_Col]:
    """Drop the lowest-priority columns until the rest plus a readable name column fit."""
    kept = list(columns)
    while kept and _NAME_MIN + 2 + sum(c.width + 2 for c in kept) > width:
        kept.remove(max(kept, key=lambda c: c.priority))
    return kept


def _bar(pct: float, cells: int = 10) -> str:
    """A horizontal bar of ``pct`` percent in ``cells`` characters (eighth-block resolution)."""
    eighths = round(max(0.0, min(pct, 100.0)) / 100.0 * cells * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")).ljust(cells)


def _unicode_ok(console: Console) -> bool:
    return console.encoding.lower().replace("-", "").startswith("utf")


def _table(console: Console) -> Table:
    return Table(
        box=box.SIMPLE_HEAD if _unicode_ok(console) else box.ASCII2,
        show_edge=False,
        pad_edge=False,
        header_style="bold",
    )


# -- single profile ----------------------------------------------------------------------------


def header_renderable(source: "Source") -> Text:
    """One or two lines: what was profiled, on which device, where it lives."""
    s = source.summary
    text = Text()
    text.append(source.label, style="bold")
    text.append(f"  {DEVICE_LABEL.get(s.device, s.device)}\n", style="dim")
    text.append(f"self device time {format_us(s.total_device_time_us)}", style="bold")
    text.append(f" in {len(s)} ops")
    m = source.manifest
    if m.get("start_ns") and m.get("end_ns"):
        text.append(f", wall {format_us((int(m['end_ns']) - int(m['start_ns'])) / 1e3)}")
    if source.path is not None:
        text.append(f"\n{source.path}", style="dim")
    return text


def summary_renderable(
    summary: "Summary",
    console: Console,
    *,
    top: int | None = 20,
    sort: str = "self_device",
    title: str | None = None,
) -> RenderableType:
    """The per-op table, best columns for the console width, plus a footer line."""
    cols = [
        _Col("Calls", 6, 3),
        _Col("Self device", 11, 1),
        _Col("%", 6, 2),
        _Col("Device total", 12, 4),
        _Col("Self CPU", 10, 6),
        _Col("CPU total", 10, 5),
    ]
    unicode_ok = _unicode_ok(console)
    if unicode_ok:
        cols.insert(3, _Col("", 10, 7, justify="left"))  # the share bar goes first on narrow consoles
    kept = {c.header for c in _fit(cols, console.width)}
    table = _table(console)
    table.add_column("Name", overflow="ellipsis", no_wrap=True, min_width=_NAME_MIN, ratio=1)
    for c in cols:
        if c.header in kept:
            table.add_column(c.header, justify=c.justify, no_wrap=True)  # type: ignore[arg-type]
    rows = sort_rows(summary.rows, sort)
    shown = rows if top is None else rows[:top]
    for r in shown:
        cells = {
            "Calls": str(r.calls),
            "Self device": format_us(r.self_device_time_us),
            "%": f"{r.device_pct:.1f}%",
            "": Text(_bar(r.device_pct), style="cyan"),
            "Device total": format_us(r.device_time_us),
            "Self CPU": format_us(r.self_cpu_time_us),
            "CPU total": format_us(r.cpu_time_us),
        }
        table.add_row(r.name, *(cells[c.header] for c in cols if c.header in kept))
    footer = Text()
    hidden = len(rows) - len(shown)
    if hidden > 0:
        footer.append(f"{hidden} more ops not shown (--top 0 shows all)\n", style="dim")
    footer.append(f"Self device time total: {format_us(summary.total_device_time_us)}")
    for w in summary.warnings:
        footer.append(f"\nwarning: {w}", style="yellow")
    heading = [Text(title, style="bold", overflow="ellipsis", no_wrap=True)] if title else []
    return Group(*heading, table, footer)


def regions_renderable(summary: "Summary", console: Console, *, top: int | None = 10, sort: str = "self_device") -> RenderableType:
    """A table of regions, then each region's own op table."""
    if not summary.regions:
        return Text("no regions in this profile (use neuronscope.region(...) or torch.profiler.record_function)", style="dim")
    total = summary.total_device_time_us
    cols = [_Col("Runs", 5, 3), _Col("Wall", 10, 2), _Col("Device", 10, 1), _Col("%", 6, 1), _Col("Top op", 20, 4, "left")]
    kept = {c.header for c in _fit(cols, console.width)}
    table = _table(console)
    table.add_column("Region", overflow="ellipsis", no_wrap=True, min_width=_NAME_MIN, ratio=1)
    for c in cols:
        if c.header in kept:
            table.add_column(c.header, justify=c.justify, no_wrap=True, overflow="ellipsis")  # type: ignore[arg-type]
    parts: list[RenderableType] = [Text("Regions", style="bold"), table]
    for path, region in summary.regions.items():
        st = region.region_stats
        dev = region.total_device_time_us
        cells = {
            "Runs": str(st.occurrences if st else 0),
            "Wall": format_us(st.wall_time_us) if st else "-",
            "Device": format_us(dev),
            "%": f"{100.0 * dev / total:.1f}%" if total else "-",
            "Top op": region.rows[0].name if region.rows else "-",
        }
        table.add_row(path, *(cells[c.header] for c in cols if c.header in kept))
        parts.append(Text())
        parts.append(summary_renderable(region, console, top=top, sort=sort, title=f"region {path}"))
    return Group(*parts)


# -- two profiles ------------------------------------------------------------------------------


def _pct_text(d: "Delta", presence: str = "both") -> Text:
    if presence == "only_b":
        return Text("new", style="red")
    if presence == "only_a":
        return Text("gone", style="green")
    p = d.pct
    if p is None:
        return Text("new", style="red")
    style = "red" if p > 1.0 else ("green" if p < -1.0 else "")
    return Text(f"{p:+.1f}%", style=style)


def _signed_us(us: float) -> str:
    return ("+" if us > 0 else "-" if us < 0 else "±") + format_us(abs(us))


def diff_renderable(
    diff: "SummaryDiff", console: Console, *, top: int | None = 20, by_region: bool = False, labels: tuple[str, str] = ("A", "B")
) -> RenderableType:
    """Totals, then the ops whose self device time changed most (either way)."""
    a_label, b_label = labels
    head = Text()
    head.append("self device time ", style="bold")
    head.append(f"{format_us(diff.total.a)} -> {format_us(diff.total.b)}  ")
    head.append_text(_pct_text(diff.total))
    head.append(f"  ({_signed_us(diff.total.delta)})\n", style="dim")
    head.append(f"A = {a_label}\nB = {b_label}", style="dim")
    if diff.device_a != diff.device_b:
        head.append(f"\nwarning: comparing a {diff.device_a} profile with a {diff.device_b} profile", style="yellow")

    cols = [_Col("A", 10, 3), _Col("B", 10, 2), _Col("Δ", 11, 1), _Col("Δ%", 7, 1), _Col("Calls A→B", 11, 4)]
    kept = {c.header for c in _fit(cols, console.width)}
    table = _table(console)
    table.add_column("Op", overflow="ellipsis", no_wrap=True, min_width=_NAME_MIN, ratio=1)
    for c in cols:
        if c.header in kept:
            table.add_column(c.header, justify="right", no_wrap=True)
    shown = diff.ops if top is None else diff.ops[:top]
    for o in shown:
        d = o.self_device_time_us
        cells: dict[str, str | Text] = {
            "A": format_us(d.a) if o.presence != "only_b" else "-",
            "B": format_us(d.b) if o.presence != "only_a" else "-",
            "Δ": _signed_us(d.delta),
            "Δ%": _pct_text(d, o.presence),
            "Calls A→B": f"{o.calls.a}→{o.calls.b}",
        }
        table.add_row(o.name, *(cells[c.header] for c in cols if c.header in kept))
    parts: list[RenderableType] = [head, Text(), table]
    hidden = len(diff.ops) - len(shown)
    if hidden > 0:
        parts.append(Text(f"{hidden} more ops not shown (--top 0 shows all)", style="dim"))
    if by_region:
        parts += [Text(), _region_diff_table(diff, console)]
    return Group(*parts)


def _region_diff_table(diff: "SummaryDiff", console: Console) -> RenderableType:
    if not diff.regions:
        return Text("no regions in either profile", style="dim")
    cols = [_Col("Runs A→B", 9, 3), _Col("Wall Δ%", 8, 2), _Col("Device A", 10, 4), _Col("Device B", 10, 4), _Col("Device Δ%", 9, 1)]
    kept = {c.header for c in _fit(cols, console.width)}
    table = _table(console)
    table.add_column("Region", overflow="ellipsis", no_wrap=True, min_width=_NAME_MIN, ratio=1)
    for c in cols:
        if c.header in kept:
            table.add_column(c.header, justify="right", no_wrap=True)
    for r in diff.regions:
        cells: dict[str, str | Text] = {
            "Runs A→B": f"{r.occurrences.a}→{r.occurrences.b}",
            "Wall Δ%": _pct_text(r.wall_time_us, r.presence),
            "Device A": format_us(r.device_time_us.a),
            "Device B": format_us(r.device_time_us.b),
            "Device Δ%": _pct_text(r.device_time_us, r.presence),
        }
        table.add_row(r.path, *(cells[c.header] for c in cols if c.header in kept))
    return Group(Text("Regions", style="bold"), table)


# -- progress ----------------------------------------------------------------------------------


@contextmanager
def loading(console: Console, path: Path | str | None) -> Iterator[None]:
    """A transient spinner on ``console`` (stderr) while a trace loads; silent when not a TTY."""
    if path is None or not console.is_terminal:
        yield
        return
    p = Path(path)
    try:
        size = p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.iterdir() if f.is_file())
    except OSError:
        size = 0
    if size < _LOAD_SPINNER_BYTES:
        yield
        return
    with console.status(f"Loading {p.name} ({size / 1e6:.1f} MB)…", spinner="dots"):
        yield


def print_error_line(message: str) -> None:
    """One line on stderr, no markup interpretation (file names may contain brackets)."""
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.stderr.flush()
