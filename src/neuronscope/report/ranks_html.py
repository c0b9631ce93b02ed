"""The cross-rank HTML report: one lane per rank on the aligned clock, the straggler, the tables.

    from neuronscope.report.ranks_html import write_ranks_html
    write_ranks_html(ns.compare_ranks("neuronscope-runs/<job id>"), "ranks.html")

Stable hooks for tests and scripts: ``svg#rank-lanes`` with one ``g.rank-lane`` per rank
(``data-rank``, ``data-straggler="1"`` on the straggler's), holding ``rect.rank-step`` (a step)
and, per collective, ``rect.rank-wait`` (waiting for the last rank) and ``rect.rank-transfer``
(the rest); ``table.ranks`` with one ``tr[data-rank]`` per rank; ``table.rank-steps``;
``p.straggler`` (or ``p.no-straggler``).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from .._version import __version__
from ..analysis.ranks import RANK_COLUMNS, RANK_HEADER, rank_label
from ..analysis.units import format_us
from ._assets import CSS, JS
from .charts import time_axis_ticks

__all__ = ["render_ranks_html", "write_ranks_html"]

_W = 960
_LANE_H = 26
_MAX_RECTS = 6000
_EXTRA_CSS = """
.rank-step { fill:var(--wall); opacity:.55; } .rank-wait { fill:#e53e3e; } .rank-transfer { fill:#38a169; }
g.rank-lane[data-straggler="1"] text.label { fill:#c53030; font-weight:700; }
.straggler { color:#c53030; font-weight:600; } .no-straggler { color:#2f855a; font-weight:600; }
.rank-step-sw { background:var(--wall); } .rank-wait-sw { background:#e53e3e; } .rank-transfer-sw { background:#38a169; }
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _lanes(c: Any) -> str:
    lanes = c.lanes
    if not lanes:
        return '<p class="empty">nothing to draw</p>'
    t0 = min((s for lane in lanes.values() for s, _ in lane["steps"]), default=0)
    t1 = max((e for lane in lanes.values() for _, e in lane["steps"]), default=t0 + 1)
    span = max(t1 - t0, 1)
    x0, x1, axis_h, gap = 90, _W - 10, 24, 6
    h = axis_h + len(lanes) * (_LANE_H + gap)
    budget = max(_MAX_RECTS // max(len(lanes), 1), 1)
    strag = c.straggler.rank if c.straggler is not None else None

    def x(t: float) -> float:
        return x0 + (t - t0) / span * (x1 - x0)

    parts, dropped = [], 0
    for i, (rank, lane) in enumerate(sorted(lanes.items())):
        y = axis_h + i * (_LANE_H + gap)
        parts.append(
            f'<g class="rank-lane" data-rank="{rank}" data-straggler="{1 if rank == strag else 0}">'
            f'<text x="{x0 - 8}" y="{y + 17}" text-anchor="end" class="label">rank {rank}</text>'
            f'<rect class="tl-bg" x="{x0}" y="{y}" width="{x1 - x0}" height="{_LANE_H}"/>'
        )
        drawn = 0
        for s, e in lane["steps"]:
            parts.append(
                f'<rect class="rank-step" x="{x(s):.2f}" y="{y + 2}" width="{max(x(e) - x(s), 0.6):.2f}" height="{_LANE_H - 4}">'
                f"<title>rank {rank} step {format_us((e - s) / 1e3)}</title></rect>"
            )
        for s, e, kind, wait_ns in lane["collectives"]:
            if drawn >= budget:
                dropped += 1
                continue
            w_end = min(s + max(int(wait_ns), 0), e)
            for cls, a, b, what in (("rank-wait", s, w_end, "waiting"), ("rank-transfer", w_end, e, "in")):
                if b > a:
                    parts.append(
                        f'<rect class="{cls}" x="{x(a):.2f}" y="{y + 6}" width="{max(x(b) - x(a), 0.6):.2f}" height="{_LANE_H - 12}" '
                        f'data-kind="{_e(kind)}"><title>rank {rank} {what} {_e(kind)} {format_us((b - a) / 1e3)} '
                        f"at +{format_us((a - t0) / 1e3)}</title></rect>"
                    )
            drawn += 1
        parts.append("</g>")
    ticks = time_axis_ticks(x0, x1, axis_h, h, span)
    note = f" {dropped} collectives not drawn (more than {budget} on a lane)." if dropped else ""
    return (
        f'<svg id="rank-lanes" class="chart rank-lanes" viewBox="0 0 {_W} {h}" width="100%" role="img" '
        f'aria-label="one lane per rank">{ticks}{"".join(parts)}</svg>'
        '<p class="legend"><span class="sw rank-step-sw"></span>step <span class="sw rank-wait-sw"></span>waiting in a '
        'collective for the last rank <span class="sw rank-transfer-sw"></span>the collective itself</p>'
        f'<p class="note">Times on the aligned clock (clock offsets removed). Hover for durations.{_e(note)}</p>'
    )


def _rank_table(c: Any) -> str:
    def th(header: str, text: bool) -> str:
        return f'<th class="text">{_e(header)}</th>' if text else f"<th>{_e(header)}</th>"

    head = th(RANK_HEADER, True) + "".join(th(col.header, col.unit == "text") for col in RANK_COLUMNS)
    rows = []
    for r in c.ranks:
        cells = []
        for col in RANK_COLUMNS:
            v = col.value(r)
            if col.unit == "text" or v is None:
                cells.append(f'<td class="text">{_e(col.text(r))}</td>')
            else:  # data-v: the number the sortable table sorts by
                cells.append(f'<td data-v="{v}">{_e(col.text(r))}</td>')
        rows.append(f'<tr data-rank="{r.rank}"><td class="text">{_e(rank_label(c, r))}</td>{"".join(cells)}</tr>')
    return (
        f'<table class="ranks sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
        '<p class="note">Per step, median over the steps. Collective: time inside collectives, of which Exposed: with no '
        "compute beside it, and Wait: waiting for the last rank. Compute / Host / Data / Compile: the time outside "
        "collectives. Late: arrival at the collectives after the other ranks' median. Last %: share of the collectives "
        "it arrived at last. Clock: its clock offset from the lowest rank.</p>"
    )


def _step_table(c: Any, limit: int = 200) -> str:
    ranks = [r.rank for r in c.ranks]
    head = "".join(f"<th>rank {k}</th>" for k in ranks)
    rows = []
    for st in c.steps[:limit]:
        cells = "".join(
            f'<td data-v="{st.wall_us[k]}" title="late {_e(format_us(st.late_us[k]))}">{_e(format_us(st.wall_us[k]))}</td>'
            for k in ranks
        )
        rows.append(f'<tr data-step="{_e(st.key)}"><td class="text">{_e(st.key)}</td>{cells}<td>{st.last_rank}</td></tr>')
    more = f'<p class="note">first {limit} of {len(c.steps)} steps</p>' if len(c.steps) > limit else ""
    return (
        f'<table class="rank-steps sortable"><thead><tr><th class="text">Step</th>{head}<th>Last</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{more}"
    )


def render_ranks_html(comparison: Any, *, title: str | None = None) -> str:
    """The cross-rank report of a :class:`~neuronscope.analysis.ranks.RankComparison` as one HTML string."""
    c = comparison
    title = title or f"neuronscope: {c.name} across {len(c.ranks)} ranks"
    lines = c.headline()
    if c.straggler is not None:
        verdict = f'<p class="straggler">{_e(c.straggler.message)}</p>'
    else:
        verdict = f'<p class="no-straggler">{_e(lines[1])}</p>'
    skew = c.clock.get("max_skew_us")
    cards = "".join(
        f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div></div>'
        for k, v in (
            ("job", c.job_id or "-"),
            ("ranks", len(c.ranks)),
            ("steps", len(c.steps)),
            ("straggler", f"rank {c.straggler.rank}" if c.straggler else "none"),
            ("clock skew", "-" if skew is None else format_us(skew)),
            ("step skew", f"{c.step_skew:.2f}x"),
        )
    )
    warnings = "".join(f'<p class="warning">{_e(w)}</p>' for w in c.warnings)
    body = (
        f'<section id="ranks" class="ranks-report"><div class="cards">{cards}</div>{verdict}'
        f"{''.join(f'<p class=verdict-line>{_e(x)}</p>' for x in lines[2:])}{warnings}"
        f"<h3>Ranks, step by step</h3>{_lanes(c)}<h3>Per rank</h3>{_rank_table(c)}<h3>Per step</h3>{_step_table(c)}</section>"
    )
    generated = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="neuronscope {_e(__version__)}"><title>{_e(title)}</title>'
        f"<style>{CSS}{_EXTRA_CSS}</style></head>"
        f'<body data-report="ranks" data-schema-version="1">'
        f'<header><h1>{_e(title)}</h1><p class="note">generated {generated} by neuronscope {_e(__version__)}</p></header>'
        f"<main>{body}</main><script>{JS}</script></body></html>\n"
    )


def write_ranks_html(comparison: Any, path: str | os.PathLike[str], **kwargs: Any) -> Path:
    target = Path(path)
    target.write_text(render_ranks_html(comparison, **kwargs), encoding="utf-8")
    return target
