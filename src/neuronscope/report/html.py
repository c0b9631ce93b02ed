"""A self-contained HTML report: one file, no network at view time, charts as inline SVG.

    from neuronscope.report.html import render_html, write_html
    write_html(run, "report.html")                  # a Run, Summary, Trace or a path
    write_html("runs/before", "diff.html", other="runs/after")

Contents, per profile: a bar chart of self device time per op (with shares), the full op
table (click a header to sort), the region breakdown, a timeline of device activity, the
run's manifest and links to the run directory's raw files. Given two profiles, a diff view
comes first. Stable hooks for tests and scripts (``<k>`` is ``a``, or ``b`` for the second):

* ``svg#op-chart-<k>.op-chart`` with one ``rect.op-bar`` per op drawn (``data-op``,
  ``data-self-device-us``, ``data-pct``); ``data-bars`` on the svg says how many;
* ``svg#region-chart-<k>`` with ``rect.region-bar`` (``data-region``);
* ``svg#timeline-<k>.timeline`` with ``g.tl-lane`` (``data-mode`` = ``events`` | ``bins``)
  holding ``rect.tl-event`` or ``rect.tl-bin``;
* ``div#trigger-<k>.trigger`` (``data-kind`` = ``slow`` | ``arm``, ``data-key``) with one
  ``p.trigger-line`` a line, for runs captured by a trigger or by ``ns.arm``;
* ``svg#roofline-chart-<k>.roofline`` (log-log; its axes in ``data-x-log``/``data-y-log``, decades,
  and ``data-box``, the plot area) with ``circle.roof-point`` (``data-op``) and ``line.roof-memory``
  / ``line.roof-compute`` (``data-roof``); ``table.roofline-table``, ``table.roofline-noflop``;
  ``p.roofline-unknown`` when the device's limits are not known;
* ``svg#class-chart-<k>.class-chart`` with one ``rect.class-bar`` per class of device time
  (``data-class``, ``data-us``, ``data-pct``) and ``table#class-table-<k>.class-table`` (a row per
  class, ``data-class``: its time, share, the part its op classified, the part outside any op);
* ``a.raw-file`` links; ``table.manifest``; ``svg#diff-chart`` with ``rect.diff-bar``.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from .._version import __version__
from ..analysis.diff import DIFF_OP_COLUMNS, DIFF_REGION_COLUMNS, SummaryDiff, choose_basis, diff_summaries
from ..analysis.intervals import busy_bins
from ..analysis.nesting import nest
from ..analysis.roofline import AT_LIMIT_PCT, Roofline
from ..analysis.roofs import DeviceLimits
from ..analysis.summary import OpStats, Summary
from ..trace.model import EventKind, Trace
from ._assets import CSS, JS
from .charts import LogScale, time_axis_ticks
from .memory_html import memory_section
from .sources import Source, as_source, run_extent
from ..analysis.kernel_classes import CLASS_WORDS, CLASSES, pct_text
from ..analysis.text import classes_line, roofline_footer, roofline_rows
from ..analysis.units import format_rate, format_us

__all__ = ["CHART_WIDTH", "name_colour", "render_html", "run_section", "write_html"]

#: viewBox width of every chart (here and the comparison page's); the svg scales to the page
CHART_WIDTH = 960
_LABEL_W = 300  # room for op names left of the bars
_ROW_H = 22
_PALETTE = ("#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#b7791f", "#4a5568", "#e53e3e", "#3182ce")
_STEP_MARKER = "ProfilerStep#"


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _short(name: str, n: int = 44) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def name_colour(name: str) -> str:
    """The palette colour ``name`` is always drawn in (an op's bar here, a variant's on the comparison page)."""
    return _PALETTE[zlib.crc32(name.encode()) % len(_PALETTE)]


# -- op bars -----------------------------------------------------------------------------------


def _op_chart(summary: Summary, key: str, top: int) -> str:
    rows = summary.rows[:top] if top else summary.rows
    if not rows:
        return '<p class="empty">no ops in this profile</p>'
    peak = max(r.self_device_time_us for r in rows) or 1.0
    bar_w = CHART_WIDTH - _LABEL_W - 150
    h = _ROW_H * len(rows) + 8
    out = [
        (
            f'<svg id="op-chart-{key}" class="chart op-chart" data-run="{key}" data-bars="{len(rows)}" '
            f'viewBox="0 0 {CHART_WIDTH} {h}" width="100%" role="img" aria-label="self device time per op">'
        )
    ]
    for i, r in enumerate(rows):
        y = 4 + i * _ROW_H
        w = max(bar_w * r.self_device_time_us / peak, 0.5)
        label = f"{r.device_pct:.1f}%  {format_us(r.self_device_time_us)}  ×{r.calls}"
        out.append(
            f'<g class="op-row"><title>{_e(r.name)}: {_e(label)}</title>'
            f'<text x="{_LABEL_W - 8}" y="{y + 15}" text-anchor="end" class="label">{_e(_short(summary.label(r.name)))}</text>'
            f'<rect class="op-bar" x="{_LABEL_W}" y="{y + 3}" width="{w:.2f}" height="{_ROW_H - 6}" '
            f'fill="{name_colour(r.name)}" data-op="{_e(r.name)}" data-self-device-us="{r.self_device_time_us:.3f}" '
            f'data-pct="{r.device_pct:.3f}"/>'
            f'<text x="{_LABEL_W + w + 6:.2f}" y="{y + 15}" class="value">{_e(label)}</text></g>'
        )
    out.append("</svg>")
    hidden = len(summary.rows) - len(rows)
    if hidden > 0:
        rest = sum(r.device_pct for r in summary.rows[len(rows) :])
        out.append(f'<p class="note">{hidden} more ops ({rest:.1f}% of self device time) are in the table below.</p>')
    return "".join(out)


def _op_table(summary: Summary, key: str) -> str:
    head = (
        "<tr><th>Op</th><th>Calls</th><th>Self device</th><th>%</th><th>Device total</th><th>Self CPU</th><th>CPU total</th></tr>"
    )
    body = "".join(
        f'<tr><td title="{_e(r.name)}">{_e(summary.label(r.name))}</td>'
        + "".join(
            f'<td data-v="{v}">{t}</td>'
            for v, t in (
                (r.calls, r.calls),
                (r.self_device_time_us, format_us(r.self_device_time_us)),
                (r.device_pct, f"{r.device_pct:.2f}%"),
                (r.device_time_us, format_us(r.device_time_us)),
                (r.self_cpu_time_us, format_us(r.self_cpu_time_us)),
                (r.cpu_time_us, format_us(r.cpu_time_us)),
            )
        )
        + "</tr>"
        for r in summary.rows
    )
    return (
        f'<details class="all-ops"><summary>All {len(summary.rows)} ops (click a column header to sort)</summary>'
        f'<table id="op-table-{key}" class="op-table sortable"><thead>{head}</thead><tbody>{body}</tbody></table></details>'
    )


# -- device time by class ----------------------------------------------------------------------

_CLASS_H = 26  # height of the stacked bar


def _class_colour(cls: str) -> str:
    return "#a0aec0" if cls == "other" else _PALETTE[CLASSES.index(cls) % len(_PALETTE)] if cls in CLASSES else name_colour(cls)


def _classes(summary: Summary, key: str) -> str:
    """The device time by class (GEMM, attention, copy...): one stacked bar, then a table saying
    how much of each class its op classified, and how much ran outside any op."""
    dc = summary.device_classes
    if dc is None or dc.total_us <= 0:
        return ""
    x, bars = 0.0, []
    for cls, us in dc.by_class_us.items():
        w = CHART_WIDTH * us / dc.total_us
        bars.append(
            f'<rect class="class-bar" x="{x:.2f}" y="0" width="{max(w, 0.5):.2f}" height="{_CLASS_H}" '
            f'fill="{_class_colour(cls)}" data-class="{_e(cls)}" data-us="{us:.3f}" data-pct="{dc.share(cls):.3f}">'
            f"<title>{_e(cls)}: {_e(pct_text(dc.share(cls)))}, {format_us(us)}</title></rect>"
        )
        x += w
    chart = (
        f'<svg id="class-chart-{key}" class="chart class-chart" viewBox="0 0 {CHART_WIDTH} {_CLASS_H}" width="100%" '
        f'role="img" aria-label="device time by class">{"".join(bars)}</svg>'
    )
    body = "".join(
        f'<tr data-class="{_e(cls)}"><td><span class="sw" style="background:{_class_colour(cls)}"></span>{_e(cls)}</td>'
        + "".join(
            f'<td data-v="{v:.3f}">{t}</td>'
            for v, t in (
                (us, format_us(us)),
                (dc.share(cls), pct_text(dc.share(cls))),
                (dc.by_op_us.get(cls, 0.0), format_us(dc.by_op_us[cls]) if cls in dc.by_op_us else "-"),
                (dc.outside_ops_us.get(cls, 0.0), format_us(dc.outside_ops_us[cls]) if cls in dc.outside_ops_us else "-"),
            )
        )
        + f'<td class="text">{_e(CLASS_WORDS.get(cls, cls))}</td></tr>'
        for cls, us in dc.by_class_us.items()
    )
    table = (
        f'<table id="class-table-{key}" class="class-table sortable"><thead><tr><th>Class</th><th>Device time</th>'
        '<th>%</th><th>By its op</th><th>Outside any op</th><th class="text">What</th></tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )
    return f'<p class="note">{_e(classes_line(summary) or "")}</p>{chart}{table}'


# -- roofline ----------------------------------------------------------------------------------

_ROOF_H = 420
_ROOF_BOX = (100.0, 28.0, CHART_WIDTH - 20.0, _ROOF_H - 44.0)  # the plot area: left, top, right, bottom
_R_MAX = 22.0  # radius of the op with the most device time


def _num(value: float) -> str:
    """Three significant digits, whole numbers from 100 up: ``0.0833``, ``62.5``, ``3,350``."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _gbs(bytes_per_s: float) -> str:
    return f"{_num(bytes_per_s / 1e9)} GB/s"


def _roofline(summary: Summary, key: str) -> str:
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


# -- regions -----------------------------------------------------------------------------------


def _regions(summary: Summary, key: str) -> str:
    if not summary.regions:
        return '<p class="empty">no regions (wrap code in <code>neuronscope.region("name")</code> to see a breakdown)</p>'
    items = list(summary.regions.items())
    total = summary.total_device_time_us
    peak = max(max(s.total_device_time_us, s.region_stats.wall_time_us if s.region_stats else 0.0) for _, s in items) or 1.0
    bar_w = CHART_WIDTH - _LABEL_W - 290  # room for the value label right of the longest bar
    h = _ROW_H * len(items) + 8
    out = [
        (
            f'<svg id="region-chart-{key}" class="chart region-chart" data-run="{key}" data-bars="{len(items)}" '
            f'viewBox="0 0 {CHART_WIDTH} {h}" width="100%" role="img" aria-label="device and wall time per region">'
        )
    ]
    rows = []
    for i, (path, s) in enumerate(items):
        st = s.region_stats
        wall = st.wall_time_us if st else 0.0
        dev = s.total_device_time_us
        pct = 100.0 * dev / total if total else 0.0
        y = 4 + i * _ROW_H
        label = f"{format_us(dev)} device ({pct:.1f}%), wall {format_us(wall)}"
        out.append(
            f'<g class="region-row"><title>{_e(path)}: {_e(label)}</title>'
            f'<text x="{_LABEL_W - 8}" y="{y + 15}" text-anchor="end" class="label">{_e(_short(path))}</text>'
            f'<rect class="region-wall" x="{_LABEL_W}" y="{y + 3}" width="{max(bar_w * wall / peak, 0.5):.2f}" height="{_ROW_H - 6}"/>'
            f'<rect class="region-bar" x="{_LABEL_W}" y="{y + 6}" width="{max(bar_w * dev / peak, 0.5):.2f}" '
            f'height="{_ROW_H - 12}" data-region="{_e(path)}" data-device-us="{dev:.3f}" data-wall-us="{wall:.3f}"/>'
            f'<text x="{_LABEL_W + bar_w * max(wall, dev) / peak + 6:.2f}" y="{y + 15}" class="value">{_e(label)}</text></g>'
        )
        top_op = s.rows[0].name if s.rows else "-"
        rows.append(
            f'<tr><td>{_e(path)}</td><td data-v="{st.occurrences if st else 0}">{st.occurrences if st else 0}</td>'
            f'<td data-v="{wall}">{format_us(wall)}</td><td data-v="{dev}">{format_us(dev)}</td>'
            f'<td data-v="{pct}">{pct:.1f}%</td><td class="text">{_e(top_op)}</td></tr>'
        )
    out.append("</svg>")
    out.append(
        '<p class="legend"><span class="sw region-bar-sw"></span> device time of the ops inside '
        '<span class="sw region-wall-sw"></span> wall time</p>'
        f'<table id="region-table-{key}" class="region-table sortable"><thead><tr><th>Region</th><th>Runs</th>'
        f'<th>Wall</th><th>Device</th><th>%</th><th class="text">Top op</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )
    return "".join(out)


# -- timeline ----------------------------------------------------------------------------------


@dataclass
class _Lane:
    label: str
    start: np.ndarray  # int64 ns, absolute
    end: np.ndarray
    name_id: np.ndarray
    kind: str  # "device" | "region"


def _lanes(trace: Trace, device: str) -> tuple[list[_Lane], int]:
    """Device-activity lanes (busiest first) and region lanes (one per nesting depth).

    On a CPU profile device time is CPU op time, so the lanes are CPU threads and only the
    outermost op of each nest is drawn (its children run inside it).
    """
    lanes: list[_Lane] = []
    kind = trace.kind
    end_all = trace.start_ns + trace.duration_ns
    if device == "cpu":
        idx = np.flatnonzero(kind == EventKind.OP)
        if idx.size:
            n = nest(trace.thread[idx], trace.start_ns[idx], end_all[idx])
            idx = idx[n.order][n.depth == 0]
        label = "thread"
    else:
        idx = np.flatnonzero(kind == EventKind.DEVICE)
        label = "NeuronCore lane" if device == "neuron" else "stream"
    dropped = 0
    if idx.size:
        threads = trace.thread[idx]
        uniq = np.unique(threads)
        busy = [(int(t), int(trace.duration_ns[idx[threads == t]].sum())) for t in uniq.tolist()]
        busy.sort(key=lambda tb: -tb[1])
        dropped = max(len(busy) - 12, 0)
        for n_lane, (t, _) in enumerate(busy[:12]):
            sel = idx[threads == t]
            sel = sel[np.argsort(trace.start_ns[sel], kind="stable")]
            lanes.append(_Lane(f"{label} {n_lane}", trace.start_ns[sel], end_all[sel], trace.name_id[sel], "device"))
    # Regions (not torch's ProfilerStep# markers), one lane per nesting depth, at most three.
    is_step = np.array([nm.startswith(_STEP_MARKER) for nm in trace.names] or [False], dtype=bool)
    ridx = np.flatnonzero((kind == EventKind.REGION) & ~is_step[np.minimum(trace.name_id, len(is_step) - 1)])
    if ridx.size:
        n = nest(trace.thread[ridx], trace.start_ns[ridx], end_all[ridx])
        ordered = ridx[n.order]
        for d in range(min(int(n.depth.max()) + 1, 3)):
            sel = ordered[n.depth == d]
            sel = sel[np.argsort(trace.start_ns[sel], kind="stable")]
            lanes.append(
                _Lane(
                    "regions" if d == 0 else f"regions L{d + 1}", trace.start_ns[sel], end_all[sel], trace.name_id[sel], "region"
                )
            )
    return lanes, dropped


def _timeline(source: Source, key: str, max_rects: int, bins: int) -> str:
    trace = source.trace
    if trace is None:
        if source.trace_error:  # saved, but truncated or damaged: the summary above is from summary.json
            return f'<p class="empty timeline-missing">the saved trace could not be read, so no timeline ({_e(source.trace_error)})</p>'
        if source.manifest.get("coverage", {}).get("windows", 1) > 1:
            return (
                '<p class="empty timeline-missing">no window trace kept with this run, so no timeline (a run in windows '
                "keeps its first and slowest windows' traces: neuronscope run --keep K)</p>"
            )
        return '<p class="empty timeline-missing">no trace saved with this run, so no timeline (profile with save_trace=True)</p>'
    lanes, dropped = _lanes(trace, source.device)
    lanes = [ln for ln in lanes if ln.start.size]
    if not lanes:
        return '<p class="empty timeline-missing">the trace holds no device activity to draw</p>'
    t0 = min(int(ln.start.min()) for ln in lanes)
    t1 = max(int(ln.end.max()) for ln in lanes)
    span = max(t1 - t0, 1)
    x0, x1 = 150, CHART_WIDTH - 10
    lane_h, gap, axis_h = 26, 6, 24
    h = axis_h + len(lanes) * (lane_h + gap)
    budget = max(max_rects // len(lanes), 1)
    total_events = sum(int(ln.start.size) for ln in lanes)
    parts: list[str] = []
    drawn = 0

    def x(t: float) -> float:
        return x0 + (t - t0) / span * (x1 - x0)

    for i, ln in enumerate(lanes):
        y = axis_h + i * (lane_h + gap)
        count = int(ln.start.size)
        mode = "events" if count <= budget else "bins"
        parts.append(
            f'<g class="tl-lane tl-{ln.kind}" data-lane="{_e(ln.label)}" data-mode="{mode}" data-events="{count}">'
            f'<text x="{x0 - 8}" y="{y + 17}" text-anchor="end" class="label">{_e(ln.label)}</text>'
            f'<rect class="tl-bg" x="{x0}" y="{y}" width="{x1 - x0}" height="{lane_h}"/>'
        )
        if mode == "events":
            for s, e_, nid in zip(ln.start.tolist(), ln.end.tolist(), ln.name_id.tolist()):
                name = trace.names[nid]
                xs, xe = x(s), x(e_)
                parts.append(
                    f'<rect class="tl-event" x="{xs:.2f}" y="{y + 2}" width="{max(xe - xs, 0.6):.2f}" height="{lane_h - 4}" '
                    f'fill="{name_colour(name)}" data-op="{_e(name)}"><title>{_e(name)} {format_us((e_ - s) / 1e3)} '
                    f"at +{format_us((s - t0) / 1e3)}</title></rect>"
                )
                drawn += 1
        else:
            frac = busy_bins(ln.start, ln.end, t0, span, bins)
            w = (x1 - x0) / bins
            for b in np.flatnonzero(frac > 0).tolist():
                f = float(frac[b])
                parts.append(
                    f'<rect class="tl-bin" x="{x0 + b * w:.2f}" y="{y + 2}" width="{w + 0.05:.2f}" height="{lane_h - 4}" '
                    f'fill-opacity="{0.15 + 0.85 * f:.3f}" data-busy="{f:.3f}"><title>{100 * f:.0f}% busy '
                    f"at +{format_us(b * span / bins / 1e3)}</title></rect>"
                )
                drawn += 1
        parts.append("</g>")
    ticks = time_axis_ticks(x0, x1, axis_h, h, span)
    mode_note = (
        ""
        if drawn == total_events
        else f" ({total_events} events aggregated into {bins} time bins where a lane has more than {budget})"
    )
    lane_note = f"; {dropped} quieter lanes not drawn" if dropped else ""
    return (
        f'<svg id="timeline-{key}" class="chart timeline" data-run="{key}" data-events="{total_events}" data-drawn="{drawn}" '
        f'viewBox="0 0 {CHART_WIDTH} {h}" width="100%" role="img" aria-label="timeline of device activity">{ticks}{"".join(parts)}</svg>'
        f'<p class="note">{_e(source.device)} activity over {format_us(span / 1e3)}{_e(mode_note)}{_e(lane_note)}. '
        "Hover for names and durations.</p>"
        + (f'<p class="note timeline-source">The timeline of {_e(source.trace_label)}.</p>' if source.trace_label else "")
    )


# -- metadata and files ------------------------------------------------------------------------


def _iso(ns: Any) -> str:
    try:
        return datetime.fromtimestamp(int(ns) / 1e9, tz=timezone.utc).isoformat(timespec="milliseconds")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ns)


def _manifest(source: Source, key: str) -> str:
    m = dict(source.manifest)
    rows: list[tuple[str, str]] = [("source", f"{source.kind}: {source.path or '(in memory)'}"), ("device", source.device)]
    for k in ("start_ns", "end_ns"):
        if m.get(k):
            rows.append((k.replace("_ns", " (UTC)"), _iso(m[k])))
    if m.get("start_ns") and m.get("end_ns"):
        rows.append(("wall time", format_us((int(m["end_ns"]) - int(m["start_ns"])) / 1e3)))
    for k, v in m.items():
        if k in ("files", "device"):
            continue
        rows.append((k, v if isinstance(v, str) else json.dumps(v, default=str)))
    body = "".join(f"<tr><th>{_e(k)}</th><td><code>{_e(v)}</code></td></tr>" for k, v in rows)
    return f'<table id="manifest-{key}" class="manifest">{body}</table>'


def _href(path: Path, link_base: Path | None) -> str:
    if link_base is not None:
        try:
            return quote(os.path.relpath(path.resolve(), link_base.resolve()).replace(os.sep, "/"))
        except ValueError:  # another drive on Windows
            pass
    return path.resolve().as_uri()


def _files(source: Source, key: str, link_base: Path | None) -> str:
    files = source.files()
    if not files:
        return '<p class="empty">no files (an in-memory profile)</p>'
    root = source.path if source.path is not None and source.path.is_dir() else None
    items = "".join(
        f'<li><a class="raw-file" href="{_e(_href(p, link_base))}">{_e(p.relative_to(root) if root else p.name)}</a> '
        f'<span class="size">{size / 1e3:,.1f} kB</span></li>'
        for p, size in files
    )
    where = f'<p class="note">in <code>{_e(source.path)}</code></p>'
    return f'{where}<ul id="files-{key}" class="files">{items}</ul>'


# -- diff --------------------------------------------------------------------------------------


def _pct(p: float | None, presence: str = "both") -> str:
    from ..analysis.diff import pct_text

    return pct_text(p, presence)


def _diff(d: SummaryDiff, a: Source, b: Source, top: int) -> str:
    ops = d.ops[:top] if top else d.ops
    cls = "worse" if d.total.delta > 0 else "better"

    def where(src: Source) -> str:
        return f'<div class="s path">{_e(src.path.name)}</div>' if src.path is not None else ""

    n = d.normalised
    per = f" {n.figures_label}" if n.figures_label else ""
    head = (
        f'<p class="verdict" id="diff-headline" data-basis="{n.basis}">{_e(d.headline())}</p>'
        + (f'<p class="note" id="diff-basis">{_e(n.reason())}</p>' if n.basis != "total" else "")
        + (f'<p class="warning">{_e(d.other_way_note())}</p>' if d.moved_apart else "")
        + f'<div class="cards"><div class="card"><div class="k">A</div><div class="v">{_e(a.label)}</div>'
        f'<div class="s">{format_us(d.total.a)}{_e(per)}</div>{where(a)}</div>'
        f'<div class="card"><div class="k">B</div><div class="v">{_e(b.label)}</div><div class="s">{format_us(d.total.b)}{_e(per)}</div>'
        f"{where(b)}</div>"
        f'<div class="card {cls}"><div class="k">self device time{_e(per)}</div><div id="diff-total" class="v" '
        f'data-pct="{d.total.pct if d.total.pct is not None else ""}">{_pct(d.total.pct)}</div>'
        f'<div class="s">{"+" if d.total.delta >= 0 else "−"}{format_us(abs(d.total.delta))}</div></div></div>'
    )
    if d.device_a != d.device_b:
        head += f'<p class="warning">comparing a {_e(d.device_a)} profile with a {_e(d.device_b)} profile</p>'
    if not ops:
        return head + '<p class="empty">no ops in either profile</p>'
    peak = max(abs(o.self_device_time_us.delta) for o in ops) or 1.0
    mid = _LABEL_W + (CHART_WIDTH - _LABEL_W) / 2
    half = (CHART_WIDTH - _LABEL_W) / 2 - 160  # room for the value label beyond the longest bar
    h = _ROW_H * len(ops) + 8
    out = [
        head,
        (
            f'<svg id="diff-chart" class="chart diff-chart" data-bars="{len(ops)}" viewBox="0 0 {CHART_WIDTH} {h}" width="100%" '
            'role="img" aria-label="change of self device time per op">'
            f'<line class="axis" x1="{mid}" x2="{mid}" y1="0" y2="{h}"/>'
        ),
    ]
    for i, o in enumerate(ops):
        sd = o.self_device_time_us
        y = 4 + i * _ROW_H
        w = max(half * abs(sd.delta) / peak, 0.5)
        x = mid if sd.delta >= 0 else mid - w
        tag = _pct(sd.pct, o.presence)
        label = f"{tag} ({'+' if sd.delta >= 0 else '−'}{format_us(abs(sd.delta))})"
        tx, anchor = (mid + w + 6, "start") if sd.delta >= 0 else (mid - w - 6, "end")
        out.append(
            f'<g class="diff-row"><title>{_e(o.name)}: {format_us(sd.a)} → {format_us(sd.b)} {_e(tag)}</title>'
            f'<text x="{_LABEL_W - 8}" y="{y + 15}" text-anchor="end" class="label">{_e(_short(d.label(o.name)))}</text>'
            f'<rect class="diff-bar {"worse" if sd.delta > 0 else "better"}" x="{x:.2f}" y="{y + 3}" width="{w:.2f}" '
            f'height="{_ROW_H - 6}" data-op="{_e(o.name)}" data-delta-us="{sd.delta:.3f}" data-presence="{o.presence}"/>'
            f'<text x="{tx:.2f}" y="{y + 15}" text-anchor="{anchor}" class="value">{_e(label)}</text></g>'
        )
    out.append("</svg>")
    op_rows = [(f'<td title="{_e(o.name)}">{_e(d.label(o.name))}</td>', o) for o in d.ops]
    out.append(
        f'<details class="all-ops"><summary>All {len(d.ops)} ops</summary>'
        + _spec_table("diff-table", "diff-table sortable", "Op", DIFF_OP_COLUMNS, op_rows)
        + "</details>"
    )
    if d.regions:
        region_rows = [(f"<td>{_e(r.path)}</td>", r) for r in d.regions]
        out.append(
            "<h3>Regions</h3>" + _spec_table("diff-region-table", "diff-region-table", "Region", DIFF_REGION_COLUMNS, region_rows)
        )
    out.append(_explanation(d, a, b))
    return "".join(out)


def _compared(a: Source, b: Source) -> SummaryDiff:
    """The diff of two sources, like with like (per step, per recorded s, or totals: analysis/diff.py)."""
    return diff_summaries(a.summary, b.summary, normalised=choose_basis(run_extent(a), run_extent(b)))


def _spec_table(table_id: str, cls: str, first: str, columns: Any, rows: list[tuple[str, Any]]) -> str:
    """A table from the one column spec the terminal and --json read too (analysis/diff.py)."""
    head = "".join(f'<th data-key="{c.key}">{_e(c.header)}</th>' for c in columns)
    body = []
    for first_cell, row in rows:
        cells = []
        for c in columns:
            v = c.value(row)
            tone = f' class="{c.tone(row)}"' if c.tone and c.tone(row) else ""
            cells.append(f'<td data-v="{v if v is not None else 1e300}"{tone}>{_e(c.text(row))}</td>')
        body.append(f'<tr class="{row.presence}">{first_cell}{"".join(cells)}</tr>')
    return (
        f'<table id="{table_id}" class="{cls}"><thead><tr><th>{_e(first)}</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _explanation(d: SummaryDiff, a: Source, b: Source) -> str:
    """Why the wall time changed: ops' busy share and idle classes, summing to the change."""
    if a.diagnosis is None or b.diagnosis is None:
        return ""
    from ..analysis.explain import explain_diff

    ex = explain_diff(a.summary, b.summary, a.diagnosis, b.diagnosis, normalised=d.normalised)
    head = ex.lines(top=0)[0]
    n = d.normalised
    rows = "".join(
        f'<tr data-kind="{c.kind}" data-delta-us="{c.delta_us:.3f}"><td class="text">'
        f"{_e(d.label(c.name) if c.kind == 'op' else 'idle: ' + c.name)}</td>"
        f"<td>{format_us(c.a_us)}</td><td>{format_us(c.b_us)}</td><td>{c.delta_us / 1e3:+.3f} ms{_e(n.unit)}</td></tr>"
        for c in ex.contributions[:25]
    )
    return (
        f"<h3>Why: where the wall time went{_e(', ' + n.figures_label if n.figures_label else '')}</h3>"
        f'<p class="verdict" id="diff-why">{_e(head)}</p>'
        '<table id="diff-explanation" class="diff-explanation"><thead><tr><th class="text">Part</th><th>A</th><th>B</th>'
        f"<th>Δ</th></tr></thead><tbody>{rows}</tbody></table>"
        '<p class="note">Busy time is split over the ops by their share of self device time; idle time by class. '
        "The parts sum to the change in wall time.</p>"
    )


# -- page --------------------------------------------------------------------------------------


def run_section(
    source: Source, key: str, top: int, link_base: Path | None, max_rects: int, bins: int, heading: str | None = None
) -> str:
    """One profile's section; ``heading`` replaces ``A: label`` / ``B: label`` (a comparison's
    variants: comparison_page.py draws each variant's run with it)."""
    s = source.summary
    m = source.manifest
    wall = format_us((int(m["end_ns"]) - int(m["start_ns"])) / 1e3) if m.get("start_ns") and m.get("end_ns") else "-"
    cards = "".join(
        f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div></div>'
        for k, v in (
            ("device", s.device),
            ("self device time", format_us(s.total_device_time_us)),
            ("ops", len(s)),
            ("regions", len(s.regions)),
            ("wall time", wall),
        )
    )
    warnings = "".join(f'<p class="warning">{_e(w)}</p>' for w in s.warnings)
    warnings += "".join(f'<p class="note run-note">{_e(n)}</p>' for n in s.notes)
    return (
        f'<section id="run-{key}" class="run" data-run="{key}"><h2>{_e(heading if heading is not None else ("A: " if key == "a" else "B: ") + source.label)}</h2>'
        f'{_trigger(source, key)}<div class="cards">{cards}</div>{warnings}{_neuron_device(source, key)}'
        f"<h3>Why it is slow</h3>{_diagnosis(source, key)}{memory_section(source, key)}"
        f"<h3>Self device time per op</h3>{_op_chart(s, key, top)}{_op_table(s, key)}"
        f"{'<h3>Device time by class</h3>' + _classes(s, key) if s.device_classes is not None else ''}{_roofline(s, key)}"
        f"<h3>Regions</h3>{_regions(s, key)}"
        f"<h3>Timeline</h3>{_timeline(source, key, max_rects, bins)}"
        f"<h3>Run metadata</h3>{_manifest(source, key)}"
        f"<h3>Files</h3>{_files(source, key, link_base)}</section>"
    )


#: one colour per idle class, the same in the legend, the bars and the table
GAP_COLOURS = {
    "host_wait": "#d69e2e",
    "launch": "#805ad5",
    "sync": "#e53e3e",
    "data": "#3182ce",
    "compile": "#d53f8c",
    "stream_wait": "#38a169",
}


def _diagnosis(source: Source, key: str) -> str:
    """Verdict, the device busy/idle timeline with gaps coloured by class, the findings."""
    d = source.diagnosis
    if d is None:
        return '<p class="empty diagnosis-missing">no diagnosis (this run saved no trace to diagnose)</p>'
    from ..analysis.diagnosis.model import CLASS_WORDS, VERDICT_WORDS

    lines = d.headline()
    verdict = f'<p class="verdict" data-bound-by="{_e(d.bound_by)}"><b>{_e(lines[0])}</b></p>' + "".join(
        f'<p class="note verdict-line">{_e(line)}</p>' for line in lines[1:]
    )
    tl = d.timeline_data
    svg = ""
    if tl is not None and tl.end_ns > tl.start_ns:
        x0, x1, lane_h = 150, CHART_WIDTH - 10, 26
        span = tl.end_ns - tl.start_ns
        bins = tl.busy_bins
        w = (x1 - x0) / max(len(bins), 1)
        busy = "".join(
            f'<rect class="dg-busy" x="{x0 + i * w:.2f}" y="4" width="{w + 0.05:.2f}" height="{lane_h - 8}" '
            f'fill-opacity="{0.15 + 0.85 * b:.3f}" data-busy="{b:.3f}"/>'
            for i, b in enumerate(bins)
            if b > 0
        )
        gaps = "".join(
            f'<rect class="dg-gap" x="{x0 + (g0 - tl.start_ns) / span * (x1 - x0):.2f}" y="{lane_h + 6}" '
            f'width="{max(gn / span * (x1 - x0), 0.6):.2f}" height="{lane_h - 8}" fill="{GAP_COLOURS.get(cls, "#999")}" '
            f'data-class="{cls}" data-us="{gn / 1e3:.3f}"><title>{cls} gap {format_us(gn / 1e3)} at +{format_us((g0 - tl.start_ns) / 1e3)}</title></rect>'
            for g0, gn, cls in tl.gaps
        )
        label = "CPU ops (main thread)" if d.timeline == "cpu_main_thread" else f"{d.device} busy"
        svg = (
            f'<svg id="diagnosis-timeline-{key}" class="chart diagnosis-timeline" data-run="{key}" data-gaps="{len(tl.gaps)}" '
            f'viewBox="0 0 {CHART_WIDTH} {2 * lane_h + 12}" width="100%" role="img" aria-label="device busy and idle over time">'
            f'<text x="{x0 - 8}" y="{lane_h - 8}" text-anchor="end" class="label">{_e(label)}</text>'
            f'<rect class="tl-bg" x="{x0}" y="4" width="{x1 - x0}" height="{lane_h - 8}"/>{busy}'
            f'<text x="{x0 - 8}" y="{2 * lane_h - 2}" text-anchor="end" class="label">gaps &gt;= {d.gaps.threshold_us:g}us</text>'
            f'<rect class="tl-bg" x="{x0}" y="{lane_h + 6}" width="{x1 - x0}" height="{lane_h - 8}"/>{gaps}</svg>'
        )
    legend = (
        '<p class="legend dg-legend">'
        + "".join(
            f'<span class="sw" style="background:{colour}"></span>{_e(cls)} {format_us(d.idle_us_by_class.get(cls, 0.0))}'
            for cls, colour in GAP_COLOURS.items()
        )
        + "</p>"
    )
    rows = "".join(
        f'<tr data-rule="{_e(f.rule)}" class="sev-{_e(f.severity)}"><td class="text">{_e(f.rule)}</td>'
        f'<td class="text">{_e(f.message)}</td><td data-v="{f.us_at_stake}">{format_us(f.us_at_stake)}</td>'
        f'<td data-v="{f.us_per_step or 0}">{format_us(f.us_per_step) if f.us_per_step is not None else "-"}</td>'
        f'<td class="text">{_e(f.severity)}</td></tr>'
        for f in d.findings
    )
    findings = (
        f'<table id="findings-{key}" class="findings sortable"><thead><tr><th class="text">Rule</th><th class="text">What to change</th>'
        f'<th>At stake</th><th>Per step</th><th class="text">Severity</th></tr></thead><tbody>{rows}</tbody></table>'
        if rows
        else '<p class="empty">no findings: nothing the advisor knows how to improve</p>'
    )
    classes = "".join(
        f'<tr><td class="text"><span class="sw" style="background:{GAP_COLOURS[c]}"></span>{_e(c)}</td>'
        f'<td class="text">{_e(CLASS_WORDS.get(c, c))}</td><td data-v="{d.gaps.count_by_class.get(c, 0)}">{d.gaps.count_by_class.get(c, 0)}</td>'
        f'<td data-v="{d.idle_us_by_class.get(c, 0.0)}">{format_us(d.idle_us_by_class.get(c, 0.0))}</td></tr>'
        for c in GAP_COLOURS
    )
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in d.notes)
    return (
        f'<div id="diagnosis-{key}" class="diagnosis" data-bound-by="{_e(d.bound_by)}" data-busy-pct="{d.device_busy_pct:.2f}">'
        f"{verdict}{svg}{legend}"
        f'<table id="gap-classes-{key}" class="gap-classes"><thead><tr><th class="text">Idle class</th><th class="text">Meaning</th>'
        f"<th>Gaps</th><th>Idle time</th></tr></thead><tbody>{classes}</tbody></table>"
        f"{_communication(d, key)}"
        f"<h4>Findings</h4>{findings}{notes}"
        f'<p class="note">{_e(VERDICT_WORDS.get(d.bound_by, d.bound_by))}: see docs/diagnosis.md for how gaps are classified.</p></div>'
    )


def _communication(d: Any, key: str) -> str:
    """Collectives: time, exposed time, overlap, and one row per kind."""
    c = d.communication
    if c is None:
        return ""
    rows = "".join(
        f'<tr data-kind="{_e(k.kind)}"><td class="text">{_e(k.kind)}</td><td data-v="{k.calls}">{k.calls}</td>'
        f'<td data-v="{k.time_us}">{format_us(k.time_us)}</td>'
        f'<td data-v="{k.bytes or 0}">{_bytes(k.bytes) if k.bytes else "-"}</td>'
        f'<td data-v="{k.group_size or 0}">{k.group_size or "-"}</td></tr>'
        for k in c.by_kind
    )
    return (
        f'<div id="communication-{key}" class="communication" data-exposed-us="{c.exposed_us:.3f}" '
        f'data-collective-us="{c.collective_us:.3f}" data-overlap-pct="{c.overlap_pct:.2f}">'
        f"<h4>Communication</h4><p>{_e(c.line())}</p>"
        f'<table class="collectives sortable"><thead><tr><th class="text">Collective</th><th>Calls</th><th>Time</th>'
        f"<th>Bytes</th><th>Group size</th></tr></thead><tbody>{rows}</tbody></table></div>"
    )


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _trigger(source: Source, key: str) -> str:
    """Why this run exists (a slow call or an ``arm`` request) and why it was slower than its
    baseline: the lines ``neuronscope show`` prints first. Empty for other runs."""
    from .trigger_text import trigger_lines

    lines = trigger_lines(source.manifest, labels=source.summary.labels)
    if not lines:
        return ""
    trig = source.manifest["trigger"]
    rows = "".join(
        f'<p class="{"verdict" if line.startswith(("Triggered", "Why")) else "note"} trigger-line">{_e(line.strip())}</p>'
        for line in lines
    )
    return (
        f'<div id="trigger-{key}" class="trigger" data-kind="{_e(trig.get("kind"))}" '
        f'data-key="{_e(trig.get("key") if trig.get("key") is not None else "")}">{rows}</div>'
    )


def _neuron_device(source: Source, key: str) -> str:
    """Neuron Explorer's device metrics and insights, and the system profile's host facts
    (``manifest["neuron"]``); empty for other runs."""
    neuron = source.manifest.get("neuron")
    if not isinstance(neuron, dict):
        return ""
    explorer = v if isinstance(v := neuron.get("explorer"), dict) else {}
    m = v if isinstance(v := explorer.get("metrics"), dict) else {}
    system = v if isinstance(v := neuron.get("system_profile"), dict) else {}
    if not m and not system:
        return ""
    pct = lambda k: f"{m[k]:.1f}%" if isinstance(m.get(k), (int, float)) else None  # noqa: E731
    reads = m.get("hbm_read_bytes")
    items = [
        ("device time", format_us(m["total_time_s"] * 1e6) if isinstance(m.get("total_time_s"), (int, float)) else None),
        ("MFU", pct("mfu_percent")),
        ("HFU", pct("hfu_percent")),
        ("MBU", pct("mbu_percent")),
        ("DMA active", format_us(m["dma_active_time_s"] * 1e6) if isinstance(m.get("dma_active_time_s"), (int, float)) else None),
        ("CC active", pct("cc_active_percent")),
        (
            "spill reload / HBM reads",
            f"{m['spill_reload_bytes'] / reads:.1%}" if reads and isinstance(m.get("spill_reload_bytes"), (int, float)) else None,
        ),
        *((f"{e} engine active", f"{v:.1f}%") for e, v in (m.get("engine_active_percent") or {}).items()),
        ("host memory (max)", f"{system['host_memory']['max_bytes'] / 2**30:,.2f} GiB" if "host_memory" in system else None),
        ("CPU utilisation (mean)", f"{system['cpu_util']['mean_percent']:.1f}%" if "cpu_util" in system else None),
    ]
    cards = "".join(
        f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div></div>' for k, v in items if v is not None
    )
    findings = "".join(
        f'<p class="warning neuron-finding" data-rule="{_e(f.get("rule"))}">{_e(f.get("message"))} '
        f'<span class="note">(~{_e(format_us(float(f.get("us_at_stake") or 0)))} at stake)</span></p>'
        for f in explorer.get("findings") or ()
        if isinstance(f, dict)
    )
    where = ", ".join(explorer.get("sources") or ()) or system.get("path", "")
    return (
        f'<div id="neuron-device-{key}" class="neuron-device"><h3>Neuron device (Neuron Explorer)</h3>'
        f'<div class="cards">{cards}</div>{findings}<p class="note">from <code>{_e(where)}</code></p></div>'
    )


def render_html(
    run_or_summary: Any,
    other: Any = None,
    *,
    title: str | None = None,
    top: int = 30,
    link_base: str | os.PathLike[str] | None = None,
    max_timeline_rects: int = 3000,
    timeline_bins: int = 480,
) -> str:
    """The report as one HTML string.

    ``run_or_summary`` / ``other``: a ``Run``, ``Summary``, ``Trace``, a run directory or
    trace file path (or a :class:`~neuronscope.report.sources.Source`). With ``other`` the
    page opens with the diff from the first to the second. ``top``: ops drawn in the bar
    charts (0 = all; the tables always list all). ``link_base``: the directory the page
    will be saved in, so links to raw files are relative; without it they are absolute
    ``file://`` URLs. The timeline draws each event while a lane has at most
    ``max_timeline_rects / lanes`` of them, else ``timeline_bins`` busy-fraction bins.
    """
    if type(run_or_summary).__name__ == "RankComparison":  # ns.compare_ranks(...): the per-rank lane view
        from .ranks_html import render_ranks_html

        return render_ranks_html(run_or_summary, title=title)
    a = as_source(run_or_summary)
    b = as_source(other) if other is not None else None
    base = Path(link_base) if link_base is not None else None
    title = title or (f"neuronscope: {a.label} vs {b.label}" if b else f"neuronscope: {a.label}")
    sections = []
    nav = []
    if b is not None:
        sections.append(f'<section id="diff" class="diff"><h2>Diff: A → B</h2>{_diff(_compared(a, b), a, b, top)}</section>')
        nav.append('<a href="#diff">diff</a>')
    for key, src in (("a", a), ("b", b)):
        if src is not None:
            sections.append(run_section(src, key, top, base, max_timeline_rects, timeline_bins))
            nav.append(f'<a href="#run-{key}">{key.upper()}: {_e(src.label)}</a>')
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="neuronscope {_e(__version__)}"><title>{_e(title)}</title>'
        f"<style>{CSS}</style></head>"
        f'<body data-report="{"diff" if b else "single"}" data-schema-version="1">'
        f'<header><h1>{_e(title)}</h1><p class="note">generated {generated} by neuronscope {_e(__version__)}</p>'
        f"<nav>{' · '.join(nav)}</nav></header><main>{''.join(sections)}</main>"
        f"<script>{JS}</script></body></html>\n"
    )


def write_html(run_or_summary: Any, path: str | os.PathLike[str], other: Any = None, **kwargs: Any) -> Path:
    """Render (see :func:`render_html`) and write to ``path``; raw-file links are relative to it."""
    target = Path(path)
    kwargs.setdefault("link_base", target.parent if str(target.parent) else Path("."))
    text = render_html(run_or_summary, other, **kwargs)
    target.write_text(text, encoding="utf-8")
    return target
