"""SVG pieces the HTML reports draw: the width, rows and palette the run report's charts share
(the comparison page's too), time axis ticks (the run report and the per-rank comparison), log scales."""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from ..analysis.units import format_us

__all__ = ["CHART_WIDTH", "LABEL_W", "PALETTE", "ROW_H", "LogScale", "name_colour", "short", "time_axis_ticks"]

#: viewBox width of every chart (the run report's and the comparison page's); the svg scales to the page
CHART_WIDTH = 960
LABEL_W = 300  # room for op names left of the bars
ROW_H = 22
PALETTE = ("#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#b7791f", "#4a5568", "#e53e3e", "#3182ce")


def short(name: str, n: int = 44) -> str:
    """``name`` cut to ``n`` characters, ending in "…" when cut (a chart row's label)."""
    return name if len(name) <= n else name[: n - 1] + "…"


def name_colour(name: str) -> str:
    """The palette colour ``name`` is always drawn in (an op's bar in the run report, a variant's on the comparison page)."""
    return PALETTE[zlib.crc32(name.encode()) % len(PALETTE)]


def time_axis_ticks(x0: float, x1: float, axis_h: int, h: int, span_ns: float) -> str:
    """Five ticks from +0 to +span along the top of an SVG time chart (both report charts)."""
    return "".join(
        f'<line class="tick" x1="{x0 + k * (x1 - x0) / 4:.2f}" x2="{x0 + k * (x1 - x0) / 4:.2f}" y1="{axis_h - 4}" y2="{h}"/>'
        f'<text class="tick-label" x="{x0 + k * (x1 - x0) / 4:.2f}" y="{axis_h - 8}" '
        f'text-anchor="{"start" if k == 0 else "end" if k == 4 else "middle"}">+{format_us(k * span_ns / 4 / 1e3)}</text>'
        for k in range(5)
    )


@dataclass(frozen=True)
class LogScale:
    """Whole decades ``10**lo .. 10**hi`` onto pixels ``a .. b`` (``b < a`` for a y axis: up is more)."""

    lo: int
    hi: int
    a: float
    b: float

    @classmethod
    def spanning(cls, values: Iterable[float], a: float, b: float) -> "LogScale":
        """The decades around the positive ``values``, with at least a factor of 2 to spare each side
        (so nothing sits on the chart's edge)."""
        vs = [v for v in values if v > 0] or [1.0]
        lo, hi = math.floor(math.log10(min(vs) / 2)), math.ceil(math.log10(max(vs) * 2))
        return cls(lo, hi, a, b)

    def __call__(self, v: float) -> float:
        return self.a + (math.log10(v) - self.lo) / (self.hi - self.lo) * (self.b - self.a)

    @property
    def decade_px(self) -> float:
        """Pixels per decade (negative on a y axis)."""
        return (self.b - self.a) / (self.hi - self.lo)
