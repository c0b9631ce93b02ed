"""The HTML report's timeline of device activity: a lane per busiest stream (or CPU thread, or
NeuronCore lane) and per region nesting depth, each drawn event by event while it has few enough,
else as busy-fraction time bins. Its hooks (``svg#timeline-<k>.timeline``, ``g.tl-lane``...) are
listed in :mod:`.html`.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

import numpy as np

from ..analysis.intervals import busy_bins
from ..analysis.nesting import nest
from ..analysis.units import format_us
from ..trace.model import EventKind, Trace
from .charts import CHART_WIDTH, name_colour, time_axis_ticks
from .sources import Source

__all__ = ["timeline_section"]

_STEP_MARKER = "ProfilerStep#"


def _e(value: object) -> str:
    return escape(str(value), quote=True)  # as the run report's own (html.py)


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


def timeline_section(source: Source, key: str, max_rects: int, bins: int) -> str:
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
