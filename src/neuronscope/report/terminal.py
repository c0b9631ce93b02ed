"""Terminal rendering with rich: op tables, region tables, diff tables, a loading spinner.

Colour is used only on a terminal and never when ``NO_COLOR`` is set (then no escape codes
at all). Tables fit the console width: on narrow terminals the less important columns go
first, and op names are shortened with an ellipsis rather than wrapped. Output that is not a
terminal (a CI log, ``-o FILE``, a pipe) is :data:`LOG_WIDTH` wide (or ``COLUMNS``): its long
names wrap inside their column — a log is searched, so nothing in it is cut short.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..analysis.text import (
    classes_line,
    compile_footer,
    device_cells,
    roofline_cells,
    roofline_footer,
    roofline_header,
    roofline_rows,
    split_compile_rows,
)
from ..analysis.units import device_heading, format_us
from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..analysis.diff import Delta, SummaryDiff
    from ..analysis.summary import OpStats, Summary
    from .sources import Source

__all__ = [
    "SORT_KEYS",
    "diff_renderable",
    "header_renderable",
    "ranks_renderable",
    "loading",
    "make_console",
    "regions_renderable",
    "sort_rows",
    "summary_renderable",
]

#: ``--sort`` choices -> (row key, descending). Ties break by name.
SORT_KEYS: dict[str, tuple[Callable[[OpStats], Any], bool]] = {
    "self_device": (lambda r: (r.self_device_time_us, r.device_time_us), True),  # = Summary's own order
    "device": (lambda r: r.device_time_us, True),
    "cpu": (lambda r: r.cpu_time_us, True),
    "self_cpu": (lambda r: r.self_cpu_time_us, True),
    "calls": (lambda r: r.calls, True),
    "name": (lambda r: r.name, False),
}

_NAME_MIN = 14  # an op name column narrower than this is unreadable


#: the width of output that is not a terminal (a CI log, ``-o FILE``, a pipe) unless ``COLUMNS``
#: says otherwise: wider than a terminal, so the verdict and the usual op names fit on a line,
#: yet bounded — a separator or a table row is never thousands of characters long
LOG_WIDTH = 160


class LogConsole(Console):
    """The console of output that is not a terminal: names too long for their column wrap in it
    (a log is searched: nothing is cut short with an ellipsis there)."""

    wrap_names = True


def make_console(*, stderr: bool = False, file: IO[str] | None = None) -> Console:
    """A rich Console for stdout (or stderr): colour only on a TTY, none with NO_COLOR set.

    Width comes from the terminal, or ``COLUMNS``; output that is not a terminal is a
    :class:`LogConsole`, :data:`LOG_WIDTH` wide unless ``COLUMNS`` says otherwise.
    """
    from .. import _env

    no_color = _env.env_str("NO_COLOR", None) is not None
    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream
        tty = False
    columns = _env.env_int("COLUMNS", None, min=1, lenient=True)
    kind = Console if tty else LogConsole
    return kind(
        file=file,
        stderr=stderr,
        width=columns or (None if tty else LOG_WIDTH),
        no_color=no_color,
        color_system=None if no_color else "auto",  # NO_COLOR: not even bold/dim escapes
        highlight=False,  # no guessing colours for numbers in plain strings
        soft_wrap=False,
    )


def _wraps_names(console: Console) -> bool:
    return bool(getattr(console, "wrap_names", False))


def sort_rows(rows: Sequence[OpStats], sort: str) -> list[OpStats]:
    """Rows ordered by a ``--sort`` key (largest first; ``name`` alphabetically)."""
    try:
        key, descending = SORT_KEYS[sort]
    except KeyError:
        raise ConfigurationError(f"sort={sort!r}: use one of {', '.join(SORT_KEYS)}") from None
    by_name = sorted(rows, key=lambda r: r.name)
    return sorted(by_name, key=key, reverse=descending)  # stable: ties stay by name


# -- column layout ---------------------------------------------------------------------------


@dataclass
class _Col:
    """A table column: its cells, and how early it is dropped on a narrow console."""

    header: str
    priority: int  #: lower = kept longer
    cells: list[str | Text]
    justify: str = "right"

    @property
    def width(self) -> int:
        return max([cell_len(self.header)] + [Text(c).cell_len if isinstance(c, str) else c.cell_len for c in self.cells])


_SEP = 3  # SIMPLE_HEAD without edges: padding, separator, padding between columns


def _fit(columns: list[_Col], width: int) -> list[_Col]:
    """Drop the lowest-priority columns until the rest plus a readable name column fit."""
    kept = list(columns)
    while kept and _NAME_MIN + sum(c.width + _SEP for c in kept) > width:
        kept.remove(max(kept, key=lambda c: c.priority))
    return kept


def _build_table(console: Console, first_header: str, first_cells: list[str], columns: list[_Col]) -> Table:
    """A table whose first (name) column absorbs the squeeze: it is ellipsised, the numbers never are."""
    kept = _fit(columns, console.width)
    longest = max([cell_len(first_header)] + [cell_len(n) for n in first_cells])

    def make(name_width: int) -> Table:
        table = Table(
            box=box.SIMPLE_HEAD if _unicode_ok(console) else box.ASCII2,
            show_edge=False,
            pad_edge=False,
            header_style="bold",
        )
        if _wraps_names(console):  # a log: a long name wraps in its column, never cut
            table.add_column(first_header, overflow="fold", width=name_width)
        else:
            table.add_column(first_header, overflow="ellipsis", no_wrap=True, width=name_width)
        for c in kept:
            table.add_column(c.header, justify=c.justify, no_wrap=True)  # type: ignore[arg-type]
        for i, name in enumerate(first_cells):
            table.add_row(name, *(c.cells[i] for c in kept))
        return table

    # Give the name column what is left, then check with rich's own measurement (its
    # padding arithmetic differs between versions) and shrink names, or drop a column.
    name_width = max(min(longest, console.width - sum(c.width + _SEP for c in kept)), _NAME_MIN)
    while True:
        table = make(name_width)
        over = Measurement.get(console, console.options, table).maximum - console.width
        if over <= 0:
            return table
        if name_width - over >= _NAME_MIN:
            name_width -= over
        elif kept:
            kept.remove(max(kept, key=lambda c: c.priority))
            name_width = max(min(longest, console.width - sum(c.width + _SEP for c in kept)), _NAME_MIN)
        else:
            return table  # nothing left to drop: rich crops the name column


def _bar(pct: float, cells: int = 10) -> str:
    """A horizontal bar of ``pct`` percent in ``cells`` characters (eighth-block resolution)."""
    eighths = round(max(0.0, min(pct, 100.0)) / 100.0 * cells * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")).ljust(cells)


def _unicode_ok(console: Console) -> bool:
    return console.encoding.lower().replace("-", "").startswith("utf")


# -- single profile ----------------------------------------------------------------------------


def header_renderable(source: Source) -> Text:
    """One or two lines: what was profiled, on which device, where it lives."""
    s = source.summary
    text = Text()
    text.append(source.label, style="bold")
    text.append(f"  {device_heading(s.device)}\n", style="dim")
    text.append(f"self device time {format_us(s.total_device_time_us)}", style="bold")
    text.append(f" in {len(s)} ops")
    if s.compile_time_us > 0:
        text.append(f", compiling {format_us(s.compile_time_us)}", style="magenta")
    m = source.manifest
    if m.get("start_ns") and m.get("end_ns"):
        text.append(f", wall {format_us((int(m['end_ns']) - int(m['start_ns'])) / 1e3)}")
    if isinstance(m.get("coverage"), dict):  # a long run: what was recorded, and why it stopped
        from ..result import Coverage

        cov = Coverage.from_dict(m["coverage"])
        text.append(f"\n{cov.line()}", style="yellow" if cov.stopped else "dim")
    if source.path is not None:
        text.append(f"\n{source.path}", style="dim")
    if m.get("error"):  # the profiled code raised: the profile stops at the exception
        message = f": {m['error_message']}" if m.get("error_message") else ""
        text.append(f"\nthe profiled code raised {m['error']}{message}; the profile covers it up to the exception", style="red")
    if m.get("status") in ("recording", "processing"):
        text.append(
            f"\nincomplete run: its process stopped while {m['status']} (killed, out of memory); what it wrote is shown",
            style="yellow",
        )
    return text


_VERDICT_STYLE = {"device": "green", "host": "yellow", "launch": "yellow", "sync": "red", "data": "yellow", "compile": "magenta"}


def diagnosis_renderable(diagnosis: Any, *, findings: int = 3, memory: Any = None) -> Text:
    """The verdict lines (the memory one last when memory was recorded), then the top findings
    with the time at stake."""
    from ..analysis.diagnosis.model import finding_line

    text = Text()
    lines = diagnosis.headline()
    if memory is not None and not diagnosis.memory_line:
        lines.append(memory.headline())
    style = _VERDICT_STYLE.get(diagnosis.bound_by, "bold")
    for i, line in enumerate(lines):
        if i:
            text.append("\n")
        text.append(line, style=f"bold {style}" if i == 0 else ("bold" if line.startswith("memory peak") else ""))
    rest = list(diagnosis.findings[1 : 1 + max(findings - 1, 0)])
    for f in rest:
        text.append("\n  • " + finding_line(f), style="dim" if f.severity == "low" else "")
    unlisted = len(diagnosis.findings) - 1 - len(rest)
    if unlisted > 0:  # the headline's "+N more" counts them all: say where the rest are
        text.append(
            f"\n  • and {unlisted} more finding{'s' if unlisted > 1 else ''}: neuronscope show RUN --json lists every one",
            style="dim",
        )
    for note in diagnosis.notes:
        text.append(f"\n  note: {note}", style="dim")
    return text


def summary_renderable(
    summary: Summary,
    console: Console,
    *,
    top: int | None = 20,
    sort: str = "self_device",
    title: str | None = None,
) -> RenderableType:
    """The per-op table, best columns for the console width, plus a footer line."""
    rows = sort_rows(summary.rows, sort)
    ops, comp = split_compile_rows(rows, top)  # compilation apart, marked compile
    shown = ops + comp
    dev = [device_cells(r) for r in shown]
    cols = [
        _Col("Calls", 3, [str(r.calls) for r in shown]),
        _Col("Self device", 1, [d[0] for d in dev]),
        _Col("%", 2, [Text("compile", style="magenta") if r.compile else f"{r.device_pct:.1f}%" for r in shown]),
        _Col("Device total", 4, [d[2] for d in dev]),
        _Col("Self CPU", 6, [format_us(r.self_cpu_time_us) for r in shown]),
        _Col("CPU total", 5, [format_us(r.cpu_time_us) for r in shown]),
    ]
    if _unicode_ok(console):  # a share bar, the first thing to go on a narrow console
        cols.insert(3, _Col("", 7, [Text(_bar(0.0 if r.compile else r.device_pct), style="cyan") for r in shown], justify="left"))
    table = _build_table(console, "Name", [summary.label(r.name) for r in shown], cols)
    footer = Text()
    hidden = len(rows) - len(shown)
    if hidden > 0:
        footer.append(f"{hidden} more ops not shown (--top 0 shows all)\n", style="dim")
    footer.append(f"Self device time total: {format_us(summary.total_device_time_us)}")
    classes = classes_line(summary, sep=" · " if _unicode_ok(console) else ", ")
    if classes:  # GEMM, attention, copy...: what the kernels are, with or without an op
        footer.append("\n" + classes)
    if compile_footer(summary):
        footer.append("\n" + compile_footer(summary))
    for w in summary.warnings:
        footer.append(f"\nwarning: {w}", style="yellow")
    for note in summary.notes:  # e.g. how to open the raw Neuron files
        footer.append(f"\n{note}", style="dim")
    wrap = _wraps_names(console)  # a log: a long region path wraps, never cut
    heading = [Text(title, style="bold", overflow="fold" if wrap else "ellipsis", no_wrap=not wrap)] if title else []
    return Group(*heading, table, footer)


def roofline_renderable(summary: Summary, console: Console, *, top: int | None = 20) -> RenderableType:
    """Each op against the device's roofs (``show --roofline``): the most time at stake first."""
    rows = roofline_rows(summary)
    shown = rows if top is None else rows[:top]
    header = roofline_header(rows)
    cells = [roofline_cells(r, "Level" in header) for r in shown]
    # the name column absorbs the squeeze; then the least telling columns go first
    priority = {
        "Calls": 6,
        "Time": 3,
        "Work": 7,
        "Achieved": 4,
        "FLOP/B": 8,
        "Bound": 5,
        "Level": 6,
        "% of roof": 1,
        "At roof": 9,
        "At stake": 2,
    }
    cols = [_Col(h, priority[h], [c[i] for c in cells]) for i, h in enumerate(header[1:])]
    parts: list[RenderableType] = []
    if shown:
        parts.append(_build_table(console, "Name", [summary.label(r.name) for r in shown], cols))
    footer = Text()
    if len(rows) > len(shown):
        footer.append(f"{len(rows) - len(shown)} more ops with a roofline (--top 0 shows all)\n", style="dim")
    footer.append("\n".join(roofline_footer(summary)))
    parts.append(footer)
    return Group(*parts)


def regions_renderable(summary: Summary, console: Console, *, top: int | None = 10, sort: str = "self_device") -> RenderableType:
    """A table of regions, then each region's own op table."""
    if not summary.regions:
        return Text("no regions in this profile (use neuronscope.region(...) or torch.profiler.record_function)", style="dim")
    total = summary.total_device_time_us
    items = list(summary.regions.items())
    stats = [region.region_stats for _, region in items]
    dev = [region.total_device_time_us for _, region in items]
    cols = [
        _Col("Runs", 3, [str(st.occurrences if st else 0) for st in stats]),
        _Col("Wall", 2, [format_us(st.wall_time_us) if st else "-" for st in stats]),
        _Col("Device", 1, [format_us(d) for d in dev]),
        _Col("%", 1, [f"{100.0 * d / total:.1f}%" if total else "-" for d in dev]),
        _Col("Top op", 4, [region.rows[0].name if region.rows else "-" for _, region in items], justify="left"),
    ]
    parts: list[RenderableType] = [Text("Regions", style="bold"), _build_table(console, "Region", [p for p, _ in items], cols)]
    for path, region in items:
        parts.append(Text())
        parts.append(summary_renderable(region, console, top=top, sort=sort, title=f"region {path}"))
    return Group(*parts)


# -- two profiles ------------------------------------------------------------------------------


def _pct_text(d: Delta, presence: str = "both") -> Text:
    from ..analysis.diff import pct_text, tone

    return Text(pct_text(d.pct, presence), style=_STYLE[tone(d, presence)])


_STYLE = {"worse": "red", "better": "green", "": ""}


def _signed_us(us: float) -> str:
    from ..analysis.diff import signed_us

    return signed_us(us)


def _spec_cols(columns: Any, rows: list[Any], arrow: str) -> list[_Col]:
    """The table's columns from the one spec the HTML report and --json read too."""
    return [
        _Col(
            c.header.replace("→", arrow),
            c.priority,
            [Text(c.text(r).replace("→", arrow), style=_STYLE[c.tone(r)] if c.tone else "") for r in rows],
        )
        for c in columns
    ]


def diff_renderable(
    diff: SummaryDiff, console: Console, *, top: int | None = 20, by_region: bool = False, labels: tuple[str, str] = ("A", "B")
) -> RenderableType:
    """The headline (the median step change when both runs have steps), the self device time in
    the diff's basis and why that basis, then the ops whose self device time changed most."""
    from ..analysis.diff import DIFF_OP_COLUMNS

    a_label, b_label = labels
    n = diff.normalised
    head = Text()
    if n.p50_step_us is not None:
        head.append(diff.headline() + "\n", style="bold")
    head.append("self device time" + (f" {n.figures_label}" if n.figures_label else "") + " ", style="bold")
    head.append(f"{format_us(diff.total.a)} -> {format_us(diff.total.b)}  ")
    head.append_text(_pct_text(diff.total))
    head.append(f"  ({_signed_us(diff.total.delta)})\n", style="dim")
    if diff.moved_apart:
        head.append(diff.other_way_note() + "\n", style="yellow")
    if n.basis != "total":
        head.append(n.reason() + "\n", style="dim")
    head.append(f"A = {a_label}\nB = {b_label}", style="dim")
    if diff.device_a != diff.device_b:
        head.append(f"\nwarning: comparing a {diff.device_a} profile with a {diff.device_b} profile", style="yellow")

    shown = list(diff.ops if top is None else diff.ops[:top])
    arrow = "→" if _unicode_ok(console) else "->"
    cols = _spec_cols(DIFF_OP_COLUMNS, shown, arrow)
    parts: list[RenderableType] = [head, Text(), _build_table(console, "Op", [diff.label(o.name) for o in shown], cols)]
    hidden = len(diff.ops) - len(shown)
    if hidden > 0:
        parts.append(Text(f"{hidden} more ops not shown (--top 0 shows all)", style="dim"))
    if by_region:
        parts += [Text(), _region_diff(diff, console, arrow)]
    return Group(*parts)


def _region_diff(diff: SummaryDiff, console: Console, arrow: str) -> RenderableType:
    from ..analysis.diff import DIFF_REGION_COLUMNS

    if not diff.regions:
        return Text("no regions in either profile", style="dim")
    rs = list(diff.regions)
    cols = _spec_cols(DIFF_REGION_COLUMNS, rs, arrow)
    return Group(Text("Regions", style="bold"), _build_table(console, "Region", [r.path for r in rs], cols))


# -- ranks of a distributed job ----------------------------------------------------------------


def ranks_renderable(comparison: Any, console: Console, *, steps: bool = False, max_steps: int = 50) -> RenderableType:
    """``neuronscope ranks``: the verdict lines, one row per rank, and optionally one per step."""
    from ..analysis.ranks import RANK_COLUMNS, RANK_HEADER, rank_label

    c = comparison
    head = Text()
    for i, line in enumerate(c.headline()):
        if i:
            head.append("\n")
        style = "bold" if i == 0 else ("bold red" if i == 1 and c.straggler is not None else "green" if i == 1 else "")
        head.append(line, style=style)
    for w in c.warnings:
        head.append(f"\n  warning: {w}", style="yellow")
    rows = c.ranks
    names = [rank_label(c, r) for r in rows]
    cols = [
        _Col(col.header, col.priority, [col.text(r) for r in rows], justify="left" if col.unit == "text" else "right")
        for col in RANK_COLUMNS
    ]
    parts: list[RenderableType] = [head, Text(""), _build_table(console, RANK_HEADER, names, cols)]
    parts.append(Text("per step, median over steps; Late: arrival at collectives after the other ranks' median", style="dim"))
    if steps and c.steps:
        shown = c.steps[:max_steps]
        scols = [_Col(f"rank {r.rank}", 1, [format_us(st.wall_us[r.rank]) for st in shown]) for r in rows]
        scols.append(_Col("Last", 1, [str(st.last_rank) for st in shown]))
        parts += [
            Text(""),
            Text("Steps (wall time per rank)", style="bold"),
            _build_table(console, "Step", [st.key for st in shown], scols),
        ]
        if len(c.steps) > max_steps:
            parts.append(Text(f"first {max_steps} of {len(c.steps)} steps (--json has all)", style="dim"))
    return Group(*parts)


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
    amount = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"
    with console.status(f"Loading {p.name} ({amount})…", spinner="dots"):
        yield
