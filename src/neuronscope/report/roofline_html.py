"""The HTML report's roofline: each op with known work against the device's roofs, a log-log
chart (the memory roofs, a CPU's caches among them, and a compute roof per peak), then tables.
Its hooks (``svg#roofline-chart-<k>.roofline``, ``circle.roof-point``...) are listed in :mod:`.html`.
"""

from __future__ import annotations

import math
from html import escape

from ..analysis.roofline import AT_LIMIT_PCT, Roofline
from ..analysis.roofs import DeviceLimits
from ..analysis.summary import OpStats, Summary
from ..analysis.text import roofline_footer, roofline_rows
from ..analysis.units import format_rate, format_us
from .charts import CHART_WIDTH, LogScale, name_colour

__all__ = ["roofline_section"]

_ROOF_H = 420
_ROOF_BOX = (100.0, 28.0, CHART_WIDTH - 20.0, _ROOF_H - 44.0)  # the plot area: left, top, right, bottom
_R_MAX = 22.0  # radius of the op with the most device time


def _e(value: object) -> str:
    return escape(str(value), quote=True)  # as the run report's own (html.py)


def _num(value: float) -> str:
    """Three significant digits, whole numbers from 100 up: ``0.0833``, ``62.5``, ``3,350``."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _gbs(bytes_per_s: float) -> str:
    return f"{_num(bytes_per_s / 1e9)} GB/s"


def roofline_section(summary: Summary, key: str) -> str:
    """Each op with known work against the device's roofs: a log-log chart, then tables."""
    limits = summary.limits
    if limits is None:
        if any(r.work is not None and r.work.calls > 0 for r in summary.rows):
            return '<p class="note roofline-unknown">Roofline: unknown device — give its limits with ns.configure(device_limits=...)</p>'
        return ""
    ops = [(r, r.roofline) for r in roofline_rows(summary)]  # the most time at stake first
    if not ops:
        return ""
    # an op with no FLOPs (a copy) has intensity 0: no place on a log axis, so it goes in a table
    computing = [(r, rl) for r, rl in ops if rl.flops > 0]
    plotted = [(r, rl) for r, rl in computing if rl.bytes > 0]  # an intensity to plot
    flat = [(r, rl) for r, rl in ops if rl.flops <= 0 and rl.bytes > 0]
    # the run's share of its roofs and the ops without a roofline (the caption already names the roofs)
    notes = "".join(f'<p class="note roofline-note">{_e(n)}</p>' for n in roofline_footer(summary) if not n.startswith("roofs:"))
    return (
        f'<div id="roofline-{key}" class="roofline-section"><h3>Roofline</h3>'
        f'<p class="note roofline-caption">{_e(limits.line().rstrip("; "))}</p>'
        f"{_roofline_chart(summary, plotted, limits, key)}{_roofline_table(summary, computing, key)}"
        f"{_no_flop_table(summary, flat, limits, key)}{notes}</div>"
    )


def _roofline_chart(summary: Summary, plotted: list[tuple[OpStats, Roofline]], limits: DeviceLimits, key: str) -> str:
    if not plotted:
        return ""
    bw = limits.memory_bandwidth
    # a compute roof per peak the plotted ops are measured against; dtypes of equal peak share it
    roofs: dict[float, list[str]] = {}
    for _, rl in plotted:
        if rl.roof_flops_per_s > 0 and rl.dtype not in roofs.setdefault(rl.roof_flops_per_s, []):
            roofs[rl.roof_flops_per_s].append(rl.dtype)
    left, top, right, bottom = _ROOF_BOX
    # a CPU's caches are faster memory roofs above main memory's (a cache-aware roofline)
    caches = [(name, level_bw) for name, _, level_bw in limits.cache_levels if level_bw > 0]
    fastest = max([bw] + [level_bw for _, level_bw in caches])
    ridges = [p / b for p in roofs for b in (bw, fastest)]  # where each compute roof meets the memory roofs
    xs = LogScale.spanning([rl.intensity or 0.0 for _, rl in plotted] + ridges, left, right)
    ys = LogScale.spanning([rl.achieved_flops_per_s for _, rl in plotted] + list(roofs), bottom, top)
    out = [
        f'<svg id="roofline-chart-{key}" class="chart roofline" data-run="{key}" data-points="{len(plotted)}" '
        f'data-x-log="{xs.lo} {xs.hi}" data-y-log="{ys.lo} {ys.hi}" data-box="{left} {top} {right} {bottom}" '
        f'viewBox="0 0 {CHART_WIDTH} {_ROOF_H}" width="100%" role="img" aria-label="roofline: achieved FLOP/s per op against the device roofs">',
        _roofline_axes(xs, ys),
    ]
    memory = [("roof-memory", "memory" if not caches else "DRAM", bw)] + [("roof-cache", n, b) for n, b in caches]
    out.append(_memory_roofs(xs, ys, memory, max(roofs, default=0.0)))
    label_y = -1e9
    for peak in sorted(roofs, reverse=True):
        py = ys(peak)
        label_y = max(py - 5, label_y + 14)  # stack labels of close roofs instead of overprinting them
        names = ", ".join(roofs[peak])
        out.append(
            f'<line class="roof roof-compute" data-roof="{_e(names)}" data-flops-per-s="{peak}" x1="{xs(peak / fastest):.2f}" '
            f'y1="{py:.2f}" x2="{right:.2f}" y2="{py:.2f}" style="stroke:var(--fg);stroke-width:2"/>'
            f'<text class="label roof-label" x="{right - 4:.2f}" y="{label_y:.2f}" text-anchor="end">'
            f"{_e(names)} {_e(format_rate(peak, 'FLOP/s'))}</text>"
        )
    out.append(_roofline_points(summary, plotted, xs, ys))
    out.append("</svg>")
    out.append(
        '<p class="note">One circle per op with known work (area: its device time; colour: as in the bar chart). '
        "The lines are the device's roofs: at its intensity an op can go no higher than the lower of them. Hover for numbers.</p>"
    )
    return "".join(out)


def _memory_roofs(xs: LogScale, ys: LogScale, memory: list[tuple[str, str, float]], top_peak: float) -> str:
    """The memory roofs y = bw·x (``(class, name, bw)``: main memory's, a CPU's caches), each from
    the chart's lower-left edge up to the highest compute roof; the labels of roofs closer than a
    line of text share one label instead of overprinting each other."""
    angle = math.degrees(math.atan2(ys.decade_px, xs.decade_px))
    out: list[str] = []
    labels: list[tuple[float, float, list[str]]] = []  # (x, y, texts) at the start of the topmost line of a group
    for cls, name, bw in sorted(memory, key=lambda m: -m[2]):
        x0 = max(10.0**xs.lo, 10.0**ys.lo / bw)
        x1 = top_peak / bw if top_peak > 0 else 10.0**xs.hi
        px0, py0 = xs(x0), ys(bw * x0)
        # main memory's roof solid; a cache's thinner and dashed
        style = (
            "stroke:var(--fg);stroke-width:2" if cls == "roof-memory" else "stroke:var(--fg);stroke-width:1;stroke-dasharray:4 3"
        )
        out.append(
            f'<line class="roof {cls}" data-level="{_e(name)}" data-bytes-per-s="{bw}" x1="{px0:.2f}" y1="{py0:.2f}" '
            f'x2="{xs(x1):.2f}" y2="{ys(bw * x1):.2f}" style="{style}"/>'
        )
        if labels and abs(py0 - labels[-1][1]) < 14 and abs(px0 - labels[-1][0]) < 14:
            labels[-1][2].append(f"{name} {_gbs(bw)}")
        else:
            labels.append((px0, py0, [f"{name} {_gbs(bw)}"]))
    for px0, py0, texts in labels:
        out.append(
            f'<text class="label roof-label" x="{px0 + 8:.2f}" y="{py0:.2f}" dy="-6" transform="rotate({angle:.2f} {px0:.2f} {py0:.2f})">'
            f"{_e(', '.join(texts))}</text>"
        )
    return "".join(out)


def _roofline_axes(xs: LogScale, ys: LogScale) -> str:
    """The decade grid, tick labels and axis titles."""
    left, top, right, bottom = _ROOF_BOX
    out = [
        f'<line class="tick" x1="{xs(10.0**k):.2f}" x2="{xs(10.0**k):.2f}" y1="{top}" y2="{bottom}"/>'
        f'<text class="tick-label" x="{xs(10.0**k):.2f}" y="{bottom + 15}" text-anchor="middle">{10.0**k:g}</text>'
        for k in range(xs.lo, xs.hi + 1)
    ]
    out += [
        f'<line class="tick" x1="{left}" x2="{right}" y1="{ys(10.0**k):.2f}" y2="{ys(10.0**k):.2f}"/>'
        f'<text class="tick-label" x="{left - 6}" y="{ys(10.0**k) + 4:.2f}" text-anchor="end">{format_rate(10.0**k, "FLOP/s")}</text>'
        for k in range(ys.lo, ys.hi + 1)
    ]
    out.append(
        f'<line class="axis" x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"/>'
        f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{bottom}"/>'
        f'<text class="label" x="{(left + right) / 2:.2f}" y="{bottom + 34}" text-anchor="middle">arithmetic intensity (FLOP/byte)</text>'
        f'<text class="label" x="{left}" y="{top - 12}">achieved FLOP/s</text>'
    )
    return "".join(out)


def _roofline_points(summary: Summary, plotted: list[tuple[OpStats, Roofline]], xs: LogScale, ys: LogScale) -> str:
    longest = max(rl.time_us for _, rl in plotted) or 1.0
    out = []
    # the biggest first, so a small circle is drawn over a big one and stays hoverable
    for r, rl in sorted(plotted, key=lambda p: -p[1].time_us):
        radius = max(_R_MAX * math.sqrt(rl.time_us / longest), 2.0)  # area ∝ time; 2px so a short op shows
        tip = (
            f"{r.name}: {format_rate(rl.achieved_flops_per_s, 'FLOP/s')}, {_gbs(rl.achieved_bytes_per_s)}, "
            f"{_num(rl.intensity or 0.0)} FLOP/byte; {rl.pct_of_roof:.1f}% of roof ({rl.bound}-bound, {rl.dtype}"
            f"{', bytes in ' + rl.memory_level if rl.memory_level else ''}); "
            f"{format_us(rl.time_at_roof_us)} at the roof vs {format_us(rl.time_us)} taken"
            f"{'; above the roof: ' + rl.above_roof if rl.above_roof else ''}"
        )
        colour = name_colour(r.name)
        out.append(
            f'<circle class="roof-point" data-op="{_e(r.name)}" cx="{xs(rl.intensity or 0.0):.2f}" '
            f'cy="{ys(rl.achieved_flops_per_s):.2f}" r="{radius:.2f}" fill="{colour}" fill-opacity="0.55" stroke="{colour}" '
            f'data-intensity="{rl.intensity}" data-flops-per-s="{rl.achieved_flops_per_s}" data-time-us="{rl.time_us}" '
            f'data-pct-of-roof="{rl.pct_of_roof:.3f}" data-bound="{rl.bound}"><title>{_e(tip)}</title></circle>'
        )
    return "".join(out)


def _roofline_table(summary: Summary, ops: list[tuple[OpStats, Roofline]], key: str) -> str:
    if not ops:
        return ""
    levels = any(rl.memory_level for _, rl in ops)
    body = "".join(
        f'<tr data-op="{_e(r.name)}" class="{"at-limit" if rl.at_limit else ""}"><td title="{_e(r.name)}">{_e(summary.label(r.name))}</td>'
        + "".join(
            f'<td data-v="{v}">{_e(t)}</td>'
            for v, t in (
                (rl.calls, rl.calls),
                (rl.time_us, format_us(rl.time_us)),
                (rl.achieved_flops_per_s, format_rate(rl.achieved_flops_per_s, "FLOP/s")),
                (rl.achieved_bytes_per_s, _gbs(rl.achieved_bytes_per_s)),
                (rl.intensity or 0.0, _num(rl.intensity) if rl.intensity is not None else "-"),
            )
        )
        + f'<td class="text">{rl.bound}</td>{_level_cell(rl) if levels else ""}<td data-v="{rl.pct_of_roof}"'
        f"{_above_title(rl)}>{rl.pct_of_roof:.1f}%{' *' if rl.above_roof else ''}</td>"
        f'<td data-v="{rl.time_at_roof_us}">{format_us(rl.time_at_roof_us)}</td>'
        f'<td data-v="{rl.time_at_stake_us}">{format_us(rl.time_at_stake_us)}</td>'
        f'<td class="text">{"at limit" if rl.at_limit else ""}</td></tr>'
        for r, rl in ops
    )
    level_th = '<th class="text">Level</th>' if levels else ""
    return (
        f'<table id="roofline-table-{key}" class="roofline-table sortable"><thead><tr><th>Op</th><th>Calls</th><th>Time</th>'
        f'<th>FLOP/s</th><th>GB/s</th><th>FLOP/byte</th><th class="text">Bound</th>{level_th}<th>% of roof</th><th>At the roof</th>'
        f'<th>At stake</th><th class="text">At limit (&ge;{AT_LIMIT_PCT:g}%)</th></tr></thead><tbody>{body}</tbody></table>'
    )


def _level_cell(rl: Roofline) -> str:
    """The memory level an op's bytes are held to, and that level's roof."""
    return f'<td class="text" title="{_e(_gbs(rl.roof_bytes_per_s))}">{_e(rl.memory_level or "-")}</td>'


def _above_title(rl: Roofline) -> str:
    return f' title="{_e(rl.above_roof)}"' if rl.above_roof else ""


def _no_flop_table(summary: Summary, flat: list[tuple[OpStats, Roofline]], limits: DeviceLimits, key: str) -> str:
    if not flat:
        return ""
    levels = any(rl.memory_level for _, rl in flat)
    body = "".join(
        f'<tr data-op="{_e(r.name)}"><td title="{_e(r.name)}">{_e(summary.label(r.name))}</td>'
        f'<td data-v="{rl.time_us}">{format_us(rl.time_us)}</td><td data-v="{rl.achieved_bytes_per_s}">{_gbs(rl.achieved_bytes_per_s)}</td>'
        f"{_level_cell(rl) if levels else ''}"
        f'<td data-v="{rl.pct_of_roof}"{_above_title(rl)}>{rl.pct_of_roof:.1f}%{" *" if rl.above_roof else ""}</td></tr>'
        for r, rl in sorted(flat, key=lambda p: -p[1].time_us)
    )
    level_th = '<th class="text">Level</th>' if levels else ""
    return (
        '<p class="note">Ops that move data but do no arithmetic (copies) have no place on a log intensity axis; '
        "they are measured against the memory roof alone:</p>"
        f'<table id="roofline-noflop-{key}" class="roofline-noflop sortable" style="width:auto"><thead><tr><th>Op</th><th>Time</th><th>GB/s</th>'
        f"{level_th}<th>% of memory roof</th></tr></thead><tbody>{body}</tbody></table>"
    )
