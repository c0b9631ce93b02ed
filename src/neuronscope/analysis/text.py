"""Plain-text rendering of a Summary (what ``print(run.summary)`` shows, and its roofline
table). The units it writes in are analysis/units.py's, which every renderer shares.

It reads summaries through the two protocols below rather than importing analysis.summary:
``Summary.__str__`` calls down into this module, so this module must not import it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from .kernel_classes import pct_text
from .roofline import run_roofline
from .units import device_heading, format_amount, format_rate, format_us


class OpStats(Protocol):
    """What a table reads of a row (analysis.summary.OpStats); read-only, as the frozen rows are."""

    @property
    def name(self) -> str: ...
    @property
    def calls(self) -> int: ...
    @property
    def device_time_us(self) -> float: ...
    @property
    def self_device_time_us(self) -> float: ...
    @property
    def device_pct(self) -> float: ...
    @property
    def cpu_time_us(self) -> float: ...
    @property
    def self_cpu_time_us(self) -> float: ...
    @property
    def compile(self) -> bool: ...


class Summary(Protocol):
    """What a table reads of a summary (analysis.summary.Summary); read-only."""

    @property
    def device(self) -> str: ...
    @property
    def rows(self) -> Sequence[OpStats]: ...
    @property
    def total_device_time_us(self) -> float: ...
    @property
    def compile_time_us(self) -> float: ...
    @property
    def warnings(self) -> Sequence[str]: ...
    @property
    def notes(self) -> Sequence[str]: ...

    def label(self, name: str) -> str: ...


__all__ = [
    "classes_line",
    "compile_footer",
    "device_cells",
    "roofline_table",
    "split_compile_rows",
    "unmodelled_gemm_line",
    "summary_table",
]

#: compile rows listed under the ops (the heaviest by self CPU time); the rest are counted
COMPILE_ROWS_SHOWN = 5


def split_compile_rows(rows: Sequence["OpStats"], limit: int | None) -> tuple[list["OpStats"], list["OpStats"]]:
    """The rows a table shows: the ops (in the given order, ``limit`` of them), then the
    compilation rows apart (heaviest self CPU time first, at most :data:`COMPILE_ROWS_SHOWN`)."""
    ops = [r for r in rows if not r.compile]
    comp = sorted((r for r in rows if r.compile), key=lambda r: (-r.self_cpu_time_us, r.name))
    if limit is None:
        return ops, comp
    return ops[:limit], comp[: min(limit, COMPILE_ROWS_SHOWN)]


def compile_footer(summary: "Summary") -> str:
    """How compilation relates to the device-time total ('' when nothing compiled)."""
    us = summary.compile_time_us
    if us <= 0:
        return ""
    if summary.device == "cpu":
        return f"Compilation: {format_us(us)} of CPU time (rows marked compile), not in the device time"
    return f"Compilation: {format_us(us)} of CPU time (rows marked compile)"


def classes_line(summary: Any, sep: str = " · ") -> str | None:
    """``Device time by class: gemm 59% · attention 22% · ... (classified 99.9%: ...)``: the split
    of :class:`~.kernel_classes.DeviceClasses`, and how much of it an op or a name classified (None
    without it: a summary saved before the classes, or no device time)."""
    dc = getattr(summary, "device_classes", None)
    if dc is None or dc.total_us <= 0:
        return None
    by_op = dc.pct(sum(dc.by_op_us.values()))
    by_name = max(dc.classified_pct - by_op, 0.0)
    name = "by name" if getattr(summary, "device", "") == "cpu" else "by kernel name"
    how = f"classified {pct_text(dc.classified_pct)}: {pct_text(by_op)} by op, {pct_text(by_name)} {name}"
    outside = sum(dc.outside_ops_us.values())
    if outside > 0:
        how += f"; {pct_text(dc.pct(outside))} launched outside any op"
        if dc.graph_us > 0:
            how += f", {pct_text(dc.pct(dc.graph_us))} by a graph replay"
    return f"Device time by class: {dc.line(sep=sep)} ({how})"


def device_cells(r: "OpStats") -> tuple[str, str, str]:
    """Self device, device %, device total of a row; a compile row says so instead of a share."""
    if r.compile:
        return (
            format_us(r.self_device_time_us) if r.self_device_time_us else "-",
            "compile",
            format_us(r.device_time_us) if r.device_time_us else "-",
        )
    return format_us(r.self_device_time_us), f"{r.device_pct:.2f}%", format_us(r.device_time_us)


def _fit(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def summary_table(summary: "Summary", limit: int | None = 20, max_name: int = 48) -> str:
    header = ("Name", "Calls", "Self device", "Device %", "Device total", "Self CPU", "CPU total")
    ops, comp = split_compile_rows(summary.rows, limit)
    rows = ops + comp
    body = [
        (
            _fit(summary.label(r.name), max_name),
            str(r.calls),
            *device_cells(r),
            format_us(r.self_cpu_time_us),
            format_us(r.cpu_time_us),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    rule = "  ".join("-" * w for w in widths)
    out = [f"device: {device_heading(summary.device)}", rule, line(header), rule]
    out += [line(b) for b in body[: len(ops)]]
    if comp:
        out.append(rule)
        out += [line(b) for b in body[len(ops) :]]
    out.append(rule)
    hidden = len(summary.rows) - len(rows)
    if hidden > 0:
        out.append(f"... {hidden} more ops (summary.rows has all)")
    out.append(f"Self device time total: {format_us(summary.total_device_time_us)}")
    classes = classes_line(summary)
    if classes:
        out.append(classes)
    if compile_footer(summary):
        out.append(compile_footer(summary))
    out.extend(f"warning: {w}" for w in summary.warnings)
    out.extend(summary.notes)
    return "\n".join(out)


# -- the roofline table (``summary.roofline_table()``, ``neuronscope show --roofline``) ------------
ROOFLINE_HEADER = ("Name", "Calls", "Time", "Work", "Achieved", "FLOP/B", "Bound", "Level", "% of roof", "At roof", "At stake")
#: marks a % of roof above 100: the footer says why
ABOVE_MARK = "*"


def roofline_rows(summary: Any) -> list[Any]:
    """The rows with a roofline, the most time at stake first."""
    rows = [r for r in summary.rows if getattr(r, "roofline", None) is not None]
    return sorted(rows, key=lambda r: (-r.roofline.time_at_stake_us, r.name))


def roofline_header(rows: Sequence[Any]) -> tuple[str, ...]:
    """The table's columns: "Level" (the memory level each op's bytes are held to) only where
    the device has cache levels (a CPU)."""
    if any(r.roofline.memory_level for r in rows):
        return ROOFLINE_HEADER
    return tuple(h for h in ROOFLINE_HEADER if h != "Level")


def roofline_cells(r: Any, level: bool = True) -> tuple[str, ...]:
    rf = r.roofline
    work = format_amount(rf.flops, "FLOP") if rf.bound == "compute" else format_amount(rf.bytes, "B")
    achieved = (
        format_rate(rf.achieved_flops_per_s, "FLOP/s") if rf.bound == "compute" else format_rate(rf.achieved_bytes_per_s, "B/s")
    )
    pct = f"{rf.pct_of_roof:.1f}%" + (" at limit" if rf.at_limit else "") + (f" {ABOVE_MARK}" if rf.above_roof else "")
    return (
        str(rf.calls),
        format_us(rf.time_us),
        work,
        achieved,
        f"{rf.intensity:.3g}" if rf.intensity is not None else "-",
        f"{rf.bound} {rf.dtype.split('/')[-1]}",
        *((rf.memory_level or "-",) if level else ()),
        pct,
        format_us(rf.time_at_roof_us),
        format_us(rf.time_at_stake_us),
    )


def roofline_footer(summary: Any) -> list[str]:
    """The device, the run's fraction of its roofs, and what has no roofline and why."""
    if not any(getattr(r, "work", None) is not None for r in summary.rows):
        return ["roofline: no shapes recorded: profile with record_shapes=True (2-3 us more per op recorded; docs/roofline.md)"]
    if not any(r.work is not None and r.work.calls > 0 for r in summary.rows):
        return [
            "roofline: no op of this profile has a work model (GEMM, convolution, attention, elementwise, ...; docs/roofline.md)"
        ]
    limits = getattr(summary, "limits", None)
    if limits is None:
        return ["roofline: unknown device: give its limits with ns.configure(device_limits=...) (docs/roofline.md)"]
    out = [f"roofs: {limits.line()}"]
    run = run_roofline(summary)
    if run is not None:
        out.append(
            f"modelled ops: {run.coverage_pct:.0f}% of device time, at {run.roof_pct:.0f}% of their roofs "
            f"(FLOP/s {run.flops_pct:.1f}% of peak, bytes/s {run.bytes_pct:.1f}% of bandwidth); "
            f"{format_us(run.time_at_stake_us)} above the roofs"
        )
    unmodelled = unmodelled_gemm_line(summary)
    if unmodelled:
        out.append(unmodelled)
    over = sorted((r for r in roofline_rows(summary) if r.roofline.above_roof), key=lambda r: -r.roofline.time_us)
    for r in over[:5]:
        rf = r.roofline
        level = f" {rf.memory_level}" if rf.memory_level and rf.bound == "memory" else ""
        out.append(f"{ABOVE_MARK} {r.name} at {rf.pct_of_roof:.0f}% of its{level} roof: {rf.above_roof}")
    if len(over) > 5:
        out.append(f"{ABOVE_MARK} +{len(over) - 5} more above their roofs (summary.rows[i].roofline.above_roof says why)")
    covered = ("counted in ", "a wrapper", "moves no data")  # their work has a roofline elsewhere, or there is none
    missing = sorted(
        (
            r
            for r in summary.rows
            if r.roofline is None
            and r.self_device_time_us > 0
            and r.work is not None
            and r.work.reason
            and not r.work.reason.startswith(covered)
        ),
        key=lambda r: -r.self_device_time_us,
    )
    if missing:
        shown = "; ".join(f"{r.name} ({format_us(r.self_device_time_us)}): {r.work.reason}" for r in missing[:3])
        out.append(f"no roofline: {shown}" + (f"; +{len(missing) - 3} more" if len(missing) > 3 else ""))
    return out


#: GEMM time without a roofline below this share of the device time is not worth a line
UNMODELLED_GEMM_MIN_PCT = 1.0


def unmodelled_gemm_line(summary: Any) -> str | None:
    """The GEMM kernels the roofline does not see (their class says GEMM, no row models them): how
    much, and why — launched outside any op (a graph replay records its kernels' names, not their
    sizes), or under ops without a work model (``vllm::moe_forward``)."""
    dc = getattr(summary, "device_classes", None)
    if dc is None or dc.total_us <= 0:
        return None
    modelled = sum(
        r.roofline.time_us
        for r in summary.rows
        if getattr(r, "roofline", None) is not None and r.work is not None and r.work.family == "gemm"
    )
    missing = max(dc.by_class_us.get("gemm", 0.0) - modelled, 0.0)
    if dc.pct(missing) < UNMODELLED_GEMM_MIN_PCT:
        return None
    outside = min(dc.outside_ops_us.get("gemm", 0.0), missing)
    why = []
    if outside > 0:
        why.append(f"{format_us(outside)} launched outside any op (the trace records no sizes for them)")
    if missing - outside > 1e-9 * missing:
        why.append(f"{format_us(missing - outside)} under ops without a work model")
    return f"no roofline for GEMM kernels of {format_us(missing)} ({pct_text(dc.pct(missing))} of device time): " + ", ".join(why)


def roofline_table(summary: Any, limit: int | None = 20, max_name: int = 48) -> str:
    rows = roofline_rows(summary)
    shown = rows if limit is None else rows[:limit]
    header = roofline_header(rows)
    body = [(_fit(summary.label(r.name), max_name), *roofline_cells(r, "Level" in header)) for r in shown]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    rule = "  ".join("-" * w for w in widths)
    out = [rule, line(header), rule, *(line(b) for b in body), rule] if body else []
    if len(rows) > len(shown):
        out.append(f"... {len(rows) - len(shown)} more ops with a roofline")
    return "\n".join(out + roofline_footer(summary))
