"""Plain-text rendering of a Summary (what ``print(run.summary)`` shows) and the time format
every renderer shares.

It reads summaries through the two protocols below rather than importing analysis.summary:
``Summary.__str__`` calls down into this module, so this module must not import it back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class OpStats(Protocol):
    """What a table reads of a row (analysis.summary.OpStats)."""

    name: str
    calls: int
    device_time_us: float
    self_device_time_us: float
    device_pct: float
    cpu_time_us: float
    self_cpu_time_us: float
    compile: bool


class Summary(Protocol):
    """What a table reads of a summary (analysis.summary.Summary)."""

    device: str
    rows: Sequence[OpStats]
    total_device_time_us: float
    compile_time_us: float
    warnings: Sequence[str]
    notes: Sequence[str]

    def label(self, name: str) -> str: ...


__all__ = ["compile_footer", "device_cells", "format_us", "split_compile_rows", "summary_table"]

#: compile rows listed under the ops (the heaviest by self CPU time); the rest are counted
COMPILE_ROWS_SHOWN = 5

_DEVICE_LABEL = {
    "cpu": "cpu (no accelerator: device time = CPU op time)",
    "cuda": "cuda (device time = GPU kernel time)",
    "rocm": "rocm (device time = GPU kernel time)",
    "neuron": "neuron (device time = NeuronCore time)",
}


def format_us(us: float) -> str:
    """Microseconds in the unit a human reads fastest."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


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
    out = [f"device: {_DEVICE_LABEL.get(summary.device, summary.device)}", rule, line(header), rule]
    out += [line(b) for b in body[: len(ops)]]
    if comp:
        out.append(rule)
        out += [line(b) for b in body[len(ops) :]]
    out.append(rule)
    hidden = len(summary.rows) - len(rows)
    if hidden > 0:
        out.append(f"... {hidden} more ops (summary.rows has all)")
    out.append(f"Self device time total: {format_us(summary.total_device_time_us)}")
    if compile_footer(summary):
        out.append(compile_footer(summary))
    out.extend(f"warning: {w}" for w in summary.warnings)
    out.extend(summary.notes)
    return "\n".join(out)
