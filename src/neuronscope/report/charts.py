"""SVG pieces both HTML reports draw (the run report and the per-rank comparison)."""

from __future__ import annotations

from ..analysis.text import format_us

__all__ = ["time_axis_ticks"]


def time_axis_ticks(x0: float, x1: float, axis_h: int, h: int, span_ns: float) -> str:
    """Five ticks from +0 to +span along the top of an SVG time chart (both report charts)."""
    return "".join(
        f'<line class="tick" x1="{x0 + k * (x1 - x0) / 4:.2f}" x2="{x0 + k * (x1 - x0) / 4:.2f}" y1="{axis_h - 4}" y2="{h}"/>'
        f'<text class="tick-label" x="{x0 + k * (x1 - x0) / 4:.2f}" y="{axis_h - 8}" '
        f'text-anchor="{"start" if k == 0 else "end" if k == 4 else "middle"}">+{format_us(k * span_ns / 4 / 1e3)}</text>'
        for k in range(5)
    )
