"""Plain-text rendering of a Summary (what ``print(run.summary)`` shows)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..analysis.summary import Summary

__all__ = ["format_us", "summary_table"]

_DEVICE_LABEL = {
    "cpu": "cpu (no accelerator: device time = CPU op time)",
    "cuda": "cuda (device time = GPU kernel time)",
    "neuron": "neuron (device time = NeuronCore time)",
}


def format_us(us: float) -> str:
    """Microseconds in the unit a human reads fastest."""
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


def _fit(name: str, width: int) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def summary_table(summary: "Summary", limit: int | None = 20, max_name: int = 48) -> str:
    header = ("Name", "Calls", "Self device", "Device %", "Device total", "Self CPU", "CPU total")
    rows = summary.rows if limit is None else summary.rows[:limit]
    body = [
        (
            _fit(summary.label(r.name), max_name),
            str(r.calls),
            format_us(r.self_device_time_us),
            f"{r.device_pct:.2f}%",
            format_us(r.device_time_us),
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
    out += [line(b) for b in body]
    out.append(rule)
    hidden = len(summary.rows) - len(rows)
    if hidden > 0:
        out.append(f"... {hidden} more ops (summary.rows has all)")
    out.append(f"Self device time total: {format_us(summary.total_device_time_us)}")
    out.extend(f"warning: {w}" for w in summary.warnings)
    out.extend(summary.notes)
    return "\n".join(out)
