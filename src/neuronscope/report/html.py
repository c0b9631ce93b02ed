"""A self-contained HTML report: one file, no network at view time, charts as inline SVG.

    from neuronscope.report.html import render_html, write_html
    write_html(run, "report.html")                  # a Run, Summary, Trace or a path
    write_html("runs/before", "diff.html", other="runs/after")

Contents, per profile: a bar chart of self device time per op (with shares), the full op
table (click a header to sort), the region breakdown, a timeline of device activity, the
run's manifest and links to the run directory's raw files. Given two profiles, a diff view
comes first. This module lays out the page and its smaller sections; the larger ones are drawn
by diagnosis_html.py, memory_html.py, roofline_html.py, timeline_html.py and diff_html.py, with
what every chart shares (width, rows, palette) in charts.py. Stable hooks for tests and scripts (``<k>`` is ``a``, or ``b`` for the second):

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
import os
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .._version import __version__
from ..analysis.diff import SummaryDiff, choose_basis, diff_summaries
from ..analysis.summary import Summary
from ._assets import CSS, JS
from .charts import CHART_WIDTH, LABEL_W, PALETTE, ROW_H, name_colour, short
from .diagnosis_html import diagnosis_section
from .diff_html import diff_section
from .memory_html import memory_section
from .roofline_html import roofline_section
from .sources import Source, as_source, run_extent
from .timeline_html import timeline_section
from ..analysis.kernel_classes import CLASS_WORDS, CLASSES, pct_text
from ..analysis.text import classes_line
from ..analysis.units import format_us

__all__ = ["render_html", "run_section", "write_html"]


def _e(value: object) -> str:
    return escape(str(value), quote=True)


# -- op bars -----------------------------------------------------------------------------------


def _op_chart(summary: Summary, key: str, top: int) -> str:
    rows = summary.rows[:top] if top else summary.rows
    if not rows:
        return '<p class="empty">no ops in this profile</p>'
    peak = max(r.self_device_time_us for r in rows) or 1.0
    bar_w = CHART_WIDTH - LABEL_W - 150
    h = ROW_H * len(rows) + 8
    out = [
        (
            f'<svg id="op-chart-{key}" class="chart op-chart" data-run="{key}" data-bars="{len(rows)}" '
            f'viewBox="0 0 {CHART_WIDTH} {h}" width="100%" role="img" aria-label="self device time per op">'
        )
    ]
    for i, r in enumerate(rows):
        y = 4 + i * ROW_H
        w = max(bar_w * r.self_device_time_us / peak, 0.5)
        label = f"{r.device_pct:.1f}%  {format_us(r.self_device_time_us)}  ×{r.calls}"
        out.append(
            f'<g class="op-row"><title>{_e(r.name)}: {_e(label)}</title>'
            f'<text x="{LABEL_W - 8}" y="{y + 15}" text-anchor="end" class="label">{_e(short(summary.label(r.name)))}</text>'
            f'<rect class="op-bar" x="{LABEL_W}" y="{y + 3}" width="{w:.2f}" height="{ROW_H - 6}" '
            f'fill="{name_colour(r.name)}" data-op="{_e(r.name)}" data-self-device-us="{r.self_device_time_us:.3f}" '
            f'data-pct="{r.device_pct:.3f}"/>'
            f'<text x="{LABEL_W + w + 6:.2f}" y="{y + 15}" class="value">{_e(label)}</text></g>'
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
    return "#a0aec0" if cls == "other" else PALETTE[CLASSES.index(cls) % len(PALETTE)] if cls in CLASSES else name_colour(cls)


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


# -- regions -----------------------------------------------------------------------------------


def _regions(summary: Summary, key: str) -> str:
    if not summary.regions:
        return '<p class="empty">no regions (wrap code in <code>neuronscope.region("name")</code> to see a breakdown)</p>'
    items = list(summary.regions.items())
    total = summary.total_device_time_us
    peak = max(max(s.total_device_time_us, s.region_stats.wall_time_us if s.region_stats else 0.0) for _, s in items) or 1.0
    bar_w = CHART_WIDTH - LABEL_W - 290  # room for the value label right of the longest bar
    h = ROW_H * len(items) + 8
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
        y = 4 + i * ROW_H
        label = f"{format_us(dev)} device ({pct:.1f}%), wall {format_us(wall)}"
        out.append(
            f'<g class="region-row"><title>{_e(path)}: {_e(label)}</title>'
            f'<text x="{LABEL_W - 8}" y="{y + 15}" text-anchor="end" class="label">{_e(short(path))}</text>'
            f'<rect class="region-wall" x="{LABEL_W}" y="{y + 3}" width="{max(bar_w * wall / peak, 0.5):.2f}" height="{ROW_H - 6}"/>'
            f'<rect class="region-bar" x="{LABEL_W}" y="{y + 6}" width="{max(bar_w * dev / peak, 0.5):.2f}" '
            f'height="{ROW_H - 12}" data-region="{_e(path)}" data-device-us="{dev:.3f}" data-wall-us="{wall:.3f}"/>'
            f'<text x="{LABEL_W + bar_w * max(wall, dev) / peak + 6:.2f}" y="{y + 15}" class="value">{_e(label)}</text></g>'
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
        f"<h3>Why it is slow</h3>{diagnosis_section(source, key)}{memory_section(source, key)}"
        f"<h3>Self device time per op</h3>{_op_chart(s, key, top)}{_op_table(s, key)}"
        f"{'<h3>Device time by class</h3>' + _classes(s, key) if s.device_classes is not None else ''}{roofline_section(s, key)}"
        f"<h3>Regions</h3>{_regions(s, key)}"
        f"<h3>Timeline</h3>{timeline_section(source, key, max_rects, bins)}"
        f"<h3>Run metadata</h3>{_manifest(source, key)}"
        f"<h3>Files</h3>{_files(source, key, link_base)}</section>"
    )


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


def _compared(a: Source, b: Source) -> SummaryDiff:
    """The diff of two sources, like with like (per step, per recorded s, or totals: analysis/diff.py)."""
    return diff_summaries(a.summary, b.summary, normalised=choose_basis(run_extent(a), run_extent(b)))


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
        sections.append(
            f'<section id="diff" class="diff"><h2>Diff: A → B</h2>{diff_section(_compared(a, b), a, b, top)}</section>'
        )
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
