"""The HTML report's diff of two profiles (A → B): the headline, the change per op as a bar chart,
the tables of every op and region (the column spec the terminal and ``--json`` read too) and why
the wall time changed (:func:`~neuronscope.analysis.explain.explain_diff`). Its hooks
(``svg#diff-chart``, ``rect.diff-bar``...) are listed in :mod:`.html`.
"""

from __future__ import annotations

from html import escape
from typing import Any

from ..analysis.diff import DIFF_OP_COLUMNS, DIFF_REGION_COLUMNS, SummaryDiff
from ..analysis.units import format_us
from .charts import CHART_WIDTH, LABEL_W, ROW_H, short
from .sources import Source

__all__ = ["diff_section"]


def _e(value: object) -> str:
    return escape(str(value), quote=True)  # as the run report's own (html.py)


def _pct(p: float | None, presence: str = "both") -> str:
    from ..analysis.diff import pct_text

    return pct_text(p, presence)


def diff_section(d: SummaryDiff, a: Source, b: Source, top: int) -> str:
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
    mid = LABEL_W + (CHART_WIDTH - LABEL_W) / 2
    half = (CHART_WIDTH - LABEL_W) / 2 - 160  # room for the value label beyond the longest bar
    h = ROW_H * len(ops) + 8
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
        y = 4 + i * ROW_H
        w = max(half * abs(sd.delta) / peak, 0.5)
        x = mid if sd.delta >= 0 else mid - w
        tag = _pct(sd.pct, o.presence)
        label = f"{tag} ({'+' if sd.delta >= 0 else '−'}{format_us(abs(sd.delta))})"
        tx, anchor = (mid + w + 6, "start") if sd.delta >= 0 else (mid - w - 6, "end")
        out.append(
            f'<g class="diff-row"><title>{_e(o.name)}: {format_us(sd.a)} → {format_us(sd.b)} {_e(tag)}</title>'
            f'<text x="{LABEL_W - 8}" y="{y + 15}" text-anchor="end" class="label">{_e(short(d.label(o.name)))}</text>'
            f'<rect class="diff-bar {"worse" if sd.delta > 0 else "better"}" x="{x:.2f}" y="{y + 3}" width="{w:.2f}" '
            f'height="{ROW_H - 6}" data-op="{_e(o.name)}" data-delta-us="{sd.delta:.3f}" data-presence="{o.presence}"/>'
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
