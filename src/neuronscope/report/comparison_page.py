"""The HTML report of a :class:`~neuronscope.Comparison` (``comparison.write_html(path)``): one
self-contained page, as the run report (:mod:`.html`), whose pieces it reuses.

Contents: the comparison table (click a header to sort), a chart of each variant's step time
with its interval, each variant's difference from the baseline (ops gone and new, where the
profiled step time went), how each column was measured, then each variant's profile as the run
report shows one. Stable hooks for tests and scripts:

* ``table#comparison-table`` with one ``tr.variant`` per variant (``data-variant``,
  ``data-verdict``, ``data-significant``);
* ``svg#compare-chart`` with one ``rect.compare-bar`` per timed variant (``data-variant``,
  ``data-median-s``, ``data-low-s``, ``data-high-s``) and its ``line.compare-ci``, and
  ``line.compare-baseline`` at the baseline's median;
* ``div.variant-diff`` (``data-variant``) holding ``table.diff-explanation``;
* ``section.run`` per profiled variant (``data-run`` = ``v0``, ``v1``...), with the run
  report's hooks (``svg#op-chart-v0``...).

It reads the comparison through its public attributes and :meth:`VariantResult.cells` only
(the record imports this module, not the other way round).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from .._version import __version__
from ..analysis.units import format_us
from ._assets import CSS, JS
from .charts import CHART_WIDTH, name_colour
from .html import run_section
from .sources import as_source

__all__ = ["render_comparison"]

_LABEL_W = 220
_ROW_H = 26
_PAGE_CSS = """
.verdict-cell.win { color:var(--better); font-weight:600; } .verdict-cell.loss { color:var(--worse); }
.verdict-cell.wrong, .verdict-cell.failed { color:var(--worse); font-weight:600; }
.compare-ci { stroke:var(--fg); stroke-width:1.5; } .compare-baseline { stroke:var(--muted); stroke-dasharray:4 3; }
pre.ops { white-space:pre-wrap; font-size:12px; margin:4px 0; }
table.comparison-table th, table.comparison-table td { white-space:nowrap; word-break:normal; }
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)  # as the run report's own (html.py, memory_html.py)


def _verdict_class(v: Any) -> str:
    verdict = v.verdict
    if verdict == "wrong result":
        return "wrong"
    if verdict == "failed":
        return "failed"
    if verdict.endswith("faster"):
        return "win"
    return "loss" if verdict.endswith("slower") else ""


def _table(c: Any) -> str:
    header = "".join(
        f'<th class="{"text" if i in (0, 7, 8) else ""}">{_e(h)}</th>' for i, (h, _, _) in enumerate(c.variants[0].cells())
    )
    rows = []
    for v in c.variants:
        cells = []
        for i, (_, text, value) in enumerate(v.cells()):
            sort = f' data-v="{value}"' if value is not None else (' data-v="1e300"' if i not in (0, 7, 8) else "")
            cls = "text" if i in (0, 7, 8) else ""
            if i == 8:
                cls += f" verdict-cell {_verdict_class(v)}"
            title = f' title="{_e(v.error or v.mismatch)}"' if i == 8 and (v.error or v.mismatch) else ""
            cells.append(f'<td class="{cls.strip()}"{sort}{title}>{_e(text)}</td>')
        rows.append(
            f'<tr class="variant" data-variant="{_e(v.name)}" data-verdict="{_e(v.verdict)}" '
            f'data-significant="{str(v.significant).lower()}">{"".join(cells)}</tr>'
        )
    return (
        f'<table id="comparison-table" class="comparison-table sortable"><thead><tr>{header}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _chart(c: Any) -> str:
    """Each timed variant's median step time as a bar, its interval as a whisker, and a dashed
    line at the baseline's median."""
    timed = [v for v in c.variants if v.step is not None]
    if not timed:
        return '<p class="empty">no variant was timed</p>'
    peak = max(v.step.high for v in timed) or 1.0
    bar_w = CHART_WIDTH - _LABEL_W - 330  # room for the label right of the longest whisker

    def x(seconds: float) -> float:
        return _LABEL_W + bar_w * seconds / peak

    h = _ROW_H * len(timed) + 8
    out = [
        f'<svg id="compare-chart" class="chart compare-chart" data-bars="{len(timed)}" viewBox="0 0 {CHART_WIDTH} {h}" width="100%" '
        'role="img" aria-label="step time per variant, with its interval">'
    ]
    for i, v in enumerate(timed):
        y = 4 + i * _ROW_H
        s = v.step
        label = f"{format_us(s.median * 1e6)} [{format_us(s.low * 1e6)}, {format_us(s.high * 1e6)}]  {v.verdict}"
        out.append(
            f'<g class="compare-row"><title>{_e(v.name)}: {_e(label)}</title>'
            f'<text x="{_LABEL_W - 8}" y="{y + 17}" text-anchor="end" class="label">{_e(v.name)}</text>'
            f'<rect class="compare-bar" x="{_LABEL_W}" y="{y + 4}" width="{max(x(s.median) - _LABEL_W, 0.5):.2f}" '
            f'height="{_ROW_H - 8}" fill="{name_colour(v.name)}" fill-opacity="0.75" data-variant="{_e(v.name)}" '
            f'data-median-s="{s.median!r}" data-low-s="{s.low!r}" data-high-s="{s.high!r}"/>'
            f'<line class="compare-ci" data-variant="{_e(v.name)}" x1="{x(s.low):.2f}" x2="{x(s.high):.2f}" '
            f'y1="{y + _ROW_H / 2:.2f}" y2="{y + _ROW_H / 2:.2f}"/>'
            f'<text x="{x(s.high) + 6:.2f}" y="{y + 17}" class="value">{_e(label)}</text></g>'
        )
    base = next((v for v in timed if v.baseline), None)
    if base is not None:
        bx = x(base.step.median)
        out.append(f'<line class="compare-baseline" x1="{bx:.2f}" x2="{bx:.2f}" y1="0" y2="{h}"/>')
    out.append("</svg>")
    return "".join(out)


def _differences(c: Any) -> str:
    """Each variant against the baseline: the ops only one ran, and where the step time went."""
    out = []
    base = c[c.baseline]
    for v in c.variants:
        ex = v.explanation
        if v.baseline or ex is None:
            continue
        labels = {
            **(base.summary.labels if base.summary is not None else {}),
            **(v.summary.labels if v.summary is not None else {}),
        }
        unit = ex.normalised.unit
        rows = "".join(
            f'<tr data-kind="{c_.kind}" data-delta-us="{c_.delta_us:.3f}"><td class="text">'
            f"{_e(labels.get(c_.name, c_.name) if c_.kind == 'op' else 'idle: ' + c_.name)}</td>"
            f"<td>{format_us(c_.a_us)}</td><td>{format_us(c_.b_us)}</td><td>{c_.delta_us / 1e3:+.3f} ms{_e(unit)}</td></tr>"
            for c_ in ex.contributions[:15]
        )
        command = f"neuronscope diff {base.path} {v.path}" if base.path is not None and v.path is not None else ""
        out.append(
            f'<div class="variant-diff" data-variant="{_e(v.name)}"><h3>{_e(c.baseline)} → {_e(v.name)}</h3>'
            f'<p class="verdict">{_e(c.explanation_lines(v.name, top=0)[0])}</p>'
            f'<pre class="ops">ops gone: {_e(", ".join(v.ops_removed) or "-")}\nnew: {_e(", ".join(v.ops_added) or "-")}</pre>'
            f'<table class="diff-explanation"><thead><tr><th class="text">Part</th><th>{_e(c.baseline)}</th><th>{_e(v.name)}</th>'
            f"<th>Δ</th></tr></thead><tbody>{rows}</tbody></table>"
            + (f'<p class="note">the same from the command line: <code>{_e(command)}</code></p>' if command else "")
            + "</div>"
        )
    if not out:
        return ""
    return (
        '<section id="differences"><h2>Why they differ (profiled, per step)</h2>'
        '<p class="note">Busy time is split over the ops by their share of self device time, idle time by class; '
        "the parts sum to the change of the profiled step time.</p>" + "".join(out) + "</section>"
    )


def render_comparison(
    c: Any,
    *,
    title: str | None = None,
    top: int = 30,
    link_base: str | os.PathLike[str] | None = None,
    max_timeline_rects: int = 3000,
    timeline_bins: int = 480,
) -> str:
    """The comparison as one HTML page (the keyword arguments as in :func:`.html.render_html`)."""
    base = Path(link_base) if link_base is not None else None
    title = title or f"neuronscope: {' vs '.join(v.name for v in c.variants)}"
    runs = []
    nav = ['<a href="#comparison">comparison</a>']
    for i, v in enumerate(c.variants):
        if v.run is None or v.summary is None:
            continue
        key = f"v{i}"
        heading = f"{v.name}: its profile ({v.steps} calls)"
        runs.append(run_section(as_source(v.run), key, top, base, max_timeline_rects, timeline_bins, heading=heading))
        nav.append(f'<a href="#run-{key}">{_e(v.name)}</a>')
    notes = "".join(f'<p class="note compare-note">{_e(line)}</p>' for line in c.footer())
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="neuronscope {_e(__version__)}"><title>{_e(title)}</title>'
        f"<style>{CSS}{_PAGE_CSS}</style></head>"
        '<body data-report="comparison" data-schema-version="1">'
        f'<header><h1>{_e(title)}</h1><p class="note">generated {generated} by neuronscope {_e(__version__)}</p>'
        f"<nav>{' · '.join(nav)}</nav></header><main>"
        f'<section id="comparison"><h2>Comparison</h2><p class="verdict">{_e(c.headline())}</p>'
        f"{_table(c)}{_chart(c)}{notes}</section>{_differences(c)}{''.join(runs)}</main>"
        f"<script>{JS}</script></body></html>\n"
    )
