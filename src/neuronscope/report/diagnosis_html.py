"""The HTML report's "Why it is slow": the verdict, the device's busy and idle time with its gaps
coloured by class, the idle classes, communication (collectives) and the findings.
"""

from __future__ import annotations

from html import escape
from typing import Any

from ..analysis.units import format_us
from .charts import CHART_WIDTH
from .sources import Source

__all__ = ["GAP_COLOURS", "diagnosis_section"]


def _e(value: object) -> str:
    return escape(str(value), quote=True)  # as the run report's own (html.py)


#: one colour per idle class, the same in the legend, the bars and the table
GAP_COLOURS = {
    "host_wait": "#d69e2e",
    "launch": "#805ad5",
    "sync": "#e53e3e",
    "data": "#3182ce",
    "compile": "#d53f8c",
    "stream_wait": "#38a169",
}


def diagnosis_section(source: Source, key: str) -> str:
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
