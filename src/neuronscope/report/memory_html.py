"""The HTML report's memory section: allocated bytes over time (peak marked) and who holds the peak.

Stable hooks (``<k>`` is ``a`` or ``b``):

* ``div#memory-<k>.memory`` (``data-peak-bytes``, ``data-growth-per-step-bytes``, ``data-device``);
* ``svg#memory-chart-<k>.memory-chart`` with one ``polyline.mem-line`` (``data-points``) and
  ``circle.mem-peak`` at the peak (``data-bytes``, ``data-t-ns``);
* ``table#memory-at-peak-<k>`` (one ``tr`` per holder: ``data-op``, ``data-region``, ``data-bytes``),
  ``table#memory-by-region-<k>``.
"""

from __future__ import annotations

from html import escape
from typing import Any

from ..analysis.memory_model import MemoryReport, format_bytes
from ..analysis.units import format_us

__all__ = ["memory_section"]

_W = 960  # the same viewBox width as the other charts
_H = 160


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def memory_section(source: Any, key: str) -> str:
    """``<h3>Memory</h3>`` and its contents; empty when the run recorded no memory."""
    try:
        m = source.memory
    except Exception:  # noqa: BLE001 - an unreadable trace must not cost the rest of the report
        return ""
    if m is None:
        return ""
    return f"<h3>Why memory is high</h3>{render_memory(m, key)}"


def render_memory(m: MemoryReport, key: str) -> str:
    gps = "" if m.growth_per_step_bytes is None else str(m.growth_per_step_bytes)
    head = (
        f'<div id="memory-{key}" class="memory" data-device="{_e(m.device)}" data-peak-bytes="{m.peak_bytes}" '
        f'data-growth-per-step-bytes="{gps}"><p class="verdict memory-verdict"><b>{_e(m.headline())}</b></p>'
    )
    cards = [
        ("peak", format_bytes(m.peak_bytes)),
        ("start → end", f"{format_bytes(m.start_bytes)} → {format_bytes(m.end_bytes)}"),
        ("growth", format_bytes(m.growth_bytes)),
        ("allocations / frees", f"{m.allocations:,} / {m.frees:,}"),
    ]
    if m.peak_reserved_bytes is not None:
        cards.append(("reserved (max)", format_bytes(m.peak_reserved_bytes)))
    hbm = m.device_facts.get("neuron_hbm") if isinstance(m.device_facts, dict) else None
    if isinstance(hbm, dict) and isinstance(hbm.get("categories"), dict):
        cards += [(f"HBM {c}", format_bytes(v)) for c, v in list(hbm["categories"].items())[:6] if isinstance(v, (int, float))]
    card_html = (
        '<div class="cards">'
        + "".join(f'<div class="card"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div></div>' for k, v in cards)
        + "</div>"
    )
    return (
        head
        + card_html
        + _chart(m, key)
        + _at_peak(m, key)
        + _by_region(m, key)
        + _oom(m)
        + "".join(f'<p class="note">{_e(n)}</p>' for n in m.notes)
        + "</div>"
    )


def _chart(m: MemoryReport, key: str) -> str:
    pts = m.timeline
    if len(pts) < 2:
        return '<p class="empty">no allocator timeline (fewer than two records)</p>'
    x0, x1, y0, y1 = 90, _W - 10, 8, _H - 22
    t_lo, t_hi = pts[0][0], pts[-1][0]
    span = max(t_hi - t_lo, 1)
    top = max(max(b for _, b in pts), m.peak_bytes, 1)

    def x(t: int) -> float:
        return x0 + (t - t_lo) / span * (x1 - x0)

    def y(b: int) -> float:
        return y1 - max(b, 0) / top * (y1 - y0)

    # a step line: the level holds until the next record
    coords = []
    prev_y = None
    for t, b in pts:
        if prev_y is not None:
            coords.append(f"{x(t):.2f},{prev_y:.2f}")
        prev_y = y(b)
        coords.append(f"{x(t):.2f},{prev_y:.2f}")
    px, py = x(m.peak_at_ns) if t_lo <= m.peak_at_ns <= t_hi else x(t_hi), y(m.peak_bytes)
    ticks = "".join(
        f'<text x="{x0 - 6}" y="{y(v) + 4:.2f}" text-anchor="end" class="label">{_e(format_bytes(v))}</text>'
        f'<line x1="{x0}" x2="{x1}" y1="{y(v):.2f}" y2="{y(v):.2f}" class="grid" stroke="#ddd" stroke-width="0.5"/>'
        for v in (0, top // 2, top)
    )
    return (
        f'<svg id="memory-chart-{key}" class="chart memory-chart" data-run="{key}" viewBox="0 0 {_W} {_H}" width="100%" '
        f'role="img" aria-label="allocated memory over time, peak marked">{ticks}'
        f'<polyline class="mem-line" fill="none" stroke="#2b6cb0" stroke-width="1.5" data-points="{len(pts)}" '
        f'points="{" ".join(coords)}"/>'
        f'<line class="mem-peak-line" x1="{px:.2f}" x2="{px:.2f}" y1="{y0}" y2="{y1}" stroke="#e53e3e" stroke-dasharray="3 3"/>'
        f'<circle class="mem-peak" cx="{px:.2f}" cy="{py:.2f}" r="4" fill="#e53e3e" data-bytes="{m.peak_bytes}" '
        f'data-t-ns="{m.peak_at_ns}"><title>peak {_e(format_bytes(m.peak_bytes))} at '
        f"+{_e(format_us((m.peak_at_ns - t_lo) / 1e3))}</title></circle>"
        f'<text x="{min(px + 6, x1 - 120):.2f}" y="{max(py - 6, y0 + 10):.2f}" class="value">peak {_e(format_bytes(m.peak_bytes))}</text>'
        f'<text x="{x0}" y="{_H - 6}" class="label">0</text>'
        f'<text x="{x1}" y="{_H - 6}" text-anchor="end" class="label">+{_e(format_us(span / 1e3))}</text></svg>'
    )


def _at_peak(m: MemoryReport, key: str) -> str:
    if not m.at_peak:
        return '<p class="empty">nothing alive at the peak</p>'
    rows = "".join(
        f'<tr data-op="{_e(h.op)}" data-region="{_e(h.region)}" data-bytes="{h.bytes}">'
        f'<td data-v="{h.bytes}">{_e(format_bytes(h.bytes))}</td>'
        f'<td data-v="{100 * h.bytes / m.peak_bytes if m.peak_bytes else 0:.2f}">'
        f'{100 * h.bytes / m.peak_bytes if m.peak_bytes else 0:.1f}%</td><td data-v="{h.count}">{h.count}</td>'
        f'<td class="text">{_e(h.op)}</td><td class="text">{_e(h.region or "-")}</td><td class="text">{_e(h.source or "-")}</td></tr>'
        for h in m.at_peak
    )
    return (
        "<h4>Alive at the peak (who holds the memory)</h4>"
        f'<table id="memory-at-peak-{key}" class="memory-at-peak sortable"><thead><tr><th>Bytes</th><th>% of peak</th>'
        f'<th>Count</th><th class="text">Op</th><th class="text">Region</th><th class="text">Source</th></tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def _by_region(m: MemoryReport, key: str) -> str:
    if not m.by_region:
        return ""
    rows = "".join(
        f'<tr data-region="{_e(g.name)}"><td class="text">{_e(g.name or "(outside regions)")}</td>'
        f'<td data-v="{g.allocated_bytes}">{_e(format_bytes(g.allocated_bytes))}</td>'
        f'<td data-v="{g.freed_bytes}">{_e(format_bytes(g.freed_bytes))}</td>'
        f'<td data-v="{g.net_bytes}">{_e(format_bytes(g.net_bytes))}</td><td data-v="{g.count}">{g.count}</td></tr>'
        for g in m.by_region
    )
    return (
        "<details><summary>By region: allocated, freed, still held</summary>"
        f'<table id="memory-by-region-{key}" class="memory-by-region sortable"><thead><tr><th class="text">Region</th>'
        f"<th>Allocated</th><th>Freed</th><th>Net</th><th>Allocations</th></tr></thead><tbody>{rows}</tbody></table></details>"
    )


def _oom(m: MemoryReport) -> str:
    if not m.oom:
        return ""
    table = m.device_facts.get("neuron_oom_table") if isinstance(m.device_facts, dict) else None
    extra = ""
    if isinstance(table, dict) and table.get("text"):
        extra = f"<details><summary>Neuron runtime OOM table ({_e(table.get('file', ''))})</summary><pre>{_e(table['text'])}</pre></details>"
    return f'<p class="warning memory-oom">out of memory: {_e(m.oom.get("error"))}</p>{extra}'
